"""No request body reaches kio's native reader with an array count it could over-allocate for.

kio sizes an array from the declared count before checking the bytes exist, and a failed
allocation aborts the process: these frames used to kill the broker. Each is decoded in a child
process, so that a regression shows as that process dying (SIGABRT), not as this run dying.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from kio.index import KioIndexError, load_request_schema
from kio.serial import entity_reader, entity_writer

from protocol import fast_requests, guard
from protocol.build import build
from protocol.codec import decode_request
from protocol.errors import AnsweredOverLimits, MalformedRequest
from protocol.guard import body_length, compile_guard

PROJECT = Path(__file__).resolve().parents[2]


def header(key: int, version: int, flexible: bool, correlation_id: int = 1) -> bytes:
    return struct.pack(">hhih", key, version, correlation_id, 1) + b"c" + (
        b"\x00" if flexible else b"")


HOSTILE_FRAMES = {
    # LeaveGroup v4: group "g", members compact array declaring 2**32 - 2 elements.
    "compact array count": header(13, 4, True) + b"\x02g" + b"\xff\xff\xff\xff\x0f",
    # LeaveGroup v3: members legacy array declaring 2**31 - 1 elements.
    "legacy array count": header(13, 3, False) + b"\x00\x01g" + b"\x7f\xff\xff\xff",
    # OffsetCommit v8: one topic whose partitions array declares 2**32 - 2 elements.
    "nested array count": header(8, 8, True) + b"\x02g" + b"\x00\x00\x00\x01" + b"\x02m"
    + b"\x00" + b"\x02" + b"\x02t" + b"\xff\xff\xff\xff\x0f",
    # ListOffsets v1: topics with a primitive int32 array far larger than the frame.
    "primitive array count": header(2, 1, False) + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    + b"\x00\x01t" + b"\x7f\xff\xff\xff",
    # BrokerHeartbeat v1: tagged field 0 (offline_log_dirs, an array of uuids), huge count.
    "array in a tagged field": header(63, 1, True) + struct.pack(">iqqbb", 1, 1, 1, 0, 0)
    + b"\x01" + b"\x00" + b"\x05" + b"\xff\xff\xff\xff\x0f",
}


def test_hostile_counts_are_refused_without_aborting_the_process() -> None:
    script = (
        "import json, sys\n"
        "from protocol.codec import decode_request\n"
        "from protocol.errors import MalformedRequest\n"
        "out = {}\n"
        "for name, frame in json.loads(sys.stdin.read()).items():\n"
        "    try:\n"
        "        decode_request(bytes.fromhex(frame))\n"
        "        out[name] = 'decoded'\n"
        "    except MalformedRequest as exc:\n"
        "        out[name] = str(exc)\n"
        "print(json.dumps(out))\n"
    )
    frames = {name: frame.hex() for name, frame in HOSTILE_FRAMES.items()}
    result = subprocess.run([sys.executable, "-c", script], input=json.dumps(frames),
                            capture_output=True, text=True, cwd=PROJECT, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    outcomes = json.loads(result.stdout)
    assert set(outcomes) == set(HOSTILE_FRAMES)
    for name, outcome in outcomes.items():
        assert "elements declared" in outcome, (name, outcome)


@pytest.mark.parametrize(("name", "frame"), [
    ("LeaveGroup v3 members", header(13, 3, False) + b"\x00\x01g" + b"\xff\xff\xff\xff"),
    ("LeaveGroup v5 members", header(13, 5, True) + b"\x02g" + b"\x00" + b"\x00"),
    ("SyncGroup v3 assignments", header(14, 3, False) + b"\x00\x01g" + b"\x00\x00\x00\x01"
     + b"\x00\x01m" + b"\xff\xff" + b"\xff\xff\xff\xff"),
    ("ListOffsets v1 topics", header(2, 1, False) + b"\x00\x00\x00\x01" + b"\xff\xff\xff\xff"),
    ("OffsetCommit v8 partitions", header(8, 8, True) + b"\x02g" + b"\x00\x00\x00\x01"
     + b"\x02m" + b"\x00" + b"\x02" + b"\x02t" + b"\x00"),
])
def test_null_where_the_schema_forbids_it_is_malformed(name: str, frame: bytes) -> None:
    with pytest.raises(MalformedRequest, match="null"):
        decode_request(frame)


def test_null_where_the_schema_allows_it_still_decodes() -> None:
    # Metadata v12: topics null means "all topics".
    frame = header(3, 12, True) + b"\x00" + b"\x01" + b"\x00" + b"\x00"
    _, request = decode_request(frame)
    assert request.topics is None


def test_every_request_schema_compiles() -> None:
    compiled = 0
    for key in range(100):
        for version in range(20):
            try:
                cls = load_request_schema(key, version)
            except KioIndexError:
                continue
            compile_guard(cls)
            body_length(cls)
            compiled += 1
    assert compiled > 250


def test_heartbeat_has_no_guard_to_run() -> None:
    for version in range(5):
        assert compile_guard(load_request_schema(12, version)) is None


def test_walk_ends_where_kio_ends_for_a_real_commit() -> None:
    cls = load_request_schema(8, 8)
    request = build(cls, {
        "group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m",
        "group_instance_id": None, "topics": [{"name": "t", "partitions": [
            {"partition_index": i, "committed_offset": i, "committed_leader_epoch": -1,
             "committed_metadata": None} for i in range(3)]}]})
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, request)
    body = buffer.getvalue()
    assert body_length(cls)(body, 0, len(body)) == len(body)
    with mock.patch.dict(fast_requests.HAND_DECODERS, {}, clear=True):  # kio behind the guard
        _, decoded = decode_request(header(8, 8, True) + body)
    assert decoded == request


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _empty_topic_names(version: int, count: int) -> bytes:
    """The body of a Metadata request naming `count` topics of the empty name (2 bytes, or 1;
    v10+ adds a 16-byte topic id)."""
    if version >= 9:  # flexible: topic id, compact name, tags
        topic = b"\x00" * 16 + b"\x01" + b"\x00" if version >= 10 else b"\x01\x00"
        flags = b"\x01\x00\x00" if version <= 10 else b"\x01\x00"  # v8-v10: cluster operations
        return _uvarint(count + 1) + topic * count + flags + b"\x00"
    return struct.pack(">i", count) + b"\x00\x00" * count + b"\x01"


def _decode_body(api_key: int, version: int, body: bytes) -> Any:
    """Guard and kio reader of one schema, without the API's element limit (the budget
    alone is under test)."""
    cls = load_request_schema(api_key, version)
    check = compile_guard(cls)
    assert check is not None
    check(body, 0, len(body))
    return entity_reader(cls)(body, 0)[0]


def _decoded_peak(api_key: int, version: int, body: bytes) -> int:
    """Peak bytes allocated while decoding `body`."""
    import tracemalloc

    tracemalloc.start()
    try:
        _decode_body(api_key, version, body)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("version", [4, 9])
def test_a_frame_of_a_million_empty_names_is_refused_before_decoding(version: int) -> None:
    body = _empty_topic_names(version, 1_000_000)
    with pytest.raises(MalformedRequest, match="decoding would take about"):
        _decode_body(3, version, body)


@pytest.mark.parametrize("version", [4, 9, 12])
def test_what_the_budget_lets_through_decodes_within_it(version: int) -> None:
    # The largest count the budget allows for this element shape (found by halving), decoded:
    # its memory stays under the promised 16x the frame + 10 MB.
    low, high = 1, 300_000
    while low < high:
        middle = (low + high + 1) // 2
        try:
            _decode_body(3, version, _empty_topic_names(version, middle))
            low = middle
        except MalformedRequest:
            high = middle - 1
    body = _empty_topic_names(version, low)
    assert low > 10_000
    assert _decoded_peak(3, version, body) <= guard.DECODED_BYTES_PER_BYTE * len(body) + (
        guard.DECODED_BYTES_ALLOWANCE)


def test_nested_arrays_count_toward_one_budget() -> None:
    # OffsetFetch v8: groups each naming many topics of the empty name and no partitions: three
    # bytes on the wire, two objects, a string and a tuple in memory. No one array is too large
    # for the frame; together they are.
    topics = 20_000
    groups = 50
    group = b"\x02g" + _uvarint(topics + 1) + b"\x01\x01\x00" * topics + b"\x00"
    body = _uvarint(groups + 1) + group * groups + b"\x00" + b"\x00"
    with pytest.raises(MalformedRequest, match="decoding would take about"):
        _decode_body(9, 8, body)
    small = _uvarint(3) + group * 2 + b"\x00" + b"\x00"
    assert len(_decode_body(9, 8, small).groups) == 2


@pytest.mark.parametrize(("api_key", "version", "body"), [
    (3, 4, struct.pack(">i", 12_000) + b"\x00\x01t" * 12_000 + b"\x01"),
    (15, 0, struct.pack(">i", 3_000) + b"\x00\x01g" * 3_000),
    (42, 0, struct.pack(">i", 3_000) + b"\x00\x01g" * 3_000),
    (2, 1, struct.pack(">ii", -1, 1) + b"\x00\x01t" + struct.pack(">i", 6_000)
     + struct.pack(">iq", 0, -1) * 6_000),
    (9, 8, _uvarint(2) + b"\x02g" + _uvarint(2) + b"\x02t" + _uvarint(6_001)
     + struct.pack(">i", 0) * 6_000 + b"\x00" + b"\x00" + b"\x00" + b"\x00"),
])
def test_more_elements_than_the_api_allows_are_decoded_to_be_answered(
        api_key: int, version: int, body: bytes) -> None:
    frame = header(api_key, version,
                   version >= {3: 9, 15: 5, 2: 6, 9: 6, 42: 2}[api_key]) + body
    with pytest.raises(AnsweredOverLimits, match="this API allows") as refused:
        decode_request(frame)
    assert refused.value.header.api_key == api_key
    assert refused.value.request is not None


def test_more_than_twice_the_elements_the_api_allows_are_refused_before_decoding() -> None:
    count = guard.ELEMENT_LIMITS[3] * guard.ANSWERED_ELEMENTS_FACTOR + 1
    frame = header(3, 4, False) + struct.pack(">i", count) + b"\x00\x01t" * count + b"\x01"
    with pytest.raises(guard.TooManyElements, match="this API allows"):
        decode_request(frame)


def test_as_many_elements_as_the_api_allows_decode() -> None:
    limit = guard.ELEMENT_LIMITS[3]
    frame = header(3, 4, False) + struct.pack(">i", limit) + b"\x00\x01t" * limit + b"\x01"
    _, request = decode_request(frame)
    assert len(request.topics) == limit
