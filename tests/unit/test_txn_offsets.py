"""Offsets inside transactions (KIP-447): staged per (group, producer), visible only after the
commit marker, dropped on abort, never expired while pending; and the group log replays the
same from its transactional batches and markers."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from coordinator.group.offset_decisions import GroupOffsets
from coordinator.group.offsets import GroupExpiryView, OffsetStore
from coordinator.group.record_helpers import offset_commit_tombstone
from coordinator.grouplog.log import GroupLog
from coordinator.grouplog.records import CoordinatorRecord, OffsetCommitRecord
from storage.log import LogConfig
from tests.context import GroupTestContext
from tests.unit.test_static_membership import static_group

GROUP = "g"
PRODUCER = 7


def exists(_topic: str, _partition: int) -> bool:
    return True


def commit(store: OffsetStore, offset: int, now_ms: int = 0) -> list[OffsetCommitRecord]:
    _, records = store.commit(GROUP, [("t", [(0, offset, -1, "")])], now_ms,
                              topic_exists=exists, pending=False)
    return records


def fetched(store: OffsetStore, *, require_stable: bool) -> tuple[int, ErrorCode]:
    [result] = store.fetch(GROUP, [("t", [0])], require_stable=require_stable)
    return result.offset, result.error


def test_staged_offsets_are_invisible_and_unstable_until_the_commit_marker() -> None:
    store = OffsetStore()
    store.apply_all(commit(store, 5))
    store.stage_transactional(PRODUCER, commit(store, 9))
    assert fetched(store, require_stable=False) == (5, ErrorCode.none)
    assert fetched(store, require_stable=True) == (-1, ErrorCode.unstable_offset_commit)
    assert store.transactional_groups(PRODUCER) == [GROUP]
    made_visible = store.end_transaction(GROUP, PRODUCER, committed=True)
    assert [r.value.offset for r in made_visible if r.value is not None] == [9]
    assert fetched(store, require_stable=True) == (9, ErrorCode.none)
    assert not store.has_transactional(GROUP)


def test_an_abort_drops_the_staged_offsets() -> None:
    store = OffsetStore()
    store.apply_all(commit(store, 5))
    store.stage_transactional(PRODUCER, commit(store, 9))
    assert store.end_transaction(GROUP, PRODUCER, committed=False) == []
    assert fetched(store, require_stable=True) == (5, ErrorCode.none)
    assert store.transactional_groups(PRODUCER) == []


def test_another_producer_s_marker_leaves_the_staged_offsets_pending() -> None:
    store = OffsetStore()
    store.stage_transactional(PRODUCER, commit(store, 9))
    assert store.end_transaction(GROUP, PRODUCER + 1, committed=True) == []
    assert fetched(store, require_stable=True) == (-1, ErrorCode.unstable_offset_commit)


def test_expiry_never_removes_a_partition_with_staged_offsets() -> None:
    store = OffsetStore()
    store.apply_all(commit(store, 5, now_ms=0))
    store.stage_transactional(PRODUCER, commit(store, 9))
    empty = GroupExpiryView(state_is_empty=True, current_state_timestamp=None,
                            subscribed_topics=None, protocol_type="")
    far = 10 * store.offsets_retention_ms
    result = store.expire(far, {GROUP: empty})
    assert result.tombstones == [] and result.groups_without_offsets == []
    store.end_transaction(GROUP, PRODUCER, committed=False)
    assert len(store.expire(far, {GROUP: empty}).tombstones) == 1


def replay(log: GroupLog) -> tuple[dict[tuple[str, int], int | None],
                                   dict[int, list[CoordinatorRecord]]]:
    open_transactions: dict[int, list[CoordinatorRecord]] = {}
    view: dict[tuple[str, int], int | None] = {}
    partition = log.partition_of(GROUP)
    for _, record in log.replay_partition_at(partition, open_transactions):
        assert isinstance(record, OffsetCommitRecord)
        if record.key.group != GROUP:
            continue
        view[(record.key.topic, record.key.partition)] = (
            None if record.value is None else record.value.offset)
    return view, open_transactions


async def test_the_group_log_replays_transactional_offsets_by_their_markers(
        tmp_path: Path) -> None:
    store = OffsetStore()
    log = GroupLog.open(tmp_path, 1, LogConfig(), "always")
    try:
        await log.append(commit(store, 5), 1, group_id=GROUP)
        # A transaction that commits: its offset counts from the marker on, even over a plain
        # commit written between its record and its marker.
        log.append_transactional(GROUP, commit(store, 9), PRODUCER, 0, 2)
        await log.append(commit(store, 6), 3, group_id=GROUP)
        assert replay(log)[0] == {("t", 0): 6}
        log.append_marker(0, PRODUCER, 0, True, 4)
        assert replay(log) == ({("t", 0): 9}, {})
        # One that aborts: nothing of it counts.
        log.append_transactional(GROUP, commit(store, 20), PRODUCER, 0, 5)
        log.append_marker(0, PRODUCER, 0, False, 6)
        assert replay(log) == ({("t", 0): 9}, {})
        # One without a marker: handed back as open, the committed view unchanged.
        log.append_transactional(GROUP, commit(store, 30), PRODUCER + 1, 0, 7)
        view, open_transactions = replay(log)
        assert view == {("t", 0): 9}
        [staged] = open_transactions[PRODUCER + 1]
        assert isinstance(staged, OffsetCommitRecord) and staged.value is not None
        assert staged.value.offset == 30
    finally:
        log.close()


def test_txn_offset_commit_v3_checks_the_member_against_the_group() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    leader, _ = ctx.stable_group(2, group="g")
    generation = ctx.group().generation_id
    check = core.validate_txn_offset_commit
    assert check("g", leader, generation, None) is None
    assert check("g", "", -1, None) is None  # v0-v2: no member to check
    assert check("g", leader, generation + 1, None) is ErrorCode.illegal_generation
    assert check("g", "stranger", generation, None) is ErrorCode.unknown_member_id
    assert check("nobody", "", -1, None) is None
    assert check("nobody", "m", 3, None) is ErrorCode.illegal_generation


def test_txn_offset_commit_from_a_replaced_static_member_is_fenced() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    [member] = static_group(ctx, "i-1")
    generation = ctx.group().generation_id
    assert core.validate_txn_offset_commit("g", member, generation, "i-1") is None
    assert (core.validate_txn_offset_commit("g", "old-member", generation, "i-1")
            is ErrorCode.fenced_instance_id)


async def test_compaction_leaves_a_partition_with_transactional_records_alone(
        tmp_path: Path) -> None:
    """An aborted transactional record is the latest of its key but hides nothing: keeping
    only the latest record per key would drop the committed value under it."""
    store = OffsetStore()
    config = LogConfig(segment_bytes=2048, retention_ms=-1, retention_bytes=-1)
    log = GroupLog.open(tmp_path, 1, config, "always")
    try:
        await log.append(commit(store, 5), 1, group_id=GROUP)
        log.append_transactional(GROUP, commit(store, 9), PRODUCER, 0, 2)
        log.append_marker(0, PRODUCER, 0, False, 3)
        for i in range(60):  # roll past the segment holding them
            _, other = store.commit("other", [("t", [(0, i, -1, "")])], 4,
                                    topic_exists=exists, pending=False)
            await log.append(other, 4, group_id="other")
        assert len(log.logs[0].segment_base_offsets()) > 2
        log.compact(10, 1)
        assert replay(log)[0] == {("t", 0): 5}
    finally:
        log.close()


def test_a_tombstone_deletes_the_staged_offsets_of_its_partition() -> None:
    store = OffsetStore()
    store.apply_all(commit(store, 5))
    store.stage_transactional(PRODUCER, commit(store, 9))
    tombstones = store.delete_group(GROUP)
    assert len(tombstones) == 1
    store.apply_all(tombstones)
    assert store.end_transaction(GROUP, PRODUCER, committed=True) == []
    assert fetched(store, require_stable=True) == (-1, ErrorCode.none)
    # Only staged, never committed: deleting the group writes its tombstone too.
    store.stage_transactional(PRODUCER, commit(store, 11))
    assert len(store.delete_topics({"t"})) == 1


async def test_replay_drops_staged_offsets_deleted_before_their_marker(tmp_path: Path) -> None:
    store = OffsetStore()
    log = GroupLog.open(tmp_path, 1, LogConfig(), "always")
    try:
        await log.append(commit(store, 5), 1, group_id=GROUP)
        log.append_transactional(GROUP, commit(store, 9), PRODUCER, 0, 2)
        await log.append([offset_commit_tombstone(GROUP, "t", 0)], 3, group_id=GROUP)
        log.append_marker(0, PRODUCER, 0, True, 4)
        assert replay(log) == ({("t", 0): None}, {})
    finally:
        log.close()
