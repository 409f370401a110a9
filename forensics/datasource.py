"""`spark.read.format("consumer_offsets")`: a PySpark Python data source over group-log segments.

`spark.read.format("consumer_offsets").load(DIR)` lists every `__consumer_offsets-N/*.log`
under DIR on the driver and reads each segment in its own Spark partition with
`forensics.grouplog.decode_segment`. Executors open the files with plain `open()`, so on a
cluster DIR must be on a filesystem every executor mounts at the same path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from forensics.grouplog import decode_segment, find_segments
from forensics.schema import GROUP_LOG_DDL

FORMAT_NAME = "consumer_offsets"


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

    def read(self, partition: Any) -> Iterator[tuple[object, ...]]:
        if partition.path:
            yield from decode_segment(partition.path, partition.log_partition)


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
