"""`storage/batch.py`: splitting, checking and stamping magic-2 record batches."""

from __future__ import annotations

import io
import struct
from datetime import UTC, datetime

import pytest
from kio.records import readers
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from storage.batch import (
    ATTR_LOG_APPEND_TIME,
    HEADER_SIZE,
    CorruptRecordError,
    batch_header,
    first_record_at_or_after,
    first_record_with_timestamp,
    set_base_offset,
    set_log_append_time,
    split_batches,
)
from tests.unit._batches import decode, make_batch


def kio_batch(values: list[bytes], timestamp_ms: int = 1_700_000_000_000) -> bytes:
    stamp = TZAwareMicros.parse(datetime.fromtimestamp(timestamp_ms / 1000, UTC))
    records = tuple(
        Record(attributes=i8(0), timestamp=stamp, offset=i64(i), key=None, value=v, headers=())
        for i, v in enumerate(values)
    )
    buf = io.BytesIO()
    write_batch(
        buf,
        NewRecordBatch(
            producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1),
            records=records, attributes=i16(0),
        ),
    )
    return buf.getvalue()


def test_split_one_batch_reports_header_fields() -> None:
    data = make_batch([b"a", b"b", b"c"], timestamps=[10, 30, 20], producer_id=7)
    [(start, end, info)] = split_batches(data)
    assert (start, end) == (0, len(data))
    assert info.last_offset_delta == 2
    assert info.records_count == 3
    assert info.max_timestamp == 30
    assert info.size == len(data)
    assert info.producer_id == 7
    assert info.attributes == 0


def test_split_several_batches_gives_their_slices() -> None:
    first, second = make_batch([b"x"]), make_batch([b"y", b"z"])
    result = split_batches(first + second)
    assert [(s, e) for s, e, _ in result] == [(0, len(first)), (len(first), len(first + second))]


def test_split_accepts_a_batch_written_by_kio() -> None:
    data = kio_batch([b"hello", b"world"])
    [(_, _, info)] = split_batches(data)
    assert info.records_count == 2


def test_split_empty_input_is_empty() -> None:
    assert split_batches(b"") == []


def test_split_rejects_a_bad_crc() -> None:
    data = bytearray(make_batch([b"payload"]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch") as info:
        split_batches(bytes(data))
    assert info.value.position == 0


def test_split_without_crc_check_accepts_a_bad_crc() -> None:
    data = bytearray(make_batch([b"payload"]))
    data[-1] ^= 0xFF
    assert len(split_batches(bytes(data), verify_crc=False)) == 1


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_split_rejects_other_magic(magic: int) -> None:
    data = bytearray(make_batch([b"v"]))
    data[16] = magic
    with pytest.raises(CorruptRecordError, match=f"magic {magic}"):
        split_batches(bytes(data))


def test_split_rejects_a_short_old_format_message_by_its_magic() -> None:
    # A magic-0 message set entry is shorter than a v2 header; the magic still decides.
    data = struct.pack(">qiIbb", 0, 14, 0, 0, 0) + b"\xff\xff\xff\xff" + b"\xff\xff\xff\xff"
    with pytest.raises(CorruptRecordError, match="magic 0"):
        split_batches(data)


def test_split_rejects_a_length_below_the_header() -> None:
    data = bytearray(make_batch([b"v"]))
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(CorruptRecordError, match="batch_length 10"):
        split_batches(bytes(data))


def test_split_rejects_trailing_garbage() -> None:
    data = make_batch([b"v"])
    with pytest.raises(CorruptRecordError) as info:
        split_batches(data + b"\x00\x01\x02")
    assert info.value.position == len(data)
    assert info.value.truncated


def test_split_rejects_a_cut_off_batch_and_names_its_position() -> None:
    first = make_batch([b"a"])
    second = make_batch([b"b" * 100])
    with pytest.raises(CorruptRecordError, match=f"at byte {len(first)}") as info:
        split_batches(first + second[:-5])
    assert info.value.truncated


def test_set_base_offset_keeps_the_crc_valid() -> None:
    buf = bytearray(make_batch([b"a", b"b"]))
    set_base_offset(buf, 0, 1234)
    assert decode(bytes(buf)) == [(1234, b"a"), (1235, b"b")]
    assert split_batches(bytes(buf))[0][2].base_offset == 1234


def test_set_log_append_time_rewrites_crc() -> None:
    buf = bytearray(make_batch([b"a"], timestamp_ms=5))
    set_log_append_time(buf, 0, len(buf), 99_000)
    [(_, _, info)] = split_batches(bytes(buf))  # CRC still valid
    assert info.max_timestamp == 99_000
    assert info.attributes & ATTR_LOG_APPEND_TIME
    readers.read_batch(bytes(buf), 0)


def test_first_record_at_or_after_finds_the_record_inside_the_batch() -> None:
    data = make_batch([b"a", b"b", b"c"], base_offset=10, timestamps=[100, 300, 200])
    assert first_record_at_or_after(data, 150) == (11, 300)
    assert first_record_at_or_after(data, 100) == (10, 100)
    assert first_record_at_or_after(data, 300) == (11, 300)


def test_first_record_at_or_after_a_compressed_batch_answers_the_batch() -> None:
    data = make_batch([b"a", b"b"], base_offset=4, timestamps=[1, 9], attributes=1)
    assert first_record_at_or_after(data, 5) == (4, 9)


def test_first_record_with_timestamp_finds_the_max() -> None:
    data = make_batch([b"a", b"b", b"c"], base_offset=20, timestamps=[5, 9, 9])
    assert first_record_with_timestamp(data, 9) == 21


def test_batch_header_reads_the_header() -> None:
    data = make_batch([b"a", b"b"], base_offset=3)
    info = batch_header(data)
    assert (info.base_offset, info.last_offset, info.size) == (3, 4, len(data))
    assert len(data) > HEADER_SIZE
