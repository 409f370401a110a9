"""One batch run: inputs -> Parquet tables, the HTML report and the timeline PNGs in `out`."""

from __future__ import annotations

import copy
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from forensics import transforms as T
from forensics.reader import (
    Problems,
    empty_journal,
    journal_dir,
    journal_files,
    read_group_log,
    read_journal,
)
from forensics.report import ReportData, render_html, render_timeline

TABLES = ("rebalances", "member_sessions", "group_states", "commits")
REPORT_NAME = "report.html"


@dataclass
class Outcome:
    report: Path
    rebalances: int
    groups: int
    problems: Problems


def run(spark: SparkSession, data_dir: Path, out_dir: Path, *, timelines: int = 10,
        journal: Path | None = None, events: DataFrame | None = None,
        extra_problems: Problems | None = None) -> Outcome:
    """Analyse `data_dir` (a rebalanced `log.dirs` or a Kafka log directory) into `out_dir`.
    `events` replaces the journal read from disk, and `extra_problems` are what its reader
    found (the streaming mode passes both).

    Speed: the journal is parsed once (Spark's JSON reader, explicit schema) and cached; the
    events that explain rebalances (a few percent of a journal, the rest is commits) are
    cached apart, and every table and the report come from those two caches and the decoded
    group log, with the small results collected once."""
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = copy.deepcopy(extra_problems) if extra_problems is not None else Problems()
    if events is None:
        files = journal_files(journal or journal_dir(data_dir))
        events = read_journal(spark, files, problems) if files else empty_journal(spark)
    control = events.filter(F.col("event_type") != "offsets_committed").cache()
    summary = _journal_summary(events)
    has_journal = summary.events > 0
    records = read_group_log(spark, data_dir, problems)
    log_summary = _group_log_summary(records) if records is not None else _Summary()

    span_start = _min(summary.first_ts, log_summary.first_ts)
    span_end = _max(summary.last_ts, log_summary.last_ts)
    data_end: Column = F.lit(span_end if span_end is not None else 0).cast("long")

    generations = T.group_generations(records).cache() if records is not None else None
    moved = T.partitions_moved(generations) if generations is not None else None
    if has_journal:
        rebalances = T.with_consumer_groups(T.rebalances_from_journal(control), control)
        consumer_moved = T.consumer_partitions_moved(control)
        moved = consumer_moved if moved is None else moved.unionByName(consumer_moved)
        sessions = T.member_sessions(control)
        states = T.group_states(control, data_end)
    elif generations is not None:
        rebalances = T.rebalances_from_group_log(generations)
        sessions = T.member_sessions_from_group_log(generations)
        states = None
    else:
        rebalances = T.rebalances_from_journal(control)  # empty, with the right columns
        sessions = T.member_sessions(control)
        states = T.group_states(control, data_end)
    rebalances = T.with_partitions_moved(rebalances, moved).cache()
    times = T.commit_times(events if has_journal else None, records)
    if times is not None:
        rebalances = T.commit_gaps_around(rebalances, times)
    else:
        rebalances = (rebalances.withColumn("gap_start_ts", F.lit(None).cast("long"))
                      .withColumn("gap_end_ts", F.lit(None).cast("long"))
                      .withColumn("commit_gap_ms", F.lit(None).cast("long")))
    rebalances = rebalances.cache()
    sessions = sessions.cache()

    _write(rebalances, out_dir / "rebalances")
    _write(sessions, out_dir / "member_sessions")
    if states is not None:
        _write(states, out_dir / "group_states")
    else:
        shutil.rmtree(out_dir / "group_states", ignore_errors=True)
    if records is not None:
        _write(T.commits(records, data_end), out_dir / "commits")

    rb = _pandas(rebalances)
    members = _pandas(sessions)
    worst = _pandas(T.worst_groups(rebalances))
    counts = {
        "groups": len(summary.groups | log_summary.groups),
        "members": len(members),
        # Commit requests as the journal shows them, else commit records in the group log.
        "commits": summary.commits if has_journal else log_summary.commits,
    }
    data = ReportData(
        data_dir=str(data_dir), has_journal=has_journal, has_group_log=records is not None,
        span=(span_start, span_end), counts=counts, rebalances=rb, worst_groups=worst,
        causes=_pandas(T.top_causes(rebalances)),
        culprits=_pandas(T.top_culprits(rebalances)),
        static_restarts=_pandas(T.static_restarts(control)), problems=problems,
        write_failures=_pandas(T.write_failures(control)),
        conversions=_pandas(T.group_conversions(control)))
    for old in out_dir.glob("timeline-*.png"):
        old.unlink()
    if span_start is not None and span_end is not None and len(worst):
        top = worst["group_id"].head(timelines).tolist()
        data.timelines = _timelines(members, times, records, top, rb, out_dir,
                                    (span_start, span_end))
    report = out_dir / REPORT_NAME
    tmp = report.with_suffix(".html.tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(report)  # a reader (or a browser refresh in --follow) never sees half a page
    spark.catalog.clearCache()  # --follow runs this again and again in one session
    return Outcome(report=report, rebalances=len(rb), groups=counts["groups"],
                   problems=problems)


@dataclass
class _Summary:
    """What the report needs to know about an input as a whole, from one aggregation."""

    events: int = 0
    commits: int = 0
    first_ts: int | None = None
    last_ts: int | None = None
    groups: set[str] = field(default_factory=set)


def _journal_summary(events: DataFrame) -> _Summary:
    rows = events.groupBy("event_type").agg(
        F.count(F.lit(1)).alias("n"), F.min("ts").alias("lo"), F.max("ts").alias("hi"),
        F.collect_set("group_id").alias("groups")).collect()
    summary = _Summary()
    for row in rows:
        summary.events += row["n"]
        if row["event_type"] == "offsets_committed":
            summary.commits += row["n"]
        summary.first_ts = _min(summary.first_ts, row["lo"])
        summary.last_ts = _max(summary.last_ts, row["hi"])
        summary.groups.update(row["groups"])
    return summary


def _group_log_summary(records: DataFrame) -> _Summary:
    positive = F.when(F.col("timestamp") > 0, F.col("timestamp"))
    rows = records.groupBy("record_type").agg(
        F.count(F.lit(1)).alias("n"), F.min(positive).alias("lo"), F.max(positive).alias("hi"),
        F.collect_set("group_id").alias("groups")).collect()
    summary = _Summary()
    for row in rows:
        if row["record_type"] == "offset_commit":
            summary.commits += row["n"]
        summary.first_ts = _min(summary.first_ts, row["lo"])
        summary.last_ts = _max(summary.last_ts, row["hi"])
        summary.groups.update(row["groups"])
    return summary


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _write(frame: DataFrame, path: Path) -> None:
    frame.write.mode("overwrite").parquet(str(path))


def _timelines(members: pd.DataFrame, times: DataFrame | None, records: DataFrame | None,
               groups: list[str], rb: pd.DataFrame, out_dir: Path, span: tuple[int, int]
               ) -> dict[str, str]:
    wanted = F.col("group_id").isin(*groups)
    gaps = (_pandas(_commit_gaps(times, records, wanted)) if times is not None
            else pd.DataFrame(columns=["group_id", "gap_start_ts", "gap_end_ts"]))
    made: dict[str, str] = {}
    for index, group in enumerate(groups):
        name = f"timeline-{index:02d}-{_slug(group)}.png"
        group_rb = rb[rb["group_id"] == group]
        group_members = members[members["group_id"] == group]
        lo = [v for v in (group_rb["start_ts"].min(), group_rb["end_ts"].min(),
                          group_members["joined_ts"].min()) if not pd.isna(v)]
        hi = [v for v in (group_rb["end_ts"].max(), group_members["left_ts"].max())
              if not pd.isna(v)]
        start = int(min(lo)) if lo else span[0]
        end = max(int(max(hi)) if hi else span[1], start + 1)
        pad = max((end - start) // 20, 500)
        render_timeline(out_dir / name, group, group_members, group_rb,
                        gaps[gaps["group_id"] == group], (start - pad, end + pad))
        made[group] = name
    return made


def _commit_gaps(times: DataFrame, records: DataFrame | None, wanted: Column) -> DataFrame:
    """The gaps worth drawing: per partition when the group log has its commits (a dead
    member's partitions stop while the others go on), else per group; longer than a second
    and five times the group's median gap, at most 200 per group."""
    from pyspark.sql import Window

    if records is not None:
        source = T.offset_commits(records).select(
            "group_id", F.concat_ws("-", "topic", F.col("partition").cast("string"))
            .alias("key"), F.col("commit_timestamp").alias("ts"))
    else:  # one commit a millisecond, as `T.commit_times` used to give them
        source = times.filter(wanted).select("group_id", F.lit("").alias("key"), "ts").distinct()
    w = Window.partitionBy("group_id", "key").orderBy("ts")
    gaps = (source.filter(wanted)
            .withColumn("gap_start_ts", F.lag("ts").over(w))
            .withColumnRenamed("ts", "gap_end_ts")
            .filter(F.col("gap_start_ts").isNotNull())
            .withColumn("gap_ms", F.col("gap_end_ts") - F.col("gap_start_ts")))
    median = gaps.groupBy("group_id").agg(F.percentile_approx("gap_ms", 0.5).alias("median"))
    ranked = (gaps.join(median, "group_id")
              .filter((F.col("gap_ms") >= 1000) & (F.col("gap_ms") >= 5 * F.col("median")))
              .withColumn("_r", F.row_number().over(
                  Window.partitionBy("group_id").orderBy(F.col("gap_ms").desc()))))
    return ranked.filter(F.col("_r") <= 200).select("group_id", "gap_start_ts", "gap_end_ts")


def _pandas(frame: DataFrame) -> pd.DataFrame:
    return cast(pd.DataFrame, frame.toPandas())


def _slug(group: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", group)[:60] or "group"
