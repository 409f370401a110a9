"""Kafka magic-2 record batch framing: split, check, stamp. Records inside stay opaque bytes.

A Produce `records` field is a run of record batches, each one

    offset  size  field
    0       8     baseOffset            i64   (rewritten by the broker)
    8       4     batchLength           i32   bytes after this field
    12      4     partitionLeaderEpoch  i32   (rewritten by the broker)
    16      1     magic                 i8    must be 2
    17      4     crc                   u32   CRC-32C of bytes 21 .. end
    21      2     attributes            i16
    23      4     lastOffsetDelta       i32
    27      8     baseTimestamp         i64
    35      8     maxTimestamp          i64
    43      8     producerId            i64
    51      2     producerEpoch         i16
    53      4     baseSequence          i32
    57      4     recordsCount          i32
    61      ...   records

all big-endian. Because the CRC starts at `attributes`, the broker can assign offsets by
rewriting bytes 0..8 (and stamp the leader epoch at 12..16) without recomputing it
(see notes/kio-and-clients.md §1.4). Only LogAppendTime changes covered bytes
(`set_log_append_time`).

This module never parses the records themselves, except `first_record_at_or_after`, which
ListOffsets needs for an exact answer and which only reads uncompressed batches.

Raises: `CorruptRecordError` (and its subclasses) for bad input; anything else is a bug.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from storage.crc import crc32c
from storage.varint import VarintError, read_varint

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_LOG_APPEND_TIME",
    "ATTR_TRANSACTIONAL",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchInfo",
    "CorruptRecordError",
    "InvalidRecordError",
    "MessageTooLargeError",
    "RawBatch",
    "batch_header",
    "first_record_at_or_after",
    "first_record_with_timestamp",
    "scan_batches",
    "set_base_offset",
    "set_leader_epoch",
    "set_log_append_time",
    "split_batches",
]

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a batch with no records
MAGIC = 2
_MAGIC_POS = 16
_CRC_POS = 17
_ATTRIBUTES_POS = 21
_MAX_TIMESTAMP_POS = 35

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
assert _HEADER.size == HEADER_SIZE


class CorruptRecordError(ValueError):
    """Bytes that are not a well-formed run of magic-2 record batches.

    `position` is the byte position of the offending batch in the buffer handed over;
    `truncated` is true when the data simply ends inside a batch (a torn write looks like that).
    Produce maps this to CORRUPT_MESSAGE.
    """

    def __init__(self, reason: str, *, position: int = -1, truncated: bool = False) -> None:
        super().__init__(reason if position < 0 else f"record batch at byte {position}: {reason}")
        self.reason = reason
        self.position = position
        self.truncated = truncated


class InvalidRecordError(CorruptRecordError):
    """Well-framed batches the log still refuses (empty batch, offset delta not matching the
    record count). Produce maps this to INVALID_RECORD."""


class MessageTooLargeError(CorruptRecordError):
    """A batch larger than the topic's `max.message.bytes`. Produce maps this to
    MESSAGE_TOO_LARGE."""


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The header fields the log needs, read from one batch."""

    base_offset: int
    last_offset_delta: int
    max_timestamp: int
    records_count: int
    size: int  # whole batch, LOG_OVERHEAD included
    producer_id: int
    attributes: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


# (start, end, base_offset, last_offset_delta, max_timestamp, records_count, producer_id,
#  attributes): what the scanner produces per batch, cheaper than a BatchInfo per batch when
# recovery walks a whole segment.
RawBatch = tuple[int, int, int, int, int, int, int, int]


