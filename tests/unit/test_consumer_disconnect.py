"""Disconnect-fast failover in consumer groups: a dynamic member (consumer protocol, or classic
protocol inside a consumer group) whose connection closes without leaving is fenced after
`group.member.disconnect.grace.ms` unless it is heard from meanwhile."""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.group import ConsumerGroup
from tests.builders import heartbeat
from tests.consumer_helpers import beat, image, join, parts
from tests.context import DEFAULT_CONFIG, GroupTestContext
from tests.migration_helpers import classic_join, stable_classic_group

GRACE = 1_000


def context(partitions: int = 4, grace_ms: int = GRACE) -> GroupTestContext:
    ctx = GroupTestContext(
        dataclasses.replace(DEFAULT_CONFIG, group_member_disconnect_grace_ms=grace_ms),
                           consumer_config=ConsumerGroupConfig())
    ctx.service.consumer.set_topic_image(image({"t": partitions}))
    return ctx


def group(ctx: GroupTestContext) -> ConsumerGroup:
    found = ctx.service.consumer.group("g")
    assert found is not None
    return found


def removed(ctx: GroupTestContext) -> list[tuple[str, str]]:
    return [(e.member_id, e.cause.value) for e in ctx.events_named("member_removed")]


def two_members(ctx: GroupTestContext, **b_fields: Any) -> None:
    """a on connection 1 owns everything, b joins on connection 2; both reconciled."""
    ctx.send(join("a"), 1)
    ctx.send(join("b", **b_fields), 2)
    a = ctx.send(beat("a", 1, {"t": range(4)}), 1)
    ctx.send(beat("a", 1, {"t": parts(a.assignment)}), 1)
    ctx.send(beat("b", 2, {}), 2)
    assert group(ctx).state.value == "Stable"


def keep_a_alive(ctx: GroupTestContext, ms: int) -> None:
    """Let `ms` pass while member a heartbeats every 5 s on connection 1."""
    while ms > 0:
        step = min(ms, 5_000)
        ctx.sleep(step)
        ms -= step
        a = group(ctx).members["a"]
        ctx.send(beat("a", a.member_epoch, {"t": parts(a.assigned)}), 1)


def test_a_closed_connection_fences_the_member_after_the_grace() -> None:
    ctx = context()
    two_members(ctx)
    epoch = group(ctx).group_epoch
    ctx.close(2)
    ctx.sleep(GRACE - 1)
    assert "b" in group(ctx).members
    ctx.sleep(1)
    assert removed(ctx) == [("b", "disconnect")]
    assert "b" not in group(ctx).members and group(ctx).group_epoch == epoch + 1
    # The survivor gets b's partitions through the ordinary target assignment.
    reply = ctx.send(beat("a", 2, {"t": parts(group(ctx).members["a"].assigned)}), 1)
    assert reply.member_epoch == epoch + 1 and parts(reply.assignment) == {0, 1, 2, 3}
    computed = ctx.events_named("target_assignment_computed")[-1]
    assert "disconnect" in computed.reason


