"""OffsetFetch through the core answers every requested group on its own, in request order:
the runtime's refusal, or each partition's last durable commit (a pending one only when the
fetch asks for stable offsets)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from coordinator.group import offset_commands as oc
from coordinator.group.offset_decisions import GroupOffsets
from coordinator.group.offsets import OffsetStore
from coordinator.group.result import RequestRef
from tests.context import GroupTestContext

GROUPS = ["g1", "g2", "g3"]
TOPICS = ["a", "b"]
REF = RequestRef(1, 1)
REFUSALS = [ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator]

commits = st.lists(
    st.tuples(st.sampled_from(GROUPS), st.sampled_from(TOPICS), st.integers(0, 2),
              st.integers(0, 1000), st.booleans()),  # the last: made durable
    max_size=20)
requested_topics = st.none() | st.lists(
    st.tuples(st.sampled_from(TOPICS), st.lists(st.integers(0, 3), max_size=3).map(tuple)),
    max_size=2).map(tuple)
fetched_groups = st.lists(
    st.builds(oc.OffsetFetchGroup, group_id=st.sampled_from([*GROUPS, "none"]),
              topics=requested_topics),
    min_size=1, max_size=4)
refusals = st.dictionaries(st.sampled_from(GROUPS), st.sampled_from(REFUSALS), max_size=2)


@settings(max_examples=150, deadline=None)
@given(commits=commits, groups=fetched_groups, refused=refusals, require_stable=st.booleans())
def test_every_group_is_answered_on_its_own_in_request_order(
    commits: list[tuple[str, str, int, int, bool]],
    groups: list[oc.OffsetFetchGroup],
    refused: dict[str, ErrorCode],
    require_stable: bool,
) -> None:
    ctx = GroupTestContext()
    core = GroupOffsets(ctx.service, OffsetStore())
    durable: dict[tuple[str, str, int], int] = {}
    # Commits written but never made durable: each stays pending (a later one's write
    # finishing does not finish it).
    pending: set[tuple[str, str, int]] = set()
    for group_id, topic, partition, offset, made_durable in commits:
        decision = core.commit(
            oc.OffsetCommit(ref=REF, group_id=group_id,
                            topics=((topic, ((partition, offset, -1, ""),)),)),
            8, ctx.now_ms, lambda topic, partition: True)
        assert decision.error is None
        if made_durable:
            core.offsets.apply_all(decision.records)
            durable[group_id, topic, partition] = offset
        else:
            pending.add((group_id, topic, partition))

    outcome = core.fetch(oc.OffsetFetch(ref=REF, groups=tuple(groups),
                                        require_stable=require_stable), 8, refused.get)

    assert [g.group_id for g in outcome.groups] == [g.group_id for g in groups]
    for asked, answer in zip(groups, outcome.groups, strict=True):
        requested = [(t, p) for t, ps in asked.topics or () for p in ps]
        if asked.group_id in refused:
            error = refused[asked.group_id]
            assert answer.error is error
            assert [(p.topic, p.partition, p.error) for p in answer.partitions] == [
                (t, p, error) for t, p in requested]
            continue
        assert answer.error is ErrorCode.none
        if asked.topics is None:  # every partition with a durable commit
            requested = sorted((t, p) for g, t, p in durable if g == asked.group_id)
            assert sorted((p.topic, p.partition) for p in answer.partitions) == requested
        else:
            assert [(p.topic, p.partition) for p in answer.partitions] == requested
        for fetched in answer.partitions:
            key = (asked.group_id, fetched.topic, fetched.partition)
            if require_stable and key in pending:
                assert (fetched.offset, fetched.error) == (-1, ErrorCode.unstable_offset_commit)
            else:
                assert (fetched.offset, fetched.error) == (durable.get(key, -1), ErrorCode.none)
