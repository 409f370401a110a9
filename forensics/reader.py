"""Finding and reading the inputs: the journal directory and the group log's segments."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from forensics.datasource import FORMAT_NAME, register
from forensics.grouplog import find_segments
from forensics.schema import CORRUPT_COLUMN, JOURNAL_DDL, JOURNAL_FIELDS, KNOWN_EVENT_TYPES

ACTIVE_NAME = ".events-active.jsonl"  # docs/events.md §1
ACTIVE_COPY_NAME = "events-active-copy.jsonl"
_ACTIVE_COPIES: dict[str, str] = {}  # copy -> the active file it was taken from
JOURNAL_VERSION = 1
COMMIT_EVENT = "offsets_committed"
_CONTROL_TYPES = tuple(t for t in KNOWN_EVENT_TYPES if t != COMMIT_EVENT)
# What the first parse of every line reads (`read_journal`).
_HEAD_DDL = f"v INT, event_type STRING, ts BIGINT, group_id STRING, {CORRUPT_COLUMN} STRING"


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


def _file_columns() -> list[Column]:
    """`source_path`, and `file`: sorts in time order, the active file last."""
    name = F.col("_metadata.file_name")
    return [F.col("_metadata.file_path").alias("source_path"),
            F.when(name.isin(ACTIVE_NAME, ACTIVE_COPY_NAME), F.lit("~active"))
            .otherwise(name).alias("file")]


def with_file(raw: DataFrame) -> DataFrame:
    """`source_path` and `file` (`_file_columns`) added to a journal frame."""
    return raw.select("*", *_file_columns())


def empty_journal(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], f"{JOURNAL_FIELDS}, file STRING, row BIGINT")


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


@dataclass
class Journal:
    """The journal split the way the job reads it: the events that explain rebalances (a few
    percent of a journal, every field), the commit stream (group and time only: one
    `offsets_committed` line per commit request is most of a journal), and the totals."""

    control: DataFrame
    commits: DataFrame  # group_id, ts
    summary: Summary


@dataclass
class JournalFrames:
    """The journal as lazy frames, before any Spark job has run (`journal_frames`)."""

    heads: DataFrame  # v, event_type, ts, group_id, bad: every line, cached
    control: DataFrame
    commits: DataFrame  # group_id, ts
    paths: list[str]


def journal_frames(spark: SparkSession, files: list[Path]) -> JournalFrames:
    """Schema-version-1 events of known types, as frames; `summarize_journal` counts the rest.

    Speed: Spark's JSON reader parses every line once, and one cached frame keeps what the
    job reads of it: every line's version, type, time and group (the summary and the commit
    stream read those), and the other fields only for the events that explain rebalances (a
    few percent of a journal; null for commits, which costs next to nothing in the cache).
    Caching every field of every line cost about twice as much; reading the rebalance events
    in a second pass over the files cost a second parse."""
    readable = [_readable_copy(p) if p.name == ACTIVE_NAME else p for p in files]
    paths = [str(p) for p in readable]
    is_control = (~_bad() & (F.col("v") == JOURNAL_VERSION)
                  & F.col("event_type").isin(*_CONTROL_TYPES))
    parsed = (spark.read.schema(JOURNAL_DDL).options(**_PERMISSIVE).json(paths)
              .select("v", "event_type", "ts", "group_id", _bad().alias("bad"),
                      F.when(is_control, F.struct(*_JOURNAL_COLUMNS, _file_columns()[1]))
                      .alias("event"))
              .withColumn("row", F.monotonically_increasing_id())
              .cache())
    heads = parsed.select("v", "event_type", "ts", "group_id", "bad")
    control = parsed.filter(F.col("event").isNotNull()).select("event.*", "row").cache()
    commits = heads.filter(~F.col("bad") & (F.col("v") == JOURNAL_VERSION)
                           & (F.col("event_type") == COMMIT_EVENT)).select("group_id", "ts")
    return JournalFrames(heads=heads, control=control, commits=commits, paths=paths)


def summarize_journal(frames: JournalFrames, problems: Problems) -> Summary:
    """The journal's totals, with what is skipped counted in `problems` (one Spark job, and
    one more to find the first malformed lines when there are any)."""
    summary = _tally(frames.heads, problems)
    if problems.malformed_lines:
        spark = frames.heads.sparkSession
        text = F.col("value")
        head = F.from_json(text, _HEAD_DDL, _PERMISSIVE)
        # The raw text of a bad line: the JSON reader keeps it only for lines that are not
        # JSON at all, not for a JSON object without a type.
        lines = spark.read.text(frames.paths).filter(F.trim(text) != "").select(
            head.alias("j"), text, *_file_columns())
        bad = F.col(f"j.{CORRUPT_COLUMN}").isNotNull() | F.col("j.event_type").isNull()
        for row in lines.filter(bad).select(F.col("source_path").alias("path"),
                                            F.col("value").alias("line")).limit(20).collect():
            text_of = row["line"] or ""
            path = _local_path(row["path"])
            problems.malformed_examples.append(
                (path, _byte_position(path, text_of), text_of[:120]))
    return summary


def read_journal(spark: SparkSession, files: list[Path], problems: Problems) -> Journal:
    """Schema-version-1 events of known types; everything else counted in `problems`."""
    if not files:
        return split_events(empty_journal(spark))
    frames = journal_frames(spark, files)
    summary = summarize_journal(frames, problems)
    return Journal(control=frames.control, commits=frames.commits, summary=summary)


_PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}
_JOURNAL_COLUMNS = [part.split(" ", 1)[0] for part in JOURNAL_FIELDS.split(", ")]


def _bad() -> Column:
    return F.col(CORRUPT_COLUMN).isNotNull() | F.col("event_type").isNull()


def event_frames(events: DataFrame) -> JournalFrames:
    """`JournalFrames` of clean events (journal fields plus `file` and `row`), as the
    streaming mode keeps them."""
    is_commit = F.col("event_type") == COMMIT_EVENT
    return JournalFrames(heads=events, control=events.filter(~is_commit).cache(),
                         commits=events.filter(is_commit).select("group_id", "ts"), paths=[])


def summarize_events(events: DataFrame) -> Summary:
    """The totals of clean events (`event_frames`)."""
    is_commit = F.col("event_type") == COMMIT_EVENT
    summary = Summary()
    for row in events.groupBy(is_commit.alias("commit")).agg(
            F.count(F.lit(1)).alias("n"), F.min("ts").alias("lo"), F.max("ts").alias("hi"),
            F.collect_set("group_id").alias("groups")).collect():
        summary.add(row["n"], bool(row["commit"]), row["lo"], row["hi"], row["groups"])
    return summary


def split_events(events: DataFrame) -> Journal:
    """A `Journal` from clean events (`event_frames`), with its totals."""
    frames = event_frames(events)
    return Journal(control=frames.control, commits=frames.commits,
                   summary=summarize_events(events))


def _tally(parsed: DataFrame, problems: Problems) -> Summary:
    """Count what is skipped, and sum up what is kept, in one pass."""
    summary = Summary()
    for row in parsed.groupBy("bad", "v", "event_type").agg(
            F.count(F.lit(1)).alias("n"), F.min("ts").alias("lo"), F.max("ts").alias("hi"),
            F.collect_set("group_id").alias("groups")).collect():
        if row["bad"]:
            problems.malformed_lines += row["n"]
        elif row["v"] != JOURNAL_VERSION:
            problems.other_versions[row["v"]] = (problems.other_versions.get(row["v"], 0)
                                                 + row["n"])
        elif row["event_type"] not in KNOWN_EVENT_TYPES:
            problems.unknown_event_types[row["event_type"]] = row["n"]
        else:
            summary.add(row["n"], row["event_type"] == COMMIT_EVENT, row["lo"], row["hi"],
                        row["groups"])
    return summary


def clean_journal(raw: DataFrame, problems: Problems) -> DataFrame:
    """Keep the events this job reads (schema version 1, known types); count the rest. For a
    frame from Spark's JSON reader with `with_file` (the streaming mode's micro-batches)."""
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


_MODELLED_RECORDS = ("offset_commit", "group_metadata")


def group_log_frame(spark: SparkSession, data_dir: Path) -> DataFrame | None:
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


def modelled_records(records: DataFrame) -> DataFrame:
    """The commit and group-metadata records: what the job reads."""
    return records.filter(F.col("record_type").isin(*_MODELLED_RECORDS))


def summarize_group_log(records: DataFrame, problems: Problems) -> Summary:
    """One aggregation over `group_log_frame` gives both the problems (undecodable, unknown
    and corrupt records) and the summary of the modelled ones."""
    positive = F.when(F.col("timestamp") > 0, F.col("timestamp"))
    tally = records.groupBy("record_type", "key_version").agg(
        F.count(F.lit(1)).alias("n"), F.min(positive).alias("lo"), F.max(positive).alias("hi"),
        F.collect_set("group_id").alias("groups")).collect()
    summary = Summary()
    for row in tally:
        if row["record_type"] == "undecodable":
            problems.undecodable_records += row["n"]
        elif row["record_type"] == "unknown":
            problems.unknown_record_types[row["key_version"]] = row["n"]
        elif row["record_type"] in _MODELLED_RECORDS:
            summary.add(row["n"], row["record_type"] == "offset_commit", row["lo"], row["hi"],
                        row["groups"])
    summary.events = 0  # records, not journal events
    if any(row["record_type"] == "corrupt" for row in tally):
        for row in records.filter(F.col("record_type") == "corrupt").select(
                "source_file", "position", "error").limit(50).collect():
            problems.corrupt_batches.append((row["source_file"], row["position"], row["error"]))
    return summary


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
