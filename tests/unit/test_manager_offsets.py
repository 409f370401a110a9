"""The group-side checks of OffsetCommit (SPEC §10), group deletion, connections, replay."""

from __future__ import annotations

from dataclasses import replace

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from coordinator.group.config import GroupConfig
from coordinator.group.offset_commands import OffsetCommit
from coordinator.group.result import RequestRef
from coordinator.group.service import GroupCoordinatorService
from coordinator.grouplog.records import GroupMetadataRecord
from tests.builders import JoinGroupBuilder, describe, heartbeat, leave, list_groups, sync
from tests.context import GroupTestContext


def commit(ctx: GroupTestContext, member: str, generation: int, group: str = "g") -> object:
    error, result = ctx.service.validate_offset_commit(group, member, generation, None, ctx.now_ms)
    ctx.apply(result)
    return error


def test_standalone_commit_creates_an_empty_group() -> None:
    ctx = GroupTestContext()
    assert commit(ctx, "", -1, group="solo") is None
    assert ctx.group("solo").state is GroupState.EMPTY
    assert commit(ctx, "", -1, group="solo") is None


def test_commit_to_unknown_group_with_generation_is_illegal() -> None:
    ctx = GroupTestContext()
    assert commit(ctx, "m", 3, group="nope") is ErrorCode.illegal_generation


def test_member_commit_checks() -> None:
    ctx = GroupTestContext()
    a, _ = ctx.stable_group(2)
    assert commit(ctx, a, 1) is None
    assert commit(ctx, "ghost", 1) is ErrorCode.unknown_member_id
    assert commit(ctx, a, 0) is ErrorCode.illegal_generation
    assert commit(ctx, "", -1) is ErrorCode.unknown_member_id


def test_commit_during_preparing_rebalance_is_accepted_and_resets_session() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2, session_ms=10_000)
    ctx.send(JoinGroupBuilder().member_id(a))
    ctx.sleep(9_000)
    assert commit(ctx, b, 1) is None
    ctx.sleep(9_000)
    assert b in ctx.group().members


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    ctx = GroupTestContext()
    a = ctx.join_dynamic()
    ctx.sleep(0)
    assert commit(ctx, a, 1) is ErrorCode.rebalance_in_progress


def test_delete_group() -> None:
    ctx = GroupTestContext()
    a = ctx.stable_group(1)[0]
    error, _ = ctx.service.delete_group("g", ctx.now_ms)
    assert error is ErrorCode.non_empty_group
    ctx.send(leave(a))
    error, result = ctx.service.delete_group("g", ctx.now_ms)
    ctx.apply(result)
    assert error is None and ctx.service.group("g") is None
    assert "g" not in ctx.service.durable_view()
    assert isinstance(result.records[-1], GroupMetadataRecord) and result.records[-1].value is None


def test_no_reply_on_a_closed_connection_and_member_stays() -> None:
    ctx = GroupTestContext()
    leader, follower = ctx.stable_group(2, session_ms=10_000)
    ctx.send(JoinGroupBuilder().member_id(leader), connection=7)
    ctx.close(7)  # the context asserts no reply reaches connection 7
    ctx.send(JoinGroupBuilder(client_id="c1").member_id(follower), connection=8)
    assert ctx.reply(ctx.ref_of_last()).generation_id == 2
    assert leader in ctx.group().members
    ctx.sleep(10_000)  # nobody answers for the leader: it expires
    assert leader not in ctx.group().members


def test_replay_restores_stable_groups_with_fresh_sessions() -> None:
    ctx = GroupTestContext()
    members = ctx.stable_group(3)
    other = GroupTestContext()
    for record in ctx.records:
        if isinstance(record, GroupMetadataRecord):
            other.apply(other.service.replay(record, other.now_ms))
    assert other.service.durable_view() == ctx.service.durable_view()
    group = other.group()
    assert group.state is GroupState.STABLE and group.generation_id == 1
    assert list(group.members) == members
    assert other.send(sync(members[1], 1)).assignment == members[1].encode()
    assert other.send(heartbeat(members[0], 1)).error is ErrorCode.none
    other.sleep(10_000)
    assert other.group().state is GroupState.EMPTY  # nobody heartbeat after the restart