def scan_batches(
    data: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    *,
    verify_crc: bool = True,
    expected_base: int | None = None,
) -> tuple[list[RawBatch], int, CorruptRecordError | None]:
    """Walk batches in `data[start:end]` and stop at the first problem. Never raises.

    Returns the batches read, the position just after the last good one (the end of the valid
    prefix), and the error that stopped the walk (None if it reached `end` cleanly). With
    `expected_base`, every batch's base offset must continue the previous one (the log's own
    files are contiguous; Produce input is not checked this way).
    """
    mv = data if isinstance(data, memoryview) else memoryview(data)
    stop = len(mv) if end is None else end
    out: list[RawBatch] = []
    unpack = _HEADER.unpack_from
    pos = start
    while pos < stop:
        remaining = stop - pos
        if remaining < HEADER_SIZE:
            if remaining > _MAGIC_POS and mv[pos + _MAGIC_POS] != MAGIC:
                return out, pos, _bad_magic(mv[pos + _MAGIC_POS], pos)
            if remaining >= LOG_OVERHEAD:
                length = _I32.unpack_from(mv, pos + 8)[0]
                if length < MIN_BATCH_LENGTH:
                    return out, pos, _bad_length(length, pos)
            return out, pos, CorruptRecordError(
                f"truncated: {remaining} bytes left, a batch header needs {HEADER_SIZE}",
                position=pos,
                truncated=True,
            )
        (base, length, _epoch, magic, crc, attributes, last_delta, _base_ts, max_ts,
         producer_id, _producer_epoch, _base_seq, count) = unpack(mv, pos)
        if magic != MAGIC:
            return out, pos, _bad_magic(magic, pos)
        if length < MIN_BATCH_LENGTH:
            return out, pos, _bad_length(length, pos)
        size = length + LOG_OVERHEAD
        if size > remaining:
            return out, pos, CorruptRecordError(
                f"truncated: batch_length {length} needs {size} bytes, {remaining} left",
                position=pos,
                truncated=True,
            )
        if verify_crc:
            actual = crc32c(mv[pos + _ATTRIBUTES_POS : pos + size])
            if actual != crc:
                return out, pos, CorruptRecordError(
                    f"CRC-32C mismatch (stored {crc:#010x}, computed {actual:#010x})",
                    position=pos,
                )
        if last_delta < 0 or count < 0:
            return out, pos, CorruptRecordError(
                f"negative last_offset_delta {last_delta} or records_count {count}",
                position=pos,
            )
        if expected_base is not None:
            if base != expected_base:
                return out, pos, CorruptRecordError(
                    f"base offset {base}, expected {expected_base}",
                    position=pos,
                )
            expected_base = base + last_delta + 1
        out.append((pos, pos + size, base, last_delta, max_ts, count, producer_id, attributes))
        pos += size
    return out, pos, None


def _bad_magic(magic: int, pos: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"magic {magic} is not supported (only magic 2)",
        position=pos,
    )


def _bad_length(length: int, pos: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"batch_length {length} is below the minimum {MIN_BATCH_LENGTH}",
        position=pos,
    )


def split_batches(
    data: bytes | bytearray | memoryview, verify_crc: bool = True
) -> list[tuple[int, int, BatchInfo]]:
    """The `(start, end, info)` of every batch in a Produce `records` field, in order.

    Raises `CorruptRecordError` on magic != 2, a bad length, a bad CRC, or bytes after the last
    complete batch (trailing garbage or a cut-off batch). Empty input gives an empty list.
    """
    batches, _, error = scan_batches(data, verify_crc=verify_crc)
    if error is not None:
        raise error
    return [
        (start, end, BatchInfo(base, delta, max_ts, count, end - start, producer_id, attrs))
        for start, end, base, delta, max_ts, count, producer_id, attrs in batches
    ]


def batch_header(data: bytes | bytearray | memoryview, start: int = 0) -> BatchInfo:
    """The header of the batch at `start` (no CRC check). Raises `CorruptRecordError` if
    fewer than `HEADER_SIZE` bytes are there."""
    if len(data) - start < HEADER_SIZE:
        raise CorruptRecordError(f"{len(data) - start} bytes cannot hold a batch header")
    (base, length, _epoch, _magic, _crc, attributes, last_delta, _base_ts, max_ts,
     producer_id, _producer_epoch, _base_seq, count) = _HEADER.unpack_from(data, start)
    return BatchInfo(
        base, last_delta, max_ts, count, length + LOG_OVERHEAD, producer_id, attributes
    )


