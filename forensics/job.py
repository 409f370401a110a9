"""One batch run: inputs -> Parquet tables, the HTML report and the timeline PNGs in `out`."""

from __future__ import annotations

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
from forensics.journal_pass import OUTPUT, close_states
from forensics.live import LiveSource
from forensics.reader import (
    JournalTables,
    Problems,
    Summary,
    analyse_journal,
    group_log_frame,
    journal_dir,
    journal_files,
    journal_tables,
    live_group_log_frame,
    modelled_records,
    stored_group_log_frame,
    summarize_group_log,
)
from forensics.report import ReportData, ready, render_html, render_timeline

TABLES = ("rebalances", "member_sessions", "group_states", "commits", "rebalance_commit_gaps")
REPORT_NAME = "report.html"
PARTITION_KEYS = ("topic", "partition")
MAX_DRAWN_GAPS = 200  # per timeline
RENDER_WORKERS = 2
SPARK_THREADS = 4  # Spark jobs in flight at once: the journal pass beside the group log's


@dataclass
class Outcome:
    report: Path
    rebalances: int
    groups: int
    problems: Problems


def run(spark: SparkSession, data_dir: str | Path | None, out_dir: Path, *,
        timelines: int = 10, journal: str | Path | None = None,
        live: LiveSource | None = None, group_log_store: Path | None = None) -> Outcome:
    """Analyse `data_dir` (a rebalanced `log.dirs` or a Kafka log directory) into `out_dir`;
    the journal is `journal`, else `data_dir`/events. With `live`, the group log is a live
    cluster's offsets topic instead of `data_dir`'s segments (and `data_dir` may be None).
    With `group_log_store`, the group log is the records `--follow` kept there (Parquet).
    Inputs are local paths or URLs (`forensics.files`); `out_dir` is the driver's.

    Speed: each journal file is parsed in its own task and gathered there per group
    (`journal_chunks`), those rows are shuffled once by group, and each group's go through
    one Python function that makes every journal table at once (`journal_pass`). On a cold
    JVM every distinct Spark SQL operator costs compile time and every row handled before
    the code is compiled costs more: a row per file and group, and one pass, cost far less
    than a row per line and a plan per table. The group log, where there is one, is read by
    its own data source at the same time; its tables (per-partition commits and gaps,
    partitions moved) are Spark SQL over the decoded records. Every table is collected as
    Arrow (tables are aggregates, small next to their inputs) and the driver writes it as
    Parquet; the rankings are pandas. The timeline renderers start with the job."""
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = Problems()
    renderer = Renderer(min(RENDER_WORKERS, timelines))
    try:
        with ThreadPoolExecutor(max_workers=SPARK_THREADS,
                                thread_name_prefix="forensics-job") as pool:
            if journal is None and data_dir is not None:
                journal = journal_dir(data_dir)
            return _run(spark, data_dir, out_dir, timelines, journal, live, group_log_store,
                        problems, pool, renderer)
    finally:
        renderer.close()


def _run(spark: SparkSession, data_dir: str | Path | None, out_dir: Path, timelines: int,
         journal: str | Path | None, live: LiveSource | None,
         group_log_store: Path | None, problems: Problems,
         pool: ThreadPoolExecutor, renderer: Renderer) -> Outcome:
    # The journal pass and the group log's first jobs run at once.
    analysed = (pool.submit(_collect, analyse_journal(spark, journal))
                if journal is not None and journal_files(journal) else None)
    if group_log_store is not None:
        all_records = stored_group_log_frame(spark, group_log_store)
    elif live is not None:
        all_records = live_group_log_frame(spark, live)
    else:
        all_records = group_log_frame(spark, data_dir) if data_dir is not None else None
    records = modelled_records(all_records) if all_records is not None else None
    log_summary_f = (pool.submit(summarize_group_log, all_records, problems)
                     if all_records is not None else _done(Summary()))
    generations = T.group_generations(records).cache() if records is not None else None
    moved_f = (pool.submit(_collect, T.partitions_moved(generations))
               if generations is not None and analysed is not None else None)

    found = (journal_tables(analysed.result(), problems) if analysed is not None
             else journal_tables(OUTPUT.empty_table(), problems))
    summary = found.summary
    log_summary = log_summary_f.result()
    has_journal = summary.events > 0
    span_end = _max(summary.last_ts, log_summary.last_ts)
    data_end = span_end if span_end is not None else 0

    tables: dict[str, pa.Table | None]
    if has_journal:
        moved = moved_f.result() if moved_f is not None else None
        tables = _journal_outputs(spark, found.tables, moved, records, data_end, timelines,
                                  pool)
    elif generations is not None and records is not None:
        tables = _group_log_outputs(generations, records, data_end, timelines, pool)
    else:  # nothing to report: the tables a journal would fill, empty
        tables = {"rebalances": found.tables["rebalances"],
                  "member_sessions": found.tables["member_sessions"],
                  "group_states": close_states(found.tables["group_states"], data_end)}
    outcome = write_outputs(out_dir, tables, found, log_summary, problems,
                            source=live.display if live is not None else str(data_dir),
                            has_group_log=records is not None, timelines=timelines,
                            renderer=renderer, live_source=live is not None)
    spark.catalog.clearCache()  # --follow runs this again and again in one session
    return outcome


