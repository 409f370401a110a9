"""OffsetCommit / OffsetFetch / OffsetDelete / DeleteGroups: request -> command, outcome ->
response, for every supported version; every response must encode with kio's writer."""

from __future__ import annotations

import datetime
import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from coordinator.api import delete_groups, offset_commit, offset_delete, offset_fetch
from coordinator.group.offset_commands import (
    DeleteGroupsOutcome,
    OffsetCommit,
    OffsetCommitOutcome,
    OffsetDeleteOutcome,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchGroupResult,
    OffsetFetchOutcome,
)
from coordinator.group.offsets import FetchedOffset
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import encode_response

REF = RequestRef(1, 7)


def roundtrip(response: Any) -> Any:
    """Encode with kio's writer and decode again: catches nullability and type mistakes."""
    buf = io.BytesIO()
    entity_writer(type(response))(buf, response)
    decoded, size = entity_reader(type(response))(buf.getvalue(), 0)
    assert size == len(buf.getvalue())
    assert decoded == response
    return decoded


def request(api_key: int, version: int, **values: Any) -> Any:
    return build(load_request_schema(api_key, version), values)


# ------------------------------------------------------------------ OffsetCommit

# The versions kio has schemas for; v0-v1 (hand-read) are tested in test_legacy_versions.py.
COMMIT_VERSIONS = range(2, offset_commit.MAX_VERSION + 1)


def commit_request(version: int, **extra: Any) -> Any:
    return request(
        8, version, group_id="g", generation_id_or_member_epoch=3, member_id="m",
        topics=[{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 4,
             "committed_metadata": "md"},
            {"partition_index": 1, "committed_offset": 11, "committed_metadata": None},
        ]}],
        **extra,
    )


@pytest.mark.parametrize("version", COMMIT_VERSIONS)
def test_offset_commit_to_command(version: int) -> None:
    cmd = offset_commit.to_command(commit_request(version), version, REF)
    epoch = 4 if version >= 6 else -1
    assert cmd == OffsetCommit(
        ref=REF, group_id="g", generation_id=3, member_id="m", retention_time_ms=-1,
        topics=(("t", ((0, 10, epoch, "md"), (1, 11, -1, None))),),
    )


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_commit_retention_time(version: int) -> None:
    req = commit_request(version, retention_time=datetime.timedelta(milliseconds=5000))
    assert offset_commit.to_command(req, version, REF).retention_time_ms == 5000
    # aiokafka sends -1 explicitly: the broker default
    req = commit_request(version, retention_time=datetime.timedelta(milliseconds=-1))
    assert offset_commit.to_command(req, version, REF).retention_time_ms == -1


@pytest.mark.parametrize("version", [7, 8, 9])
def test_offset_commit_group_instance_id(version: int) -> None:
    req = commit_request(version, group_instance_id="i-1")
    assert offset_commit.to_command(req, version, REF).group_instance_id == "i-1"


@pytest.mark.parametrize("version", COMMIT_VERSIONS)
def test_offset_commit_response_encodes(version: int) -> None:
    cmd = offset_commit.to_command(commit_request(version), version, REF)
    outcome = OffsetCommitOutcome.from_errors(
        [("t", [(0, ErrorCode.none), (1, ErrorCode.offset_metadata_too_large)])]
    )
    response = roundtrip(offset_commit.to_response(outcome, version))
    assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [
        (0, ErrorCode.none), (1, ErrorCode.offset_metadata_too_large)
    ]
    failed = roundtrip(
        offset_commit.to_response(
            OffsetCommitOutcome.failed(cmd, ErrorCode.illegal_generation), version
        )
    )
    assert {p.error_code for p in failed.topics[0].partitions} == {ErrorCode.illegal_generation}


def _kio_commit_bytes(outcome: OffsetCommitOutcome, version: int, correlation_id: int) -> bytes:
    return encode_response(8, version, correlation_id,
                           offset_commit.to_response(outcome, version))


_WIDE = "tópico-ü-" * 3  # multi-byte UTF-8: lengths count bytes, not characters
PACKED_COMMIT_OUTCOMES = [
    OffsetCommitOutcome(topics=()),
    OffsetCommitOutcome(topics=(("t", ()),)),
    OffsetCommitOutcome(topics=(("t", tuple((p, ErrorCode.none) for p in range(10))),)),
    OffsetCommitOutcome(topics=(
        ("t", ((0, ErrorCode.none), (7, ErrorCode.offset_metadata_too_large))),
        (_WIDE, ((2**31 - 1, ErrorCode.unknown_topic_or_partition),)),
        ("x" * 200, tuple((p, ErrorCode.illegal_generation) for p in range(130))),
    )),
]


@pytest.mark.parametrize("version", COMMIT_VERSIONS)
@pytest.mark.parametrize("outcome", PACKED_COMMIT_OUTCOMES)
def test_hand_packed_offset_commit_response_matches_kio(
    version: int, outcome: OffsetCommitOutcome
) -> None:
    expected = _kio_commit_bytes(outcome, version, 424242)
    assert offset_commit.encode(outcome, version, 424242) == expected


@given(
    version=st.sampled_from(COMMIT_VERSIONS),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    topics=st.lists(
        st.tuples(
            st.text(max_size=40),
            st.lists(st.tuples(st.integers(0, 2**31 - 1), st.sampled_from(ErrorCode)),
                     max_size=140).map(tuple),
        ),
        max_size=4,
    ).map(tuple),
)
@settings(max_examples=300, deadline=None)
def test_hand_packed_offset_commit_response_matches_kio_for_any_outcome(
    version: int, correlation_id: int,
    topics: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...],
) -> None:
    outcome = OffsetCommitOutcome(topics=topics)
    expected = _kio_commit_bytes(outcome, version, correlation_id)
    assert offset_commit.encode(outcome, version, correlation_id) == expected


