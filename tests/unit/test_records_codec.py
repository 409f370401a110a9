"""Edge cases of `coordinator/grouplog/codec.py` that the golden vectors do not cover."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.grouplog.codec import (
    Fields,
    RecordDecodeError,
    UnknownRecord,
    decode,
    decode_record,
    encode,
    encode_key,
    encode_record,
    encode_value,
)
from coordinator.grouplog.records import (
    GroupMemberRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
)

OC_KEY = OffsetCommitKey(group="g", topic="t", partition=3)
OC_VALUE = OffsetCommitValue(offset=42, leader_epoch=7, metadata="m", commit_timestamp=1000)


def test_offset_commit_key_is_written_as_v1() -> None:
    assert encode_key(OC_KEY)[:2] == b"\x00\x01"


def test_group_metadata_key_is_written_as_v2() -> None:
    assert encode_key(GroupMetadataKey(group="g")) == bytes.fromhex("0002000167")


def test_offset_commit_value_is_written_as_v3() -> None:
    raw = encode_value(OC_VALUE)
    assert decode("OffsetCommitValue", raw) == (
        3,
        {"offset": 42, "leaderEpoch": 7, "metadata": "m", "commitTimestamp": 1000},
    )


def test_explicit_expire_timestamp_is_written_as_v1_and_drops_the_leader_epoch() -> None:
    value = OffsetCommitValue(
        offset=42, leader_epoch=7, metadata="m", commit_timestamp=1000, expire_timestamp=5000
    )
    raw = encode_value(value)
    assert decode("OffsetCommitValue", raw) == (
        1,
        {"offset": 42, "metadata": "m", "commitTimestamp": 1000, "expireTimestamp": 5000},
    )
    decoded = decode_record(encode_key(OC_KEY), raw)
    assert isinstance(decoded, OffsetCommitRecord)
    assert decoded.value == OffsetCommitValue(
        offset=42, leader_epoch=-1, metadata="m", commit_timestamp=1000, expire_timestamp=5000
    )


def test_group_metadata_value_is_written_as_v3() -> None:
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=2,
        protocol="range",
        leader="m1",
        current_state_timestamp=99,
        members=(GroupMemberRecord(member_id="m1", group_instance_id="i1", session_timeout=10),),
    )
    raw = encode_value(value)
    assert raw[:2] == b"\x00\x03"
    assert decode_record(encode_key(GroupMetadataKey(group="g")), raw) == GroupMetadataRecord(
        key=GroupMetadataKey(group="g"), value=value
    )


def test_typed_fast_path_matches_the_schema_codec() -> None:
    fields: Fields = {"offset": 42, "leaderEpoch": 7, "metadata": "m", "commitTimestamp": 1000}
    assert encode_value(OC_VALUE) == encode("OffsetCommitValue", 3, fields)
    assert encode_key(OC_KEY) == encode(
        "OffsetCommitKey", 1, {"group": "g", "topic": "t", "partition": 3}
    )


@pytest.mark.parametrize("version", [9, 10, 15, 100, 32767])
def test_key_versions_of_other_record_types_are_unknown_records(version: int) -> None:
    key = version.to_bytes(2, "big") + b"\x00\x01x"
    record = decode_record(key, b"\x00\x00whatever")
    assert record == UnknownRecord(key_version=version, key=key, value=b"\x00\x00whatever")


def test_negative_key_version_is_an_error() -> None:
    with pytest.raises(RecordDecodeError):
        decode_record(b"\xff\xff\x00\x01g", None)


@pytest.mark.parametrize(
    "key",
    [b"", b"\x00", b"\x00\x01\x00\x05ab", b"\x00\x02\x00\x05ab", b"\x00\x01\x00\x01g\x00\x01t\x00"],
)
def test_truncated_keys_are_errors(key: bytes) -> None:
    with pytest.raises(RecordDecodeError):
        decode_record(key, None)


def test_trailing_bytes_are_an_error() -> None:
    with pytest.raises(RecordDecodeError):
        decode_record(encode_key(OC_KEY) + b"\x00", None)
    with pytest.raises(RecordDecodeError):
        decode_record(encode_key(OC_KEY), encode_value(OC_VALUE) + b"\x00")


@pytest.mark.parametrize("version", [5, -1])
def test_unknown_value_versions_are_errors(version: int) -> None:
    raw = version.to_bytes(2, "big", signed=True) + encode_value(OC_VALUE)[2:]
    with pytest.raises(RecordDecodeError):
        decode_record(encode_key(OC_KEY), raw)


def test_invalid_utf8_is_an_error() -> None:
    with pytest.raises(RecordDecodeError):
        decode_record(b"\x00\x02\x00\x01\xff", None)


def test_null_in_a_non_nullable_field_cannot_be_encoded() -> None:
    with pytest.raises(ValueError):
        encode("OffsetCommitValue", 3, {"offset": 1, "metadata": None, "commitTimestamp": 0})


def test_null_in_a_non_nullable_field_cannot_be_decoded() -> None:
    # OffsetCommitValue v3 with metadata length -1
    raw = bytes.fromhex("0003" "0000000000000001" "ffffffff" "ffff" "0000000000000000")
    with pytest.raises(RecordDecodeError):
        decode_record(encode_key(OC_KEY), raw)


def test_out_of_range_int_cannot_be_encoded() -> None:
    with pytest.raises(ValueError):
        encode_key(OffsetCommitKey(group="g", topic="t", partition=1 << 31))


def test_overlong_string_cannot_be_encoded() -> None:
    with pytest.raises(ValueError):
        encode_key(GroupMetadataKey(group="x" * 40000))


def test_tombstones_encode_to_a_null_value() -> None:
    record = OffsetCommitRecord(key=OC_KEY, value=None)
    key, value = encode_record(record)
    assert value is None
    assert decode_record(key, value) == record


def test_flexible_value_skips_unknown_tagged_fields() -> None:
    base = encode("OffsetCommitValue", 4, {"offset": 1, "leaderEpoch": 2, "metadata": "",
                                             "commitTimestamp": 3})
    assert base.endswith(b"\x00")
    tagged = base[:-1] + bytes([2, 0, 1, 0xAA, 9, 2, 0xBB, 0xCC])
    assert decode("OffsetCommitValue", tagged) == decode("OffsetCommitValue", base)


@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=64)))
def test_arbitrary_bytes_raise_only_record_decode_error(key: bytes, value: bytes | None) -> None:
    with contextlib.suppress(RecordDecodeError):
        decode_record(key, value)


@given(st.binary(max_size=64))
def test_arbitrary_value_bytes_under_a_valid_key(value: bytes) -> None:
    for key in (encode_key(OC_KEY), encode_key(GroupMetadataKey(group="g"))):
        with contextlib.suppress(RecordDecodeError):
            decode_record(key, b"\x00\x04" + value)
        with contextlib.suppress(RecordDecodeError):
            decode_record(key, b"\x00\x03" + value)
