"""The offset APIs' group decisions in the pure core (`coordinator/group/offset_decisions.py`)."""

from __future__ import annotations

import copy

from kio.schema.errors import ErrorCode

from coordinator.group import offset_commands as oc
from coordinator.group.offset_decisions import GroupOffsets
from coordinator.group.offsets import OffsetStore, OffsetStoreConfig
from coordinator.group.result import APPEND_FAILED, RequestRef
from coordinator.grouplog.records import GroupMetadataRecord, OffsetCommitRecord
from tests.bench.members import subscription
from tests.builders import JoinGroupBuilder, leave, protocols
from tests.consumer_helpers import image, join
from tests.context import GroupTestContext
from tests.unit.test_heartbeat import _scenarios

REF = RequestRef(1, 1)


def core_with_standalone_offsets() -> tuple[GroupTestContext, GroupOffsets]:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    decision = core.commit(
        oc.OffsetCommit(ref=REF, group_id="solo", topics=(("t", ((0, 5, -1, ""),)),)),
        8, ctx.now_ms, lambda topic, partition: True)
    assert decision.error is None and len(decision.records) == 1
    core.offsets.apply_all(decision.records)
    return ctx, core


def test_a_commit_to_an_unknown_group_with_a_generation_is_refused_by_version() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    cmd = oc.OffsetCommit(ref=REF, group_id="nobody", generation_id=3, member_id="m",
                          topics=(("t", ((0, 1, -1, ""),)),))
    exists = lambda topic, partition: True  # noqa: E731
    assert core.commit(cmd, 8, 0, exists).error is ErrorCode.illegal_generation
    assert core.commit(cmd, 9, 0, exists).error is ErrorCode.group_id_not_found


def test_offsets_of_a_subscribed_topic_are_kept() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    builder = JoinGroupBuilder(group="c").with_protocols(
        *protocols("range", metadata=subscription(["t"])))
    ctx.join_dynamic(builder, connection=9)
    ctx.sleep(0)
    assert core.subscriptions("c") == {"t"}
    outcome, result = core.delete_offsets(
        oc.OffsetDelete(ref=REF, group_id="c", topics=(("t", (0,)),)), lambda g: None)
    assert outcome.topics[0][1][0][1] is ErrorCode.group_subscribed_to_topic  # type: ignore[index]
    assert result.records == []


def test_deleting_a_standalone_consumers_group_deletes_its_offsets() -> None:
    ctx, core = core_with_standalone_offsets()
    outcome, result = core.delete_groups(["solo", "ghost"], ctx.now_ms, lambda g: None)
    assert outcome.results == (("solo", ErrorCode.none), ("ghost", ErrorCode.group_id_not_found))
    kinds = sorted(type(r).__name__ for r in result.records)
    assert kinds == [GroupMetadataRecord.__name__, OffsetCommitRecord.__name__]
    assert all(r.value is None for r in result.records)


def test_a_group_the_runtime_does_not_serve_is_answered_as_it_says() -> None:
    ctx, core = core_with_standalone_offsets()
    outcome, result = core.delete_groups(
        ["solo"], ctx.now_ms, lambda g: ErrorCode.coordinator_load_in_progress)
    assert outcome.results == (("solo", ErrorCode.coordinator_load_in_progress),)
    assert result.records == [] and ctx.service.group("solo") is not None


def test_strings_the_group_log_cannot_store_are_refused_with_kafkas_codes() -> None:
    """The group log stores group ids and metadata with int16 lengths (UTF-8 bytes): a commit
    that could never be written is refused before anything is written or held."""
    ctx = GroupTestContext()
    offsets = OffsetStore(OffsetStoreConfig(offset_metadata_max_bytes=1 << 20))  # allows it
    core = GroupOffsets(ctx.service, offsets)
    exists = lambda topic, partition: True  # noqa: E731
    long_group = oc.OffsetCommit(ref=REF, group_id="g" * 32768,
                                 topics=(("t", ((0, 5, -1, ""),)),))
    refused = core.commit(long_group, 8, ctx.now_ms, exists)
    assert refused.error is ErrorCode.invalid_group_id and not refused.records
    assert ctx.service.group("g" * 32768) is None
    # 11,000 characters of three UTF-8 bytes each: under the setting in UTF-16 units, over the
    # log's limit in bytes.
    wide = "\u4e2d" * 11_000
    decision = core.commit(oc.OffsetCommit(ref=REF, group_id="solo", topics=(
        ("t", ((0, 5, -1, wide), (1, 6, -1, "x" * 32767))),)), 8, ctx.now_ms, exists)
    assert decision.errors == [("t", [(0, ErrorCode.offset_metadata_too_large),
                                      (1, ErrorCode.none)])]
    assert len(decision.records) == 1


