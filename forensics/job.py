"""One batch run: inputs -> Parquet tables, the HTML report and the timeline PNGs in `out`."""

from __future__ import annotations

import copy
import multiprocessing
import re
import shutil
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from forensics import summaries as S
from forensics import transforms as T
from forensics.reader import (
    Problems,
    Summary,
    empty_journal,
    journal_dir,
    journal_files,
    read_group_log,
    read_journal,
    split_events,
)
from forensics.report import ReportData, render_html, render_timeline

TABLES = ("rebalances", "member_sessions", "group_states", "commits", "rebalance_commit_gaps")
REPORT_NAME = "report.html"
PARTITION_KEYS = ("topic", "partition")
MAX_DRAWN_GAPS = 200  # per timeline
RENDER_WORKERS = 2


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

    Speed: the journal is parsed once, narrowly, and cached (`reader.read_journal`); the events
    that explain rebalances are cached apart with every field. The commit gaps come from one
    sort of the commits with the rebalances marked in between. Each output table is computed
    once and collected as Arrow: the report reads it and the driver writes it as Parquet
    (tables are aggregates, small next to their inputs), and the rankings are pandas."""
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = copy.deepcopy(extra_problems) if extra_problems is not None else Problems()
    if events is None:
        files = journal_files(journal or journal_dir(data_dir))
        parts = (read_journal(spark, files, problems) if files
                 else split_events(empty_journal(spark)))
    else:
        parts = split_events(events)
    control = parts.control
    summary = parts.summary
    has_journal = summary.events > 0
    group_log = read_group_log(spark, data_dir, problems)
    records = group_log.records if group_log is not None else None
    log_summary = group_log.summary if group_log is not None else Summary()

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
    numbered = T.number_rebalances(T.with_partitions_moved(rebalances, moved)).cache()
    times = T.commit_times(parts.commits if has_journal else None, records)
    group_stream = T.commit_stream(numbered, times).cache() if times is not None else None
    partition_stream = (T.commit_stream(numbered, T.partition_commit_times(records),
                                        PARTITION_KEYS).cache()
                        if records is not None else None)
    if group_stream is not None:
        rebalances = T.with_commit_gaps(numbered, group_stream)
    else:
        rebalances = (numbered.drop("_rid")
                      .withColumn("gap_start_ts", F.lit(None).cast("long"))
                      .withColumn("gap_end_ts", F.lit(None).cast("long"))
                      .withColumn("commit_gap_ms", F.lit(None).cast("long")))
    if partition_stream is not None:
        around = T.rebalance_commit_gaps(numbered, partition_stream, PARTITION_KEYS,
                                         "group_log")
    elif group_stream is not None:
        around = T.rebalance_commit_gaps(numbered, group_stream, (), "journal")
    else:
        around = None

    rb_table = _collect(rebalances)
    _write(rb_table, out_dir / "rebalances")
    members_table = _collect(sessions)
    _write(members_table, out_dir / "member_sessions")
    _write_or_remove(_collect(states) if states is not None else None,
                     out_dir / "group_states")
    around_table = _collect(around) if around is not None else None
    _write_or_remove(around_table, out_dir / "rebalance_commit_gaps")
    if records is not None:
        per_partition = partition_stream is not None and around is not None
        _write(_collect(T.commits(records, data_end, around if per_partition else None)),
               out_dir / "commits")
    else:
        shutil.rmtree(out_dir / "commits", ignore_errors=True)

    rb = rb_table.to_pandas()
    members = members_table.to_pandas()
    worst = S.worst_groups(rb)
    listed = _collect(control.filter(F.col("event_type").isin(
        "static_member_replaced", "group_write_failed"))).to_pandas()
    counts = {
        "groups": len(summary.groups | log_summary.groups),
        "members": len(members),
        # Commit requests as the journal shows them, else commit records in the group log.
        "commits": summary.commits if has_journal else log_summary.commits,
    }
    data = ReportData(
        data_dir=str(data_dir), has_journal=has_journal, has_group_log=records is not None,
        span=(span_start, span_end), counts=counts, rebalances=rb, worst_groups=worst,
        causes=S.top_causes(rb), culprits=S.top_culprits(rb),
        static_restarts=_static_restarts(listed), problems=problems,
        write_failures=_write_failures(listed),
        conversions=_collect(T.group_conversions(control)).to_pandas())
    for old in out_dir.glob("timeline-*.png"):
        old.unlink()
    if span_start is not None and span_end is not None and len(worst) and timelines > 0:
        top = worst["group_id"].head(timelines).tolist()
        # Per partition when the group log has its commits (a dead member's partitions stop
        # while the others go on), else per group.
        stream, keys = ((partition_stream, PARTITION_KEYS) if partition_stream is not None
                        else (group_stream, ()))
        gaps = (_collect(T.drawn_gaps(stream, keys).filter(F.col("group_id").isin(*top)))
                .to_pandas() if stream is not None else None)
        data.timelines = _timelines(members, gaps, top, rb, out_dir, (span_start, span_end))
    report = out_dir / REPORT_NAME
    tmp = report.with_suffix(".html.tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(report)  # a reader (or a browser refresh in --follow) never sees half a page
    spark.catalog.clearCache()  # --follow runs this again and again in one session
    return Outcome(report=report, rebalances=len(rb), groups=counts["groups"],
                   problems=problems)


_STATIC_RESTART_COLUMNS = ["group_id", "ts", "generation", "group_instance_id", "old_member_id",
                           "member_id", "client_id", "client_host", "rebalance"]
_WRITE_FAILURE_COLUMNS = ["ts", "group_ids", "records", "error"]


def _static_restarts(listed: pd.DataFrame) -> pd.DataFrame:
    """Static members replaced in place; `rebalance` false means the restart cost nothing."""
    return listed.loc[listed["event_type"] == "static_member_replaced",
                      _STATIC_RESTART_COLUMNS].reset_index(drop=True)


def _write_failures(listed: pd.DataFrame) -> pd.DataFrame:
    """Failed group-log writes: when, which groups' records were in them, and the error."""
    return listed.loc[listed["event_type"] == "group_write_failed",
                      _WRITE_FAILURE_COLUMNS].reset_index(drop=True)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _collect(frame: DataFrame) -> pa.Table:
    """One Spark job, the result as Arrow: the column types stay Spark's (a nullable integer
    does not turn into a float as it would in pandas) for the Parquet file and the report."""
    return frame.toArrow()


