"""The data-plane handlers in a started broker: when Fetch parks or answers, Produce edge cases.

Requests go straight to the handlers through an in-memory request context (`in_process.py`).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.runtime.broker import Broker
from coordinator.settings import defaults
from storage.fs import FaultyFileSystem
from tests.fakes import FakeContext
from tests.integration.in_process import send, started_broker
from tests.unit._batches import make_batch


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    settings = defaults().with_overrides({"log.dirs": str(tmp_path / "data")})
    b = Broker(settings)
    await b.start()
    b.create_topic("t", 1, {}, reason="test")
    try:
        yield b
    finally:
        await b.stop()


async def answered_within(ctx: FakeContext, seconds: float) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not ctx.responses and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)


def fetch_body(min_bytes: int, max_wait_ms: int, topics: list[dict[str, Any]]) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait": datetime.timedelta(milliseconds=max_wait_ms),
            "min_bytes": min_bytes, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": topics,
            "forgotten_topics_data": [], "rack_id": ""}


AT_LOG_END = [{"topic": "t", "partitions": [{
    "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]


async def test_fetch_with_min_bytes_zero_is_answered_at_once(broker: Broker) -> None:
    ctx = send(broker, 1, 12, fetch_body(0, 2000, AT_LOG_END))
    # Well before its max_wait_ms: a parked Fetch would only be answered after 2 s.
    await answered_within(ctx, 1.0)
    assert ctx.responses, "Fetch(min_bytes=0) is still parked"


async def test_fetch_of_no_partitions_is_answered_at_once(broker: Broker) -> None:
    ctx = send(broker, 1, 12, fetch_body(1, 2000, []))
    await answered_within(ctx, 1.0)
    assert ctx.responses, "Fetch([]) is still parked"


async def test_fetch_at_log_end_with_min_bytes_one_waits(broker: Broker) -> None:
    """Control: the ordinary long-poll parks until max_wait."""
    ctx = send(broker, 1, 12, fetch_body(1, 300, AT_LOG_END))
    assert len(broker.fetches) == 1  # parked in the purgatory, not answered
    assert ctx.responses == []
    for _ in range(100):
        if ctx.responses:
            break
        await asyncio.sleep(0.01)
    assert ctx.responses and ctx.responses[0].responses[0].partitions[
        0].error_code == ErrorCode.none


async def test_produce_without_a_record_batch_is_invalid_record(broker: Broker) -> None:
    ctx = send(broker, 0, 9, {
        "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=1),
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": None}]}]})
    response = ctx.answer
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.invalid_record


async def test_a_topic_partition_whose_fsync_fails_goes_offline_alone(tmp_path: Path) -> None:
    """Kafka's rule for a partition on a failing disk: it answers KAFKA_STORAGE_ERROR from then
    on (Produce, Fetch, ListOffsets), the other partitions and the broker carry on."""
    fs = FaultyFileSystem()
    b = await started_broker(tmp_path / "data", topics_fs=fs, partitions=None)
    b.create_topic("t", 2, {"flush.messages": "1"}, reason="test")
    try:
        def produce(partition: int) -> ErrorCode:
            ctx = send(b, 0, 9, {
                "transactional_id": None, "acks": -1, "timeout": datetime.timedelta(seconds=1),
                "topic_data": [{"name": "t", "partition_data": [
                    {"index": partition, "records": make_batch([b"v"])}]}]})
            return ErrorCode(ctx.answer.responses[0].partition_responses[0].error_code)

        def fetch(partition: int) -> ErrorCode:
            ctx = send(b, 1, 12, fetch_body(0, 0, [{"topic": "t", "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}]))
            return ErrorCode(ctx.answer.responses[0].partitions[0].error_code)

        def list_offsets(partition: int) -> ErrorCode:
            ctx = send(b, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "t", "partitions": [{"partition_index": partition,
                                              "current_leader_epoch": -1, "timestamp": -1}]}]})
            return ErrorCode(ctx.answer.topics[0].partitions[0].error_code)

        assert produce(0) == produce(1) == ErrorCode.none
        fs.fail_next_fsync()
        assert produce(0) == ErrorCode.kafka_storage_error
        fsyncs = fs.ops["fsync"]
        assert produce(0) == ErrorCode.kafka_storage_error  # no fsync is tried again
        assert fs.ops["fsync"] == fsyncs
        assert fetch(0) == ErrorCode.kafka_storage_error
        assert list_offsets(0) == ErrorCode.kafka_storage_error
        assert produce(1) == ErrorCode.none and fetch(1) == ErrorCode.none
        assert list_offsets(1) == ErrorCode.none
        # Metadata describes it as Kafka does a partition whose only replica's log directory
        # failed: no leader, the replica offline; the other partition as before.
        for version in (1, 12):
            topics = {"topics": [{"name": "t", "topic_id": None}],
                      "allow_auto_topic_creation": False,
                      "include_topic_authorized_operations": False}
            described = send(b, 3, version, topics).answer.topics[0]
            offline, online = sorted(described.partitions, key=lambda p: p.partition_index)
            assert offline.error_code == ErrorCode.leader_not_available
            assert offline.leader_id == -1
            assert list(offline.offline_replicas if version >= 5 else [b.node_id]) == [
                b.node_id]
            assert online.error_code == ErrorCode.none and online.leader_id == b.node_id
            assert list(getattr(online, "offline_replicas", ())) == []
        assert not b.stop_requested.is_set()
    finally:
        await b.stop()
