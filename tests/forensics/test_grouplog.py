"""The group-log decoder without Spark: golden vectors in batches, damaged input, gzip."""

from __future__ import annotations

import gzip
import json
import operator
import struct
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c

from coordinator.grouplog.codec import encode_record
from coordinator.grouplog.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRecord,
)
from forensics import grouplog
from forensics.grouplog import (
    GROUP_LOG_COLUMNS,
    _record_row,
    decode_assignment,
    decode_segment,
    find_segments,
)
from tests.unit._batches import make_batch, varint

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent.parent / "golden" / "consumer_offsets.json").read_text("utf-8"))
KEY_FOR = {"OffsetCommitValue": "offset_commit_key_v1_basic",
           "GroupMetadataValue": "group_metadata_key_v2_basic"}


def rows_of(path: Path, partition: int = 0) -> list[dict[str, Any]]:
    return [dict(zip(GROUP_LOG_COLUMNS, row, strict=True))
            for row in decode_segment(str(path), partition)]


def segment(tmp_path: Path, *batches: bytes, partition: int = 3) -> Path:
    directory = tmp_path / f"__consumer_offsets-{partition}"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    return path


def key_hex(record: str) -> str:
    by_name = {c["name"]: c for c in CASES}
    name = KEY_FOR[record]
    if name not in by_name:  # fall back to any key vector of the right type
        wanted = "OffsetCommitKey" if record == "OffsetCommitValue" else "GroupMetadataKey"
        name = next(c["name"] for c in CASES if c["record"] == wanted and not c.get("tombstone"))
    return str(by_name[name]["hex"])


def test_every_golden_value_version_decodes_inside_a_batch(tmp_path: Path) -> None:
    values = [c for c in CASES if c["record"].endswith("Value") and not c.get("tombstone")]
    keys = [bytes.fromhex(key_hex(c["record"])) for c in values]
    stamps = [1_700_000_000_000 + i for i in range(len(values))]
    path = segment(tmp_path, make_batch([bytes.fromhex(c["hex"]) for c in values], keys=keys,
                                        timestamps=stamps, base_offset=40))
    rows = rows_of(path, 3)
    assert len(rows) == len(values)
    for row, case, ts in zip(rows, values, stamps, strict=True):
        assert row["value_version"] == case["version"], case["name"]
        assert row["timestamp"] == ts and row["log_partition"] == 3
        fields = case["fields"]
        if case["record"] == "OffsetCommitValue":
            assert row["record_type"] == "offset_commit", case["name"]
            assert row["committed_offset"] == fields["offset"]
            assert row["commit_timestamp"] == fields["commitTimestamp"]
        else:
            assert row["record_type"] == "group_metadata", case["name"]
            assert row["generation"] == fields["generation"]
            assert row["protocol_type"] == fields["protocolType"]
            assert [m[0] for m in row["members"]] == [m["memberId"] for m in fields["members"]]
            assert [m[2] for m in row["members"]] == [m["clientId"] for m in fields["members"]]
    assert [r["offset"] for r in rows] == list(range(40, 40 + len(values)))


def test_tombstones_unknown_record_types_and_undecodable_records(tmp_path: Path) -> None:
    kip848_key = struct.pack(">hh", 11, 1) + b"g"  # ConsumerGroupMetadata-style key version
    keys = [bytes.fromhex(key_hex("OffsetCommitValue")),
            bytes.fromhex(key_hex("GroupMetadataValue")), kip848_key, b"\x00\x01\x00"]
    path = segment(tmp_path, make_batch([None, None, b"\x00\x00", b"x"], keys=keys))
    kinds = [(r["record_type"], r["key_version"], r["tombstone"]) for r in rows_of(path)]
    assert kinds == [("offset_commit", 1, True), ("group_metadata", 2, True),
                     ("unknown", 11, None), ("undecodable", 1, None)]


def test_a_corrupted_batch_is_reported_with_file_and_position(tmp_path: Path) -> None:
    key = bytes.fromhex(key_hex("OffsetCommitValue"))
    value = bytes.fromhex(next(c["hex"] for c in CASES if c["record"] == "OffsetCommitValue"))
    good = make_batch([value], keys=[key])
    bad = bytearray(make_batch([value], keys=[key], base_offset=1))
    bad[-3] ^= 0xFF  # inside the CRC-covered bytes
    path = segment(tmp_path, good, bytes(bad), good[:30])
    rows = rows_of(path)
    assert [r["record_type"] for r in rows] == ["offset_commit", "corrupt"]
    assert rows[1]["position"] == len(good) and "CRC" in rows[1]["error"]
    assert rows[1]["source_file"] == str(path)


def test_a_truncated_tail_is_one_corrupt_row(tmp_path: Path) -> None:
    key = bytes.fromhex(key_hex("OffsetCommitValue"))
    value = bytes.fromhex(next(c["hex"] for c in CASES if c["record"] == "OffsetCommitValue"))
    good = make_batch([value], keys=[key])
    rows = rows_of(segment(tmp_path, good, good[:40]))
    assert [r["record_type"] for r in rows] == ["offset_commit", "corrupt"]
    assert rows[1]["position"] == len(good) and "truncated" in rows[1]["error"]