def test_describe_and_list() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2)
    ctx.send(JoinGroupBuilder(group="h"))
    described = ctx.send(describe("g", "h", "missing")).groups
    assert described[0].state == "Stable" and described[0].protocol_data == "range"
    assert [m.assignment for m in described[0].members] == [a.encode(), b.encode()]
    assert described[1].state == "Empty" and described[1].members == ()
    assert described[2].state == "Dead" and described[2].error is ErrorCode.none
    v6 = ctx.send(describe("missing", version=6)).groups[0]
    assert v6.error is ErrorCode.group_id_not_found
    listed = ctx.send(list_groups(states=frozenset({"stable"}))).groups
    assert [g.group_id for g in listed] == ["g"]
    # Kafka trims each state as it lowers its case.
    padded = ctx.send(list_groups(states=frozenset({" Stable", "empty "}))).groups
    assert sorted(g.group_id for g in padded) == ["g", "h"]
    assert ctx.send(list_groups(types=frozenset({"consumer"}))).groups == ()
    # The operations are filled in for every group answered without an error, a Dead one too.
    with_operations = replace(describe("g", "missing"), include_authorized_operations=True)
    assert {d.authorized_operations for d in ctx.send(with_operations).groups} == {328}
    assert len(ctx.send(list_groups()).groups) == 2


def test_new_member_id_is_injected() -> None:
    seen: list[str] = []

    def ids(prefix: str) -> str:
        seen.append(prefix)
        return prefix + "-fixed"

    service = GroupCoordinatorService(GroupConfig(), ids)
    cmd = JoinGroupBuilder(client_id="cid").build()
    result = service.handle(cmd, 0)
    assert result.replies[0].outcome.member_id == "cid-fixed" and seen == ["cid"]


def _known(topic: str, partition: int) -> bool:
    return topic == "t" and partition < 2


def _offset_commit(ctx: GroupTestContext, group: str, generation: int, member: str,
                   topics: tuple[tuple[str, tuple[int, ...]], ...]) -> list[object]:
    ref = RequestRef(1, 1_000_000 + len(ctx.sent))
    command = OffsetCommit(ref=ref, group_id=group, generation_id=generation, member_id=member,
                           topics=tuple((t, tuple((p, 5, -1, "") for p in ps)) for t, ps in topics))
    ctx.sent[ref] = command  # type: ignore[assignment]
    ctx.apply(ctx.service.offset_commit(command, 8, ctx.now_ms, _known, pending=False))
    return list(ctx.reply(ref).topics)


def test_commit_to_unknown_partitions_only_neither_asks_nor_creates_the_group() -> None:
    # Kafka answers unknown topics before the coordinator sees the request
    # (KafkaApis.handleOffsetCommitRequest): no group is created, none refuses.
    ctx = GroupTestContext()
    unknown = ErrorCode.unknown_topic_or_partition
    assert _offset_commit(ctx, "solo", -1, "", (("nope", (0,)), ("t", (7,)))) == [
        ("nope", ((0, unknown),)), ("t", ((7, unknown),))]
    assert ctx.service.group("solo") is None
    ctx.stable_group(1)
    assert _offset_commit(ctx, "g", 1, "ghost", (("nope", (0,)),)) == [("nope", ((0, unknown),))]


def test_group_refusal_keeps_unknown_partitions_unknown() -> None:
    ctx = GroupTestContext()
    a = ctx.stable_group(1)[0]
    assert _offset_commit(ctx, "g", 4, a, (("t", (0, 5)), ("nope", (1,)))) == [
        ("t", ((0, ErrorCode.illegal_generation), (5, ErrorCode.unknown_topic_or_partition))),
        ("nope", ((1, ErrorCode.unknown_topic_or_partition),))]
    assert _offset_commit(ctx, "g", 1, a, (("t", (0, 5)),)) == [
        ("t", ((0, ErrorCode.none), (5, ErrorCode.unknown_topic_or_partition)))]