# ------------------------------------------------------------------ OffsetFetch

FETCH_VERSIONS = range(1, offset_fetch.MAX_VERSION + 1)  # v0: test_legacy_versions.py
FETCHED = (
    FetchedOffset("t", 0, 10, 4, "md", ErrorCode.none),
    FetchedOffset("t", 1, -1, -1, "", ErrorCode.none),
    FetchedOffset("u", 0, 5, -1, "", ErrorCode.unstable_offset_commit),
)


def fetch_request(version: int, topics: list[dict[str, Any]] | None) -> Any:
    if version >= 8:
        return request(9, version, groups=[
            {"group_id": "g", "topics": topics},
            {"group_id": "h", "topics": None},
        ], require_stable=True)
    extra = {"require_stable": True} if version >= 7 else {}
    return request(9, version, group_id="g", topics=topics, **extra)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_offset_fetch_to_command(version: int) -> None:
    topics = [{"name": "t", "partition_indexes": [0, 1]}]
    cmd = offset_fetch.to_command(fetch_request(version, topics), version, REF)
    g = OffsetFetchGroup(group_id="g", topics=(("t", (0, 1)),))
    if version >= 8:
        assert cmd == OffsetFetch(
            ref=REF, groups=(g, OffsetFetchGroup(group_id="h", topics=None)), require_stable=True
        )
    else:
        assert cmd == OffsetFetch(ref=REF, groups=(g,), require_stable=version >= 7)


@pytest.mark.parametrize("version", [v for v in FETCH_VERSIONS if v >= 2])
def test_offset_fetch_null_topics_means_all(version: int) -> None:
    cmd = offset_fetch.to_command(fetch_request(version, None), version, REF)
    assert cmd.groups[0].topics is None


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_offset_fetch_response_encodes(version: int) -> None:
    groups = [OffsetFetchGroupResult(group_id="g", partitions=FETCHED)]
    if version >= 8:
        groups.append(OffsetFetchGroupResult(group_id="h", error=ErrorCode.not_coordinator))
    response = roundtrip(offset_fetch.to_response(OffsetFetchOutcome(groups=tuple(groups)),
                                                  version))
    topics = response.groups[0].topics if version >= 8 else response.topics
    assert [t.name for t in topics] == ["t", "u"]
    first = topics[0].partitions[0]
    assert (first.partition_index, first.committed_offset, first.metadata) == (0, 10, "md")
    if version >= 5:
        assert first.committed_leader_epoch == 4
    assert topics[1].partitions[0].error_code == ErrorCode.unstable_offset_commit
    if version >= 8:
        assert (response.groups[1].group_id, response.groups[1].error_code,
                response.groups[1].topics) == ("h", ErrorCode.not_coordinator, ())


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_offset_fetch_group_error(version: int) -> None:
    group = OffsetFetchGroup(group_id="g", topics=(("t", (0, 1)),))
    outcome = OffsetFetchOutcome(
        groups=(OffsetFetchGroupResult.failed(group, ErrorCode.coordinator_load_in_progress),)
    )
    response = roundtrip(offset_fetch.to_response(outcome, version))
    if version >= 8:
        assert response.groups[0].error_code == ErrorCode.coordinator_load_in_progress
        assert response.groups[0].topics == ()
    elif version >= 2:
        assert response.error_code == ErrorCode.coordinator_load_in_progress
        assert response.topics == ()
    else:  # v1: no top-level error; every requested partition carries it
        assert [p.error_code for p in response.topics[0].partitions] == [
            ErrorCode.coordinator_load_in_progress
        ] * 2


# ------------------------------------------------------------------ OffsetDelete


def test_offset_delete_roundtrip() -> None:
    req = request(47, 0, group_id="g", topics=[
        {"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 2}]}
    ])
    cmd = offset_delete.to_command(req, 0, REF)
    assert (cmd.group_id, cmd.topics) == ("g", (("t", (0, 2)),))
    outcome = OffsetDeleteOutcome.from_errors(
        [("t", [(0, ErrorCode.none), (2, ErrorCode.group_subscribed_to_topic)])]
    )
    response = roundtrip(offset_delete.to_response(outcome, 0))
    assert response.error_code == ErrorCode.none
    assert [p.error_code for p in response.topics[0].partitions] == [
        ErrorCode.none, ErrorCode.group_subscribed_to_topic
    ]
    failed = roundtrip(offset_delete.to_response(
        OffsetDeleteOutcome(error=ErrorCode.group_id_not_found), 0))
    assert (failed.error_code, failed.topics) == (ErrorCode.group_id_not_found, ())


# ------------------------------------------------------------------ DeleteGroups


@pytest.mark.parametrize("version", range(delete_groups.MIN_VERSION, delete_groups.MAX_VERSION + 1))
def test_delete_groups_roundtrip(version: int) -> None:
    req = request(42, version, groups_names=["a", "b"])
    cmd = delete_groups.to_command(req, version, REF)
    assert cmd.group_ids == ("a", "b")
    outcome = DeleteGroupsOutcome(
        results=(("a", ErrorCode.none), ("b", ErrorCode.non_empty_group))
    )
    response = roundtrip(delete_groups.to_response(outcome, version))
    assert [(r.group_id, r.error_code) for r in response.results] == [
        ("a", ErrorCode.none), ("b", ErrorCode.non_empty_group)
    ]
