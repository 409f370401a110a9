"""The running group runtime keeps group state behind the log, with faults and slow fsyncs.

An in-process broker whose group log sits on a filesystem that can fail a write or fsync and
can hold every fsync until the test lets it through (`tests.fakes.GatedFileSystem`), so a test
sees the window between a write and its durability.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from coordinator.runtime.broker import Broker
from tests.fakes import GatedFileSystem
from tests.integration.in_process import TOPIC, completing_group, send, started_broker, sync, until

NOT_AVAILABLE = ErrorCode.coordinator_not_available


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[tuple[Broker, GatedFileSystem]]:
    fs = GatedFileSystem()
    broker = await started_broker(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"},
                                  groups_fs=fs)
    try:
        yield broker, fs
    finally:
        fs.open()
        await broker.stop()


def commit(broker: Broker, group: str, offset: int = 1, version: int = 8,
           retention_ms: int | None = None) -> Any:
    body: dict[str, Any] = {
        "group_id": group, "member_id": "", "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}]}
    if version >= 1:
        body["generation_id_or_member_epoch"] = -1
    if 2 <= version <= 4:
        body["retention_time"] = (datetime.timedelta(milliseconds=retention_ms)
                                     if retention_ms is not None else
                                     datetime.timedelta(milliseconds=-1))
    return send(broker, 8, version, body)


def commit_errors(ctx: Any) -> list[ErrorCode]:
    return [p.error_code for t in ctx.answer.topics for p in t.partitions]


def heartbeat(broker: Broker, group: str, generation: int, member_id: str) -> Any:
    return send(broker, 12, 3, {"group_id": group, "generation_id": generation,
                                "member_id": member_id, "group_instance_id": None})


def same_partition(broker: Broker, group: str, count: int) -> list[str]:
    partition = broker.groups.group_log.partition_of(group)
    return [g for g in (f"other-{i}" for i in range(10_000))
            if broker.groups.group_log.partition_of(g) == partition][:count]


async def test_followers_wait_for_the_assignment_to_be_durable(
    gated: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = gated
    leader, follower, generation = await completing_group(broker)
    fs.close()
    leader_sync = sync(broker, "g", generation, leader, {leader: b"L", follower: b"F"})
    follower_sync = sync(broker, "g", generation, follower)
    # The assignment's fsync is held at the gate: nothing can be answered before it passes.
    await until(lambda: fs.held == 1, "the assignment's fsync at the gate")
    assert leader_sync.responses == [] and follower_sync.responses == []
    group = broker.groups.service.group("g")
    assert group is not None and group.state is GroupState.COMPLETING_REBALANCE
    fs.let_through()
    await until(lambda: leader_sync.responses and follower_sync.responses, "sync answers")
    assert (leader_sync.answer.assignment, follower_sync.answer.assignment) == (b"L", b"F")
    assert group.state is GroupState.STABLE


async def test_a_failed_assignment_fsync_fails_every_sync_and_rebalances(
    gated: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = gated
    leader, follower, generation = await completing_group(broker)
    fs.close()
    leader_sync = sync(broker, "g", generation, leader, {leader: b"L", follower: b"F"})
    follower_sync = sync(broker, "g", generation, follower)
    fs.fail_next_fsync()
    fs.let_through()
    await until(lambda: leader_sync.responses and follower_sync.responses, "sync answers")
    assert leader_sync.answer.error_code == NOT_AVAILABLE
    assert follower_sync.answer.error_code == NOT_AVAILABLE
    assert follower_sync.answer.assignment == b""
    group = broker.groups.service.group("g")
    assert group is not None and group.state is GroupState.PREPARING_REBALANCE
    assert "g" not in broker.groups.service.durable_view()


async def test_a_held_heartbeat_is_answered_once_its_offset_is_durable(
    gated: tuple[Broker, GatedFileSystem],
) -> None:
    """A heartbeat arriving while its group's metadata is being written waits for that write,
    and only for it: other groups of the same log partition keep writing meanwhile."""
    broker, fs = gated
    leader, follower, generation = await completing_group(broker)
    first, second = same_partition(broker, "g", 2)
    other_leader, other_follower, other_generation = await completing_group(broker, first)
    fs.close()
    leader_sync = sync(broker, "g", generation, leader, {leader: b"L", follower: b"F"})
    await until(lambda: fs.held == 1, "the assignment's fsync at the gate")
    beat = heartbeat(broker, "g", generation, follower)
    # Another group of the partition writes its metadata and a third commits: the next round.
    later = sync(broker, first, other_generation, other_leader, {other_follower: b"O"})
    commit_later = commit(broker, second)
    # Answered at once unless held; the assignment's fsync is still at the gate.
    assert beat.responses == [] and leader_sync.responses == []
    fs.let_through()  # the round holding the assignment
    await until(lambda: beat.responses, "heartbeat answer")
    assert beat.answer.error_code == ErrorCode.none
    assert leader_sync.answer.error_code == ErrorCode.none
    # Still being written, and they did not hold the heartbeat.
    assert later.responses == [] and commit_later.responses == []
    beat_again = heartbeat(broker, "g", generation, follower)
    assert beat_again.answer.error_code == ErrorCode.none  # no write of g pending: at once
    fs.open()
    await until(lambda: later.responses and commit_later.responses, "the other writes")


async def test_a_failed_write_fails_the_replies_held_behind_it(
    gated: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = gated
    leader, follower, generation = await completing_group(broker)
    fs.close()
    leader_sync = sync(broker, "g", generation, leader, {leader: b"L", follower: b"F"})
    await until(lambda: fs.held == 1, "the assignment's fsync at the gate")
    beat = heartbeat(broker, "g", generation, follower)
    fs.fail_next_fsync()
    fs.let_through()
    await until(lambda: beat.responses and leader_sync.responses, "answers")
    assert leader_sync.answer.error_code == NOT_AVAILABLE
    assert beat.answer.error_code == NOT_AVAILABLE


async def test_a_failed_delete_groups_write_keeps_the_group_and_its_offsets(
    gated: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = gated
    committed = commit(broker, "standalone", offset=42)
    await until(lambda: committed.responses, "commit answer")
    fs.fail_next_write()
    deleted = send(broker, 42, 2, {"groups_names": ["standalone"]})
    await until(lambda: deleted.responses, "delete answer")
    assert [r.error_code for r in deleted.answer.results] == [NOT_AVAILABLE]
    group = broker.groups.service.group("standalone")
    assert group is not None and group.state is GroupState.EMPTY
    assert broker.groups.offsets.has_offsets("standalone")
    listed = send(broker, 16, 4, {"states_filter": []})
    assert [g.group_id for g in listed.answer.groups] == ["standalone"]

    retried = send(broker, 42, 2, {"groups_names": ["standalone"]})
    await until(lambda: retried.responses, "delete answer")
    assert [r.error_code for r in retried.answer.results] == [ErrorCode.none]
    assert broker.groups.service.group("standalone") is None
    assert not broker.groups.offsets.has_offsets("standalone")


async def test_a_failed_offset_expiry_write_keeps_the_group_and_its_offsets(
    gated: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = gated
    committed_at = broker.groups.clock.now_ms()
    committed = commit(broker, "standalone", version=2, retention_ms=1)
    await until(lambda: committed.responses, "commit answer")
    await until(lambda: broker.groups.clock.now_ms() > committed_at + 1, "expiry time")
    fs.fail_next_write()
    with pytest.raises(OSError):
        await broker.groups.expire_offsets()
    assert broker.groups.service.group("standalone") is not None
    assert broker.groups.offsets.has_offsets("standalone")

    await broker.groups.expire_offsets()
    assert broker.groups.service.group("standalone") is None
    assert not broker.groups.offsets.has_offsets("standalone")


def delete_topic(broker: Broker) -> Any:
    return send(broker, 20, 6, {"topics": [{"name": TOPIC, "topic_id": None}],
                                "timeout": datetime.timedelta(seconds=5)})


def fetched_offset(broker: Broker, group: str) -> int:
    fetched = send(broker, 9, 7, {"group_id": group, "topics": [
        {"name": TOPIC, "partition_indexes": [0]}]})
    return int(fetched.answer.topics[0].partitions[0].committed_offset)


async def test_delete_topics_is_answered_once_the_offsets_tombstones_are_durable(
    gated: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = gated
    groups = ["a", *same_partition(broker, "a", 1)]  # one group-log partition: one fsync
    commits = [commit(broker, group, offset=5) for group in groups]
    await until(lambda: all(c.responses for c in commits), "commit answers")
    fs.close()
    deleted = delete_topic(broker)
    await until(lambda: fs.held == 1, "the tombstones' fsync at the gate")
    assert deleted.responses == []
    assert broker.topics.get(TOPIC) is not None
    # Meanwhile a commit to the topic is refused: no offset may outlive it.
    late = commit(broker, "a", offset=7)
    assert commit_errors(late) == [ErrorCode.unknown_topic_or_partition]
    fs.open()
    await until(lambda: deleted.responses, "delete answer")
    assert [r.error_code for r in deleted.answer.responses] == [ErrorCode.none]
    assert broker.topics.get(TOPIC) is None
    assert not any(broker.groups.offsets.has_offsets(group) for group in groups)

    broker.create_topic(TOPIC, 2, {}, reason="test")
    assert fetched_offset(broker, "a") == -1
    fresh = commit(broker, "a", offset=1)  # the new topic takes commits again
    await until(lambda: fresh.responses, "commit answer")
    assert commit_errors(fresh) == [ErrorCode.none]


async def test_a_failed_delete_topics_write_keeps_the_topic_and_its_offsets(
    gated: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = gated
    committed = commit(broker, "standalone", offset=5)
    await until(lambda: committed.responses, "commit answer")
    # A disk full when the tombstones are written: nothing of them is durable, the write is
    # rolled back and the broker carries on (a failed fsync would stop it: fail-stop).
    fs.fail_next_write()
    deleted = delete_topic(broker)
    await until(lambda: deleted.responses, "delete answer")
    assert [r.error_code for r in deleted.answer.responses] == [ErrorCode.kafka_storage_error]
    assert broker.topics.get(TOPIC) is not None
    assert fetched_offset(broker, "standalone") == 5
    still = commit(broker, "standalone", offset=6)  # the topic takes commits again
    await until(lambda: still.responses, "commit answer")
    assert commit_errors(still) == [ErrorCode.none]

    retried = delete_topic(broker)
    await until(lambda: retried.responses, "delete answer")
    assert [r.error_code for r in retried.answer.responses] == [ErrorCode.none]
    assert broker.topics.get(TOPIC) is None
    assert fetched_offset(broker, "standalone") == -1


async def test_delete_topics_without_offsets_is_answered_at_once(
    gated: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = gated
    fs.close()  # nothing to write: no fsync to wait for
    deleted = delete_topic(broker)
    assert [r.error_code for r in deleted.answer.responses] == [ErrorCode.none]
    assert broker.topics.get(TOPIC) is None
