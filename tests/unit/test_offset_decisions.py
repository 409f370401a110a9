"""The offset APIs' group decisions in the pure core (`coordinator/group/offset_decisions.py`)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group import offset_commands as oc
from coordinator.group.offset_decisions import GroupOffsets
from coordinator.group.offsets import OffsetStore, OffsetStoreConfig
from coordinator.group.result import RequestRef
from coordinator.grouplog.records import GroupMetadataRecord, OffsetCommitRecord
from tests.bench.members import subscription
from tests.builders import JoinGroupBuilder, protocols
from tests.context import GroupTestContext

REF = RequestRef(1, 1)


def core_with_standalone_offsets() -> tuple[GroupTestContext, GroupOffsets]:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.manager, OffsetStore())
    decision = core.commit(
        oc.OffsetCommit(ref=REF, group_id="solo", topics=(("t", ((0, 5, -1, ""),)),)),
        8, ctx.now_ms, lambda topic, partition: True)
    assert decision.error is None and len(decision.records) == 1
    core.offsets.apply_all(decision.records)
    return ctx, core


def test_a_commit_to_an_unknown_group_with_a_generation_is_refused_by_version() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.manager, OffsetStore())
    cmd = oc.OffsetCommit(ref=REF, group_id="nobody", generation_id=3, member_id="m")
    exists = lambda topic, partition: True  # noqa: E731
    assert core.commit(cmd, 8, 0, exists).error is ErrorCode.illegal_generation
    assert core.commit(cmd, 9, 0, exists).error is ErrorCode.group_id_not_found


def test_offsets_of_a_subscribed_topic_are_kept() -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.manager, OffsetStore())
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
    assert result.records == [] and ctx.manager.group("solo") is not None


def test_strings_the_group_log_cannot_store_are_refused_with_kafkas_codes() -> None:
    """The group log stores group ids and metadata with int16 lengths (UTF-8 bytes): a commit
    that could never be written is refused before anything is written or held."""
    ctx = GroupTestContext()
    offsets = OffsetStore(OffsetStoreConfig(offset_metadata_max_bytes=1 << 20))  # allows it
    core = GroupOffsets(ctx.manager, offsets)
    exists = lambda topic, partition: True  # noqa: E731
    long_group = oc.OffsetCommit(ref=REF, group_id="g" * 32768,
                                 topics=(("t", ((0, 5, -1, ""),)),))
    refused = core.commit(long_group, 8, ctx.now_ms, exists)
    assert refused.error is ErrorCode.invalid_group_id and not refused.records
    assert ctx.manager.group("g" * 32768) is None
    # 11,000 characters of three UTF-8 bytes each: under the setting in UTF-16 units, over the
    # log's limit in bytes.
    wide = "\u4e2d" * 11_000
    decision = core.commit(oc.OffsetCommit(ref=REF, group_id="solo", topics=(
        ("t", ((0, 5, -1, wide), (1, 6, -1, "x" * 32767))),)), 8, ctx.now_ms, exists)
    assert decision.errors == [("t", [(0, ErrorCode.offset_metadata_too_large),
                                      (1, ErrorCode.none)])]
    assert len(decision.records) == 1
