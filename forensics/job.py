"""One batch run: inputs -> Parquet tables, the HTML report and the timeline PNGs in `out`."""

from __future__ import annotations

import copy
import multiprocessing
import re
import shutil
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
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
    event_frames,
    group_log_frame,
    journal_dir,
    journal_files,
    journal_frames,
    modelled_records,
    summarize_events,
    summarize_group_log,
    summarize_journal,
)
from forensics.report import ReportData, ready, render_html, render_timeline

TABLES = ("rebalances", "member_sessions", "group_states", "commits", "rebalance_commit_gaps")
REPORT_NAME = "report.html"
PARTITION_KEYS = ("topic", "partition")
MAX_DRAWN_GAPS = 200  # per timeline
RENDER_WORKERS = 2
SPARK_THREADS = 4  # Spark jobs in flight at once: planning one while another runs


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

    Speed: the journal is parsed once, narrowly, and cached (`reader.journal_frames`); the
    events that explain rebalances are read apart with every field. The commit gaps come from
    one sort of the commits with the rebalances marked in between. Each output table is
    computed once and collected as Arrow: the report reads it and the driver writes it as
    Parquet (tables are aggregates, small next to their inputs), and the rankings are pandas.
    Spark jobs are submitted from several threads: the inputs' totals are counted while the
    rest is planned, and the tables are collected together, so that the driver's planning and
    the executors' work overlap. The timeline renderers start with the job."""
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = copy.deepcopy(extra_problems) if extra_problems is not None else Problems()
    renderer = _Renderer(min(RENDER_WORKERS, timelines))
    try:
        with ThreadPoolExecutor(max_workers=SPARK_THREADS,
                                thread_name_prefix="forensics-job") as pool:
            return _run(spark, data_dir, out_dir, timelines, journal, events, problems, pool,
                        renderer)
    finally:
        renderer.close()


@dataclass
class _Plan:
    rebalances: DataFrame
    sessions: DataFrame
    around: DataFrame | None
    group_stream: DataFrame | None
    partition_stream: DataFrame | None


def _plan(control: DataFrame, journal_commits: DataFrame | None, records: DataFrame | None,
          has_journal: bool) -> _Plan:
    """The output tables that do not depend on the inputs' time span, as frames."""
    generations = T.group_generations(records).cache() if records is not None else None
    moved = T.partitions_moved(generations) if generations is not None else None
    if has_journal:
        rebalances = T.with_consumer_groups(T.rebalances_from_journal(control), control)
        consumer_moved = T.consumer_partitions_moved(control)
        moved = consumer_moved if moved is None else moved.unionByName(consumer_moved)
        sessions = T.member_sessions(control)
    elif generations is not None:
        rebalances = T.rebalances_from_group_log(generations)
        sessions = T.member_sessions_from_group_log(generations)
    else:
        rebalances = T.rebalances_from_journal(control)  # empty, with the right columns
        sessions = T.member_sessions(control)
    numbered = T.number_rebalances(T.with_partitions_moved(rebalances, moved)).cache()
    times = T.commit_times(journal_commits if has_journal else None, records)
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
    return _Plan(rebalances=rebalances, sessions=sessions, around=around,
                 group_stream=group_stream, partition_stream=partition_stream)


