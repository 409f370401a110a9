"""Disconnect-fast failover: a dynamic member whose connection closes without LeaveGroup is
removed after `group.member.disconnect.grace.ms` unless it is heard from meanwhile."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from coordinator.group.config import GroupConfig
from tests.builders import JoinGroupBuilder, heartbeat, leave, sync
from tests.context import GroupTestContext

GRACE = 1_000


def _removed(ctx: GroupTestContext) -> list[tuple[str, str]]:
    return [(e.member_id, e.cause.value) for e in ctx.events_named("member_removed")]


def test_a_closed_connection_removes_the_member_after_the_grace() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2)
    ctx.close_member_connection(b)
    ctx.sleep(GRACE - 10)
    assert b in ctx.group().members and ctx.group().is_state(GroupState.STABLE)
    ctx.sleep(10)
    assert _removed(ctx) == [(b, "disconnect")]
    started = ctx.events_named("rebalance_started")[-1]
    assert started.member_id == b and "connection closed" in started.reason
    # The survivor learns of the rebalance and rejoins: the join completes at once.
    assert ctx.send(heartbeat(a, 1), 100).error is ErrorCode.rebalance_in_progress
    joined = ctx.send(JoinGroupBuilder().member_id(a), 100)
    assert joined.error is ErrorCode.none and joined.generation_id == 2
    assert [m.member_id for m in joined.members] == [a]


def test_a_request_on_another_connection_within_the_grace_keeps_the_member() -> None:
    ctx = GroupTestContext()
    _, b = ctx.stable_group(2)
    rebalances = len(ctx.events_named("rebalance_started"))
    ctx.close_member_connection(b)
    ctx.sleep(GRACE - 100)
    assert ctx.send(heartbeat(b, 1), 500).error is ErrorCode.none  # reconnected
    ctx.sleep(5 * GRACE)
    assert _removed(ctx) == [] and len(ctx.events_named("rebalance_started")) == rebalances
    assert ctx.connection_of(b) == 500
    # Its new connection is tracked: closing that one starts a new grace.
    ctx.close(500)
    ctx.sleep(GRACE)
    assert _removed(ctx) == [(b, "disconnect")]


def test_an_offset_commit_within_the_grace_keeps_the_member() -> None:
    ctx = GroupTestContext()
    _, b = ctx.stable_group(2)
    ctx.close_member_connection(b)
    error, result = ctx.service.validate_offset_commit("g", b, 1, None, ctx.now_ms, 600)
    ctx.apply(result)
    assert error is None
    ctx.sleep(5 * GRACE)
    assert _removed(ctx) == []


def test_closing_a_connection_the_member_no_longer_uses_changes_nothing() -> None:
    ctx = GroupTestContext()
    _, b = ctx.stable_group(2)
    old = ctx.connection_of(b)
    assert ctx.send(heartbeat(b, 1), 700).error is ErrorCode.none
    assert old is not None
    ctx.close(old)
    ctx.sleep(5 * GRACE)
    assert _removed(ctx) == []


def test_leave_group_then_close_is_one_removal_with_cause_leave() -> None:
    ctx = GroupTestContext()
    _, b = ctx.stable_group(2)
    connection = ctx.connection_of(b)
    ctx.send(leave(b), connection or 0)
    assert connection is not None
    ctx.close(connection)
    ctx.sleep(5 * GRACE)
    assert _removed(ctx) == [(b, "leave")]


def test_static_members_keep_session_semantics() -> None:
    ctx = GroupTestContext()
    builder = JoinGroupBuilder().group_instance_id("i-1").session_timeout_ms(10_000)
    ctx.send(builder, 3)
    ctx.sleep(0)
    a = ctx.replies[ctx.ref_of_last()].member_id
    ctx.send(sync(a, 1, assignments={a: b"x"}), 3)
    ctx.close(3)
    ctx.sleep(5 * GRACE)
    assert a in ctx.group().members and _removed(ctx) == []
    ctx.sleep(10_000)
    assert _removed(ctx) == [(a, "session_expiry")]


def test_the_grace_can_be_turned_off() -> None:
    ctx = GroupTestContext(GroupConfig(group_initial_rebalance_delay_ms=0,
                                       group_member_disconnect_grace_ms=-1))
    _, b = ctx.stable_group(2)
    # With the grace off the core does not note connections: close both members' own
    # (`stable_group`: 100 and 101).
    assert ctx.connection_of(b) is None
    ctx.close(100)
    ctx.close(101)
    ctx.sleep(9_000)
    assert _removed(ctx) == []
    ctx.sleep(1_000)  # the builder's 10 s session
    assert (b, "session_expiry") in _removed(ctx)
    assert all(cause == "session_expiry" for _, cause in _removed(ctx))


def test_a_dead_member_does_not_hold_a_rebalance_until_its_timeout() -> None:
    ctx = GroupTestContext()
    a, b, c = ctx.stable_group(3)
    ctx.close_member_connection(b)  # b dies while consuming
    ctx.send(JoinGroupBuilder().member_id(a), 100)  # a new rebalance (the leader rejoins)
    assert ctx.send(JoinGroupBuilder().member_id(c), 102) is None  # waits for b
    ctx.sleep(GRACE)  # far sooner than the 30 s rebalance timeout
    assert _removed(ctx) == [(b, "disconnect")]
    joined = ctx.replies[ctx.ref_of_last()]
    assert joined.error is ErrorCode.none and joined.generation_id == 2


def test_a_v3_member_added_without_kip_394_is_tracked() -> None:
    ctx = GroupTestContext()
    first = ctx.send(JoinGroupBuilder(version=3), 8)
    assert first is None or first.error is ErrorCode.none
    ctx.sleep(0)
    member = next(iter(ctx.group().members))
    assert ctx.connection_of(member) is None  # its first group request on connection 8
    ctx.send(sync(member, 1, assignments={member: b"x"}), 8)
    assert ctx.connection_of(member) == 8  # a second one there: the client keeps it
    ctx.close(8)
    ctx.sleep(GRACE)
    assert _removed(ctx) == [(member, "disconnect")]
    assert ctx.group().is_state(GroupState.EMPTY)


def test_a_new_member_that_dies_before_its_join_completes_is_dropped() -> None:
    ctx = GroupTestContext(GroupConfig(group_initial_rebalance_delay_ms=3_000))
    a = ctx.join_dynamic(connection=9)  # parked in the initial delay
    ctx.close(9)
    ctx.sleep(GRACE)
    assert _removed(ctx) == [(a, "disconnect")]
