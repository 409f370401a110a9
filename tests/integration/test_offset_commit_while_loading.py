"""An OffsetCommit or TxnOffsetCommit while its group's log partition loads: unknown topics
and partitions are answered UNKNOWN_TOPIC_OR_PARTITION (Kafka answers them before the
coordinator), the others COORDINATOR_LOAD_IN_PROGRESS."""
from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.runtime.broker import Broker
from tests.integration.in_process import send, started_broker, until


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = await started_broker(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"})
    try:
        yield b
    finally:
        await b.stop()


def commit(broker: Broker, group: str, topics: list[tuple[str, int]]) -> Any:
    body: dict[str, Any] = {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": name, "partitions": [
            {"partition_index": p, "committed_offset": 42, "committed_leader_epoch": -1,
             "committed_metadata": ""}]} for name, p in topics]}
    return send(broker, 8, 8, body)


def codes(ctx: Any) -> list[tuple[str, int, ErrorCode]]:
    return [(t.name, p.partition_index, p.error_code) for t in ctx.answer.topics
            for p in t.partitions]


async def test_all_unknown_commit_while_loading(broker: Broker) -> None:
    broker.groups.loading.add(broker.groups.group_log.partition_of("g"))
    ctx = commit(broker, "g", [("missing", 0)])
    assert codes(ctx) == [("missing", 0, ErrorCode.unknown_topic_or_partition)]


async def test_mixed_commit_while_loading(broker: Broker) -> None:
    broker.groups.loading.add(broker.groups.group_log.partition_of("g"))
    ctx = commit(broker, "g", [("t", 0), ("missing", 0), ("t", 9)])
    assert codes(ctx) == [("t", 0, ErrorCode.coordinator_load_in_progress),
                          ("missing", 0, ErrorCode.unknown_topic_or_partition),
                          ("t", 9, ErrorCode.unknown_topic_or_partition)]


def txn_commit_body(version: int) -> dict[str, Any]:
    partition: dict[str, Any] = {"partition_index": 0, "committed_offset": 5,
                                 "committed_metadata": ""}
    if version >= 2:
        partition["committed_leader_epoch"] = -1
    body: dict[str, Any] = {"transactional_id": "tx", "group_id": "g", "producer_id": 1,
                            "producer_epoch": 0, "topics": [
                                {"name": "t", "partitions": [partition]},
                                {"name": "missing", "partitions": [dict(partition)]}]}
    if version >= 3:
        body.update(generation_id=-1, member_id="", group_instance_id=None)
    return body


@pytest.mark.parametrize("version", [1, 3])
async def test_a_txn_commit_while_loading(broker: Broker, version: int) -> None:
    # Before v2 Kafka answers COORDINATOR_NOT_AVAILABLE: older producers failed on the
    # loading error instead of retrying.
    broker.groups.loading.add(broker.groups.group_log.partition_of("g"))
    ctx = send(broker, 28, version, txn_commit_body(version))
    await until(lambda: ctx.responses, "answer")
    answered = {t.name: t.partitions[0].error_code for t in ctx.answer.topics}
    loading = (ErrorCode.coordinator_not_available if version < 2
               else ErrorCode.coordinator_load_in_progress)
    assert answered == {"t": loading, "missing": ErrorCode.unknown_topic_or_partition}
