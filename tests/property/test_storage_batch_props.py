"""The batch splitter on arbitrary bytes: only `CorruptRecordError`, never anything else."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.batch import (
    HEADER_SIZE,
    CorruptRecordError,
    first_record_at_or_after,
    first_record_with_timestamp,
    scan_batches,
    split_batches,
)
from tests.unit._batches import make_batch

values = st.lists(st.binary(max_size=40) | st.none(), min_size=1, max_size=5)
batches = st.builds(
    lambda vs, ts: make_batch(vs, timestamp_ms=ts),
    values,
    st.integers(0, 2**40),
)


@given(st.binary(max_size=3000))
def test_split_of_arbitrary_bytes_raises_only_corrupt_record_error(data: bytes) -> None:
    try:
        result = split_batches(data)
    except CorruptRecordError:
        return
    assert sum(info.size for _, _, info in result) == len(data)


@given(st.lists(batches, max_size=5), st.binary(max_size=200))
def test_scan_returns_the_valid_prefix_of_batches_plus_garbage(
    good: list[bytes], garbage: bytes
) -> None:
    data = b"".join(good) + garbage
    found, end, error = scan_batches(data)
    # The garbage could by chance start with a valid batch only if it were one; it is random,
    # so the prefix is at least the good batches and stops inside or at the end of garbage.
    assert [(s, e) for s, e, *_ in found[: len(good)]] == _slices(good)
    assert end >= len(b"".join(good))
    assert (error is None) == (end == len(data))


@given(st.lists(batches, min_size=1, max_size=5), st.data())
def test_a_flipped_byte_is_caught_or_outside_the_crc(
    good: list[bytes], data: st.DataObject
) -> None:
    raw = bytearray(b"".join(good))
    position = data.draw(st.integers(0, len(raw) - 1))
    raw[position] ^= data.draw(st.integers(1, 255))
    try:
        split_batches(bytes(raw))
    except CorruptRecordError:
        return
    # Only the bytes the CRC does not cover and nobody checks may change unnoticed:
    # the base offset and the partition leader epoch.
    start = max(s for s, _ in _slices(good) if s <= position)
    assert position - start in range(0, 8) or position - start in range(12, 16)


@given(st.binary(min_size=0, max_size=400), st.integers(-(2**40), 2**40))
def test_record_parsing_of_arbitrary_records_raises_only_corrupt_record_error(
    records: bytes, timestamp: int
) -> None:
    header = make_batch([b"x"])[:HEADER_SIZE]
    batch = header + records
    for parse in (first_record_at_or_after, first_record_with_timestamp):
        with contextlib.suppress(CorruptRecordError):
            parse(batch, timestamp)


@settings(max_examples=50)
@given(st.binary(max_size=HEADER_SIZE + 10), st.integers(0, 2**31))
def test_record_parsing_with_a_huge_record_count_ends(records: bytes, count: int) -> None:
    header = bytearray(make_batch([b"x"])[:HEADER_SIZE])
    header[57:61] = count.to_bytes(4, "big")
    with contextlib.suppress(CorruptRecordError):
        first_record_at_or_after(bytes(header) + records, 2**62)


def _slices(good: list[bytes]) -> list[tuple[int, int]]:
    out = []
    pos = 0
    for batch in good:
        out.append((pos, pos + len(batch)))
        pos += len(batch)
    return out
