"""ListOffsets answers `__consumer_offsets` in every version as it answers a user topic.

Lag tools read the internal topic's end offsets; Burrow sends ListOffsets v0 for every topic in
the metadata. v0 (the `max_num_offsets` form, encoded by kafka-python, as kio has no v0), v1
and the highest version are sent as raw frames to the real broker, for a user topic and for
every partition of the group log, and must agree.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from tests.bench import wire

pytestmark = pytest.mark.integration

OFFSETS = "__consumer_offsets"
PARTITIONS = 50  # offsets.topic.num.partitions
TOPIC = "plain"
LATEST, EARLIEST = -1, -2


async def _v0(conn: wire.Connection, topic: str, partitions: range, timestamp: int,
              max_num_offsets: int) -> dict[int, list[int]]:
    partition_cls = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
    request = ListOffsetsRequest(version=0, replica_id=-1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            partition_cls(partition_index=p, timestamp=timestamp,
                          max_num_offsets=max_num_offsets) for p in partitions])])
    request.with_header(correlation_id=0, client_id="burrow")
    frame = await conn.send_raw(bytearray(request.encode(header=True, framed=True)))
    response = ListOffsetsResponse.decode(frame[4:], version=0)
    [answered] = response.topics
    assert answered.name == topic
    assert {p.error_code for p in answered.partitions} == {0}
    return {p.partition_index: list(p.old_style_offsets) for p in answered.partitions}


async def _since_v1(conn: wire.Connection, version: int, topic: str, partitions: range,
                    timestamp: int) -> dict[int, int]:
    response = await conn.call(2, version, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "timestamp": timestamp,
                                        "current_leader_epoch": -1} for p in partitions]}]})
    [answered] = response.topics
    assert {p.error_code.value for p in answered.partitions} == {0}
    return {p.partition_index: p.offset for p in answered.partitions}


async def _agree(conn: wire.Connection, topic: str, partitions: range) -> dict[int, int]:
    """v0, v1 and the highest version give the same latest and earliest offsets; returns the
    latest."""
    highest = (await wire.api_versions(conn))[2][1]
    latest = await _since_v1(conn, 1, topic, partitions, LATEST)
    assert await _since_v1(conn, highest, topic, partitions, LATEST) == latest
    assert await _v0(conn, topic, partitions, LATEST, 1) == {p: [o] for p, o in latest.items()}
    earliest = await _since_v1(conn, 1, topic, partitions, EARLIEST)
    assert await _since_v1(conn, highest, topic, partitions, EARLIEST) == earliest
    assert await _v0(conn, topic, partitions, EARLIEST, 10) == {
        p: [o] for p, o in earliest.items()}
    return latest


def _committed_offsets_written(conn_port: int) -> None:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{conn_port}"})
    for i in range(5):
        producer.produce(TOPIC, b"record-%d" % i, partition=0)
    assert producer.flush(30) == 0


async def test_v0_v1_and_latest_agree_for_the_group_log_and_a_user_topic(
        tmp_path: Path, connection: wire.Connection) -> None:
    conn = connection
    created = await conn.call(19, 7, {"topics": [
        {"name": TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout": 5000})
    assert created.topics[0].error_code.value == 0
    port = int((await conn.call(3, 12, {"topics": None})).brokers[0].port)
    _committed_offsets_written(port)
    # Commits for a few groups: group-log partitions with data, beside empty ones.
    for group in ("lag-a", "lag-b", "lag-c"):
        committed = await conn.call(8, 9, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1}]}]})
        assert committed.topics[0].partitions[0].error_code.value == 0

    assert await _agree(conn, TOPIC, range(1)) == {0: 5}
    group_log_ends = await _agree(conn, OFFSETS, range(PARTITIONS))
    written = {p: end for p, end in group_log_ends.items() if end > 0}
    assert 1 <= len(written) <= 3

    # v0's list form: the log end, then each segment's base offset, newest first.
    assert await _v0(conn, TOPIC, range(1), LATEST, 10) == {0: [5, 0]}
    listed = await _v0(conn, OFFSETS, range(PARTITIONS), LATEST, 10)
    for partition, offsets in listed.items():
        end = group_log_ends[partition]
        assert offsets == ([end, 0] if end else [0])
    # By time: every boundary up to now, or none before anything was written.
    later_ms = int(time.time() * 1000) + 3_600_000
    assert await _v0(conn, TOPIC, range(1), later_ms, 10) == {0: [5, 0]}
    assert await _v0(conn, TOPIC, range(1), 0, 10) == {0: []}
    by_time: dict[int, Any] = await _v0(conn, OFFSETS, range(PARTITIONS), later_ms, 10)
    assert {p: o for p, o in by_time.items() if p in written} == {
        p: [end, 0] for p, end in written.items()}
