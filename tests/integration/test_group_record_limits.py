"""Group records fit the group log as Kafka's fit `__consumer_offsets`, and client free text is
bounded where it is repeated (the rebalance reason, the journal, the logs).

An in-process broker (`tests.integration.in_process`): a record larger than
`offsets.topic.max.message.bytes` is never written, the requests waiting for it get Kafka's
UNKNOWN_SERVER_ERROR, and the group keeps what the log has.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from coordinator.group.commands import MAX_REASON_CHARS
from coordinator.runtime.broker import Broker
from coordinator.runtime.event_journal import MAX_TEXT_CHARS
from tests.integration.in_process import completing_group, send, started_broker, sync, until

LIMIT = 8192


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = await started_broker(tmp_path / "data", {
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.max.message.bytes": str(LIMIT),
        "journal.segment.ms": "100",
    })
    try:
        yield broker
    finally:
        await broker.stop()


def log_end(broker: Broker, group: str) -> int:
    log = broker.groups.group_log
    return log.logs[log.partition_of(group)].log_end_offset


async def test_an_assignment_too_large_for_the_group_log_is_refused_and_not_written(
    broker: Broker,
) -> None:
    leader, follower, generation = await completing_group(broker)
    before = log_end(broker, "g")
    follower_sync = sync(broker, "g", generation, follower)  # parks for the assignment
    leader_sync = sync(broker, "g", generation, leader,
                       {leader: b"L" * LIMIT, follower: b"F"})
    await until(lambda: leader_sync.responses and follower_sync.responses, "sync answers")
    assert leader_sync.answer.error_code == ErrorCode.unknown_server_error
    assert follower_sync.answer.error_code == ErrorCode.unknown_server_error
    assert log_end(broker, "g") == before  # nothing of it in the log
    group = broker.groups.service.group("g")
    assert group is not None
    # As Kafka after a failed assignment write: no assignment given, a new rebalance.
    assert group.state is GroupState.PREPARING_REBALANCE
    assert all(not m.assignment for m in group.members.values())


async def test_an_assignment_that_fits_is_still_written(broker: Broker) -> None:
    leader, follower, generation = await completing_group(broker)
    before = log_end(broker, "g")
    leader_sync = sync(broker, "g", generation, leader,
                       {leader: b"L" * (LIMIT // 4), follower: b"F"})
    await until(lambda: leader_sync.responses, "sync answer")
    assert leader_sync.answer.error_code == ErrorCode.none
    assert log_end(broker, "g") == before + 1


def join_v8(broker: Broker, group: str, reason: str, metadata: bytes = b"m") -> Any:
    return send(broker, 11, 8, {
        "group_id": group, "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": metadata}], "reason": reason,
    })


async def test_a_long_join_reason_is_cut_in_the_journal(broker: Broker, tmp_path: Path) -> None:
    first = join_v8(broker, "r", "x" * 100_000)
    await until(lambda: first.responses, "MEMBER_ID_REQUIRED")
    member_id = first.answer.member_id
    second = send(broker, 11, 8, {
        "group_id": "r", "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": member_id,
        "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}], "reason": "y" * 100_000,
    })
    await until(lambda: second.responses, "join answer")
    assert second.answer.error_code == ErrorCode.none
    events = tmp_path / "data" / "events"

    def journal_lines() -> list[dict[str, Any]]:
        lines: list[dict[str, Any]] = []
        for path in sorted(events.glob("*")):
            lines += [json.loads(line) for line in path.read_text().splitlines() if line]
        return lines

    await until(lambda: any(e["event_type"] == "rebalance_started" for e in journal_lines()),
                "the rebalance in the journal")
    started = [e for e in journal_lines() if e["event_type"] == "rebalance_started"]
    for event in started:
        assert len(event["reason"]) <= MAX_TEXT_CHARS + 64
        assert "y" * MAX_REASON_CHARS in event["reason"]
        assert "y" * (MAX_REASON_CHARS + 1) not in event["reason"]


async def test_a_long_group_id_is_cut_in_the_journal(broker: Broker, tmp_path: Path) -> None:
    group = "g" * 20_000
    first = join_v8(broker, group, "")
    await until(lambda: first.responses, "MEMBER_ID_REQUIRED")
    events = tmp_path / "data" / "events"

    def longest_line() -> int:
        return max((len(line) for path in events.glob("*")
                    for line in path.read_text().splitlines()), default=0)

    second = send(broker, 11, 8, {
        "group_id": group, "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": first.answer.member_id,
        "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}], "reason": None,
    })
    await until(lambda: second.responses, "join answer")
    await until(lambda: longest_line() > 0, "journal lines")
    assert longest_line() < 3 * MAX_TEXT_CHARS


async def test_a_consumer_group_member_too_large_for_the_group_log_is_not_kept(
    broker: Broker,
) -> None:
    # A KIP-848 member subscribing to 200 names of 100 characters: its member record is
    # about 20 KB, over the 8 KB limit.
    names = [f"{i:03d}" + "n" * 97 for i in range(200)]
    ctx = send(broker, 68, 1, {"group_id": "cg", "member_id": "m1", "member_epoch": 0,
                               "rebalance_timeout": 30_000, "subscribed_topic_names": names,
                               "topic_partitions": []})
    await until(lambda: ctx.responses, "heartbeat answer")
    assert ctx.answer.error_code == ErrorCode.unknown_server_error
    group = broker.groups.service.consumer.group("cg")
    assert group is None or "m1" not in group.members  # rebuilt from the log: not there
    small = send(broker, 68, 1, {"group_id": "cg", "member_id": "m2", "member_epoch": 0,
                                 "rebalance_timeout": 30_000, "subscribed_topic_names": ["t"],
                                 "topic_partitions": []})
    await until(lambda: small.responses, "heartbeat answer")
    assert small.answer.error_code == ErrorCode.none
