"""Finding and reading the inputs: the journal directory and the group log's segments."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from forensics.datasource import FORMAT_NAME, register
from forensics.grouplog import find_segments
from forensics.schema import CORRUPT_COLUMN, JOURNAL_DDL, JOURNAL_FIELDS, KNOWN_EVENT_TYPES

ACTIVE_NAME = ".events-active.jsonl"  # docs/events.md §1
ACTIVE_COPY_NAME = "events-active-copy.jsonl"
_ACTIVE_COPIES: dict[str, str] = {}  # copy -> the active file it was taken from
JOURNAL_VERSION = 1


@dataclass
class Problems:
    """Input that was counted and skipped, with where it was."""

    malformed_lines: int = 0
    malformed_examples: list[tuple[str, int, str]] = field(default_factory=list)
    unknown_event_types: dict[str, int] = field(default_factory=dict)
    other_versions: dict[int, int] = field(default_factory=dict)
    corrupt_batches: list[tuple[str, int, str]] = field(default_factory=list)
    undecodable_records: int = 0
    unknown_record_types: dict[int, int] = field(default_factory=dict)


def journal_dir(data_dir: Path) -> Path:
    return data_dir / "events"


def journal_files(directory: Path, include_active: bool = True) -> list[Path]:
    """Closed files in time order, then the active one (a batch run reads it too)."""
    if not directory.is_dir():
        return []
    closed = sorted(p for p in directory.glob("events-*.jsonl") if p.is_file())
    active = directory / ACTIVE_NAME
    if include_active and active.is_file() and active.stat().st_size > 0:
        closed.append(active)
    return closed


def _readable_copy(active: Path) -> Path:
    """Spark skips hidden files even when named explicitly: read the active file through a
    copy taken now (the broker keeps appending to the original). Removed at exit."""
    directory = Path(tempfile.mkdtemp(prefix="forensics-journal-"))
    atexit.register(shutil.rmtree, directory, True)
    copy = directory / ACTIVE_COPY_NAME
    shutil.copyfile(active, copy)
    _ACTIVE_COPIES[str(copy)] = str(active)
    return copy


def with_file(raw: DataFrame) -> DataFrame:
    """`source_path`, and `file`: sorts in time order, the active file last."""
    name = F.col("_metadata.file_name")
    return (raw.withColumn("source_path", F.col("_metadata.file_path"))
            .withColumn("file", F.when(name.isin(ACTIVE_NAME, ACTIVE_COPY_NAME),
                                       F.lit("~active")).otherwise(name)))


def with_order(raw: DataFrame) -> DataFrame:
    """`with_file` plus `row`, the line order within a file (not for streaming frames: add it
    to each micro-batch)."""
    return with_file(raw).withColumn("row", F.monotonically_increasing_id())


def empty_journal(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], f"{JOURNAL_FIELDS}, file STRING, row BIGINT")


def read_journal(spark: SparkSession, files: list[Path], problems: Problems) -> DataFrame:
    """Schema-version-1 events of known types, cached; everything else counted in `problems`."""
    if not files:
        return empty_journal(spark)
    readable = [_readable_copy(p) if p.name == ACTIVE_NAME else p for p in files]
    raw = with_order(spark.read.schema(JOURNAL_DDL)
                     .option("mode", "PERMISSIVE")
                     .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
                     .json([str(p) for p in readable]))
    return clean_journal(raw.cache(), problems)


def clean_journal(raw: DataFrame, problems: Problems) -> DataFrame:
    """Keep the events this job reads (schema version 1, known types); count the rest."""
    is_bad = F.col(CORRUPT_COLUMN).isNotNull() | F.col("event_type").isNull()
    tally = raw.withColumn("_bad", is_bad).groupBy("_bad", "v", "event_type").count().collect()
    for row in tally:
        if row["_bad"]:
            problems.malformed_lines += row["count"]
        elif row["v"] != JOURNAL_VERSION:
            problems.other_versions[row["v"]] = (problems.other_versions.get(row["v"], 0)
                                                 + row["count"])
        elif row["event_type"] not in KNOWN_EVENT_TYPES:
            problems.unknown_event_types[row["event_type"]] = row["count"]
    if problems.malformed_lines:
        examples = raw.filter(is_bad).select(F.col("source_path").alias("path"),
                                             CORRUPT_COLUMN).limit(20)
        for row in examples.collect():
            text = row[CORRUPT_COLUMN] or ""
            path = _local_path(row["path"])
            problems.malformed_examples.append(
                (path, _byte_position(path, text), text[:120]))
    return (raw.filter(F.col(CORRUPT_COLUMN).isNull() & (F.col("v") == JOURNAL_VERSION)
                       & F.col("event_type").isin(*KNOWN_EVENT_TYPES))
            .drop(CORRUPT_COLUMN, "source_path"))


def read_group_log(spark: SparkSession, data_dir: Path, problems: Problems
                   ) -> DataFrame | None:
    """The decoded group log (cached), or None when there is no `__consumer_offsets-N` here."""
    if not find_segments(data_dir):
        return None
    register(spark)
    records = spark.read.format(FORMAT_NAME).load(str(data_dir)).cache()
    tally = records.groupBy("record_type", "key_version").count().collect()
    for row in tally:
        if row["record_type"] == "undecodable":
            problems.undecodable_records += row["count"]
        elif row["record_type"] == "unknown":
            problems.unknown_record_types[row["key_version"]] = row["count"]
    if any(row["record_type"] == "corrupt" for row in tally):
        for row in records.filter(F.col("record_type") == "corrupt").select(
                "source_file", "position", "error").limit(50).collect():
            problems.corrupt_batches.append((row["source_file"], row["position"], row["error"]))
    return records.filter(F.col("record_type").isin("offset_commit", "group_metadata"))


def _local_path(uri: str) -> str:
    path = uri[len("file:"):] if uri.startswith("file:") else uri
    return _ACTIVE_COPIES.get(path, path)


def _byte_position(path: str, text: str) -> int:
    """Where a malformed line starts in its file (-1 when the file is not readable here)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return -1
    if not text:
        return -1
    line = text.encode("utf-8", "replace")
    if data.startswith(line + b"\n") or data == line:
        return 0
    found = data.find(b"\n" + line + b"\n")
    if found < 0 and data.endswith(b"\n" + line):
        found = len(data) - len(line) - 1
    return found + 1 if found >= 0 else -1