# ----------------------------------------------------------------------------- OffsetFetch

SERVED = lambda group_id: None  # noqa: E731


def fetch_group(group_id: str, *partitions: int, **kw: object) -> oc.OffsetFetchGroup:
    return oc.OffsetFetchGroup(group_id=group_id, topics=(("t", partitions),),
                               **kw)  # type: ignore[arg-type]


def test_a_fetch_answers_the_committed_offsets_and_none_for_the_others() -> None:
    _ctx, core = core_with_standalone_offsets()
    outcome = core.fetch(oc.OffsetFetch(ref=REF, groups=(fetch_group("solo", 0, 1),)), 8,
                         SERVED)
    (group,) = outcome.groups
    assert group.error is ErrorCode.none
    assert [(p.partition, p.offset, p.error) for p in group.partitions] == [
        (0, 5, ErrorCode.none), (1, -1, ErrorCode.none)]


def test_a_group_the_runtime_does_not_serve_is_refused_on_its_own() -> None:
    """Each group of a batched fetch (v8+) is answered on its own: a refused group carries
    the runtime's answer on every requested partition, the next one is read."""
    _ctx, core = core_with_standalone_offsets()
    refusal = {"far": ErrorCode.coordinator_load_in_progress}.get
    outcome = core.fetch(oc.OffsetFetch(ref=REF, groups=(fetch_group("far", 0),
                                                         fetch_group("solo", 0))), 8, refusal)
    far, solo = outcome.groups
    assert far.error is ErrorCode.coordinator_load_in_progress
    assert [p.error for p in far.partitions] == [ErrorCode.coordinator_load_in_progress]
    assert (solo.error, solo.partitions[0].offset) == (ErrorCode.none, 5)


def test_a_zookeeper_version_fetch_reads_nothing() -> None:
    _ctx, core = core_with_standalone_offsets()
    refusal = {"solo": ErrorCode.not_coordinator}.get
    outcome = core.fetch(oc.OffsetFetch(ref=REF, groups=(fetch_group("solo", 0, 1),)),
                         oc.ZOOKEEPER_OFFSETS_VERSION, refusal)
    (group,) = outcome.groups
    assert group.error is ErrorCode.none
    assert [(p.offset, p.error) for p in group.partitions] == [
        (-1, ErrorCode.unsupported_version)] * 2


def test_a_stable_fetch_waits_for_a_pending_commit() -> None:
    ctx, core = core_with_standalone_offsets()
    decision = core.commit(
        oc.OffsetCommit(ref=REF, group_id="solo", topics=(("t", ((0, 9, -1, ""),)),)),
        8, ctx.now_ms, lambda topic, partition: True)
    stable = oc.OffsetFetch(ref=REF, groups=(fetch_group("solo", 0),), require_stable=True)
    assert core.fetch(stable, 8, SERVED).groups[0].partitions[0].error is (
        ErrorCode.unstable_offset_commit)
    core.offsets.apply_all(decision.records)
    assert core.fetch(stable, 8, SERVED).groups[0].partitions[0].offset == 9


def test_a_consumer_group_member_fetch_is_checked_against_its_epoch() -> None:
    from coordinator.group.consumer.config import ConsumerGroupConfig
    from tests.consumer_helpers import image, join

    ctx = GroupTestContext(consumer_config=ConsumerGroupConfig())
    ctx.service.consumer.set_topic_image(image({"t": 1}))
    core = GroupOffsets(ctx.service, OffsetStore())
    assert ctx.send(join("a")).member_epoch == 1

    def error_of(member_id: str | None, epoch: int) -> ErrorCode:
        group = fetch_group("g", 0, member_id=member_id, member_epoch=epoch)
        return core.fetch(oc.OffsetFetch(ref=REF, groups=(group,)), 9, SERVED).groups[0].error

    assert error_of("a", 1) is ErrorCode.none
    assert error_of("a", 0) is ErrorCode.stale_member_epoch
    assert error_of("zz", 1) is ErrorCode.unknown_member_id
    assert error_of(None, -1) is ErrorCode.none  # an admin's fetch, not a member's


