"""Micro-benchmark of the callers of the varint readers and of the embedded protocol reader.

    python -m tests.bench.varint_readers

Best of 7 repeats, microseconds per call, this process only (no broker). Run it from two
checkouts to compare them (`cd <checkout> && python -m tests.bench.varint_readers`).
"""

from __future__ import annotations

import io
import struct
import timeit
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.types import GroupId, TopicName
from kio.serial import entity_writer
from kio.static.primitive import i32, i64

from coordinator.grouplog import codec as grouplog_codec
from forensics import grouplog as forensics_grouplog
from protocol import codec as protocol_codec
from protocol import guard
from storage import batch, legacy_convert, record_batch


def best_us(fn: Callable[[], Any], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=7)) / number * 1e6


def main() -> None:
    records = [(1_000_000 + i * 300, b"k%05d" % i, b"v" * 200) for i in range(200)]
    v2_batch = legacy_convert.encode_v2_batch(records)
    last = records[-1][0]
    group_batch = record_batch.encode_batch([(b"key%04d" % i, b"x" * 300) for i in range(200)],
                                            1000)
    partitions = tuple(
        OffsetCommitRequestPartition(partition_index=i32(p), committed_offset=i64(p),
                                     committed_leader_epoch=i32(-1), committed_metadata="")
        for p in range(300))
    request = OffsetCommitRequest(
        group_id=GroupId("g"), generation_id_or_member_epoch=i32(1), member_id="m",
        group_instance_id=None,
        topics=(OffsetCommitRequestTopic(name=TopicName("t"), partitions=partitions),))
    out = io.BytesIO()
    entity_writer(OffsetCommitRequest)(out, request)
    body = out.getvalue()
    check = guard.compile_guard(OffsetCommitRequest)
    assert check is not None
    topics: dict[str, grouplog_codec.FieldValue] = {"Topics": [
        {"TopicId": uuid.UUID(int=i).bytes, "TopicName": f"topic-{i}", "NumPartitions": 200,
         "PartitionMetadata": []} for i in range(200)]}
    value = grouplog_codec.encode("ConsumerGroupPartitionMetadataValue", 0, topics)
    tags = bytes([0xFF, 0xFF, 0x7F]) * 1000

    def read_tags() -> None:
        pos = 0
        while pos < len(tags):
            _, pos = protocol_codec._read_uvarint(tags, pos)

    payload = v2_batch[batch.HEADER_SIZE:]
    assignment = b"".join([struct.pack(">hi", 3, 5), *(
        struct.pack(">h", 2) + b"t%d" % t + struct.pack(">i", 10) + struct.pack(">10i", *range(10))
        for t in range(5)), struct.pack(">i", -1)])
    try:
        from coordinator.group.embedded_protocol import parse_assignment
    except ImportError:  # a checkout from before the embedded protocol had one module
        from coordinator.group.consumer.embedded_protocol import (  # type: ignore[no-redef]
            parse_assignment,
        )
    rows: list[tuple[str, Callable[[], Any], int]] = [
        ("storage.batch first_record_at_or_after, 200 records",
         lambda: batch.first_record_at_or_after(v2_batch, last), 2000),
        ("storage.record_batch.iter_records, 200 records",
         lambda: sum(1 for _ in record_batch.iter_records(group_batch)), 2000),
        ("protocol.guard, OffsetCommit v9 of 300 partitions",
         lambda: check(body, 0, len(body)), 2000),
        ("grouplog codec decode, 200 topics", lambda: grouplog_codec.decode(
            "ConsumerGroupPartitionMetadataValue", value), 500),
        ("protocol.codec._read_uvarint x1000, 3 bytes each", read_tags, 500),
        ("legacy_convert Python loop, 200 records", lambda: legacy_convert._convert_records_py(
            payload, 200, 0, 1_000_000, None, 1, 0, 0, None, None), 1000),
        ("forensics Python row loop, 200 records", lambda: sum(
            1 for _ in forensics_grouplog._batch_rows_py(
                "p", 0, 0, 0, 1000, group_batch[record_batch.HEADER_SIZE:], 200)), 1000),
        ("embedded protocol parse_assignment, 5 topics x 10",
         lambda: parse_assignment(assignment), 5000),
    ]
    for name, fn, number in rows:
        print(f"{name}: {best_us(fn, number):.1f} us")


if __name__ == "__main__":
    main()