def set_base_offset(buf: bytearray, start: int, base_offset: int) -> None:
    """Rewrite the base offset of the batch at `start`. The CRC stays valid."""
    _I64.pack_into(buf, start, base_offset)


def set_leader_epoch(buf: bytearray, start: int, epoch: int) -> None:
    """Stamp the partition leader epoch of the batch at `start`. The CRC stays valid."""
    _I32.pack_into(buf, start + 12, epoch)


def set_log_append_time(buf: bytearray, start: int, end: int, now_ms: int) -> None:
    """Mark the batch at `start..end` as LogAppendTime with max timestamp `now_ms`.

    Both fields are covered by the CRC, so it is recomputed (Kafka's
    `DefaultRecordBatch.setMaxTimestamp`).
    """
    attributes = _I16.unpack_from(buf, start + _ATTRIBUTES_POS)[0]
    _I16.pack_into(buf, start + _ATTRIBUTES_POS, attributes | ATTR_LOG_APPEND_TIME)
    _I64.pack_into(buf, start + _MAX_TIMESTAMP_POS, now_ms)
    _U32.pack_into(buf, start + _CRC_POS, crc32c(memoryview(buf)[start + _ATTRIBUTES_POS : end]))


def first_record_at_or_after(batch: bytes, timestamp_ms: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record in `batch` with timestamp >= `timestamp_ms`.

    The caller has already checked that the batch's max timestamp is >= `timestamp_ms`.
    For LogAppendTime every record carries the batch's max timestamp. A compressed batch is not
    opened: the answer is its base offset and max timestamp, which can be a few records early
    (a consumer seeking there re-reads them). Raises `CorruptRecordError` on malformed records.
    """
    info = batch_header(batch)
    if info.attributes & ATTR_LOG_APPEND_TIME or info.attributes & ATTR_COMPRESSION_MASK:
        return info.base_offset, info.max_timestamp
    for offset_delta, timestamp in _record_offsets_and_timestamps(batch, info):
        if timestamp >= timestamp_ms:
            return info.base_offset + offset_delta, timestamp
    return info.base_offset, info.max_timestamp


def first_record_with_timestamp(batch: bytes, timestamp_ms: int) -> int:
    """Offset of the first record in `batch` whose timestamp equals `timestamp_ms`.

    Used for ListOffsets MAX_TIMESTAMP (KIP-734). A compressed batch gives its last offset,
    which is what Kafka answered before it looked inside batches.
    """
    info = batch_header(batch)
    if info.attributes & ATTR_LOG_APPEND_TIME:
        return info.base_offset
    if info.attributes & ATTR_COMPRESSION_MASK:
        return info.last_offset
    for offset_delta, timestamp in _record_offsets_and_timestamps(batch, info):
        if timestamp == timestamp_ms:
            return info.base_offset + offset_delta
    return info.last_offset


def _record_offsets_and_timestamps(batch: bytes, info: BatchInfo) -> Iterator[tuple[int, int]]:
    """(offset delta, timestamp) of each record of an uncompressed batch.

    Raises `CorruptRecordError` when the records do not parse (a producer can send a batch
    whose CRC is right but whose records are not; Append does not look inside).
    """
    if len(batch) < HEADER_SIZE or info.records_count < 0:
        raise CorruptRecordError("batch too short or negative record count")
    base_timestamp = _I64.unpack_from(batch, 27)[0]
    pos = HEADER_SIZE
    for _ in range(info.records_count):
        try:
            length, body = read_varint(batch, pos)
            if length < 3 or body + length > len(batch):
                raise CorruptRecordError(f"record length {length} at byte {pos} is out of range")
            ts_delta, p = read_varint(batch, body + 1)  # skip the record's attributes byte
            offset_delta, _ = read_varint(batch, p)
        except (IndexError, VarintError):
            raise CorruptRecordError(f"malformed varint in a record at byte {pos}") from None
        yield offset_delta, base_timestamp + ts_delta
        pos = body + length