# ------------------------------------------------------------- OffsetDelete, failed writes


def test_an_offset_delete_for_a_group_not_served_is_refused_before_anything_is_read() -> None:
    _ctx, core = core_with_standalone_offsets()
    outcome, result = core.delete_offsets(
        oc.OffsetDelete(ref=REF, group_id="solo", topics=(("t", (0,)),)),
        lambda g: ErrorCode.not_coordinator)
    assert outcome == oc.OffsetDeleteOutcome(error=ErrorCode.not_coordinator)
    assert result.records == []


def test_a_failed_deletion_write_is_answered_for_the_groups_it_would_have_deleted() -> None:
    ctx, core = core_with_standalone_offsets()
    outcome, _ = core.delete_groups(["solo", "ghost"], ctx.now_ms, SERVED)
    assert outcome.append_failed().results == (
        ("solo", APPEND_FAILED), ("ghost", ErrorCode.group_id_not_found))
    assert oc.OffsetDeleteOutcome.append_failed().error is APPEND_FAILED


def test_the_steady_commit_does_what_the_full_checks_do() -> None:
    """Wherever the in-place group side of a commit applies it leaves the group exactly as the
    full checks do, and those accept the commit with no timer, record or event; wherever it
    does not, it changes nothing. The same states as the steady heartbeat's test, Preparing
    Rebalance included (a commit there restarts the session too)."""
    taken = 0
    for name, ctx, ids in _scenarios():
        generation = ctx.group().generation_id
        for member in [*ids, "ghost", ""]:
            for gen in (generation, generation - 1, -1):
                for connection in (100, 101, 7):
                    for instance in (None, "i0", "i1"):
                        for group in ("g", "other", ""):
                            fast, full = copy.deepcopy(ctx), copy.deepcopy(ctx)
                            done = fast.service.steady_commit(
                                group, member, gen, instance, connection, ctx.now_ms)
                            error, result = full.service.classic.validate_offset_commit_in_full(
                                group, member, gen, instance, ctx.now_ms, connection)
                            case = (name, member, gen, connection, instance, group)
                            if done:
                                taken += 1
                                assert error is None, case
                                assert not (result.timers or result.records or result.events
                                            or result.writes or result.replies), case
                                assert (fast.service.classic._groups
                                        == full.service.classic._groups), case
                                assert (fast.service.classic.connections.members_by_connection
                                        == full.service.classic.connections
                                           .members_by_connection), case
                            else:
                                assert (fast.service.classic._groups
                                        == ctx.service.classic._groups), case
            # Through the public entry point the answer is the same either way.
            fast, full = copy.deepcopy(ctx), copy.deepcopy(ctx)
            for member in ids:
                assert (fast.service.validate_offset_commit("g", member, generation, None,
                                                            ctx.now_ms, 100)[0]
                        == full.service.classic.validate_offset_commit_in_full(
                            "g", member, generation, None, ctx.now_ms, 100)[0]), name
    assert taken >= 10  # the steady state was exercised in every scenario that has one


def _delete(core: GroupOffsets, group: str, topic: str = "t") -> oc.OffsetDeleteOutcome:
    outcome, _ = core.delete_offsets(
        oc.OffsetDelete(ref=REF, group_id=group, topics=((topic, (0,)),)), lambda g: None)
    return outcome


def test_a_group_in_its_first_rebalance_keeps_its_offsets() -> None:
    # A standalone commit made the group; a consumer joins and no generation has chosen a
    # protocol yet: Kafka's `isSubscribedToTopic` counts every topic as subscribed.
    ctx, core = core_with_standalone_offsets()
    ctx.join_dynamic(JoinGroupBuilder(group="solo").with_protocols(
        *protocols("range", metadata=subscription(["t"]))))
    assert ctx.group("solo").protocol_name is None and ctx.group("solo").members
    outcome = _delete(core, "solo")
    assert outcome.error is ErrorCode.none
    assert outcome.topics == (("t", ((0, ErrorCode.group_subscribed_to_topic),)),)
    assert core.offsets.fetch("solo", [("t", [0])])[0].offset == 5


