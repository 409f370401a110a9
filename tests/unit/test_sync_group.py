"""SyncGroup: leader assignment, parked followers, errors, pending-sync expiry."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from tests.builders import JoinGroupBuilder, heartbeat, sync
from tests.context import GroupTestContext


def joined(
    ctx: GroupTestContext, n: int, *, session_ms: int = 10_000, rebalance_ms: int = 30_000
) -> list[str]:
    ids = [
        ctx.join_dynamic(
            JoinGroupBuilder(client_id=f"c{i}", session_ms=session_ms, rebalance_ms=rebalance_ms),
            10 + i,
        )
        for i in range(n)
    ]
    ctx.sleep(0)
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    return ids


def test_follower_waits_for_the_leader_then_gets_its_assignment() -> None:
    ctx = GroupTestContext()
    leader, follower = joined(ctx, 2)
    assert ctx.send(sync(follower, 1), connection=2) is None
    parked = ctx.ref_of_last()
    out = ctx.send(sync(leader, 1, assignments={leader: b"L", follower: b"F"}))
    assert out.assignment == b"L" and out.protocol_name == "range"
    assert ctx.reply(parked).assignment == b"F"
    assert ctx.group().state is GroupState.STABLE


def test_leader_assignment_is_persisted_with_members() -> None:
    ctx = GroupTestContext()
    leader, follower = joined(ctx, 2)
    ctx.send(sync(leader, 1, assignments={leader: b"L"}))
    value = ctx.service.durable_view()["g"]
    assert value.generation == 1 and value.leader == leader and value.protocol == "range"
    assert [(m.member_id, m.assignment) for m in value.members] == [(leader, b"L"), (follower, b"")]
    assert ctx.events_named("assignment_received")[0].missing_assignments == 1


def test_follower_after_stable_gets_stored_assignment() -> None:
    ctx = GroupTestContext()
    leader, follower = joined(ctx, 2)
    ctx.send(sync(leader, 1, assignments={leader: b"L", follower: b"F"}))
    assert ctx.send(sync(follower, 1)).assignment == b"F"


def test_unknown_member_and_wrong_generation() -> None:
    ctx = GroupTestContext()
    leader, _ = joined(ctx, 2)
    assert ctx.send(sync("ghost", 1)).error is ErrorCode.unknown_member_id
    assert ctx.send(sync(leader, 7)).error is ErrorCode.illegal_generation
    assert ctx.send(sync(leader, 1, group="nope")).error is ErrorCode.unknown_member_id


def test_v5_requires_matching_protocol_type_and_name() -> None:
    ctx = GroupTestContext()
    leader, _ = joined(ctx, 2)
    missing = ctx.send(sync(leader, 1, version=5))
    assert missing.error is ErrorCode.inconsistent_group_protocol
    wrong = ctx.send(sync(leader, 1, version=5, protocol_type="consumer", protocol_name="x"))
    assert wrong.error is ErrorCode.inconsistent_group_protocol
    ok = ctx.send(sync(leader, 1, version=5, protocol_type="consumer", protocol_name="range"))
    assert ok.error is ErrorCode.none


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2)
    ctx.send(JoinGroupBuilder().member_id(a))
    assert ctx.send(sync(b, 1)).error is ErrorCode.rebalance_in_progress


def test_parked_sync_is_told_to_rejoin_when_a_rebalance_starts() -> None:
    ctx = GroupTestContext()
    _, follower = joined(ctx, 2)
    ctx.send(sync(follower, 1), connection=2)
    parked = ctx.ref_of_last()
    ctx.send(JoinGroupBuilder(client_id="new").api_version(3), connection=3)
    assert ctx.reply(parked).error is ErrorCode.rebalance_in_progress
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    ctx = GroupTestContext()
    leader, follower = joined(ctx, 2, rebalance_ms=15_000, session_ms=60_000)
    ctx.send(sync(leader, 1, assignments={leader: b"L", follower: b"F"}))
    ctx.sleep(14_999)
    assert follower in ctx.group().members
    ctx.sleep(1)
    assert follower not in ctx.group().members
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_sync_timer_is_cancelled_once_everyone_synced() -> None:
    ctx = GroupTestContext()
    leader, follower = joined(ctx, 2)
    ctx.send(sync(follower, 1))
    ctx.send(sync(leader, 1))
    assert ("sync", "g") not in ctx.wheel


def test_session_restarts_when_the_assignment_is_propagated() -> None:
    ctx = GroupTestContext()
    leader, follower = joined(ctx, 2, session_ms=10_000)
    ctx.sleep(9_000)
    ctx.send(sync(follower, 1))
    ctx.send(heartbeat(leader, 1))
    ctx.sleep(5_000)  # the follower's session would have expired, but it is parked
    ctx.send(sync(leader, 1))
    ctx.sleep(9_999)
    assert follower in ctx.group().members
