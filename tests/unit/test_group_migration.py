"""Online migration between classic and consumer groups, with members, through the test context:
the upgrade when a consumer-protocol member joins a classic group, classic members answered by
the consumer group, and the downgrade when the last consumer-protocol member leaves."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.member import MemberState
from coordinator.grouplog.codec import decode_record, encode_record
from coordinator.grouplog.records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupRecord,
    GroupMetadataRecord,
)
from tests.builders import heartbeat, leave, sync
from tests.consumer_helpers import beat, image, join, parts, topic_id
from tests.context import GroupTestContext
from tests.migration_helpers import classic_join, held, stable_classic_group

T = topic_id("t")


def context(partitions: int = 6, **config: object) -> GroupTestContext:
    ctx = GroupTestContext(consumer_config=ConsumerGroupConfig(**config))  # type: ignore[arg-type]
    ctx.service.consumer.set_topic_image(image({"t": partitions}))
    return ctx


def consumer_group(ctx: GroupTestContext, group_id: str = "g") -> ConsumerGroup:
    group = ctx.service.consumer.group(group_id)
    assert group is not None
    return group


def one_owner_each(ctx: GroupTestContext) -> None:
    seen: dict[int, str] = {}
    for m in consumer_group(ctx).members.values():
        for held_now in (m.assigned, m.pending_revocation):
            for p in held_now.get(T, ()):
                assert p not in seen, f"partition {p} owned by {seen[p]} and {m.member_id}"
                seen[p] = m.member_id


def upgraded(ctx: GroupTestContext) -> tuple[dict[str, set[int]], int]:
    """Two classic members on 6 partitions, then consumer-protocol member `n` joins."""
    share = stable_classic_group(ctx, 2, 6)
    generation = ctx.group("g").generation_id
    reply = ctx.send(join("n"))
    assert reply.error is ErrorCode.none, reply
    return share, generation


def rejoin(ctx: GroupTestContext, member: str, connection: int, **kw: object) -> set[int]:
    """An eager classic member rejoins (having given up everything) and syncs."""
    joined = ctx.send(classic_join(member=member, **kw), connection)  # type: ignore[arg-type]
    assert joined.error is ErrorCode.none, joined
    assert joined.leader == "" and joined.members == ()
    synced = ctx.send(sync(member, joined.generation_id, protocol_type="consumer",
                           protocol_name="range", version=5), connection)
    assert synced.error is ErrorCode.none, synced
    return held(synced)


def test_a_consumer_member_joining_converts_the_classic_group_with_its_members() -> None:
    ctx = context()
    share, generation = upgraded(ctx)
    assert ctx.service.group("g") is None
    group = consumer_group(ctx)
    assert group.group_epoch == generation + 1
    for member_id, partitions in share.items():
        member = group.members[member_id]
        assert member.classic is not None and member.classic.session_timeout_ms == 10_000
        assert member.member_epoch == generation and member.state is MemberState.STABLE
        assert set(member.assigned[T]) == partitions  # they keep what they had
    newcomer = group.members["n"]
    assert newcomer.assigned == {} and newcomer.state is MemberState.UNRELEASED_PARTITIONS
    one_owner_each(ctx)
    (converted,) = ctx.events_named("group_converted")
    assert (converted.direction, converted.from_type, converted.to_type, converted.member_count,
            converted.generation_id) == ("upgrade", "classic", "consumer", 2, generation)
    # As Kafka writes it: the classic tombstone first, then the consumer group's records.
    tombstone = next(i for i, r in enumerate(ctx.records)
                     if isinstance(r, GroupMetadataRecord) and r.value is None)
    assert all(isinstance(r, ConsumerGroupRecord) for r in ctx.records[tombstone + 1:])


def test_classic_members_rejoin_and_partitions_move_revoke_before_assign() -> None:
    ctx = context()
    share, generation = upgraded(ctx)
    a, b = sorted(share)
    for member, connection in ((a, 100), (b, 101)):
        answer = ctx.send(heartbeat(member, generation), connection)
        assert answer.error is ErrorCode.rebalance_in_progress
    got_a = rejoin(ctx, a, 100)
    one_owner_each(ctx)
    assert len(got_a) == 2 and got_a <= share[a]
    reply = ctx.send(beat("n", consumer_group(ctx).group_epoch, {}))
    assert len(parts(reply.assignment)) == 1  # only what a gave up so far
    got_b = rejoin(ctx, b, 101)
    one_owner_each(ctx)
    reply = ctx.send(beat("n", consumer_group(ctx).group_epoch, {"t": parts(reply.assignment)}))
    got_n = parts(reply.assignment)
    assert len(got_n) == 2 and got_a | got_b | got_n == set(range(6))
    assert consumer_group(ctx).state.value == "Stable"
    epoch = consumer_group(ctx).group_epoch
    assert ctx.send(heartbeat(a, epoch)).error is ErrorCode.none


def test_a_cooperative_classic_member_revokes_before_it_moves_on() -> None:
    ctx = context()
    share, generation = upgraded(ctx)
    a = sorted(share)[0]
    # Still owning everything (subscription v1 with owned partitions): it must revoke first.
    joined = ctx.send(classic_join(member=a, owned={"t": share[a]}, version=1), 100)
    assert joined.generation_id == generation
    member = consumer_group(ctx).members[a]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    synced = ctx.send(sync(a, generation, protocol_type="consumer", protocol_name="range",
                           version=5), 100)
    kept = held(synced)
    assert len(kept) == 2 and kept < share[a]
    assert ctx.send(heartbeat(a, generation)).error is ErrorCode.rebalance_in_progress
    joined = ctx.send(classic_join(member=a, owned={"t": kept}, version=1), 100)
    assert joined.generation_id == generation + 1
    one_owner_each(ctx)


def test_a_classic_member_that_does_not_rejoin_is_fenced_after_its_rebalance_timeout() -> None:
    ctx = context()
    share, generation = upgraded(ctx)
    a, b = sorted(share)
    assert ctx.send(heartbeat(a, generation)).error is ErrorCode.rebalance_in_progress
    rejoin(ctx, b, 101)
    for _ in range(7):  # a only heartbeats (30 s rebalance timeout), b and n carry on
        ctx.sleep(5_000)
        ctx.send(heartbeat(a, generation), 100)
        ctx.send(heartbeat(b, consumer_group(ctx).members[b].member_epoch), 101)
        ctx.send(beat("n", consumer_group(ctx).members["n"].member_epoch))
    removed = ctx.events_named("member_removed")
    assert [(e.member_id, e.cause.value) for e in removed] == [(a, "rebalance_timeout")]
    assert ctx.send(heartbeat(a, generation)).error is ErrorCode.unknown_member_id


def test_a_classic_member_session_is_its_own_session_timeout() -> None:
    ctx = context()
    share, _ = upgraded(ctx)
    for _ in range(3):
        ctx.sleep(4_000)
        ctx.send(beat("n", consumer_group(ctx).group_epoch))
    assert set(consumer_group(ctx).members) == {"n"}  # 10 s sessions, not the broker's 45 s
    assert {e.member_id for e in ctx.events_named("member_removed")} == set(share)


def test_offset_commits_of_classic_members_use_the_generation() -> None:
    ctx = context()
    share, generation = upgraded(ctx)
    a = sorted(share)[0]
    check = ctx.service.validate_offset_commit
    assert check("g", a, generation, None, ctx.now_ms, api_version=8)[0] is None
    assert check("g", a, generation + 1, None, ctx.now_ms)[0] is ErrorCode.illegal_generation
    assert check("g", "n", 0, None, ctx.now_ms, api_version=8)[0] is \
        ErrorCode.unsupported_version


def test_classic_requests_to_a_consumer_group_get_kafkas_errors() -> None:
    ctx = context()
    share, generation = upgraded(ctx)
    a = sorted(share)[0]
    other = classic_join(member=a)
    other.protocol_type = "connect"
    assert ctx.send(other).error is ErrorCode.inconsistent_group_protocol
    assert ctx.send(heartbeat(a, generation + 5)).error is ErrorCode.illegal_generation
    assert ctx.send(heartbeat("n", 1)).error is ErrorCode.unknown_member_id  # not classic
    assert ctx.send(sync("zz", generation)).error is ErrorCode.unknown_member_id
    answer = ctx.send(leave("zz", a))
    assert [m.error for m in answer.members] == [ErrorCode.unknown_member_id, ErrorCode.none]
    assert a not in consumer_group(ctx).members


def test_a_new_classic_member_can_join_a_consumer_group() -> None:
    ctx = context()
    ctx.send(join("n"))
    first = ctx.send(classic_join(), 7)
    assert first.error is ErrorCode.member_id_required
    got = rejoin(ctx, first.member_id, 7)
    assert got == set()  # all still owned by n
    reply = ctx.send(beat("n", 1, {"t": range(6)}))
    kept = parts(reply.assignment)
    assert len(kept) == 3
    ctx.send(beat("n", 1, {"t": kept}))
    assert ctx.send(heartbeat(first.member_id, consumer_group(ctx).group_epoch)).error is \
        ErrorCode.rebalance_in_progress
    got = rejoin(ctx, first.member_id, 7)
    assert got == set(range(6)) - kept


def test_no_upgrade_when_the_policy_does_not_allow_it() -> None:
    for policy in ("disabled", "downgrade"):
        ctx = context(migration_policy=policy)
        stable_classic_group(ctx, 2, 6)
        assert ctx.send(join("n")).error is ErrorCode.group_id_not_found
        assert ctx.service.group("g") is not None


def test_a_classic_group_of_another_protocol_type_is_not_upgraded() -> None:
    ctx = context()
    ctx.stable_group(1, protocol_type="connect")
    assert ctx.send(join("n")).error is ErrorCode.group_id_not_found


def test_the_last_consumer_member_leaving_downgrades_the_group() -> None:
    ctx = context()
    share, generation = upgraded(ctx)
    a, b = sorted(share)
    epoch = consumer_group(ctx).group_epoch
    reply = ctx.send(beat("n", -1))
    assert reply.error is ErrorCode.none
    assert ctx.service.consumer.group("g") is None
    classic = ctx.group("g")
    assert classic.state.value == "PreparingRebalance" and classic.generation_id == epoch
    (down,) = [e for e in ctx.events_named("group_converted") if e.direction == "downgrade"]
    assert (down.from_type, down.to_type, down.member_count) == ("consumer", "classic", 2)
    # Classic members still at the old epoch rejoin through ILLEGAL_GENERATION, as in Kafka.
    assert ctx.send(heartbeat(a, generation)).error is ErrorCode.illegal_generation
    assert ctx.records[-1].value is not None and isinstance(ctx.records[-1], GroupMetadataRecord)
    ctx.send(classic_join(member=a), 100)
    first = ctx.ref_of_last()
    ctx.send(classic_join(member=b), 101)
    ctx.sleep(0)
    answers = [ctx.reply(first), ctx.reply(ctx.ref_of_last())]
    assert all(x is not None and x.error is ErrorCode.none for x in answers), answers
    assert {x.generation_id for x in answers} == {epoch + 1}
    assert ctx.group("g").state.value == "CompletingRebalance"


def test_a_consumer_member_expiring_downgrades_the_group_too() -> None:
    ctx = context()
    share, generation = upgraded(ctx)
    a, b = sorted(share)
    rejoin(ctx, a, 100)
    rejoin(ctx, b, 101)
    for _ in range(12):  # the classic members heartbeat; n goes silent (45 s session)
        ctx.sleep(4_000)
        for member, connection in ((a, 100), (b, 101)):
            group = ctx.service.consumer.group("g")
            epoch = group.members[member].member_epoch if group else generation
            ctx.send(heartbeat(member, epoch), connection)
    assert ctx.service.consumer.group("g") is None
    assert ctx.group("g").state.value == "PreparingRebalance"


def test_no_downgrade_with_the_upgrade_policy() -> None:
    ctx = context(migration_policy="upgrade")
    upgraded(ctx)
    ctx.send(beat("n", -1))
    assert ctx.service.group("g") is None
    assert len(consumer_group(ctx).members) == 2


def test_replaying_the_log_rebuilds_the_upgraded_group() -> None:
    ctx = context()
    share, _ = upgraded(ctx)
    rejoin(ctx, sorted(share)[0], 100)
    fresh = context()
    for record in ctx.records:
        key, value = encode_record(record)
        decoded = decode_record(key, value)
        assert decoded == record  # the classic member metadata survives the codec
        if isinstance(decoded, GroupMetadataRecord):
            fresh.apply(fresh.service.replay(decoded, 0))
        elif isinstance(decoded, ConsumerGroupRecord):
            fresh.apply(fresh.service.consumer.replay(decoded, 0))
    assert fresh.service.group("g") is None
    live, replayed = consumer_group(ctx), consumer_group(fresh)
    assert live.members == replayed.members
    assert (live.group_epoch, live.assignment_epoch, live.target) == (
        replayed.group_epoch, replayed.assignment_epoch, replayed.target)
    assert any(isinstance(r.key, ConsumerGroupMemberMetadataKey)
               and isinstance(r.value, ConsumerGroupMemberMetadataValue)
               and r.value.classic_member_metadata is not None
               for r in ctx.records if isinstance(r, ConsumerGroupRecord))


def test_a_failed_upgrade_write_leaves_the_classic_group() -> None:
    ctx = context()
    stable_classic_group(ctx, 2, 6)
    generation = ctx.group("g").generation_id
    ctx.fail_next_writes()
    assert ctx.send(join("n")).error is ErrorCode.coordinator_not_available
    assert ctx.service.consumer.group("g") is None
    group = ctx.group("g")
    assert group.generation_id == generation and len(group.members) == 2


def test_a_join_the_converted_group_would_refuse_does_not_convert_it() -> None:
    ctx = context(max_size=2)
    stable_classic_group(ctx, 2, 6)
    assert ctx.send(join("n")).error is ErrorCode.group_max_size_reached
    assert ctx.service.consumer.group("g") is None and ctx.service.group("g") is not None
    assert not ctx.events_named("group_converted")


def test_a_static_classic_member_restarting_takes_its_own_place_without_a_new_epoch() -> None:
    ctx = context()
    ctx.send(join("n"))
    first = ctx.send(classic_join(instance_id="i-1"), 7)
    rejoin(ctx, first.member_id, 7, instance_id="i-1")
    kept = parts(ctx.send(beat("n", 1, {"t": range(6)})).assignment)
    ctx.send(beat("n", 1, {"t": kept}))
    group = consumer_group(ctx)
    ctx.send(heartbeat(first.member_id, group.members[first.member_id].member_epoch,
                       instance_id="i-1"), 7)
    got = rejoin(ctx, first.member_id, 7, instance_id="i-1")
    assert got == set(range(6)) - kept
    epoch = group.group_epoch
    again = ctx.send(classic_join(instance_id="i-1"), 8)  # a new process, a new member id
    assert again.error is ErrorCode.none and again.member_id != first.member_id
    synced = ctx.send(sync(again.member_id, again.generation_id, instance_id="i-1"), 8)
    assert held(synced) == got
    assert consumer_group(ctx).group_epoch == epoch
    assert first.member_id not in consumer_group(ctx).members
    (replaced,) = ctx.events_named("static_member_replaced")
    assert replaced.old_member_id == first.member_id and not replaced.rebalance
    one_owner_each(ctx)