def test_unreadable_subscriptions_of_a_consumer_group_count_as_every_topic() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    ctx.stable_group(1, group="c", offered=protocols("range", metadata=b"\x00\x07junk"))
    outcome = _delete(core, "c", topic="anything")
    assert outcome.error is ErrorCode.none
    assert outcome.topics == (("anything", ((0, ErrorCode.group_subscribed_to_topic),)),)


def test_a_live_group_of_another_protocol_type_is_not_empty() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    ctx.stable_group(1, group="w", protocol_type="connect")
    assert _delete(core, "w").error is ErrorCode.non_empty_group


def test_offsets_of_the_empty_group_id_are_not_deleted() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    commit = oc.OffsetCommit(ref=REF, group_id="", topics=(("t", ((0, 5, -1, ""),)),))
    decision = core.commit(commit, 8, ctx.now_ms, lambda topic, partition: True)
    assert decision.error is None  # OffsetCommit takes it, for backward compatibility
    core.offsets.apply_all(decision.records)
    assert _delete(core, "").error is ErrorCode.invalid_group_id
    assert core.offsets.fetch("", [("t", [0])])[0].offset == 5


def test_a_group_that_emptied_and_is_rejoined_gives_up_its_offsets() -> None:
    # Kafka keeps the topics of the last generation: none once the group emptied, so a
    # consumer rejoining (no protocol chosen yet) does not protect them.
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    offered = protocols("range", metadata=subscription(["t"]))
    (member,) = ctx.stable_group(1, group="c", offered=offered)
    decision = core.commit(oc.OffsetCommit(ref=REF, group_id="c", generation_id=1,
                                           member_id=member, topics=(("t", ((0, 5, -1, ""),)),)),
                           8, ctx.now_ms, lambda topic, partition: True)
    core.offsets.apply_all(decision.records)
    ctx.send(leave(member, group="c"))
    ctx.sleep(0)
    assert ctx.group("c").generation_id == 2 and not ctx.group("c").members
    ctx.join_dynamic(JoinGroupBuilder(group="c").with_protocols(*offered))
    assert ctx.group("c").protocol_name is None and ctx.group("c").members
    outcome, result = core.delete_offsets(
        oc.OffsetDelete(ref=REF, group_id="c", topics=(("t", (0,)),)), lambda g: None)
    assert outcome.topics == (("t", ((0, ErrorCode.none),)),) and len(result.records) == 1


def test_unknown_partitions_are_answered_as_such_and_keep_their_offsets() -> None:
    _, core = core_with_standalone_offsets()
    outcome, result = core.delete_offsets(
        oc.OffsetDelete(ref=REF, group_id="solo", topics=(("t", (0, 9)), ("gone", (0,)))),
        lambda g: None, lambda topic, partition: topic == "t" and partition == 0)
    assert outcome.topics == (
        ("t", ((0, ErrorCode.none), (9, ErrorCode.unknown_topic_or_partition))),
        ("gone", ((0, ErrorCode.unknown_topic_or_partition),)))
    assert [(r.key.topic, r.key.partition) for r in result.records  # type: ignore[union-attr]
            ] == [("t", 0)]


def test_a_live_consumer_protocol_group_without_offsets_exists() -> None:
    ctx = GroupTestContext()
    ctx.service.consumer.set_topic_image(image({"t": 2, "u": 1}))
    ctx.send(join("m1", ("t",), group="cg"))
    core = GroupOffsets(ctx.service, OffsetStore())
    outcome, _ = core.delete_offsets(
        oc.OffsetDelete(ref=REF, group_id="cg", topics=(("u", (0,)), ("t", (0,)))),
        lambda g: None)
    assert outcome.error is ErrorCode.none
    assert outcome.topics == (("u", ((0, ErrorCode.none),)),
                              ("t", ((0, ErrorCode.group_subscribed_to_topic),)))