def test_gzip_batches_are_read(tmp_path: Path) -> None:
    key = bytes.fromhex(key_hex("OffsetCommitValue"))
    value = bytes.fromhex(next(c["hex"] for c in CASES if c["record"] == "OffsetCommitValue"))
    plain = make_batch([value, value], keys=[key, key])
    records = plain[61:]
    compressed = bytearray(plain[:61]) + gzip.compress(records)
    struct.pack_into(">h", compressed, 21, 1)  # attributes: gzip
    struct.pack_into(">i", compressed, 8, len(compressed) - 12)
    struct.pack_into(">I", compressed, 17, crc32c(bytes(compressed[21:])))
    rows = rows_of(segment(tmp_path, bytes(compressed)))
    assert [r["record_type"] for r in rows] == ["offset_commit", "offset_commit"]


def test_consumer_assignment_and_segment_discovery(tmp_path: Path) -> None:
    assignment = (struct.pack(">hi", 0, 1) + struct.pack(">h", 6) + b"orders"
                  + struct.pack(">iii", 2, 0, 3) + struct.pack(">i", -1))
    assert decode_assignment(assignment) == [("orders", 0), ("orders", 3)]
    assert decode_assignment(b"\x00") is None
    assert decode_assignment(b"") == []
    segment(tmp_path, b"", partition=10)
    segment(tmp_path, b"", partition=2)
    (tmp_path / "orders-0").mkdir()
    assert [p for _, p in find_segments(tmp_path)] == [2, 10]


@pytest.mark.parametrize("size", [0])
def test_an_empty_segment_has_no_rows(tmp_path: Path, size: int) -> None:
    assert rows_of(segment(tmp_path, b"\x00" * size)) == []


def test_the_inline_offset_commit_path_agrees_with_the_broker_codec(tmp_path: Path) -> None:
    keys = [c for c in CASES if c["record"] == "OffsetCommitKey" and not c.get("tombstone")]
    values = [c for c in CASES if c["record"] == "OffsetCommitValue" and c["version"] == 3]
    pairs = [(bytes.fromhex(k["hex"]), bytes.fromhex(v["hex"])) for k in keys for v in values]
    path = segment(tmp_path, make_batch([v for _, v in pairs], keys=[k for k, _ in pairs]))
    fast = list(decode_segment(str(path), 3))
    generic = [_record_row(str(path), 3, 0, n, 1_700_000_000_000, k, v)
               for n, (k, v) in enumerate(pairs)]
    assert fast == generic


@pytest.mark.skipif(grouplog._speedups is None, reason="the C loop was not built")
def test_the_c_loop_gives_the_rows_of_the_python_loop(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every golden key/value pair in batches (commits on the C fast path, the rest handed
    back to the codec), non-ASCII and invalid UTF-8 names, a null key, headers, and payloads
    cut short at 200 lengths: same rows, same errors."""
    pairs: list[tuple[bytes | None, bytes | None]] = []
    for case in CASES:
        value = None if case.get("tombstone") else bytes.fromhex(case["hex"])
        if case["record"].endswith("Value"):
            pairs.append((bytes.fromhex(key_hex(case["record"])), value))
        elif case.get("tombstone"):
            pairs.append((bytes.fromhex(case["hex"]), None))
    v3 = struct.pack(">hqih", 3, 42, -1, 0) + struct.pack(">q", 1_700_000_000_123)
    for group, topic in ((b"gr\xc3\xbcppe", b"t\xc3\xb6pic"), (b"bad\xff", b"t"),
                         (b"g", b"bad\xfe")):
        key = struct.pack(">hh", 1, len(group)) + group + struct.pack(">h", len(topic)) \
            + topic + struct.pack(">i", 7)
        pairs.append((key, v3))
    pairs.append((None, v3))
    batch = make_batch([v for _, v in pairs], keys=[k for k, _ in pairs])
    key = pairs[-2][0] or b""
    body = (b"\x00" + varint(5) + varint(0) + varint(len(key)) + key + varint(len(v3)) + v3
            + varint(2) + varint(1) + b"h" + varint(2) + b"hv" + varint(1) + b"n" + varint(-1))
    payloads = [bytes(batch[61:]), varint(len(body)) + body]

    def both(payload: bytes, count: int) -> tuple[list[object], list[object]]:
        def run() -> list[object]:
            out: list[object] = []
            try:
                out.extend(grouplog._batch_rows("p", 3, 0, 100, 1_700_000_000_000, payload,
                                                count))
            except (IndexError, ValueError) as exc:
                out.append(("error", str(exc)))
            return out

        fast = run()
        monkeypatch.setattr(grouplog, "_speedups", None)
        slow = run()
        monkeypatch.undo()
        return fast, slow

    fast, slow = both(payloads[0], len(pairs))
    assert fast == slow and len(fast) == len(pairs) - 1  # the null key is skipped
    assert sum(1 for row in fast if isinstance(row, tuple) and row[5] == "offset_commit") > 3
    for payload, count in ((payloads[0], len(pairs)), (payloads[1], 1)):
        for cut in range(0, len(payload), max(1, len(payload) // 200)):
            assert operator.eq(*both(payload[:cut], count)), cut


def test_consumer_group_records_the_broker_writes_are_counted_as_unknown(tmp_path: Path) -> None:
    # A consumer (KIP-848) group's records decode to their own types in the broker's codec;
    # the job does not model them from the group log, so they are counted and skipped.
    record = ConsumerGroupRecord(key=ConsumerGroupMetadataKey(group="billing"),
                                 value=ConsumerGroupMetadataValue(epoch=3))
    key, value = encode_record(record)
    commit_key = bytes.fromhex(key_hex("OffsetCommitValue"))
    path = segment(tmp_path, make_batch([value, None], keys=[key, commit_key]))
    kinds = [(r["record_type"], r["key_version"]) for r in rows_of(path)]
    assert kinds == [("unknown", 3), ("offset_commit", 1)]
