"""A TxnOffsetCommit to a group the coordinator does not know creates it at once, Empty and
classic, as Kafka's group coordinator does (not only when a restart replays its offsets)."""

from __future__ import annotations

from coordinator.group.classic.state import GroupState
from coordinator.group.offset_decisions import GroupOffsets
from coordinator.group.offsets import OffsetStore
from tests.context import GroupTestContext


def test_an_unknown_group_is_created_empty() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    assert core.validate_txn_offset_commit("standalone", "", -1, None) is None
    core.create_txn_commit_group("standalone", 1234)
    group = ctx.service.group("standalone")
    assert group is not None
    assert group.state is GroupState.EMPTY and group.state_timestamp_ms == 1234


def test_a_known_group_is_left_as_it_is() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    ctx.stable_group(2, group="g")
    before = ctx.service.group("g")
    core.create_txn_commit_group("g", 99)
    assert ctx.service.group("g") is before
    assert before is not None and before.state is GroupState.STABLE
