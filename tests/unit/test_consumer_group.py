"""The consumer group (KIP-848) through the test context: joins, handover, leaves, errors."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.member import MemberState
from tests.builders import JoinGroupBuilder
from tests.consumer_helpers import beat, image, join, owned, parts, topic_id
from tests.context import GroupTestContext

T = topic_id("t")


def context(partitions: int = 3, **config: object) -> GroupTestContext:
    ctx = GroupTestContext(consumer_config=ConsumerGroupConfig(**config))  # type: ignore[arg-type]
    ctx.service.consumer.set_topic_image(image({"t": partitions}))
    return ctx


def owners(ctx: GroupTestContext, group: str = "g") -> dict[int, list[str]]:
    """partition -> members holding it (assigned or still revoking)."""
    cg = ctx.service.consumer.group(group)
    assert cg is not None
    out: dict[int, list[str]] = {}
    for m in cg.members.values():
        for held in (m.assigned, m.pending_revocation):
            for p in held.get(T, ()):
                out.setdefault(p, []).append(m.member_id)
    return out


def test_first_member_gets_every_partition_at_epoch_one() -> None:
    ctx = context()
    reply = ctx.send(join("a"))
    assert reply.error is ErrorCode.none
    assert reply.member_epoch == 1
    assert parts(reply.assignment) == {0, 1, 2}
    assert reply.heartbeat_interval_ms == 5_000
    group = ctx.service.consumer.group("g")
    assert group is not None and group.state.value == "Stable"
    assert [e.event for e in ctx.events] == [
        "member_added", "target_assignment_computed", "member_reconciled"]


def test_second_member_waits_until_the_first_revokes() -> None:
    ctx = context(partitions=4)
    ctx.send(join("a"))
    b = ctx.send(join("b"))
    assert b.member_epoch == 2 and parts(b.assignment) == set()  # all still owned by a
    a = ctx.send(beat("a", 1, {"t": [0, 1, 2, 3]}))
    assert a.member_epoch == 1  # must revoke first, stays at its epoch
    kept = parts(a.assignment)
    assert len(kept) == 2
    assert all(len(holders) == 1 for holders in owners(ctx).values())
    # b still cannot have them: a has not acknowledged.
    assert parts(ctx.send(beat("b", 2, {})).assignment) == set()
    a = ctx.send(beat("a", 1, {"t": kept}))
    assert a.member_epoch == 2
    b = ctx.send(beat("b", 2, {}))
    assert parts(b.assignment) == {0, 1, 2, 3} - kept
    assert ctx.service.consumer.group("g").state.value == "Stable"  # type: ignore[union-attr]
    assert all(len(holders) == 1 for holders in owners(ctx).values())


def test_session_expiry_fences_and_bumps_the_epoch() -> None:
    ctx = context()
    ctx.send(join("a"))
    ctx.send(join("b"))
    ctx.sleep(40_000)
    ctx.send(beat("a", 1, {"t": [0, 1, 2]}))
    ctx.sleep(10_000)  # b never heartbeats again: 45 s after its join it is fenced
    group = ctx.service.consumer.group("g")
    assert group is not None and set(group.members) == {"a"}
    removed = ctx.events_named("member_removed")
    assert [(e.member_id, e.cause.value) for e in removed] == [("b", "session_expiry")]
    assert group.group_epoch == 3


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    ctx = context(partitions=2)
    ctx.send(join("a", rebalance_timeout_ms=1_000))
    ctx.send(join("b"))
    ctx.send(beat("a", 1, {"t": [0, 1]}))  # told to revoke one
    for _ in range(3):
        ctx.sleep(500)
        ctx.send(beat("a", 1, {"t": [0, 1]}))  # keeps claiming both
    assert [e.cause.value for e in ctx.events_named("member_removed")] == ["rebalance_timeout"]
    reply = ctx.send(beat("a", 1, {"t": [0, 1]}))
    assert reply.error is ErrorCode.unknown_member_id


def test_leave_with_epoch_minus_one() -> None:
    ctx = context()
    ctx.send(join("a"))
    reply = ctx.send(beat("a", -1))
    assert reply.error is ErrorCode.none and reply.member_epoch == -1
    group = ctx.service.consumer.group("g")
    assert group is not None and not group.members and group.state.value == "Empty"
    assert ctx.events_named("group_empty")


def test_static_member_is_replaced_without_a_rebalance() -> None:
    ctx = context()
    ctx.send(join("a", instance_id="i1"))
    ctx.send(join("b", instance_id="i2"))
    ctx.send(beat("a", 1, {"t": [0, 1, 2]}))
    ctx.send(beat("a", 1, {"t": [0, 1]}))
    b = ctx.send(beat("b", 2, {}))
    group = ctx.service.consumer.group("g")
    assert group is not None and group.state.value == "Stable"
    epoch = group.group_epoch
    left = ctx.send(beat("b", -2, instance_id="i2"))
    assert left.member_epoch == -2
    # A new incarnation of i2 joins while i2 is released: it inherits the assignment.
    again = ctx.send(join("b2", instance_id="i2"))
    assert again.error is ErrorCode.none
    assert parts(again.assignment) == parts(b.assignment)
    assert group.group_epoch == epoch
    assert [e.rebalance for e in ctx.events_named("static_member_replaced")] == [False]
    # A third one while i2 is held: UNRELEASED_INSTANCE_ID.
    assert ctx.send(join("b3", instance_id="i2")).error is ErrorCode.unreleased_instance_id


def test_error_paths_leave_the_group_intact() -> None:
    ctx = context()
    ctx.send(join("a"))
    errors = [
        ctx.send(beat("a", -3)).error,
        ctx.send(join("x", server_assignor="sticky")).error,
        ctx.send(join("x", subscribed_topic_regex="(")).error,
        ctx.send(beat("a", 7, {"t": [0, 1, 2]})).error,
        ctx.send(beat("nobody", 1, {})).error,
        ctx.send(join("x", owned=None)).error,
        ctx.send(join("x", rebalance_timeout_ms=-1)).error,
        ctx.send(beat("a", 1, {"t": [0]}, group="missing")).error,
        ctx.send(join("x", topics=("t" * 40_000,))).error,
    ]
    assert errors == [
        ErrorCode.invalid_request, ErrorCode.unsupported_assignor,
        ErrorCode.invalid_regular_expression, ErrorCode.fenced_member_epoch,
        ErrorCode.unknown_member_id, ErrorCode.invalid_request, ErrorCode.invalid_request,
        ErrorCode.group_id_not_found, ErrorCode.invalid_request,
    ]
    ok = ctx.send(beat("a", 1, {"t": [0, 1, 2]}))
    assert ok.error is ErrorCode.none and ok.member_epoch == 1


def test_previous_epoch_with_a_subset_is_accepted() -> None:
    ctx = context(partitions=2)
    ctx.send(join("a"))
    ctx.send(join("b"))
    ctx.send(beat("a", 1, {"t": [0, 1]}))
    ctx.send(beat("a", 1, {"t": [0]}))  # now epoch 2; suppose that response was lost
    reply = ctx.send(beat("a", 1, {"t": [0]}))
    assert reply.error is ErrorCode.none and reply.member_epoch == 2


def test_max_size() -> None:
    ctx = context(max_size=1)
    ctx.send(join("a"))
    assert ctx.send(join("b")).error is ErrorCode.group_max_size_reached


def test_new_partitions_trigger_a_new_target() -> None:
    ctx = context(partitions=2)
    ctx.send(join("a"))
    ctx.service.consumer.set_topic_image(image({"t": 4}, version=2))
    reply = ctx.send(beat("a", 1, {"t": [0, 1]}))
    assert reply.member_epoch == 2 and parts(reply.assignment) == {0, 1, 2, 3}


def test_regex_subscription_picks_up_a_new_topic() -> None:
    ctx = context()
    reply = ctx.send(join("a", topics=(), subscribed_topic_regex="t.*"))
    assert parts(reply.assignment) == {0, 1, 2}
    ctx.service.consumer.set_topic_image(image({"t": 3, "tx": 1, "other": 1}, version=2))
    reply = ctx.send(beat("a", 1, {"t": [0, 1, 2]}))
    assert parts(reply.assignment, "tx") == {0}
    assert parts(reply.assignment, "other") == set()


def test_classic_and_consumer_groups_share_one_id_space() -> None:
    ctx = context()
    ctx.send(join("a", group="cg"))
    other_type = JoinGroupBuilder(group="cg", protocol_type="connect")
    assert ctx.send(other_type).error is ErrorCode.inconsistent_group_protocol
    ctx.stable_group(1, group="classic")
    assert ctx.send(join("x", group="classic")).error is ErrorCode.group_id_not_found


def test_an_empty_classic_group_is_upgraded() -> None:
    ctx = context()
    (member,) = ctx.stable_group(1, group="old")
    from coordinator.group import commands as c

    ctx.send(c.LeaveGroup(ref=ctx.ref_of_last(), api_version=3, group_id="old",
                          members=(c.LeaveMember(member_id=member),)))
    assert ctx.group("old").state.value == "Empty"
    reply = ctx.send(join("a", group="old"))
    assert reply.error is ErrorCode.none
    assert ctx.service.group("old") is None
    assert ctx.service.consumer.group("old") is not None
    assert any(e.event == "group_dead" and e.reason == "converted to a consumer group"
               for e in ctx.events)


def test_offset_commit_checks_member_epochs() -> None:
    ctx = context()
    ctx.send(join("a"))
    consumer = ctx.service.consumer
    assert consumer.validate_offset_commit("g", "a", 1, 9) is None
    assert consumer.validate_offset_commit("g", "a", 0, 9) is ErrorCode.stale_member_epoch
    assert consumer.validate_offset_commit("g", "zz", 1, 9) is ErrorCode.unknown_member_id
    assert consumer.validate_offset_commit("g", "a", 1, 8) is ErrorCode.unsupported_version
    assert consumer.validate_offset_fetch("g", "a", 0) is ErrorCode.stale_member_epoch
    assert consumer.validate_offset_fetch("g", None, -1) is None


def test_replaying_the_records_rebuilds_the_same_groups() -> None:
    ctx = context(partitions=5)
    ctx.send(join("a", instance_id="s"))
    ctx.send(join("b"))
    ctx.send(beat("a", 1, {"t": range(5)}))
    ctx.send(join("c"))
    ctx.send(beat("b", 2, {}))
    fresh = context(partitions=5)
    for record in ctx.records:
        fresh.service.consumer.replay(record, 0)  # type: ignore[arg-type]
    live = ctx.service.consumer.group("g")
    rebuilt = fresh.service.consumer.group("g")
    assert live is not None and rebuilt is not None
    assert rebuilt.members == live.members
    assert rebuilt.target == live.target
    assert rebuilt.owners == live.owners
    assert (rebuilt.group_epoch, rebuilt.assignment_epoch) == (
        live.group_epoch, live.assignment_epoch)
    assert any(m.state is MemberState.UNREVOKED_PARTITIONS for m in rebuilt.members.values())
    assert owned({"t": [0]})  # helper sanity


def test_an_empty_consumer_group_gives_way_to_a_classic_join() -> None:
    ctx = context()
    ctx.send(join("a", group="cg"))
    ctx.send(beat("a", -1, group="cg"))
    member = ctx.join_dynamic(JoinGroupBuilder(group="cg"))
    assert member
    assert ctx.service.consumer.group("cg") is None
    assert ctx.service.group("cg") is not None
    assert any(e.event == "group_dead" and e.reason == "converted to a classic group"
               for e in ctx.events)


def test_a_deleted_topic_is_revoked() -> None:
    ctx = context()
    ctx.service.consumer.set_topic_image(image({"t": 3, "u": 2}, version=2))
    reply = ctx.send(join("a", topics=("t", "u")))
    assert parts(reply.assignment, "u") == {0, 1}
    ctx.service.consumer.set_topic_image(image({"t": 3}, version=3))
    reply = ctx.send(beat("a", 1, {"t": [0, 1, 2], "u": [0, 1]}))
    assert parts(reply.assignment, "u") == set() and parts(reply.assignment) == {0, 1, 2}


def test_claiming_partitions_of_another_member_changes_nothing() -> None:
    ctx = context(partitions=4)
    ctx.send(join("a"))
    ctx.send(join("b"))
    ctx.send(beat("a", 1, {"t": [0, 1, 2, 3]}))
    a = ctx.send(beat("a", 1, {"t": [0, 1]}))
    b = ctx.send(beat("b", 2, {}))
    assert a.member_epoch == b.member_epoch == 2
    before = owners(ctx)
    # a claims b's partitions too: Kafka ignores what a member says it owns beyond its own.
    again = ctx.send(beat("a", 2, {"t": [0, 1, 2, 3]}))
    assert again.error is ErrorCode.none and again.assignment is None
    assert owners(ctx) == before