def write_outputs(out_dir: Path, tables: dict[str, pa.Table | None], found: JournalTables,
                  log_summary: Summary, problems: Problems, *, source: str,
                  has_group_log: bool, timelines: int, renderer: Renderer,
                  live_source: bool = False) -> Outcome:
    """The tables as Parquet (a table that is None is removed: not computable from these
    inputs), the rankings, the timelines and the report, from the tables of the journal
    (`found`) and the group log."""
    summary = found.summary
    has_journal = summary.events > 0
    span_start = _min(summary.first_ts, log_summary.first_ts)
    span_end = _max(summary.last_ts, log_summary.last_ts)
    for name in TABLES:
        _write_or_remove(tables.get(name), out_dir / name)

    rebalances, sessions = tables["rebalances"], tables["member_sessions"]
    assert rebalances is not None and sessions is not None
    rb = rebalances.to_pandas()
    members = sessions.to_pandas()
    worst = S.worst_groups(rb)
    listed = found.tables["listed"].to_pandas()
    counts = {
        "groups": len(summary.groups | log_summary.groups),
        "members": len(members),
        # One commit per partition, as the `commits` table counts them: the group log's
        # records; from the journal alone (no group log) only its requests can be counted.
        "commits": log_summary.commits if has_group_log else summary.commits,
    }
    data = ReportData(
        data_dir=source, has_journal=has_journal, has_group_log=has_group_log,
        live_source=live_source,
        commits_label="partition commits" if has_group_log else "commit requests",
        span=(span_start, span_end), counts=counts, rebalances=rb, worst_groups=worst,
        causes=S.top_causes(rb), culprits=S.top_culprits(rb),
        static_restarts=_static_restarts(listed), problems=problems,
        write_failures=_write_failures(listed),
        conversions=found.tables["conversions"].to_pandas())
    for old in out_dir.glob("timeline-*.png"):
        old.unlink()
    if span_start is not None and span_end is not None and len(worst) and timelines > 0:
        top = worst["group_id"].head(timelines).tolist()
        drawn = tables.get("gaps")
        gaps = drawn.to_pandas() if drawn is not None else None
        data.timelines = _timelines(members, gaps, top, rb, out_dir, (span_start, span_end),
                                    renderer)
    report = out_dir / REPORT_NAME
    tmp = report.with_suffix(".html.tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    tmp.replace(report)  # a reader (or a browser refresh in --follow) never sees half a page
    return Outcome(report=report, rebalances=len(rb), groups=counts["groups"],
                   problems=problems)


def _journal_outputs(spark: SparkSession, found: dict[str, pa.Table], moved: pa.Table | None,
                     records: DataFrame | None, data_end: int, timelines: int,
                     pool: ThreadPoolExecutor) -> dict[str, pa.Table | None]:
    """The output tables of a journal (and of the group log beside it, if any). The journal
    pass made the rebalances with the group's commit gap around each, the member sessions,
    the state times and the gaps worth drawing. The group log adds how many partitions each
    classic rebalance moved and, from its per-partition commit records, the commit gap of
    each partition around each rebalance (a dead member's partitions stop committing while
    the others go on), the per-partition commit table and the drawn gaps per partition."""
    rebalances = _with_classic_moves(found["rebalances"], moved)
    tables: dict[str, pa.Table | None] = {
        "rebalances": rebalances,
        "member_sessions": found["member_sessions"],
        "group_states": close_states(found["group_states"], data_end),
        "gaps": found["gaps"] if timelines > 0 else None,
    }
    if records is None:
        tables["rebalance_commit_gaps"] = _journal_commit_gaps(rebalances)
        return tables
    frame = spark.createDataFrame(rebalances.select(list(T.REBALANCE_GAP_COLUMNS)))
    numbered = T.number_rebalances(frame).cache()
    stream = T.commit_stream(numbered, T.partition_commit_times(records),
                             PARTITION_KEYS).cache()
    around = T.rebalance_commit_gaps(numbered, stream, PARTITION_KEYS, "group_log").cache()
    frames = {"rebalance_commit_gaps": around,
              "commits": T.commits(records, _lit(data_end), around)}
    if timelines > 0:
        frames["gaps"] = T.drawn_gaps(stream, PARTITION_KEYS)
    pending = {name: pool.submit(_collect, f) for name, f in frames.items()}
    tables.update({name: future.result() for name, future in pending.items()})
    return tables


def _group_log_outputs(generations: DataFrame, records: DataFrame, data_end: int,
                       timelines: int, pool: ThreadPoolExecutor
                       ) -> dict[str, pa.Table | None]:
    """The output tables of a group log alone (a Kafka log directory): rebalances and member
    sessions inferred from the GroupMetadata records, commit gaps from the commit records;
    no state times (the records do not have them)."""
    rebalances = T.with_partitions_moved(T.rebalances_from_group_log(generations),
                                         T.partitions_moved(generations))
    numbered = T.number_rebalances(rebalances).cache()
    group_stream = T.commit_stream(numbered, T.commit_times(records)).cache()
    stream = T.commit_stream(numbered, T.partition_commit_times(records),
                             PARTITION_KEYS).cache()
    around = T.rebalance_commit_gaps(numbered, stream, PARTITION_KEYS, "group_log").cache()
    frames = {
        "rebalances": T.with_commit_gaps(numbered, group_stream),
        "member_sessions": T.member_sessions_from_group_log(generations),
        "rebalance_commit_gaps": around,
        "commits": T.commits(records, _lit(data_end), around),
    }
    if timelines > 0:
        frames["gaps"] = T.drawn_gaps(stream, PARTITION_KEYS)
    pending = {name: pool.submit(_collect, f) for name, f in frames.items()}
    return {name: future.result() for name, future in pending.items()}


def _lit(value: int) -> Column:
    return F.lit(value).cast("long")


def _with_classic_moves(rebalances: pa.Table, moved: pa.Table | None) -> pa.Table:
    """Partitions moved by each classic rebalance, from the group log's assignments (a
    consumer group's come with its journal events)."""
    if moved is None or moved.num_rows == 0 or rebalances.num_rows == 0:
        return rebalances
    by_generation = {(g, n): m for g, n, m in zip(
        moved.column("group_id").to_pylist(), moved.column("generation").to_pylist(),
        moved.column("partitions_moved").to_pylist(), strict=True)}
    filled = [m if m is not None else by_generation.get((g, n)) for g, n, m in zip(
        rebalances.column("group_id").to_pylist(),
        rebalances.column("generation_to").to_pylist(),
        rebalances.column("partitions_moved").to_pylist(), strict=True)]
    index = rebalances.schema.get_field_index("partitions_moved")
    return rebalances.set_column(index, "partitions_moved", pa.array(filled, pa.int64()))


def _journal_commit_gaps(rebalances: pa.Table) -> pa.Table:
    """`rebalance_commit_gaps` from the journal alone: one row per rebalance from the group's
    commit times (the journal's commit lines do not name partitions)."""
    n = rebalances.num_rows
    columns = {name: rebalances.column(name) for name in T.REBALANCE_GAP_COLUMNS}
    columns.update({
        "topic": pa.nulls(n, pa.string()), "partition": pa.nulls(n, pa.int32()),
        "gap_start_ts": rebalances.column("gap_start_ts"),
        "gap_end_ts": rebalances.column("gap_end_ts"),
        "commit_gap_ms": rebalances.column("commit_gap_ms"),
        "source": pa.array(["journal"] * n, pa.string()),
    })
    return pa.table(columns)


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
               renderer: Renderer) -> dict[str, str]:
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


class Renderer:
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