def _run(spark: SparkSession, data_dir: Path, out_dir: Path, timelines: int,
         journal: Path | None, events: DataFrame | None, problems: Problems,
         pool: ThreadPoolExecutor, renderer: _Renderer) -> Outcome:
    # The inputs as frames; their totals are counted in the background.
    files = journal_files(journal or journal_dir(data_dir)) if events is None else []
    if events is not None:
        frames = event_frames(events)
        journal_summary = pool.submit(summarize_events, events)
    elif files:
        frames = journal_frames(spark, files)
        journal_summary = pool.submit(summarize_journal, frames, problems)
    else:
        frames = event_frames(empty_journal(spark))
        journal_summary = _done(Summary())
    control = frames.control
    all_records = group_log_frame(spark, data_dir)
    records = modelled_records(all_records) if all_records is not None else None
    log_summary_f = (pool.submit(summarize_group_log, all_records, problems)
                     if all_records is not None else _done(Summary()))

    # Planned and collected while those jobs run, on the guess that a journal that is there
    # has events; only the tables that need the inputs' time span wait for their totals.
    guessed = events is not None or bool(files)
    pending = _submit(pool, _span_free(control, frames.commits, records, guessed, timelines))
    summary = journal_summary.result()
    log_summary = log_summary_f.result()
    has_journal = summary.events > 0
    if has_journal != guessed:
        for future in pending.values():
            future.result()
        pending = _submit(pool, _span_free(control, frames.commits, records, has_journal,
                                           timelines))
    span_start = _min(summary.first_ts, log_summary.first_ts)
    span_end = _max(summary.last_ts, log_summary.last_ts)
    data_end: Column = F.lit(span_end if span_end is not None else 0).cast("long")
    plan = pending.plan
    states = T.group_states(control, data_end) if has_journal or records is None else None
    per_partition = plan.partition_stream is not None and plan.around is not None
    commits = (T.commits(records, data_end, plan.around if per_partition else None)
               if records is not None else None)
    pending.update(_submit(pool, _Tables(plan, {"group_states": states, "commits": commits})))
    tables = {name: future.result() for name, future in pending.items()}
    for name in TABLES:
        _write_or_remove(tables.get(name), out_dir / name)

    rb = tables["rebalances"].to_pandas()
    members = tables["member_sessions"].to_pandas()
    worst = S.worst_groups(rb)
    listed = tables["listed"].to_pandas()
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
        conversions=tables["conversions"].to_pandas())
    for old in out_dir.glob("timeline-*.png"):
        old.unlink()
    if span_start is not None and span_end is not None and len(worst) and timelines > 0:
        top = worst["group_id"].head(timelines).tolist()
        gaps = tables["gaps"].to_pandas() if "gaps" in tables else None
        data.timelines = _timelines(members, gaps, top, rb, out_dir, (span_start, span_end),
                                    renderer)
    report = out_dir / REPORT_NAME
    tmp = report.with_suffix(".html.tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(report)  # a reader (or a browser refresh in --follow) never sees half a page
    spark.catalog.clearCache()  # --follow runs this again and again in one session
    return Outcome(report=report, rebalances=len(rb), groups=counts["groups"],
                   problems=problems)


class _Tables(dict[str, DataFrame | None]):
    """Frames to collect, by name, and the plan they came from."""

    def __init__(self, plan: _Plan, frames: dict[str, DataFrame | None]) -> None:
        super().__init__(frames)
        self.plan = plan


class _Pending(dict[str, "Future[pa.Table]"]):
    """Collections in flight, by name, and the plan their frames came from."""

    def __init__(self, plan: _Plan) -> None:
        super().__init__()
        self.plan = plan


def _span_free(control: DataFrame, journal_commits: DataFrame | None,
               records: DataFrame | None, has_journal: bool, timelines: int) -> _Tables:
    """The frames to collect that do not depend on the inputs' time span."""
    plan = _plan(control, journal_commits, records, has_journal)
    # Per partition when the group log has its commits (a dead member's partitions stop
    # while the others go on), else per group.
    stream, keys = ((plan.partition_stream, PARTITION_KEYS) if plan.partition_stream is not None
                    else (plan.group_stream, ()))
    return _Tables(plan, {
        "rebalances": plan.rebalances,
        "member_sessions": plan.sessions,
        "rebalance_commit_gaps": plan.around,
        "listed": control.filter(F.col("event_type").isin(
            "static_member_replaced", "group_write_failed")),
        "conversions": T.group_conversions(control),
        # every group's drawn gaps: they are few, and the worst groups are known only later
        "gaps": T.drawn_gaps(stream, keys) if stream is not None and timelines > 0 else None,
    })


def _submit(pool: ThreadPoolExecutor, tables: _Tables) -> _Pending:
    pending = _Pending(tables.plan)
    for name, frame in tables.items():
        if frame is not None:
            pending[name] = pool.submit(_collect, frame)
    return pending


def _done(value: Summary) -> Future[Summary]:
    future: Future[Summary] = Future()
    future.set_result(value)
    return future


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
               rb: pd.DataFrame, out_dir: Path, span: tuple[int, int],
               renderer: _Renderer) -> dict[str, str]:
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
    renderer.render(jobs)
    return made


class _Renderer:
    """matplotlib draws on one core: several timelines render in parallel, each worker a
    fresh interpreter (not a fork of this one, where the Spark gateway's threads run). The
    workers start with the job, so that their start (importing matplotlib and pandas) is done
    by the time the tables are."""

    def __init__(self, workers: int) -> None:
        self._pool: ProcessPoolExecutor | None = None
        if workers > 1:
            self._pool = ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
            for _ in range(workers):  # one each: a busy pool starts another worker
                self._pool.submit(ready)

    def render(self, jobs: list[Render]) -> None:
        if self._pool is None or len(jobs) < 2:
            for job in jobs:
                render_timeline(*job)
            return
        for future in [self._pool.submit(render_timeline, *job) for job in jobs]:
            future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _slug(group: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", group)[:60] or "group"
