"""Fuzzing what arrives from outside: the byte stream, request bodies, the group log on disk.

Each property says what a hostile input may cause: a frame error, a malformed request, a
corrupt-log error naming the file; never another exception, a hang, or (for request bodies)
kio's native reader being handed a count it would over-allocate for, which aborts the process.

The number of examples is bounded for `make test` (about half a minute in all) and raised by
`make fuzz` through REBALANCED_FUZZ_EXAMPLES.
"""

from __future__ import annotations

import asyncio
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_reader
from kio.serial.errors import SerialError
from kio.static.primitive import Records

from coordinator.grouplog.codec import RecordDecodeError, decode_record, encode_record
from coordinator.grouplog.log import GroupLog
from coordinator.grouplog.records import (
    GroupMemberRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from protocol.codec import decode_request
from protocol.errors import MalformedRequest, UnsupportedApi
from protocol.framing import FrameDecoder, FrameError
from protocol.guard import body_length
from protocol.legacy_versions import LEGACY_REQUESTS
from storage.log import CorruptLogError, LogConfig
from tests import fakes
from tests.served import served_versions

EXAMPLES = int(os.environ.get("REBALANCED_FUZZ_EXAMPLES", "250"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# kio registers strategies for its types but not for opaque record batches.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

# Versions kio has schemas for; the older ones (protocol/legacy_versions.py) are fuzzed below.
SCHEMAS = [(key, version) for key, (lo, hi) in sorted(served_versions().items())
           for version in range(lo, hi + 1) if (key, version) not in LEGACY_REQUESTS]


def request_bytes(key: int, version: int, body: Any, correlation_id: int = 1) -> bytes:
    return fakes.request_bytes(key, version, body, correlation_id, client_id="f")


@st.composite
def valid_requests(draw: st.DrawFn) -> tuple[int, int, bytes]:
    key, version = draw(st.sampled_from(SCHEMAS))
    body = draw(st.from_type(load_request_schema(key, version)))
    return key, version, request_bytes(key, version, body)


_HUGE_COUNTS = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x07",
                b"\x80\x80\x80\x80\x08", b"\x00\x10\x00\x00"]


@st.composite
def mutations(draw: st.DrawFn, frame: bytes) -> bytes:
    """Byte flips, truncation, a huge count spliced in, a wrong version, or appended junk."""
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "count", "version", "junk", "cut"]))
        if kind == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate" and len(data) > 8:
            del data[draw(st.integers(8, len(data) - 1)):]
        elif kind == "count" and len(data) > 8:
            at = draw(st.integers(8, len(data)))
            data[at:at] = draw(st.sampled_from(_HUGE_COUNTS))
        elif kind == "version" and len(data) >= 4:
            struct.pack_into(">h", data, 2, draw(st.integers(-1, 20)))
        elif kind == "junk":
            data += draw(st.binary(min_size=1, max_size=16))
        elif kind == "cut" and len(data) > 10:
            at = draw(st.integers(8, len(data) - 1))
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


def decode_outcome(frame: bytes) -> str:
    try:
        decode_request(frame)
    except (MalformedRequest, UnsupportedApi):
        return "refused"
    return "decoded"


@FUZZ
@given(valid_requests())
def test_every_valid_request_passes_the_guard_and_kio_agrees_on_its_length(
        request: tuple[int, int, bytes]) -> None:
    key, version, frame = request
    cls = load_request_schema(key, version)
    _, offset = entity_reader(cls.__header_schema__)(frame, 0)
    assert decode_outcome(frame) == "decoded"
    assert body_length(cls)(frame, offset, len(frame)) == len(frame) - offset


