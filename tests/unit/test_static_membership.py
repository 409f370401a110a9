"""KIP-345 static members: replacement without rebalance, fencing, KAFKA-9801, KIP-814."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from tests.builders import JoinGroupBuilder, heartbeat, protocols, sync
from tests.context import GroupTestContext


def static_group(ctx: GroupTestContext, *instances: str, session_ms: int = 10_000) -> list[str]:
    refs = []
    for i, inst in enumerate(instances):
        b = JoinGroupBuilder(client_id=inst, session_ms=session_ms).group_instance_id(inst)
        ctx.send(b, connection=10 + i)
        refs.append(ctx.ref_of_last())
    ctx.sleep(0)
    ids = [ctx.reply(r).member_id for r in refs]
    leader = ctx.reply(refs[0]).leader
    ctx.send(sync(leader, 1, assignments={m: m.encode() for m in ids}))
    for m in ids:
        if m != leader:
            ctx.send(sync(m, 1))
    assert ctx.group().state is GroupState.STABLE
    return ids


def test_static_member_gets_id_from_instance_id_in_one_step() -> None:
    ctx = GroupTestContext()
    ids = static_group(ctx, "i1")
    assert ids == ["i1-1"]


def test_rejoin_with_empty_id_replaces_without_rebalance() -> None:
    ctx = GroupTestContext()
    old_leader, old_follower = static_group(ctx, "i1", "i2")
    out = ctx.send(JoinGroupBuilder(client_id="i2").group_instance_id("i2"), connection=5)
    assert out.error is ErrorCode.none
    assert out.member_id != old_follower and out.generation_id == 1
    assert out.leader == old_leader
    assert ctx.group().state is GroupState.STABLE
    # It gets its previous assignment.
    assert ctx.send(sync(out.member_id, 1, instance_id="i2")).assignment == old_follower.encode()
    # The new id is persisted.
    members = [m.member_id for m in ctx.service.durable_view()["g"].members]
    assert out.member_id in members and old_follower not in members


def test_old_member_id_is_fenced() -> None:
    ctx = GroupTestContext()
    _, old = static_group(ctx, "i1", "i2")
    ctx.send(JoinGroupBuilder(client_id="i2").group_instance_id("i2"), connection=5)
    assert ctx.send(heartbeat(old, 1, instance_id="i2")).error is ErrorCode.fenced_instance_id
    assert ctx.send(sync(old, 1, instance_id="i2")).error is ErrorCode.fenced_instance_id


def test_replaced_leader_before_v9_is_told_the_old_leader_id() -> None:
    ctx = GroupTestContext()
    old_leader, _ = static_group(ctx, "i1", "i2")
    out = ctx.send(JoinGroupBuilder(client_id="i1").group_instance_id("i1").api_version(8))
    assert out.leader == old_leader != out.member_id
    assert not out.skip_assignment and out.members == ()
    assert ctx.group().leader_id == out.member_id


def test_replaced_leader_v9_skips_assignment() -> None:
    ctx = GroupTestContext()
    static_group(ctx, "i1", "i2")
    out = ctx.send(JoinGroupBuilder(client_id="i1").group_instance_id("i1").api_version(9))
    assert out.skip_assignment and out.leader == out.member_id
    assert len(out.members) == 2


def test_changed_protocol_triggers_rebalance() -> None:
    ctx = GroupTestContext()
    static_group(ctx, "i1")
    out = ctx.send(
        JoinGroupBuilder(client_id="i1")
        .group_instance_id("i1")
        .with_protocols(*protocols("roundrobin", "range"))
    )
    # A single member: the rebalance completes at once with the new protocol.
    assert out is not None and out.generation_id == 2
    assert ctx.group().protocol_name == "roundrobin"


def test_rejoin_during_completing_rebalance_rebalances() -> None:
    ctx = GroupTestContext()
    ctx.send(JoinGroupBuilder(client_id="i1").group_instance_id("i1"), connection=1)
    ctx.send(JoinGroupBuilder(client_id="i2").group_instance_id("i2"), connection=2)
    ctx.sleep(0)
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    ctx.send(sync("i2-2", 1, instance_id="i2"), connection=2)
    parked = ctx.ref_of_last()
    ctx.send(JoinGroupBuilder(client_id="i2").group_instance_id("i2"), connection=3)
    assert ctx.reply(parked).error is ErrorCode.fenced_instance_id
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_static_member_that_does_not_rejoin_stays_until_session_expiry() -> None:
    ctx = GroupTestContext()
    a, b = static_group(ctx, "i1", "i2", session_ms=60_000)
    rejoin = JoinGroupBuilder(client_id="i1", session_ms=60_000).group_instance_id("i1")
    ctx.send(rejoin.member_id(a))
    ctx.sleep(30_000)  # the rebalance timeout: b is static, it is not removed
    assert b in ctx.group().members
    # Kafka moves on with the static member still in (it gets no JoinGroup answer) ...
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    assert ctx.group().generation_id == 2
    ctx.send(sync(a, 2, instance_id="i1"))
    # ... and removes it when it does not sync within the rebalance timeout.
    ctx.sleep(30_000)
    assert b not in ctx.group().members


def test_pending_member_id_with_instance_id_is_invalid() -> None:
    ctx = GroupTestContext()
    pending = ctx.send(JoinGroupBuilder()).member_id
    out = ctx.send(JoinGroupBuilder().member_id(pending).group_instance_id("i9"))
    assert out.error is ErrorCode.invalid_request
