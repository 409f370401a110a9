"""A group that holds nothing and that the log never held goes away when it is Dead, not at the
next offset-expiry pass: a client sending JoinGroups for 100,000 new group ids (each answered
MEMBER_ID_REQUIRED, each leaving a pending member) leaves nothing behind once those pending
members expire after their session timeout, and the expiry pass has nothing to write.
"""

from __future__ import annotations

from coordinator.group.offset_decisions import GroupOffsets
from coordinator.group.offsets import OffsetStore
from coordinator.grouplog.records import offset_commit_record, offset_commit_value
from tests.builders import JoinGroupBuilder
from tests.context import GroupTestContext


def expire_pending(ctx: GroupTestContext, core: GroupOffsets, groups: list[str]) -> None:
    """Let the pending members' session timeout pass, as the runtime does it: every due
    heartbeat timer to the service, then the group offered to `forget_if_unused`."""
    ctx.sleep(10_001)
    for group_id in groups:
        core.forget_if_unused(group_id)


def test_a_group_of_only_an_expired_pending_member_is_gone() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    groups = [f"g{i}" for i in range(100)]
    for group_id in groups:
        answer = ctx.send(JoinGroupBuilder(group=group_id, session_ms=10_000))
        assert answer.member_id  # MEMBER_ID_REQUIRED, with a pending member
    assert len(ctx.service.groups) == 100
    expire_pending(ctx, core, groups)
    assert len(ctx.service.groups) == 0
    assert ctx.records == []  # nothing was, or needed to be, written
    expiry = core.expire(ctx.now_ms)
    assert expiry.result.records == [] and expiry.groups_deleted == 0


def test_a_group_with_offsets_stays() -> None:
    ctx = GroupTestContext()
    offsets = OffsetStore()
    core = GroupOffsets(ctx.service, offsets)
    ctx.send(JoinGroupBuilder(group="kept"))
    offsets.apply(offset_commit_record(
        "kept", "t", 0, offset_commit_value(5, -1, "", ctx.now_ms, -1)))
    expire_pending(ctx, core, ["kept"])
    assert ctx.service.group("kept") is not None


def test_a_group_the_log_holds_stays_until_expiry_deletes_it() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    [member] = ctx.stable_group(1, group="written")
    ctx.send(JoinGroupBuilder(group="written").member_id(member).session_timeout_ms(10_000))
    ctx.sleep(60_000)  # the member's session ends: the group is Empty, with a record
    group = ctx.service.group("written")
    assert group is not None and not group.members
    assert not core.forget_if_unused("written")
    expiry = core.expire(ctx.now_ms)
    assert expiry.groups_deleted == 1  # a tombstone, through the expiry pass as before


def test_a_group_with_a_member_is_not_dropped() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    ctx.join_dynamic(JoinGroupBuilder(group="busy"))
    assert not core.forget_if_unused("busy")
    assert ctx.service.group("busy") is not None


def test_expiry_in_slices_decides_as_one_pass() -> None:
    ctx = GroupTestContext()
    offsets = OffsetStore()
    core = GroupOffsets(ctx.service, offsets)
    for i in range(30):
        offsets.apply(offset_commit_record(f"s{i}", "t", 0, offset_commit_value(1, -1, "", 0, -1)))
    later = 8 * 24 * 3600 * 1000  # past the default 7 days of retention
    whole = core.expire(later).result.records
    candidates = core.expiry_candidates()
    assert sorted(candidates) == sorted(f"s{i}" for i in range(30))
    sliced = [r for start in range(0, 30, 7)
              for r in core.expire(later, candidates[start:start + 7]).result.records]
    assert sorted(map(repr, sliced)) == sorted(map(repr, whole))
