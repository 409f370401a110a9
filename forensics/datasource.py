"""`spark.read.format("consumer_offsets")`: a PySpark Python data source over group-log segments.

`spark.read.format("consumer_offsets").load(DIR)` lists every `__consumer_offsets-N/*.log`
under DIR on the driver and reads each segment in its own Spark partition with
`forensics.grouplog.decode_segment_chunks`, handing Spark Arrow record batches: the commit
records (nearly all of a group log) go from the C loop's column buffers into Arrow arrays
without a Python object per row. DIR is a local path (on a cluster, mounted at the same
place on every executor) or a URL (`s3://`, `hdfs://`, ...: `forensics.files`).

`spark.read.format("kafka_consumer_offsets")` reads the same records from a live cluster's
offsets topic over the Kafka protocol (`forensics.live`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from forensics.grouplog import (
    COMMIT_BUFFERS,
    GROUP_LOG_COLUMNS,
    CommitColumns,
    decode_segment_chunks,
    find_segments,
)
from forensics.schema import GROUP_LOG_DDL

FORMAT_NAME = "consumer_offsets"
ROWS_PER_BATCH = 65536


def arrow_schema() -> Any:
    """`schema.GROUP_LOG_DDL` in Arrow terms (the two must stay in step)."""
    import pyarrow as pa

    assignment = pa.list_(pa.struct([("topic", pa.string()), ("partition", pa.int32())]))
    member = pa.struct([("member_id", pa.string()), ("group_instance_id", pa.string()),
                        ("client_id", pa.string()), ("client_host", pa.string()),
                        ("session_timeout", pa.int32()), ("rebalance_timeout", pa.int32()),
                        ("assignment", assignment)])
    types = {"log_partition": pa.int32(), "position": pa.int64(), "offset": pa.int64(),
             "timestamp": pa.int64(), "key_version": pa.int32(), "value_version": pa.int32(),
             "partition": pa.int32(), "committed_offset": pa.int64(),
             "commit_timestamp": pa.int64(), "expire_timestamp": pa.int64(),
             "tombstone": pa.bool_(), "generation": pa.int32(), "state_timestamp": pa.int64(),
             "members": pa.list_(member)}
    return pa.schema([(name, types.get(name, pa.string())) for name in GROUP_LOG_COLUMNS])


def _record_batch(pa: Any, schema: Any, rows: list[tuple[object, ...]]) -> Any:
    """Column by column; a column with no value in these rows (most of them, in a run of
    commits) is made as nulls without looking at its Python objects."""
    n = len(rows)
    arrays = [pa.nulls(n, field.type) if column.count(None) == n
              else pa.array(column, type=field.type)
              for column, field in zip(zip(*rows, strict=True), schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _commit_batch(pa: Any, schema: Any, chunk: CommitColumns) -> Any:
    """Arrow arrays over the chunk's buffers (no copy); the columns every commit row has the
    same value in are repeated scalars, the ones it has no value in nulls."""
    n = chunk.rows
    buffer = dict(zip(COMMIT_BUFFERS, (pa.py_buffer(b) for b in chunk.buffers), strict=True))
    constant = {"source_file": chunk.source_file, "log_partition": chunk.log_partition,
                "record_type": "offset_commit", "value_version": 3, "expire_timestamp": -1,
                "tombstone": False}
    arrays = []
    for field in schema:
        if field.name in constant:
            arrays.append(pa.repeat(pa.scalar(constant[field.name], field.type), n))
        elif field.name in buffer:
            arrays.append(pa.Array.from_buffers(field.type, n, [None, buffer[field.name]]))
        elif f"{field.name}.data" in buffer:
            arrays.append(pa.Array.from_buffers(field.type, n, [
                None, buffer[f"{field.name}.offsets"], buffer[f"{field.name}.data"]]))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


_frozen = False


def _freeze_imports() -> None:
    """Spark's Python worker runs a full garbage collection after every task; with pyarrow,
    pandas and pyspark imported, each of those passes over a heap of modules that never
    become garbage. Those objects (everything alive before the worker's first read) are
    moved out of the collector's reach once, so that the passes see only the tasks' own."""
    global _frozen
    if not _frozen:
        import gc

        gc.freeze()
        _frozen = True


class SegmentPartition(InputPartition):  # type: ignore[misc]
    def __init__(self, path: str, log_partition: int) -> None:
        super().__init__((path, log_partition))
        self.path = path
        self.log_partition = log_partition


class ConsumerOffsetsReader(DataSourceReader):  # type: ignore[misc]
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list[SegmentPartition]:
        segments = find_segments(self.path)
        # Spark needs at least one partition; an empty one reads nothing.
        return [SegmentPartition(p, n) for p, n in segments] or [SegmentPartition("", -1)]

    def read(self, partition: Any) -> Iterator[Any]:
        """Arrow record batches of about `ROWS_PER_BATCH` rows: Spark takes them column by
        column, far cheaper than Python rows one at a time."""
        if not partition.path:
            return
        _freeze_imports()
        import pyarrow as pa

        schema = arrow_schema()
        for chunk in decode_segment_chunks(partition.path, partition.log_partition,
                                           ROWS_PER_BATCH):
            if isinstance(chunk, CommitColumns):
                yield _commit_batch(pa, schema, chunk)
            else:
                yield _record_batch(pa, schema, chunk)


class ConsumerOffsetsDataSource(DataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return GROUP_LOG_DDL

    def reader(self, schema: Any) -> ConsumerOffsetsReader:
        path = self.options.get("path")
        if not path:
            raise ValueError("consumer_offsets needs a path: .load(DIR)")
        return ConsumerOffsetsReader(path)


def register(spark: SparkSession) -> None:
    spark.dataSource.register(ConsumerOffsetsDataSource)


LIVE_FORMAT_NAME = "kafka_consumer_offsets"


def _millis(text: str | None) -> int | None:
    return int(text) if text not in (None, "") else None


class OffsetRangePartition(InputPartition):  # type: ignore[misc]
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition = partition
        self.start = start
        self.end = end


class LiveOffsetsReader(DataSourceReader):  # type: ignore[misc]
    """One Spark partition per partition of the offsets topic, each read by its own client
    on an executor."""

    def __init__(self, options: dict[str, str]) -> None:
        from forensics.live import OFFSETS_TOPIC, client_settings

        self.bootstrap = options.get("kafka.bootstrap.servers", "")
        if not self.bootstrap:
            raise ValueError(f"{LIVE_FORMAT_NAME} needs the option kafka.bootstrap.servers")
        self.topic = options.get("topic") or OFFSETS_TOPIC
        self.settings = client_settings(options)
        self.options = options

    def partitions(self) -> list[OffsetRangePartition]:
        from forensics.live import EARLIEST, LATEST, parse_bound, plan

        planned = self.options.get("ranges")
        if planned:  # resolved by the caller already (the command line does, on the driver)
            ranges = [tuple(r) for r in json.loads(planned)]
        else:
            found = plan(self.bootstrap, self.topic, self.settings,
                         parse_bound(self.options.get("startingOffsets"), EARLIEST, self.topic),
                         parse_bound(self.options.get("endingOffsets"), LATEST, self.topic),
                         check_records=False,
                         starting_ms=_millis(self.options.get("startingTimestamp")),
                         ending_ms=_millis(self.options.get("endingTimestamp")))
            ranges = [(r.partition, r.start, r.end) for r in found]
        chosen = [OffsetRangePartition(p, s, e) for p, s, e in ranges if e > s]
        return chosen or [OffsetRangePartition(-1, 0, 0)]

    def read(self, partition: Any) -> Iterator[Any]:
        if partition.end <= partition.start:
            return
        _freeze_imports()
        import pyarrow as pa

        from forensics.live import OffsetRange, read_range_chunks

        schema = arrow_schema()
        for chunk in read_range_chunks(self.bootstrap, self.topic, self.settings,
                                       OffsetRange(partition.partition, partition.start,
                                                   partition.end), ROWS_PER_BATCH):
            if isinstance(chunk, CommitColumns):
                yield _commit_batch(pa, schema, chunk)
            else:
                yield _record_batch(pa, schema, chunk)


class LiveOffsetsStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    """Structured Streaming over the offsets topic: an offset is `{"PARTITION": next offset}`
    for every partition; each micro-batch reads what the partitions' high watermarks passed
    since the last one, one Spark partition per offsets-topic partition with new records."""

    def __init__(self, options: dict[str, str]) -> None:
        self._batch = LiveOffsetsReader(options)

    def _watermarks(self, starting: str | None) -> dict[str, int]:
        from forensics.live import EARLIEST, LATEST, parse_bound, plan

        reader = self._batch
        found = plan(reader.bootstrap, reader.topic, reader.settings,
                     parse_bound(starting, EARLIEST, reader.topic), LATEST,
                     check_records=False)
        return {str(r.partition): r.end if starting is None else r.start for r in found}

    def initialOffset(self) -> dict[str, int]:
        return self._watermarks(self._batch.options.get("startingOffsets") or "earliest")

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None
                     ) -> dict[str, int]:
        latest = self._watermarks(None)
        if start:  # never behind a start (a partition's records deleted meanwhile)
            latest = {p: max(o, start.get(p, o)) for p, o in latest.items()}
        return latest

    def partitions(self, start: dict[str, int], end: dict[str, int]
                   ) -> list[OffsetRangePartition]:
        chosen = [OffsetRangePartition(int(p), start.get(p, 0), o) for p, o in end.items()
                  if o > start.get(p, 0)]
        return chosen or [OffsetRangePartition(-1, 0, 0)]

    def read(self, partition: Any) -> Iterator[Any]:
        return self._batch.read(partition)

    def commit(self, end: dict[str, int]) -> None:
        pass  # nothing to release: each read opens and closes its own client


class LiveOffsetsDataSource(DataSource):  # type: ignore[misc]
    """`spark.read.format("kafka_consumer_offsets").option("kafka.bootstrap.servers", HOST)
    .load()`: the offsets topic of a live cluster. Options: `topic` (default
    `__consumer_offsets`), `startingOffsets` / `endingOffsets` (`earliest`, `latest`, or
    `{"__consumer_offsets": {"0": 42}}`), `startingTimestamp` / `endingTimestamp` (ms since
    the epoch, in their place), and every client setting as `kafka.NAME`."""

    @classmethod
    def name(cls) -> str:
        return LIVE_FORMAT_NAME

    def schema(self) -> str:
        return GROUP_LOG_DDL

    def reader(self, schema: Any) -> LiveOffsetsReader:
        return LiveOffsetsReader(dict(self.options))

    def streamReader(self, schema: Any) -> LiveOffsetsStreamReader:
        return LiveOffsetsStreamReader(dict(self.options))


def register_live(spark: SparkSession) -> None:
    spark.dataSource.register(LiveOffsetsDataSource)
