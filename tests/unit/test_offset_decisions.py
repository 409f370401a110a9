"""The offset APIs' group decisions in the pure core (`coordinator/group/offset_decisions.py`)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group import offset_commands as oc
from coordinator.group.offset_decisions import GroupOffsets
from coordinator.group.offsets import OffsetStore
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
    outcome, result = core.delete_offsets(oc.OffsetDelete(ref=REF, group_id="c",
                                                          topics=(("t", (0,)),)))
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
