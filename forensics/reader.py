"""Finding and reading the inputs: the journal directory and the group log's segments."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from forensics.datasource import FORMAT_NAME, LIVE_FORMAT_NAME, register, register_live
from forensics.files import child
from forensics.grouplog import GROUP_LOG_COLUMNS, find_segments
from forensics.journal_chunks import CHUNK, journal_files, read_files
from forensics.journal_pass import (
    COMMIT,
    JOURNAL_VERSION,
    OUTPUT,
    TABLE_TYPES,
    analyse_group_table,
    flat_table,
    spark_ddl,
)
from forensics.live import LiveSource
from forensics.schema import KNOWN_EVENT_TYPES

__all__ = ["journal_files"]


@dataclass
class Problems:
    """Input that was counted and skipped, with where it was."""

    malformed_lines: int = 0
    malformed_examples: list[tuple[str, int, str]] = field(default_factory=list)
    unknown_event_types: dict[str, int] = field(default_factory=dict)
    other_versions: dict[int | None, int] = field(default_factory=dict)
    corrupt_batches: list[tuple[str, int, str]] = field(default_factory=list)
    undecodable_records: int = 0
    unknown_record_types: dict[int, int] = field(default_factory=dict)


def journal_dir(data_dir: str | Path) -> str:
    return child(data_dir, "events")


@dataclass
class Summary:
    """What the report needs to know about an input as a whole, from one aggregation."""

    events: int = 0
    commits: int = 0
    first_ts: int | None = None
    last_ts: int | None = None
    groups: set[str] = field(default_factory=set)

    def add(self, count: int, is_commit: bool, lo: int | None, hi: int | None,
            groups: list[str]) -> None:
        self.events += count
        if is_commit:
            self.commits += count
        if lo is not None:
            self.first_ts = lo if self.first_ts is None else min(self.first_ts, lo)
        if hi is not None:
            self.last_ts = hi if self.last_ts is None else max(self.last_ts, hi)
        self.groups.update(groups)


def analyse_journal(spark: SparkSession, directory: str | Path) -> DataFrame:
    """One row per group (`journal_pass.OUTPUT`): each journal file in `directory` read and
    gathered per group on its own (`journal_chunks.read_files`, the files shared out among
    the cores), those rows shuffled by group once, and each group's through
    `journal_pass.analyse_group_table`.

    The files are listed here, on the driver, and read by the executors through
    `forensics.files`: a local path must be mounted at the same place on every executor, a
    URL (`s3://`, `hdfs://`, ...) is read from wherever it is.
    A Spark range hands each task the numbers of its files: no Python process on the driver
    is needed to plan the read, as a Python data source would."""
    paths = journal_files(directory)
    # A task per core, not per file or per shuffle partition: a Python task's start costs
    # more than reading a file, and the groups' rows are few.
    cores = max(spark.sparkContext.defaultParallelism, 1)
    files = spark.range(0, len(paths), 1, max(min(len(paths), cores), 1))
    chunks = (files.mapInArrow(partial(read_files, paths), spark_ddl(CHUNK))
              .repartition(cores, "group_id"))
    return chunks.groupBy("group_id").applyInArrow(analyse_group_table, spark_ddl(OUTPUT))


@dataclass
class JournalTables:
    """The journal's tables (Arrow, `journal_pass.TABLE_TYPES`) and its totals."""

    tables: dict[str, pa.Table]
    summary: Summary


