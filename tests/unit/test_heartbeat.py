"""Heartbeat answers per state, and session expiry."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from tests.builders import JoinGroupBuilder, heartbeat, leave, sync
from tests.context import GroupTestContext


def test_stable_member_heartbeat_is_ok() -> None:
    ctx = GroupTestContext()
    a, _ = ctx.stable_group(2)
    assert ctx.send(heartbeat(a, 1)).error is ErrorCode.none


def test_errors() -> None:
    ctx = GroupTestContext()
    a, _ = ctx.stable_group(2)
    assert ctx.send(heartbeat(a, 1, group="other")).error is ErrorCode.unknown_member_id
    assert ctx.send(heartbeat("ghost", 1)).error is ErrorCode.unknown_member_id
    assert ctx.send(heartbeat(a, 0)).error is ErrorCode.illegal_generation
    assert ctx.send(heartbeat(a, 1, group="")).error is ErrorCode.invalid_group_id


def test_preparing_rebalance_answers_rebalance_in_progress() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2)
    ctx.send(JoinGroupBuilder().member_id(a))
    assert ctx.send(heartbeat(b, 1)).error is ErrorCode.rebalance_in_progress


def test_empty_group_answers_unknown_member() -> None:
    ctx = GroupTestContext()
    a = ctx.stable_group(1)[0]
    ctx.send(leave(a))
    assert ctx.send(heartbeat(a, 2)).error is ErrorCode.unknown_member_id


def test_heartbeats_keep_a_member_alive() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2, session_ms=10_000)
    for _ in range(5):
        ctx.sleep(9_000)
        ctx.send(heartbeat(a, 1))
        ctx.send(heartbeat(b, 1))
    assert ctx.group().state is GroupState.STABLE


def test_heartbeat_does_not_touch_the_wheel() -> None:
    ctx = GroupTestContext()
    a = ctx.stable_group(1, session_ms=10_000)[0]
    result = ctx.manager.handle(heartbeat(a, 1), ctx.now_ms)
    assert result.timers == []


def test_session_expiry_removes_the_member_and_rebalances() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2, session_ms=10_000)
    ctx.sleep(9_000)
    ctx.send(heartbeat(a, 1))
    ctx.sleep(1_000)
    assert b not in ctx.group().members
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    started = ctx.events_named("rebalance_started")[-1]
    assert started.member_id == b and started.client_id == "c1"
    assert ctx.events_named("member_removed")[-1].cause.value == "session_expiry"
    assert ctx.send(heartbeat(a, 1)).error is ErrorCode.rebalance_in_progress


def test_last_member_expiring_empties_the_group() -> None:
    ctx = GroupTestContext()
    ctx.stable_group(1, session_ms=10_000)
    ctx.sleep(10_000)
    assert ctx.group().state is GroupState.EMPTY
    assert ctx.group().generation_id == 2


def test_new_member_parked_in_join_expires_after_the_new_member_timeout() -> None:
    ctx = GroupTestContext()
    static = JoinGroupBuilder(client_id="s").group_instance_id("s")
    ctx.send(static.session_timeout_ms(1_000_000).rebalance_timeout_ms(600_000))
    ctx.sleep(0)
    ctx.send(sync("s-1", 1))
    # The static member does not rejoin, so the join phase lasts the rebalance timeout.
    new = ctx.send(JoinGroupBuilder(client_id="late").api_version(3), connection=9)
    assert new is None
    late_ref = ctx.ref_of_last()
    ctx.sleep(300_000)
    assert ctx.reply(late_ref).error is ErrorCode.unknown_member_id
