"""Up- and down-conversion between legacy message sets and magic-2 batches: limits and bad input.

Magic-2 batches are built with kafka-python's `DefaultRecordBatchBuilder`, legacy sets with its
`LegacyRecordBatchBuilder`: what real producers send.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from storage import legacy_convert
from storage.batch import CorruptRecordError, InvalidRecordError
from storage.legacy import (
    LOG_APPEND_TIME,
    UnsupportedCompressionError,
    encode_message,
    inner_messages,
    read_message_set,
)
from storage.legacy_convert import down_convert, up_convert

TS = 1_700_000_000_000


def v2_batch(values: list[bytes], *, base_offset: int = 0, codec: int = 0,
             headers: bool = False, attributes: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 22)
    for i, value in enumerate(values):
        builder.append(i, TS + i, b"k%d" % i, value,
                       [("h", b"header")] if headers else [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    if attributes:
        flags = struct.unpack_from(">h", data, 21)[0] | attributes
        struct.pack_into(">h", data, 21, flags)
        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def legacy_set(magic: int, values: list[bytes], codec: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 22)
    for i, value in enumerate(values):
        builder.append(i, TS + i if magic else None, None, value)
    return bytes(builder.build())


# ------------------------------------------------------------------------------ down


@pytest.mark.parametrize("magic", [0, 1])
def test_down_conversion_keeps_offsets_keys_values_and_drops_headers(magic: int) -> None:
    data = v2_batch([b"a", b"bb", b"ccc"], base_offset=40, headers=True)
    messages = read_message_set(down_convert(data, magic, 40, 1 << 20))
    assert [(m.offset, m.magic, m.key, m.value) for m in messages] == [
        (40, magic, b"k0", b"a"), (41, magic, b"k1", b"bb"), (42, magic, b"k2", b"ccc")]
    assert [m.timestamp for m in messages] == ([TS, TS + 1, TS + 2] if magic else [-1] * 3)


def test_records_before_the_fetch_offset_are_left_out_of_an_uncompressed_batch() -> None:
    data = v2_batch([b"a", b"b", b"c", b"d"], base_offset=10)
    assert [m.offset for m in read_message_set(down_convert(data, 1, 12, 1 << 20))] == [12, 13]


def test_compressed_batch_becomes_one_wrapper_with_relative_inner_offsets() -> None:
    values = [b"a" * 50, b"b" * 50, b"c" * 50]  # compressible: kafka-python keeps it gzip
    data = v2_batch(values, base_offset=100, codec=1)
    assert struct.unpack_from(">h", data, 21)[0] & 0x07 == 1
    (wrapper,) = read_message_set(down_convert(data, 1, 101, 1 << 20))
    assert (wrapper.offset, wrapper.codec, wrapper.timestamp) == (102, 1, TS + 2)
    assert [(m.offset, m.value) for m in inner_messages(wrapper)] == list(enumerate(values))
    (wrapper0,) = read_message_set(down_convert(data, 0, 100, 1 << 20))
    assert [m.offset for m in inner_messages(wrapper0)] == [100, 101, 102]  # absolute


def test_log_append_time_is_stamped_on_every_message() -> None:
    data = v2_batch([b"a", b"b"], attributes=0x08)
    append_time = struct.unpack_from(">q", data, 35)[0]
    messages = read_message_set(down_convert(data, 1, 0, 1 << 20))
    assert {(m.timestamp, bool(m.attributes & LOG_APPEND_TIME)) for m in messages} == {
        (append_time, True)}


def test_control_batches_are_skipped() -> None:
    data = v2_batch([b"marker"], attributes=0x20) + v2_batch([b"data"], base_offset=1)
    assert [m.value for m in read_message_set(down_convert(data, 1, 0, 1 << 20))] == [b"data"]


def test_max_bytes_cuts_between_messages_and_the_first_always_goes() -> None:
    data = v2_batch([b"x" * 100] * 5)
    one = len(encode_message(0, 1, 0, TS, b"k0", b"x" * 100))
    assert len(down_convert(data, 1, 0, one * 3 - 1)) == one * 2
    assert len(down_convert(data, 1, 0, 10)) == one  # larger than the limit, still served
    assert down_convert(data, 1, 0, 10, at_least_one=False) == b""


@pytest.mark.parametrize("codec", [2, 3, 4])  # snappy, lz4, zstd
def test_unconvertible_codec_is_refused_or_cuts_the_response(codec: int) -> None:
    # Only the header matters: conversion stops at the codec before reading the payload.
    batch = v2_batch([b"a"], base_offset=1, attributes=codec)
    with pytest.raises(UnsupportedCompressionError):
        down_convert(batch, 1, 1, 1 << 20)
    served = down_convert(v2_batch([b"first"]) + batch, 1, 0, 1 << 20)
    assert [m.value for m in read_message_set(served)] == [b"first"]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=20),
       max_bytes=st.integers(1, 4000), fetch_at=st.integers(0, 19), magic=st.sampled_from([0, 1]))
def test_down_conversion_serves_whole_messages_within_max_bytes(
        sizes: list[int], max_bytes: int, fetch_at: int, magic: int) -> None:
    values = [bytes([i]) * size for i, size in enumerate(sizes)]
    half = len(values) // 2
    data = v2_batch(values[:half] or [b"-"], base_offset=0) + v2_batch(
        values[half:], base_offset=max(half, 1))
    fetch_offset = min(fetch_at, len(values) - 1)
    out = down_convert(data, magic, fetch_offset, max_bytes)
    messages = read_message_set(out)  # whole messages only, every CRC valid
    assert messages, "the first message always goes"
    assert len(out) <= max_bytes or len(messages) == 1
    offsets = [m.offset for m in messages]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    assert offsets[0] == fetch_offset


# ------------------------------------------------------------------------------ up


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1])
def test_a_flipped_byte_is_a_corrupt_message(magic: int, codec: int) -> None:
    data = bytearray(legacy_set(magic, [b"a", b"b"], codec))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError) as raised:
        up_convert(bytes(data))
    assert not isinstance(raised.value, InvalidRecordError)  # CORRUPT_MESSAGE, not INVALID_RECORD


def _wrapper_around(magic: int, inner: list[bytes], offset: int = 0) -> bytes:
    payload = gzip.compress(b"".join(inner))
    return encode_message(offset, magic, 1, TS if magic else -1, None, payload)


def test_inconsistent_inner_offsets_are_an_invalid_record() -> None:
    inner = [encode_message(o, 1, 0, TS, None, b"v") for o in (0, 1, 5)]
    with pytest.raises(InvalidRecordError, match="inner message offsets"):
        up_convert(_wrapper_around(1, inner, offset=5))
    # the same inner offsets placed against a wrapper offset beyond them
    consistent = [encode_message(o, 1, 0, TS, None, b"v") for o in (0, 1, 2)]
    with pytest.raises(InvalidRecordError):
        up_convert(_wrapper_around(1, consistent, offset=9))
    up_convert(_wrapper_around(1, consistent, offset=2))  # as a Java producer sends it
    up_convert(_wrapper_around(1, consistent, offset=0))  # as kafka-python sends it


def test_nested_compression_is_an_invalid_record() -> None:
    nested = _wrapper_around(1, [encode_message(0, 1, 0, TS, None, b"v")])
    with pytest.raises(InvalidRecordError, match="nested"):
        up_convert(_wrapper_around(1, [nested]))


def test_magic_2_batches_in_a_legacy_produce_are_an_invalid_record() -> None:
    with pytest.raises(InvalidRecordError, match="Produce v3"):
        up_convert(v2_batch([b"a"]))


def test_a_truncated_set_is_a_corrupt_message() -> None:
    data = legacy_set(1, [b"abc", b"def"])
    with pytest.raises(CorruptRecordError):
        up_convert(data[:-2])


def test_snappy_wrapper_is_unsupported_compression() -> None:
    wrapper = encode_message(0, 1, 2, TS, None, b"not really snappy")
    with pytest.raises(UnsupportedCompressionError):
        up_convert(wrapper)


def test_legacy_crc_is_zlibs_crc32_of_magic_onwards() -> None:
    message = encode_message(7, 1, 0, TS, b"k", b"v")
    assert struct.unpack_from(">I", message, 12)[0] == zlib.crc32(message[16:])


# ------------------------------------------------------------------------------ C and Python


def _python_loop(fn: Any) -> Any:
    saved = legacy_convert._speedups
    legacy_convert._speedups = None
    try:
        return fn()
    except CorruptRecordError as exc:
        return type(exc)
    finally:
        legacy_convert._speedups = saved


def _either(fn: Any) -> Any:
    try:
        return fn()
    except CorruptRecordError as exc:
        return type(exc)


@pytest.mark.skipif(legacy_convert._speedups is None, reason="the C loop was not built")
@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.binary(max_size=200), min_size=1, max_size=15),
       fetch_at=st.integers(0, 16), max_bytes=st.integers(0, 3000),
       magic=st.sampled_from([0, 1]), attributes=st.sampled_from([0, 0x08]),
       headers=st.booleans(), cut=st.integers(0, 5))
def test_c_and_python_loops_give_the_same_bytes(
        values: list[bytes], fetch_at: int, max_bytes: int, magic: int, attributes: int,
        headers: bool, cut: int) -> None:
    data = v2_batch(values, base_offset=3, headers=headers, attributes=attributes)
    if cut:  # a batch whose records are cut short (the header still claims them all)
        data = data[:-cut]
        data = data[:8] + struct.pack(">i", len(data) - 12) + data[12:]

    def convert() -> Any:
        return down_convert(data, magic, 3 + fetch_at, max_bytes)

    assert _either(convert) == _python_loop(convert)