def test_a_heartbeat_on_a_new_connection_within_the_grace_keeps_the_member() -> None:
    ctx = context()
    two_members(ctx)
    epoch = group(ctx).group_epoch
    ctx.close(2)
    ctx.sleep(GRACE // 2)
    assert ctx.send(beat("b", epoch), 3).error is ErrorCode.none
    ctx.sleep(10 * GRACE)
    assert removed(ctx) == [] and group(ctx).group_epoch == epoch
    # The grace follows the new connection.
    ctx.close(3)
    ctx.sleep(GRACE)
    assert removed(ctx) == [("b", "disconnect")]


def test_an_offset_commit_within_the_grace_keeps_the_member() -> None:
    ctx = context()
    two_members(ctx)
    epoch = group(ctx).group_epoch
    ctx.close(2)
    error, result = ctx.service.validate_offset_commit("g", "b", epoch, None, ctx.now_ms, 7)
    ctx.apply(result)
    assert error is None
    ctx.sleep(10 * GRACE)
    assert removed(ctx) == []


def test_closing_a_connection_the_member_no_longer_uses_changes_nothing() -> None:
    ctx = context()
    two_members(ctx)
    ctx.send(beat("b", group(ctx).group_epoch), 3)
    ctx.close(2)
    ctx.sleep(10 * GRACE)
    assert removed(ctx) == []


def test_leaving_then_closing_is_one_removal_with_cause_leave() -> None:
    ctx = context()
    two_members(ctx)
    ctx.send(beat("b", -1), 2)
    ctx.close(2)
    ctx.sleep(10 * GRACE)
    assert removed(ctx) == [("b", "leave")]


def test_static_members_keep_the_session_timeout() -> None:
    ctx = context()
    two_members(ctx, instance_id="i-b")
    ctx.close(2)
    ctx.sleep(10 * GRACE)
    assert removed(ctx) == []
    keep_a_alive(ctx, 45_000)
    assert removed(ctx) == [("b", "session_expiry")]


def test_the_grace_can_be_turned_off() -> None:
    ctx = context(grace_ms=-1)
    two_members(ctx)
    ctx.close(2)
    ctx.sleep(10 * GRACE)
    assert removed(ctx) == []


def test_a_fenced_members_own_session_timer_is_gone() -> None:
    ctx = context()
    two_members(ctx)
    ctx.close(2)
    ctx.sleep(GRACE)
    keep_a_alive(ctx, 45_000)  # b's session would have expired here: no second removal
    assert removed(ctx) == [("b", "disconnect")]
    assert "b" not in group(ctx).session_deadlines
    assert "b" not in group(ctx).disconnect_deadlines and "b" not in group(ctx).connections


def test_a_classic_member_inside_a_consumer_group_is_fenced_after_the_grace() -> None:
    ctx = context(partitions=6)
    stable_classic_group(ctx, 2, 6)
    ctx.send(join("n"), 9)  # upgrades the group; classic members on connections 100, 101
    classic_ids = [m for m in group(ctx).members if m != "n"]
    doomed = sorted(classic_ids)[0]
    doomed_connection = group(ctx).connections[doomed]
    ctx.close(doomed_connection)
    ctx.sleep(GRACE)
    assert removed(ctx) == [(doomed, "disconnect")]
    assert doomed not in group(ctx).members


def test_a_classic_member_that_heartbeats_on_a_new_connection_is_kept() -> None:
    ctx = context(partitions=6)
    stable_classic_group(ctx, 2, 6)
    ctx.send(join("n"), 9)
    member = sorted(m for m in group(ctx).members if m != "n")[0]
    ctx.close(group(ctx).connections[member])
    ctx.send(heartbeat(member, group(ctx).members[member].member_epoch), 50)
    ctx.sleep(3 * GRACE)  # within its 10 s session
    assert removed(ctx) == []


def test_a_new_classic_member_in_a_consumer_group_is_tracked() -> None:
    ctx = context(partitions=6)
    ctx.send(join("n"), 1)
    first = ctx.send(classic_join(), 7)
    assert first.error is ErrorCode.member_id_required
    joined = ctx.send(classic_join(member=first.member_id), 7)
    assert joined.error is ErrorCode.none
    ctx.close(7)  # its second JoinGroup there made the connection the member's own
    ctx.sleep(GRACE)
    assert removed(ctx) == [(first.member_id, "disconnect")]


def test_a_classic_members_one_off_join_connection_is_not_its_own() -> None:
    ctx = context(partitions=6)
    ctx.send(join("n"), 1)
    first = ctx.send(classic_join(), 7)
    joined = ctx.send(classic_join(member=first.member_id), 8)  # kafka-go-like: a new one
    assert joined.error is ErrorCode.none
    ctx.close(8)
    ctx.sleep(GRACE)
    assert removed(ctx) == []
    beat = ctx.send(heartbeat(first.member_id, joined.generation_id), 9)
    assert beat.error in (ErrorCode.none, ErrorCode.rebalance_in_progress)
    ctx.close(9)  # its heartbeat's is
    ctx.sleep(GRACE)
    assert removed(ctx) == [(first.member_id, "disconnect")]


def test_the_last_consumer_member_disconnecting_downgrades_the_group() -> None:
    ctx = context(partitions=6)
    stable_classic_group(ctx, 2, 6)
    ctx.send(join("n"), 9)
    ctx.close(9)
    ctx.sleep(GRACE)
    assert removed(ctx) == [("n", "disconnect")]
    assert ctx.service.consumer.group("g") is None
    classic = ctx.group("g")
    # The classic members keep their disconnect tracking after the downgrade.
    assert all(m.connection_id is not None for m in classic.members.values())
    victim = sorted(classic.members)[0]
    ctx.close(classic.members[victim].connection_id)  # type: ignore[arg-type]
    ctx.sleep(GRACE)
    assert removed(ctx)[-1] == (victim, "disconnect")


def test_a_classic_member_told_to_rejoin_may_close_its_connection() -> None:
    ctx = context(partitions=6)
    stable_classic_group(ctx, 2, 6)
    ctx.send(join("n"), 9)  # upgrades the group: the classic members must rejoin
    classic_ids = sorted(m for m in group(ctx).members if m != "n")
    member = classic_ids[0]
    own = group(ctx).connections[member]
    told = ctx.send(heartbeat(member, group(ctx).members[member].member_epoch), own)
    assert told.error is ErrorCode.rebalance_in_progress
    ctx.close(own)  # closed to rejoin on another connection, as kafka-go does
    ctx.sleep(3 * GRACE)
    assert removed(ctx) == []