def journal_tables(analysed: pa.Table, problems: Problems) -> JournalTables:
    """`analyse_journal`'s rows as one table each, with what was skipped counted (and the
    first malformed lines located) in `problems`."""
    tables = {name: flat_table(analysed.column(name)) for name in TABLE_TYPES}
    summary = Summary()
    for row in tables.pop("tally").to_pylist():
        if row["bad"]:
            problems.malformed_lines += row["n"]
        elif row["v"] != JOURNAL_VERSION:
            problems.other_versions[row["v"]] = (problems.other_versions.get(row["v"], 0)
                                                 + row["n"])
        elif row["event_type"] not in KNOWN_EVENT_TYPES:
            problems.unknown_event_types[row["event_type"]] = (
                problems.unknown_event_types.get(row["event_type"], 0) + row["n"])
        else:
            summary.add(row["n"], row["event_type"] == COMMIT, row["lo"], row["hi"],
                        [row["group_id"]] if row["group_id"] is not None else [])
    malformed = sorted((r["path"], r["position"], r["text"])
                       for r in tables.pop("malformed").to_pylist())
    problems.malformed_examples.extend(malformed[:20])
    return JournalTables(tables=tables, summary=summary)


_MODELLED_RECORDS = ("offset_commit", "group_metadata")


def group_log_frame(spark: SparkSession, data_dir: str | Path) -> DataFrame | None:
    """Every decoded group-log record (cached once read), or None when there is no
    `__consumer_offsets-N` here."""
    if not find_segments(data_dir):
        return None
    register(spark)
    # One Spark partition per log partition or segment is how the data source splits the
    # reading; the cached records are then held in as many partitions as the cluster has
    # cores, so that every later pass over them runs that many tasks rather than one per
    # (mostly tiny) `__consumer_offsets` partition.
    return (spark.read.format(FORMAT_NAME).load(str(data_dir))
            .coalesce(spark.sparkContext.defaultParallelism).cache())


def live_group_log_frame(spark: SparkSession, source: LiveSource) -> DataFrame | None:
    """Every record of a live cluster's offsets topic in `source`'s ranges (cached once
    read), or None when the ranges hold no record."""
    if not source.records:
        return None
    register_live(spark)
    return (spark.read.format(LIVE_FORMAT_NAME).options(**source.options()).load()
            .coalesce(spark.sparkContext.defaultParallelism).cache())


def stored_group_log_frame(spark: SparkSession, store: Path) -> DataFrame | None:
    """The group-log records `--follow` kept (Parquet, a directory per micro-batch), or None
    when there are none yet."""
    if not any(store.glob("batch_id=*/*.parquet")):
        return None
    return (spark.read.parquet(str(store)).select(*GROUP_LOG_COLUMNS)
            .coalesce(spark.sparkContext.defaultParallelism).cache())


def modelled_records(records: DataFrame) -> DataFrame:
    """The commit and group-metadata records: what the job reads."""
    return records.filter(F.col("record_type").isin(*_MODELLED_RECORDS))


def summarize_group_log(records: DataFrame, problems: Problems) -> Summary:
    """One aggregation over `group_log_frame` gives both the problems (undecodable, unknown
    and corrupt records) and the summary of the modelled ones."""
    positive = F.when(F.col("timestamp") > 0, F.col("timestamp"))
    tally = records.groupBy("record_type", "key_version", "tombstone").agg(
        F.count(F.lit(1)).alias("n"), F.min(positive).alias("lo"), F.max(positive).alias("hi"),
        F.collect_set("group_id").alias("groups")).collect()
    summary = Summary()
    for row in tally:
        if row["record_type"] == "undecodable":
            problems.undecodable_records += row["n"]
        elif row["record_type"] == "unknown":
            problems.unknown_record_types[row["key_version"]] = row["n"]
        elif row["record_type"] in _MODELLED_RECORDS:
            # A tombstone deletes an offset (OffsetDelete, expiry): not a commit.
            summary.add(row["n"], row["record_type"] == "offset_commit" and not row["tombstone"],
                        row["lo"], row["hi"], row["groups"])
    summary.events = 0  # records, not journal events
    if any(row["record_type"] == "corrupt" for row in tally):
        for row in records.filter(F.col("record_type") == "corrupt").select(
                "source_file", "position", "error").limit(50).collect():
            problems.corrupt_batches.append((row["source_file"], row["position"], row["error"]))
    return summary


