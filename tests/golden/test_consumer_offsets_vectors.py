"""`coordinator/grouplog/codec.py` against the `__consumer_offsets` byte vectors (README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.grouplog.codec import (
    Fields,
    FieldValue,
    decode,
    decode_record,
    encode,
    encode_key,
    encode_record,
    encode_value,
)
from coordinator.grouplog.records import (
    GroupMetadataKey,
    GroupMetadataRecord,
    OffsetCommitKey,
    OffsetCommitRecord,
)

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "consumer_offsets.json").read_text(encoding="utf-8")
)
BY_NAME = {c["name"]: c for c in CASES}
BYTES_FIELDS = {"subscription", "assignment"}
KEY_RECORDS = {"OffsetCommitKey", "GroupMetadataKey"}


def _to_json(fields: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, bytes):
            out[name] = value.hex()
        elif isinstance(value, list):
            out[name] = [_to_json(v) for v in value]
        else:
            out[name] = value
    return out


def _from_json(fields: dict[str, Any]) -> Fields:
    out: Fields = {}
    for name, value in fields.items():
        converted: FieldValue
        if name in BYTES_FIELDS and value is not None:
            converted = bytes.fromhex(value)
        elif isinstance(value, list):
            converted = [_from_json(v) for v in value]
        else:
            converted = value
        out[name] = converted
    return out


def test_vector_file_is_complete() -> None:
    assert len(CASES) == 66
    assert sum(1 for c in CASES if not c["encode_roundtrip"]) == 2
    assert sum(1 for c in CASES if c["provenance"] == "captured") == 20


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decode(case: dict[str, Any]) -> None:
    version, fields = decode(case["record"], bytes.fromhex(case["hex"]))
    assert (version, _to_json(fields)) == (case["version"], case["fields"])


ROUNDTRIP = [c for c in CASES if c["encode_roundtrip"]]


@pytest.mark.parametrize("case", ROUNDTRIP, ids=[c["name"] for c in ROUNDTRIP])
def test_encode_roundtrip(case: dict[str, Any]) -> None:
    raw = bytes.fromhex(case["hex"])
    assert encode(case["record"], case["version"], _from_json(case["fields"])) == raw


KEYS = [c for c in CASES if c["record"] in KEY_RECORDS]


@pytest.mark.parametrize("case", KEYS, ids=[c["name"] for c in KEYS])
def test_key_version_alone_picks_the_record_type(case: dict[str, Any]) -> None:
    record = decode_record(bytes.fromhex(case["hex"]), None)
    fields = case["fields"]
    if case["record"] == "OffsetCommitKey":
        assert record == OffsetCommitRecord(
            key=OffsetCommitKey(
                group=fields["group"], topic=fields["topic"], partition=fields["partition"]
            ),
            value=None,
        )
    else:
        key = GroupMetadataKey(group=fields["group"])
        assert record == GroupMetadataRecord(key=key, value=None)


TOMBSTONES = [c for c in CASES if c.get("tombstone")]


@pytest.mark.parametrize("case", TOMBSTONES, ids=[c["name"] for c in TOMBSTONES])
def test_tombstone_roundtrip(case: dict[str, Any]) -> None:
    assert case["value_hex"] is None
    key = bytes.fromhex(case["hex"])
    record = decode_record(key, None)
    assert isinstance(record, OffsetCommitRecord | GroupMetadataRecord)
    assert record.value is None
    assert encode_record(record) == (key, None)


PAIRS = [
    (c, BY_NAME[c["pair"]])
    for c in CASES
    if c["provenance"] == "captured" and c["record"] in KEY_RECORDS
]


@pytest.mark.parametrize("pair", PAIRS, ids=[k["name"] for k, _ in PAIRS])
def test_captured_pairs_roundtrip_through_typed_records(
    pair: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """What a real broker wrote is exactly what our typed encoder writes (key v1/v2, value v3)."""
    key_case, value_case = pair
    key, value = bytes.fromhex(key_case["hex"]), bytes.fromhex(value_case["hex"])
    record = decode_record(key, value)
    assert isinstance(record, OffsetCommitRecord | GroupMetadataRecord)
    assert record.value is not None
    assert encode_key(record.key) == key
    assert encode_value(record.value) == value


VALUES = [c for c in CASES if c["record"] in ("OffsetCommitValue", "GroupMetadataValue")]


@pytest.mark.parametrize("case", VALUES, ids=[c["name"] for c in VALUES])
def test_typed_decode_of_every_value_version(case: dict[str, Any]) -> None:
    key_hex = (
        "000100016700017400000000"  # OffsetCommitKey v1 g/t/0
        if case["record"] == "OffsetCommitValue"
        else "0002000167"  # GroupMetadataKey v2 g
    )
    record = decode_record(bytes.fromhex(key_hex), bytes.fromhex(case["hex"]))
    assert isinstance(record, OffsetCommitRecord | GroupMetadataRecord)
    value = record.value
    assert value is not None
    fields = case["fields"]
    if isinstance(record, OffsetCommitRecord):
        assert record.value is not None
        assert record.value.offset == fields["offset"]
        assert record.value.leader_epoch == fields.get("leaderEpoch", -1)
        assert record.value.metadata == fields["metadata"]
        assert record.value.commit_timestamp == fields["commitTimestamp"]
        assert record.value.expire_timestamp == fields.get("expireTimestamp", -1)
        if case["encode_roundtrip"]:
            assert encode_value(record.value, case["version"]) == bytes.fromhex(case["hex"])
    else:
        assert record.value is not None
        gm = record.value
        assert (gm.protocol_type, gm.generation, gm.protocol, gm.leader) == (
            fields["protocolType"], fields["generation"], fields["protocol"], fields["leader"]
        )
        assert gm.current_state_timestamp == fields.get("currentStateTimestamp", -1)
        assert [m.member_id for m in gm.members] == [m["memberId"] for m in fields["members"]]
        for m, f in zip(gm.members, fields["members"], strict=True):
            assert m.group_instance_id == f.get("groupInstanceId")
            assert m.rebalance_timeout == f.get("rebalanceTimeout", -1)
            assert m.session_timeout == f["sessionTimeout"]
            assert m.subscription.hex() == f["subscription"]
            assert m.assignment.hex() == f["assignment"]
        if case["encode_roundtrip"]:
            assert encode_value(gm, case["version"]) == bytes.fromhex(case["hex"])