@FUZZ
@given(st.data())
def test_mutated_requests_decode_or_are_refused(data: st.DataObject) -> None:
    _, _, frame = data.draw(valid_requests())
    mutated = data.draw(mutations(frame))
    outcome = decode_outcome(mutated)  # an abort here would end the whole run
    if outcome == "decoded" and len(mutated) >= 8:
        # Where kio read a body, the guard walked the same fields to the same end.
        mkey, mversion = struct.unpack_from(">hh", mutated, 0)
        if (mkey, mversion) in LEGACY_REQUESTS:
            return  # a version mutated into an old one: read by hand, no kio guard to compare
        cls = load_request_schema(mkey, mversion)
        _, offset = entity_reader(cls.__header_schema__)(mutated, 0)
        try:
            _, size = entity_reader(cls)(mutated, offset)
        except (SerialError, KeyError, ValueError):
            return  # decoded only after its unknown tags were stripped
        assert body_length(cls)(mutated, offset, len(mutated)) == size


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_decode_or_are_refused(frame: bytes) -> None:
    decode_outcome(struct.pack(">hhi", 13, 4, 1) + frame)
    decode_outcome(frame)


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=30), st.lists(st.integers(1, 64), min_size=1))
def test_frame_decoder_splits_any_stream_or_refuses_it(chunks: list[bytes],
                                                       cuts: list[int]) -> None:
    stream = b"".join(chunks)
    decoder = FrameDecoder(max_frame_bytes=1024)
    frames: list[bytes] = []
    position = 0
    try:
        for cut in cuts * (len(stream) // max(sum(cuts), 1) + 1):
            if position >= len(stream):
                break
            frames += decoder.feed(stream[position:position + cut])
            position += cut
    except FrameError:
        return
    # What came out is a prefix of the stream, re-framed exactly.
    rebuilt = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    assert stream.startswith(rebuilt)
    assert len(rebuilt) + decoder.buffered == min(position, len(stream))


# -- the group log ---------------------------------------------------------------------------

def sample_records() -> list[Any]:
    return [
        OffsetCommitRecord(key=OffsetCommitKey(group="g", topic="t", partition=p),
                           value=OffsetCommitValue(offset=100 + p, commit_timestamp=7))
        for p in range(3)
    ] + [GroupMetadataRecord(
        key=GroupMetadataKey(group="g"),
        value=GroupMetadataValue(protocol_type="consumer", generation=3, protocol="range",
                                 leader="m-1", members=(GroupMemberRecord(
                                     member_id="m-1", client_id="c", client_host="/h",
                                     rebalance_timeout=30_000, session_timeout=10_000,
                                     subscription=b"sub", assignment=b"asg"),)))]


@FUZZ
@given(st.data())
def test_mutated_group_log_records_decode_or_raise_a_decode_error(data: st.DataObject) -> None:
    record = data.draw(st.sampled_from(sample_records()))
    key, value = encode_record(record)
    target = data.draw(st.sampled_from(["key", "value"]))
    raw = key if target == "key" or value is None else value
    mutated = data.draw(mutations(b"\x00" * 8 + raw))[8:]
    try:
        if target == "key":
            decode_record(mutated, value)
        else:
            decode_record(key, mutated)
    except RecordDecodeError:
        pass


_LOG_CONFIG = LogConfig(segment_bytes=1 << 20, retention_ms=-1, retention_bytes=-1)


def _written_group_log(path: Path) -> bytes:
    async def write() -> None:
        log = GroupLog.open(path, 1, _LOG_CONFIG, "always")
        try:
            for _ in range(3):
                await log.append(sample_records(), 1_000)
        finally:
            log.close()
    asyncio.run(write())
    (segment,) = (path / "__consumer_offsets-0").glob("*.log")
    return segment.read_bytes()


@settings(parent=FUZZ, max_examples=max(EXAMPLES // 3, 20))
@given(st.data())
def test_damaged_group_log_opens_replays_or_names_the_damage(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        original = _written_group_log(path)
        (segment,) = (path / "__consumer_offsets-0").glob("*.log")
        damaged = bytearray(original)
        for _ in range(data.draw(st.integers(1, 3))):
            if data.draw(st.booleans()):
                at = data.draw(st.integers(0, len(damaged) - 1))
                damaged[at] ^= 1 << data.draw(st.integers(0, 7))
            else:
                del damaged[data.draw(st.integers(0, len(damaged) - 1)):]
                if not damaged:
                    break
        segment.write_bytes(bytes(damaged))
        repair = data.draw(st.booleans())
        try:
            log = GroupLog.open(path, 1, _LOG_CONFIG, "always", repair=repair)
        except CorruptLogError as exc:
            assert not repair
            assert "__consumer_offsets-0" in str(exc)
            return
        try:
            for _ in log.replay_partition(0):
                pass
        except RecordDecodeError:
            pass  # a record whose batch CRC matched yet does not decode: named, not a crash
        finally:
            log.close()


@FUZZ
@given(st.sampled_from(sorted(LEGACY_REQUESTS)), st.binary(max_size=200))
def test_old_versions_decode_or_are_refused(version_of: tuple[int, int], body: bytes) -> None:
    key, version = version_of
    frame = struct.pack(">hhih", key, version, 1, 1) + b"c" + body  # header v1, client "c"
    assert decode_outcome(frame) in ("decoded", "refused")