def _write(table: pa.Table, path: Path) -> None:
    """`path` as a Parquet directory (one part file), replaced whole: the new directory is
    written next to it and renamed into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    pq.write_table(table, tmp / "part-00000.parquet")
    (tmp / "_SUCCESS").touch()
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def _write_or_remove(table: pa.Table | None, path: Path) -> None:
    if table is None:
        shutil.rmtree(path, ignore_errors=True)  # not computable from these inputs
    else:
        _write(table, path)


Render = tuple[Path, str, pd.DataFrame, pd.DataFrame, pd.DataFrame, tuple[int, int]]


def _timelines(members: pd.DataFrame, gaps: pd.DataFrame | None, groups: list[str],
               rb: pd.DataFrame, out_dir: Path, span: tuple[int, int]) -> dict[str, str]:
    if gaps is None:
        gaps = pd.DataFrame(columns=["group_id", "key", "gap_start_ts", "gap_end_ts", "gap_ms"])
    jobs: list[Render] = []
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
        group_gaps = gaps[gaps["group_id"] == group]
        drawn = group_gaps.loc[group_gaps["gap_ms"].astype("int64").nlargest(
            MAX_DRAWN_GAPS).index, ["group_id", "gap_start_ts", "gap_end_ts"]]
        jobs.append((out_dir / name, group, group_members, group_rb, drawn,
                     (start - pad, end + pad)))
        made[group] = name
    _render_all(jobs)
    return made


def _render_all(jobs: list[Render]) -> None:
    """matplotlib draws on one core: several timelines render in parallel, each worker a
    fresh interpreter (not a fork of this one, where the Spark gateway's threads run)."""
    if len(jobs) < 2:
        for job in jobs:
            render_timeline(*job)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(RENDER_WORKERS, len(jobs)),
                             mp_context=context) as pool:
        for future in [pool.submit(render_timeline, *job) for job in jobs]:
            future.result()


def _slug(group: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", group)[:60] or "group"
