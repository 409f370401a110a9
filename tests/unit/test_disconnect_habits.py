"""Disconnect-fast failover against real clients' connection habits and outsiders.

kafka-go 0.2.1 sends JoinGroup, SyncGroup and OffsetFetch each on a connection of its own and
closes it once answered; it heartbeats and commits on another, long-lived one whose first
request comes one heartbeat interval later, and closes that one when told to rejoin. An
outsider who read a member id from DescribeGroups must not be able to make the member's
removal start by sending a request for it and closing its connection.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from tests.builders import JoinGroupBuilder, heartbeat, sync
from tests.context import GroupTestContext

GRACE = 1_000


def _removed(ctx: GroupTestContext) -> list[tuple[str, str]]:
    return [(e.member_id, e.cause.value) for e in ctx.events_named("member_removed")]


def _kafka_go_member(ctx: GroupTestContext, join_on: int, sync_on: int) -> str:
    """A one-member group joined the kafka-go way: JoinGroup v1 and SyncGroup each on a
    connection of its own, closed once answered."""
    ctx.send(JoinGroupBuilder(client_id="kafka-go", version=1), join_on)
    ctx.sleep(0)
    member = ctx.replies[ctx.ref_of_last()].member_id
    ctx.close(join_on)
    ctx.send(sync(member, 1, assignments={member: b"x"}), sync_on)
    ctx.close(sync_on)
    return member


def test_short_lived_join_and_sync_connections_never_start_the_grace() -> None:
    ctx = GroupTestContext()
    member = _kafka_go_member(ctx, join_on=1, sync_on=2)
    ctx.sleep(3_000)  # kafka-go's first heartbeat comes one interval later, on a new connection
    assert ctx.send(heartbeat(member, 1), 3).error is ErrorCode.none
    for _ in range(3):
        ctx.sleep(3_000)
        assert ctx.send(heartbeat(member, 1), 3).error is ErrorCode.none
    assert _removed(ctx) == []
    # Once its heartbeat connection is gone, the grace runs as before.
    ctx.close(3)
    ctx.sleep(GRACE)
    assert _removed(ctx) == [(member, "disconnect")]


def test_closing_the_connection_told_to_rejoin_does_not_start_the_grace() -> None:
    ctx = GroupTestContext()
    a = _kafka_go_member(ctx, join_on=1, sync_on=2)
    assert ctx.send(heartbeat(a, 1), 3).error is ErrorCode.none
    b = ctx.join_dynamic(JoinGroupBuilder(client_id="other"), connection=10)  # a rebalance
    assert ctx.send(heartbeat(a, 1), 3).error is ErrorCode.rebalance_in_progress
    ctx.close(3)  # kafka-go closes it and rejoins once its fetches return (MaxWait)
    ctx.sleep(5_000)
    assert _removed(ctx) == []
    ctx.send(JoinGroupBuilder(client_id="kafka-go", version=1).member_id(a), 4)
    joined = ctx.replies[ctx.ref_of_last()]
    assert joined.error is ErrorCode.none and joined.generation_id == 2
    assert {m for m in ctx.group().members} == {a, b}


def test_a_member_that_dies_waiting_for_its_join_is_removed_after_the_grace() -> None:
    ctx = GroupTestContext()
    a, b, _ = ctx.stable_group(3)
    ctx.send(JoinGroupBuilder().member_id(a), 100)  # a rebalance; c has not rejoined yet
    assert ctx.send(heartbeat(b, 1), 101).error is ErrorCode.rebalance_in_progress
    ctx.close(101)
    assert ctx.send(JoinGroupBuilder(client_id="c1").member_id(b), 7) is None  # parked
    ctx.close(7)  # b dies while its JoinGroup waits for c
    ctx.sleep(GRACE)
    assert _removed(ctx) == [(b, "disconnect")]


def test_a_rejected_heartbeat_binds_nothing() -> None:
    ctx = GroupTestContext()
    _, b = ctx.stable_group(2)
    own = ctx.connection_of(b)
    session = ctx.group().members[b].session_deadline_ms
    ctx.sleep(100)
    # An outsider read b's id from DescribeGroups and guesses a wrong generation.
    assert ctx.send(heartbeat(b, 7), 900).error is ErrorCode.illegal_generation
    ctx.send(sync(b, 7), 900)
    error, result = ctx.service.validate_offset_commit("g", b, 7, None, ctx.now_ms, 900)
    ctx.apply(result)
    assert error is ErrorCode.illegal_generation
    assert ctx.group().members[b].session_deadline_ms == session  # its session untouched
    ctx.close(900)
    ctx.sleep(5 * GRACE)
    member = ctx.group().members[b]
    assert _removed(ctx) == [] and member.connection_id == own
    assert member.other_connections is None and member.disconnect_deadline_ms is None


def test_a_rejected_request_does_not_end_a_running_grace() -> None:
    ctx = GroupTestContext()
    _, b = ctx.stable_group(2)
    ctx.close_member_connection(b)
    ctx.sleep(GRACE // 2)
    assert ctx.send(heartbeat(b, 7), 900).error is ErrorCode.illegal_generation
    ctx.send(sync(b, 7), 901)
    ctx.sleep(GRACE // 2)
    assert _removed(ctx) == [(b, "disconnect")]


def test_an_outsiders_accepted_heartbeat_cannot_disconnect_the_member() -> None:
    ctx = GroupTestContext()
    _, b = ctx.stable_group(2)
    own = ctx.connection_of(b)
    assert ctx.send(heartbeat(b, 1), 900).error is ErrorCode.none  # right generation, guessed
    ctx.close(900)
    ctx.sleep(5 * GRACE)
    assert _removed(ctx) == [] and ctx.group().members[b].connection_id == own
    assert ctx.group().is_state(GroupState.STABLE)


def test_a_member_with_two_connections_is_connected_until_both_close() -> None:
    ctx = GroupTestContext()
    _, b = ctx.stable_group(2, session_ms=60_000)
    first = ctx.connection_of(b)
    assert first is not None
    assert ctx.send(heartbeat(b, 1), 500).error is ErrorCode.none
    ctx.close(500)
    ctx.sleep(5 * GRACE)
    assert _removed(ctx) == [] and ctx.connection_of(b) == first
    assert ctx.send(heartbeat(b, 1), 501).error is ErrorCode.none
    ctx.close(first)
    ctx.sleep(5 * GRACE)
    assert _removed(ctx) == [] and ctx.connection_of(b) == 501
    ctx.close(501)
    ctx.sleep(GRACE)
    assert _removed(ctx) == [(b, "disconnect")]


def test_a_commit_binds_its_connection_like_a_heartbeat() -> None:
    ctx = GroupTestContext()
    member = _kafka_go_member(ctx, join_on=1, sync_on=2)
    error, result = ctx.service.validate_offset_commit("g", member, 1, None, ctx.now_ms, 3)
    ctx.apply(result)
    assert error is None and ctx.connection_of(member) == 3
    error, result = ctx.service.validate_offset_commit("g", member, 9, None, ctx.now_ms, 4)
    ctx.apply(result)
    assert error is ErrorCode.illegal_generation and ctx.connection_of(member) == 3
    ctx.close(4)
    ctx.sleep(5 * GRACE)
    assert _removed(ctx) == []
    ctx.close(3)
    ctx.sleep(GRACE)
    assert _removed(ctx) == [(member, "disconnect")]


def test_a_connection_that_carried_the_join_and_the_sync_is_the_members_own() -> None:
    """A client that keeps its coordinator connection (librdkafka, the Java client,
    kafka-python) and dies between its SyncGroup and its first heartbeat is still noticed."""
    ctx = GroupTestContext()
    member = ctx.join_dynamic(JoinGroupBuilder(), connection=5)  # KIP-394: two JoinGroups
    ctx.sleep(0)
    assert ctx.connection_of(member) == 5
    ctx.send(sync(member, 1, assignments={member: b"x"}), 5)
    ctx.close(5)
    ctx.sleep(GRACE)
    assert _removed(ctx) == [(member, "disconnect")]


def test_a_sync_on_the_joins_connection_binds_it_for_an_old_client() -> None:
    ctx = GroupTestContext()
    ctx.send(JoinGroupBuilder(version=3), 6)
    ctx.sleep(0)
    member = ctx.replies[ctx.ref_of_last()].member_id
    assert ctx.connection_of(member) is None  # a first JoinGroup may be kafka-go's only one
    ctx.send(sync(member, 1, assignments={member: b"x"}), 6)
    assert ctx.connection_of(member) == 6
