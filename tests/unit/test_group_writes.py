"""State follows the log: group changes become visible only once durable, or are undone.

The test context makes every write durable at once unless told `fail_next_writes`; then the
Result's replies are answered COORDINATOR_NOT_AVAILABLE and the core is told the write failed.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from tests.builders import JoinGroupBuilder, heartbeat, leave, sync
from tests.context import GroupTestContext
from tests.unit.test_static_membership import static_group

NOT_AVAILABLE = ErrorCode.coordinator_not_available


def completing_group(ctx: GroupTestContext) -> tuple[str, str]:
    """Two members answered their JoinGroup at generation 1: (leader, follower)."""
    first = JoinGroupBuilder(client_id="a")
    second = JoinGroupBuilder(client_id="b")
    ctx.join_dynamic(first, connection=1)
    first_ref = ctx.ref_of_last()
    ctx.join_dynamic(second, connection=2)
    ctx.sleep(0)
    answer = ctx.reply(first_ref)
    leader = answer.leader
    (follower,) = {m.member_id for m in answer.members} - {leader}
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    return leader, follower


def test_a_durable_assignment_answers_everyone_and_makes_the_group_stable() -> None:
    ctx = GroupTestContext()
    leader, follower = completing_group(ctx)
    assert ctx.send(sync(follower, 1), connection=2) is None  # parked
    follower_ref = ctx.ref_of_last()
    out = ctx.send(sync(leader, 1, assignments={leader: b"L", follower: b"F"}), connection=1)
    assert out is not None and out.assignment == b"L"
    assert ctx.reply(follower_ref).assignment == b"F"
    assert ctx.group().state is GroupState.STABLE
    assert {m.member_id: m.assignment for m in ctx.service.durable_view()["g"].members} == {
        leader: b"L", follower: b"F"}


def test_a_failed_assignment_write_answers_the_error_and_rebalances() -> None:
    ctx = GroupTestContext()
    leader, follower = completing_group(ctx)
    follower_sync = ctx.send(sync(follower, 1), connection=2)
    assert follower_sync is None
    follower_ref = ctx.ref_of_last()
    ctx.fail_next_writes()
    out = ctx.send(sync(leader, 1, assignments={leader: b"L", follower: b"F"}), connection=1)
    assert out is not None and out.error is NOT_AVAILABLE
    assert ctx.reply(follower_ref).error is NOT_AVAILABLE
    assert ctx.reply(follower_ref).assignment == b""
    group = ctx.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in group.members.values())
    assert "g" not in ctx.service.durable_view()  # nothing of generation 1 reached the log
    # A heartbeat now learns of the rebalance; nobody was ever told the unwritten assignment.
    assert ctx.send(heartbeat(follower, 1), connection=2).error is ErrorCode.rebalance_in_progress


def test_after_a_failed_assignment_write_the_group_recovers_by_rejoining() -> None:
    ctx = GroupTestContext()
    leader, follower = completing_group(ctx)
    ctx.fail_next_writes()
    ctx.send(sync(leader, 1, assignments={leader: b"L", follower: b"F"}), connection=1)
    refs = []
    for member_id, connection in ((leader, 1), (follower, 2)):
        ctx.send(JoinGroupBuilder(client_id="x").member_id(member_id), connection=connection)
        refs.append(ctx.ref_of_last())
    ctx.sleep(0)
    assert all(ctx.reply(r).generation_id == 2 for r in refs)
    new_leader = ctx.reply(refs[0]).leader
    out = ctx.send(sync(new_leader, 2, assignments={leader: b"L2", follower: b"F2"}))
    assert out.error is ErrorCode.none
    assert ctx.group().state is GroupState.STABLE
    assert ctx.service.durable_view()["g"].generation == 2


def test_a_failed_static_member_replacement_restores_the_old_member_id() -> None:
    ctx = GroupTestContext()
    leader, old_follower = static_group(ctx, "i1", "i2")
    before = ctx.service.durable_view()["g"]
    ctx.fail_next_writes()
    out = ctx.send(JoinGroupBuilder(client_id="i2").group_instance_id("i2"), connection=5)
    assert out.error is NOT_AVAILABLE and out.member_id == ""
    group = ctx.group()
    assert group.state is GroupState.STABLE
    assert group.static_member_id("i2") == old_follower
    assert set(group.members) == {leader, old_follower}
    assert ctx.service.durable_view()["g"] == before
    # The old id is still the member: it heartbeats and syncs as before.
    assert ctx.send(heartbeat(old_follower, 1, instance_id="i2")).error is ErrorCode.none
    assert ctx.send(sync(old_follower, 1, instance_id="i2")).assignment == old_follower.encode()
    # Its session runs again: the wheel would expire it, as before the replacement.
    assert ctx.group().members[old_follower].session_deadline_ms is not None


def test_a_failed_group_deletion_brings_the_group_back() -> None:
    ctx = GroupTestContext()
    (member,) = ctx.stable_group(1)
    ctx.send(leave(member))
    assert ctx.group().state is GroupState.EMPTY
    stamp = ctx.group().state_timestamp_ms
    error, result = ctx.service.delete_group("g", ctx.now_ms)
    assert error is None and ctx.service.group("g") is None
    ctx.fail_next_writes()
    ctx.apply(result)
    group = ctx.group()
    assert group.state is GroupState.EMPTY and group.state_timestamp_ms == stamp
    assert "g" in ctx.service.durable_view()
    # ... and can be deleted again.
    error, result = ctx.service.delete_group("g", ctx.now_ms)
    assert error is None
    ctx.apply(result)
    assert ctx.service.group("g") is None and "g" not in ctx.service.durable_view()
