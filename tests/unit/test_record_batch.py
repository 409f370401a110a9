from __future__ import annotations

import struct

from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.records.readers import read_batch

from storage.record_batch import encode_batch, iter_records

records_strategy = st.lists(
    st.tuples(st.binary(max_size=40), st.one_of(st.none(), st.binary(max_size=200))),
    min_size=1, max_size=30)


@given(records_strategy, st.integers(0, 2**40))
def test_records_round_trip(records: list[tuple[bytes, bytes | None]], base: int) -> None:
    batch = encode_batch(records, 1_700_000_000_000, base)
    assert [(k, v) for _, k, v in iter_records(batch)] == records
    assert [o for o, _, _ in iter_records(batch)] == list(range(base, base + len(records)))


def test_batch_is_valid_for_an_independent_reader() -> None:
    batch = encode_batch([(b"key", b"value"), (b"gone", None)], 1234, 7)
    parsed, size = read_batch(batch, 0)  # checks the CRC-32C
    assert size == len(batch)
    assert [r.key for r in parsed.records] == [b"key", b"gone"]
    assert parsed.records[1].value is None


def _zigzag_varint(value: int, out: bytearray) -> None:
    value = (value << 1) ^ (value >> 63)
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _reference_batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int,
                     base_offset: int) -> bytes:
    """A plain transcription of the magic-2 layout, field by field."""
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        record = bytearray(b"\x00")  # attributes
        for field in (0, delta, len(key)):  # timestamp delta, offset delta, key length
            _zigzag_varint(field, record)
        record += key
        _zigzag_varint(-1 if value is None else len(value), record)
        record += value or b""
        _zigzag_varint(0, record)  # headers
        _zigzag_varint(len(record), body)
        body += record
    count = len(records)
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, timestamp_ms, timestamp_ms, -1, -1, -1,
                            count) + body
    return struct.pack(">qiibI", base_offset, 49 + len(body), 0, 2, crc32c(after_crc)) + after_crc


# Lengths around the one/two/three-byte varint boundaries (63/64, 8191/8192, 16383/16384).
_sizes = st.sampled_from([0, 1, 63, 64, 8191, 8192, 16383, 16384, 70_000])


@given(st.lists(st.tuples(st.binary(max_size=80) | _sizes.map(bytes),
                          st.none() | st.binary(max_size=200) | _sizes.map(bytes)),
                min_size=1, max_size=40),
       st.integers(0, 2**50), st.integers(0, 2**62))
@settings(max_examples=200, deadline=None)
def test_batch_bytes_match_the_reference_layout(
    records: list[tuple[bytes, bytes | None]], timestamp_ms: int, base: int
) -> None:
    assert encode_batch(records, timestamp_ms, base) == _reference_batch(records, timestamp_ms,
                                                                         base)


def test_batch_of_many_records_matches_the_reference_layout() -> None:
    records: list[tuple[bytes, bytes | None]] = [
        (i.to_bytes(3, "big"), None if i % 7 == 0 else b"v" * (i % 300)) for i in range(20_000)]
    assert encode_batch(records, 5, 9) == _reference_batch(records, 5, 9)
