"""Heartbeat answers per state, and session expiry."""

from __future__ import annotations

import copy
from dataclasses import replace

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from coordinator.group.config import GroupConfig
from coordinator.group.outcomes import HeartbeatOutcome
from coordinator.group.result import Reply, RequestRef
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
    result = ctx.service.handle(heartbeat(a, 1), ctx.now_ms)
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


# -- the steady-state heartbeat, against the full path ------------------------------------------


def _scenarios() -> list[tuple[str, GroupTestContext, list[str]]]:
    stable = GroupTestContext()
    stable_ids = stable.stable_group(2, session_ms=10_000)
    stable.sleep(3_000)

    completing = GroupTestContext()
    completing_ids = [completing.join_dynamic(JoinGroupBuilder(), connection=100)]
    completing.sleep(0)  # joined, not yet synced: CompletingRebalance

    preparing = GroupTestContext()
    preparing_ids = preparing.stable_group(2)
    preparing.send(JoinGroupBuilder().member_id(preparing_ids[0]), 100)

    empty = GroupTestContext()
    empty_ids = empty.stable_group(1)
    empty.send(leave(empty_ids[0]), 100)

    disconnected = GroupTestContext()
    disconnected_ids = disconnected.stable_group(2)
    disconnected.close(101)  # the second member's grace runs

    untracked = GroupTestContext(GroupConfig(group_initial_rebalance_delay_ms=0,
                                             group_member_disconnect_grace_ms=-1))
    untracked_ids = untracked.stable_group(2)

    static = GroupTestContext()
    static.send(JoinGroupBuilder().group_instance_id("i0"), 100)
    static.sleep(0)
    static_ids = list(static.group().members)
    static.send(sync(static_ids[0], 1, assignments={static_ids[0]: b"a"}), 100)
    return [("stable", stable, stable_ids), ("completing", completing, completing_ids),
            ("preparing", preparing, preparing_ids), ("empty", empty, empty_ids),
            ("disconnected", disconnected, disconnected_ids),
            ("untracked connections", untracked, untracked_ids), ("static", static, static_ids)]


def test_steady_heartbeat_does_what_the_full_path_does() -> None:
    """Wherever the steady-state heartbeat applies it leaves the group exactly as the full path
    does, and the full path answers NONE with no timer, record or event; wherever it does not,
    it changes nothing."""
    taken = 0
    for name, ctx, ids in _scenarios():
        generation = ctx.group().generation_id
        for member in [*ids, "ghost"]:
            for gen in (generation, generation - 1):
                for connection in (100, 101, 7):
                    for instance in (None, "i0", "i1"):
                        for group in ("g", "other", ""):
                            fast, full = copy.deepcopy(ctx), copy.deepcopy(ctx)
                            done = fast.service.steady_heartbeat(
                                group, member, gen, instance, connection, ctx.now_ms)
                            ref = RequestRef(connection, 999)
                            cmd = heartbeat(member, gen, group=group, instance_id=instance)
                            result = full.service.handle(replace(cmd, ref=ref), ctx.now_ms)
                            case = (name, member, gen, connection, instance, group)
                            if done:
                                taken += 1
                                assert result.replies == [Reply(ref, HeartbeatOutcome())], case
                                assert not (result.timers or result.records or result.events
                                            or result.writes), case
                                assert (fast.service.classic._groups
                                        == full.service.classic._groups), case
                                assert (fast.service.classic.connections.members_by_connection
                                        == full.service.classic.connections
                                           .members_by_connection), case
                            else:
                                assert (fast.service.classic._groups
                                        == ctx.service.classic._groups), case
    assert taken >= 10  # the steady state was exercised in every scenario that has one


# -- the early session wake-up, against the full path ------------------------------------------


def test_early_heartbeat_wakeup_does_what_expire_does() -> None:
    """Wherever the early wake-up applies it leaves the groups and the wheel exactly as
    `expire` does (a re-arm at the moved deadline, nothing else); wherever it does not, it
    changes nothing. Checked before, at and after the members' deadlines, in every scenario."""
    taken = 0
    for name, base, ids in _scenarios():
        for advance_ms in (0, 5_000, 9_999, 10_000, 30_000, 300_000):
            for member in [*ids, "ghost"]:
                for group in ("g", "other"):
                    key = ("heartbeat", group, member)
                    now_ms = base.now_ms + advance_ms
                    fast, full = copy.deepcopy(base), copy.deepcopy(base)
                    rearm_at = fast.service.early_heartbeat_wakeup(key, now_ms)
                    result = full.service.expire(key, now_ms)
                    case = (name, advance_ms, member, group)
                    if rearm_at is None:
                        assert fast.service.classic._groups == base.service.classic._groups, case
                        continue
                    taken += 1
                    assert [(op.key, op.deadline_ms) for op in result.timers] == [
                        (key, rearm_at)], case
                    assert not (result.records or result.events or result.replies), case
                    assert fast.service.classic._groups == full.service.classic._groups, case
    assert taken >= 5


def test_early_heartbeat_wakeup_leaves_other_timer_kinds_to_expire() -> None:
    ctx = GroupTestContext()
    ctx.stable_group(1, session_ms=10_000)
    assert ctx.service.early_heartbeat_wakeup(("join", "g"), ctx.now_ms) is None
    assert ctx.service.early_heartbeat_wakeup(("sync", "g"), ctx.now_ms) is None
