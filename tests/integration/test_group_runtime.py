"""How the group runtime applies Results: durability, restart, error codes.

Requests are fed to an in-process broker (`in_process.py`); the group log's `append` can be
swapped for one whose durability the test completes by hand.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from coordinator.runtime.broker import Broker
from tests.fakes import FakeContext
from tests.integration.in_process import (
    TOPIC,
    completing_group,
    join,
    send,
    started_broker,
    sync,
    until,
)


async def start(data_dir: Path) -> Broker:
    return await started_broker(data_dir, {"group.initial.rebalance.delay.ms": "0"})


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    b = await start(tmp_path / "data")
    try:
        yield b
    finally:
        await b.stop()


def waiting_for_reply(broker: Broker, ctx: FakeContext) -> bool:
    """The request reached the core and waits there for its reply (it is not answered)."""
    return any(ref.connection_id == ctx.connection.id
               for ref in broker.groups.applier._pending)


class HeldAppends:
    """Replaces GroupLog.append: every append returns a future the test completes."""

    def __init__(self, broker: Broker) -> None:
        self.futures: list[asyncio.Future[None]] = []
        broker.groups.group_log.append = self.append  # type: ignore[method-assign]

    def append(self, records: Sequence[Any], now_ms: int | None = None, *,
               group_id: str | None = None) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        return future


# -- durability ---------------------------------------------------------------------------


async def test_a_follower_is_not_given_an_assignment_before_it_is_durable(
    broker: Broker,
) -> None:
    leader, follower, generation = await completing_group(broker)
    held = HeldAppends(broker)
    leader_sync = sync(broker, "g", generation, leader,
                       {leader: b"L", follower: b"F"})
    assert len(held.futures) == 1 and leader_sync.responses == []
    follower_sync = sync(broker, "g", generation, follower)
    await until(lambda: waiting_for_reply(broker, follower_sync), "the follower's sync parked")
    # The group record carrying this assignment is not durable yet: nobody may see it.
    assert follower_sync.responses == []
    held.futures[0].set_exception(OSError("disk full"))
    await until(lambda: leader_sync.responses, "leader answer")
    assert leader_sync.answer.error_code == ErrorCode.coordinator_not_available


async def test_a_failed_group_write_answers_the_leader_with_an_error(broker: Broker) -> None:
    """Control: the parked members are answered only after the append, with an error if it
    fails, and the group rebalances."""
    leader, follower, generation = await completing_group(broker)
    held = HeldAppends(broker)
    follower_sync = sync(broker, "g", generation, follower)
    leader_sync = sync(broker, "g", generation, leader, {leader: b"L", follower: b"F"})
    await until(lambda: waiting_for_reply(broker, follower_sync)
                and waiting_for_reply(broker, leader_sync), "both syncs parked")
    assert follower_sync.responses == [] and leader_sync.responses == []
    held.futures[0].set_exception(OSError("disk full"))
    await until(lambda: follower_sync.responses and leader_sync.responses, "answers")
    assert follower_sync.answer.error_code == ErrorCode.coordinator_not_available
    assert leader_sync.answer.error_code == ErrorCode.coordinator_not_available
    group = broker.groups.service.group("g")
    assert group is not None and group.state is GroupState.PREPARING_REBALANCE


# -- restart ------------------------------------------------------------------------------


def commit(broker: Broker, group: str, generation: int = -1, member_id: str = "",
           version: int = 8) -> FakeContext:
    body: dict[str, Any] = {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}],
    }
    return send(broker, 8, version, body)


def listed(broker: Broker) -> dict[str, str]:
    ctx = send(broker, 16, 4, {"states_filter": []})
    return {g.group_id: g.group_state for g in ctx.answer.groups}


async def test_a_standalone_group_is_still_listed_after_a_restart(tmp_path: Path) -> None:
    first = await start(tmp_path / "data")
    ctx = commit(first, "standalone")
    await until(lambda: ctx.responses, "commit answer")
    assert listed(first) == {"standalone": "Empty"}
    await first.stop()

    second = await start(tmp_path / "data")
    try:
        fetched = send(second, 9, 7, {"group_id": "standalone", "topics": None,
                                      "require_stable": False})
        assert fetched.answer.topics[0].partitions[0].committed_offset == 42
        assert listed(second) == {"standalone": "Empty"}
    finally:
        await second.stop()


# -- error codes --------------------------------------------------------------------------


async def test_offset_commit_v9_to_an_unknown_group_is_group_id_not_found(
    broker: Broker,
) -> None:
    ctx = commit(broker, "nobody", generation=3, member_id="m", version=9)
    assert [p.error_code for t in ctx.answer.topics for p in t.partitions] == [
        ErrorCode.group_id_not_found]


async def test_offset_commit_v8_to_an_unknown_group_is_illegal_generation(
    broker: Broker,
) -> None:
    ctx = commit(broker, "nobody", generation=3, member_id="m", version=8)
    assert [p.error_code for t in ctx.answer.topics for p in t.partitions] == [
        ErrorCode.illegal_generation]


# -- loading ------------------------------------------------------------------------------


async def test_describe_groups_of_a_loading_partition_is_load_in_progress(
    broker: Broker,
) -> None:
    broker.groups.loading.add(broker.groups.group_log.partition_of("g"))
    ctx = send(broker, 15, 5, {"groups": ["g"], "include_authorized_operations": False})
    assert ctx.answer.groups[0].error_code == ErrorCode.coordinator_load_in_progress


async def test_join_group_of_a_loading_partition_is_load_in_progress(broker: Broker) -> None:
    """Control: the single-group APIs do check."""
    broker.groups.loading.add(broker.groups.group_log.partition_of("g"))
    ctx = join(broker, "g")
    assert ctx.answer.error_code == ErrorCode.coordinator_load_in_progress


# -- OffsetDelete -------------------------------------------------------------------------


async def test_offset_delete_on_a_live_connect_group_is_non_empty_group(broker: Broker) -> None:
    joined = send(broker, 11, 3, {
        "group_id": "cg", "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": "",
        "protocol_type": "connect", "protocols": [{"name": "sessioned", "metadata": b"x"}]})
    await until(lambda: joined.responses, "join answer")
    member, generation = joined.answer.member_id, joined.answer.generation_id
    synced = sync(broker, "cg", generation, member, {member: b"a"})
    await until(lambda: synced.responses, "sync answer")
    committed = commit(broker, "cg", generation=generation, member_id=member)
    await until(lambda: committed.responses, "commit answer")
    assert committed.answer.topics[0].partitions[0].error_code == ErrorCode.none

    deleted = send(broker, 47, 0, {"group_id": "cg", "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0}]}]})
    await until(lambda: deleted.responses, "delete answer")
    assert deleted.answer.error_code == ErrorCode.non_empty_group
