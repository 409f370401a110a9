"""Typed `__consumer_offsets` records survive encode -> decode unchanged (Hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.grouplog.codec import decode, decode_record, encode, encode_record, encode_value
from coordinator.grouplog.records import (
    CoordinatorRecord,
    GroupMemberRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
)

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=40)
OPT_TEXT = st.none() | TEXT
BLOB = st.binary(max_size=200)

offset_commit_keys = st.builds(OffsetCommitKey, group=TEXT, topic=TEXT, partition=I32)
offset_commit_values = st.builds(
    OffsetCommitValue,
    offset=I64,
    leader_epoch=I32,
    metadata=st.text(max_size=300),
    commit_timestamp=I64,
    expire_timestamp=st.just(-1),
)
expiring_offset_commit_values = st.builds(
    OffsetCommitValue,
    offset=I64,
    leader_epoch=st.just(-1),  # value v1 has no leader epoch
    metadata=TEXT,
    commit_timestamp=I64,
    expire_timestamp=I64.filter(lambda t: t != -1),
)
members = st.builds(
    GroupMemberRecord,
    member_id=TEXT,
    group_instance_id=OPT_TEXT,
    client_id=TEXT,
    client_host=TEXT,
    rebalance_timeout=I32,
    session_timeout=I32,
    subscription=BLOB,
    assignment=BLOB,
)
group_metadata_values = st.builds(
    GroupMetadataValue,
    protocol_type=TEXT,
    generation=I32,
    protocol=OPT_TEXT,
    leader=OPT_TEXT,
    current_state_timestamp=I64,
    members=st.lists(members, max_size=4).map(tuple),
)

records: st.SearchStrategy[CoordinatorRecord] = st.one_of(
    st.builds(
        OffsetCommitRecord,
        key=offset_commit_keys,
        value=st.none() | offset_commit_values | expiring_offset_commit_values,
    ),
    st.builds(
        GroupMetadataRecord,
        key=st.builds(GroupMetadataKey, group=TEXT),
        value=st.none() | group_metadata_values,
    ),
)


@given(records)
def test_typed_record_roundtrip(record: CoordinatorRecord) -> None:
    key, value = encode_record(record)
    assert decode_record(key, value) == record


@given(group_metadata_values, st.sampled_from([3, 4]))
def test_group_metadata_roundtrip_at_v3_and_flexible_v4(
    value: GroupMetadataValue, version: int
) -> None:
    raw = encode_value(value, version)
    record = decode_record(b"\x00\x02\x00\x00", raw)
    assert record == GroupMetadataRecord(key=GroupMetadataKey(group=""), value=value)


@given(offset_commit_values, st.sampled_from([3, 4]))
def test_offset_commit_value_generic_reencode(value: OffsetCommitValue, version: int) -> None:
    raw = encode_value(value, version)
    decoded_version, fields = decode("OffsetCommitValue", raw)
    assert decoded_version == version
    assert encode("OffsetCommitValue", version, fields) == raw
