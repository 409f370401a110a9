"""The shortcuts of the OffsetCommit hot path produce exactly what the plain code does."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.group.events import journal_record
from coordinator.grouplog.codec import encode_record, encode_records
from coordinator.grouplog.records import (
    CoordinatorRecord,
    GroupMemberRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
    offset_commit_record,
    offset_commit_value,
)
from coordinator.runtime import event_journal as journaling

_names = st.text(max_size=12)
_ints = st.integers(-(2**31), 2**31 - 1)
_longs = st.integers(-(2**63), 2**63 - 1)
_values = st.builds(
    OffsetCommitValue,
    offset=_longs,
    leader_epoch=_ints,
    metadata=st.sampled_from(["", "md", "ü" * 3]),
    commit_timestamp=_longs,
    expire_timestamp=st.sampled_from([-1, -1, 1_700_000_000_000]),
)
_offset_records = st.builds(
    OffsetCommitRecord,
    key=st.builds(OffsetCommitKey, group=st.sampled_from(["g", "h", "ß"]),
                  topic=st.sampled_from(["t", "u"]), partition=st.integers(0, 5)),
    value=st.none() | _values,
)
_group_records = st.builds(
    GroupMetadataRecord,
    key=st.builds(GroupMetadataKey, group=_names),
    value=st.none() | st.just(GroupMetadataValue(
        protocol_type="consumer", generation=2, protocol="range", leader="m",
        members=(GroupMemberRecord(member_id="m", client_id="c", client_host="/h",
                                   session_timeout=10_000, subscription=b"s", assignment=b"a"),),
    )),
)


@given(value=_values, group=_names, topic=_names, partition=_ints)
def test_builders_make_the_same_records_as_the_constructors(
    value: OffsetCommitValue, group: str, topic: str, partition: int
) -> None:
    built = offset_commit_value(value.offset, value.leader_epoch, value.metadata,
                                value.commit_timestamp, value.expire_timestamp)
    assert type(built) is OffsetCommitValue
    assert built == value and hash(built) == hash(value)
    record = offset_commit_record(group, topic, partition, built)
    expected = OffsetCommitRecord(
        key=OffsetCommitKey(group=group, topic=topic, partition=partition), value=value)
    assert record == expected and hash(record) == hash(expected)
    assert offset_commit_record(group, topic, partition, None) == OffsetCommitRecord(
        key=OffsetCommitKey(group=group, topic=topic, partition=partition), value=None)
    with pytest.raises(AttributeError):
        record.value = None  # type: ignore[misc]  # still frozen


@given(st.lists(_offset_records | _group_records, max_size=30))
def test_encode_records_matches_encode_record(records: list[CoordinatorRecord]) -> None:
    assert encode_records(records) == [encode_record(r) for r in records]


@pytest.mark.parametrize("record", [
    offset_commit_record("g", "t", 2**31, offset_commit_value(1, -1, "", 0, -1)),
    offset_commit_record("g", "t", 0, offset_commit_value(2**63, -1, "", 0, -1)),
    offset_commit_record("g" * 40_000, "t", 0, offset_commit_value(1, -1, "", 0, -1)),
])
def test_encode_records_refuses_what_encode_record_refuses(record: OffsetCommitRecord) -> None:
    with pytest.raises(ValueError) as plain:
        encode_record(record)
    with pytest.raises(ValueError) as batched:
        encode_records([record])
    assert str(batched.value) == str(plain.value)


@given(group=st.text(), member=st.text(), generation=_ints, partitions=st.integers(0, 10_000),
       ts=st.integers(0, 2**45))
def test_offsets_committed_journal_line_is_what_json_dumps_writes(
    group: str, member: str, generation: int, partitions: int, ts: int
) -> None:
    payload = {"event": "offsets_committed", "group_id": group, "member_id": member,
               "generation_id": generation, "partitions": partitions}
    expected = json.dumps(journal_record(payload, ts), default=str) + "\n"
    line = journaling._OFFSETS_COMMITTED_LINE % (
        ts, journaling._json_string(group), journaling._json_string(member), generation,
        partitions)
    assert line == expected
