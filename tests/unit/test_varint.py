"""Kafka's varints (`storage.varint`): round trips, the longest forms, and truncation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.varint import (
    VarintError,
    read_uvarint,
    read_varint,
    uvarint_bytes,
    varint_bytes,
    write_varint,
)

SIGNED_64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
UNSIGNED_32 = st.integers(min_value=0, max_value=2**32 - 1)


@given(SIGNED_64, st.binary(max_size=4))
def test_a_signed_varint_reads_back_and_says_where_it_ends(value: int, tail: bytes) -> None:
    out = bytearray(b"\x01")
    write_varint(value, out)
    assert read_varint(bytes(out) + tail, 1) == (value, len(out))
    assert bytes(out[1:]) == varint_bytes(value)


@given(UNSIGNED_32, st.binary(max_size=4))
def test_an_unsigned_varint_reads_back_and_says_where_it_ends(value: int, tail: bytes) -> None:
    encoded = uvarint_bytes(value)
    assert read_uvarint(encoded + tail, 0) == (value, len(encoded))


@pytest.mark.parametrize(("value", "encoded"), [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
    (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"), (-(2**63), b"\xff" * 9 + b"\x01"),
])
def test_zig_zag_matches_kafka(value: int, encoded: bytes) -> None:
    assert varint_bytes(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))


def test_an_unsigned_varint_stops_at_five_bytes() -> None:
    assert read_uvarint(b"\xff\xff\xff\xff\x0f", 0) == (2**32 - 1, 5)
    with pytest.raises(VarintError):
        read_uvarint(b"\xff" * 5 + b"\x01", 0)


def test_a_signed_varint_stops_at_ten_bytes() -> None:
    with pytest.raises(VarintError):
        read_varint(b"\xff" * 10 + b"\x01", 0)


@given(st.binary(max_size=12), st.integers(min_value=0, max_value=12))
def test_arbitrary_bytes_give_a_value_or_one_of_two_errors(data: bytes, pos: int) -> None:
    for read in (read_varint, read_uvarint):
        try:
            _, end = read(data, pos)
        except (IndexError, VarintError):
            continue
        assert pos < end <= len(data)
