"""Conversion between legacy message sets (magic 0/1) and the log's magic-2 record batches.

Up-conversion (Produce v0-v2): a producer's message set becomes one magic-2 batch holding every
message, in order, before anything is appended. Offsets are the log's to assign, as for any
produce; magic-1 timestamps are kept (magic 0 has none: -1), and a compressed wrapper's messages
go into a batch compressed with the same codec. Checks, as Kafka's log validator makes them:
every CRC (CORRUPT_MESSAGE); no compression nested in a wrapper; a magic-1 wrapper's inner
offsets must run 0, 1, 2, ... once placed against the wrapper's offset (INVALID_RECORD).

Down-conversion (Fetch v0-v3): magic-2 batches read from the log become messages of the magic
the fetch version understands (0 for v0-v1, 1 for v2-v3). An uncompressed batch gives one
message per record at or after the fetch offset; a compressed batch gives one wrapper message
with its records recompressed inside (relative inner offsets for magic 1, absolute for magic 0;
the wrapper carries the last offset). Headers cannot be expressed before magic 2 and are
dropped, control batches (transaction markers) are skipped, and a LogAppendTime batch stamps its
append time on every message, as Kafka's down-conversion does. Output is whole messages only,
cut at `max_bytes` (the first message always goes, so a consumer is never stuck behind one large
message). A batch that cannot be converted raises before any output is returned, so nothing
half-converted is served.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from storage.batch import (
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    CorruptRecordError,
    InvalidRecordError,
)
from storage.crc import crc32c
from storage.legacy import (
    CODEC_MASK,
    CODEC_NONE,
    GZIP_LEVEL_FAST,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    UnsupportedCompressionError,
    compress,
    decompress,
    encode_message,
    inner_messages,
    read_message_set,
)
from storage.varint import VarintError, read_varint, write_varint

try:
    from storage import _legacy_speedups as _speedups  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install time: the Python loop below does the same
    _speedups = None

__all__ = ["down_convert", "encode_v2_batch", "up_convert"]

_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_BATCH_HEAD = struct.Struct(">qiibI")  # base offset .. crc: outside the CRC
_BATCH_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count: inside it
_BATCH_HEADER_SIZE = 61
_I32 = struct.Struct(">i")
_MSG_HEAD = struct.Struct(">qiI")  # offset, size, crc
_V0_PREFIX = struct.Struct(">bbi")  # magic, attributes, key length
_V1_PREFIX = struct.Struct(">bbqi")  # magic, attributes, timestamp, key length
_NULL_LENGTH = _I32.pack(-1)
_NULL = -1


# ------------------------------------------------------------------------------- up-conversion


def up_convert(data: bytes | bytearray | memoryview) -> bytes:
    """A producer's legacy message set as one magic-2 batch (offsets from 0, to be assigned).

    Raises `CorruptRecordError` (bad CRC or framing), `InvalidRecordError` (nested compression,
    inconsistent inner offsets, an empty set), `UnsupportedCompressionError`.
    """
    if len(data) > 16 and data[16] not in (0, 1):
        raise InvalidRecordError(f"magic {data[16]} in a legacy produce request: magic-2 record "
                                 "batches need Produce v3 or later", position=0)
    messages = read_message_set(data)
    if not messages:
        raise InvalidRecordError("a produce request must carry at least one message")
    records: list[tuple[int, bytes | None, bytes | None]] = []
    codec = CODEC_NONE
    for message in messages:
        if message.codec == CODEC_NONE:
            records.append((message.timestamp, message.key, message.value))
            continue
        inner = inner_messages(message)
        if message.magic > 0:
            # Kafka places relative inner offsets against the wrapper's (the last inner
            # message's absolute offset); a wrapper offset below the last inner offset means
            # the producer left it unset and the inner offsets stand as they are.
            shift = message.offset - inner[-1].offset
            for expected, item in enumerate(inner):
                placed = item.offset + shift if shift >= 0 else item.offset
                if placed != expected:
                    raise InvalidRecordError(
                        f"inner message offsets of a compressed message must run 0, 1, 2, ...: "
                        f"message {expected} has offset {placed}")
        stamp = message.timestamp if message.log_append_time else None
        records.extend((item.timestamp if stamp is None else stamp, item.key, item.value)
                       for item in inner)
        codec = message.codec
    return encode_v2_batch(records, codec)


def encode_v2_batch(records: Sequence[tuple[int, bytes | None, bytes | None]],
                    codec: int = CODEC_NONE) -> bytes:
    """A magic-2 batch of (timestamp, key, value) records, offsets 0..n-1, no producer id."""
    base_timestamp = records[0][0]
    max_timestamp = max(r[0] for r in records)
    body = bytearray()
    record = bytearray()
    for delta, (timestamp, key, value) in enumerate(records):
        record.clear()
        record.append(0)  # record attributes
        write_varint(timestamp - base_timestamp, record)
        write_varint(delta, record)
        if key is None:
            write_varint(-1, record)
        else:
            write_varint(len(key), record)
            record += key
        if value is None:
            write_varint(-1, record)
        else:
            write_varint(len(value), record)
            record += value
        record.append(0)  # no headers
        write_varint(len(record), body)
        body += record
    payload = bytes(body)
    if codec != CODEC_NONE:
        payload = compress(codec, payload)
    count = len(records)
    tail = _BATCH_TAIL.pack(codec, count - 1, base_timestamp, max_timestamp, -1, -1, -1, count)
    crc = crc32c(payload, crc32c(tail))
    head = _BATCH_HEAD.pack(0, _BATCH_HEADER_SIZE - 12 + len(payload), 0, 2, crc)
    return head + tail + payload


# ----------------------------------------------------------------------------- down-conversion


def down_convert(data: bytes, magic: int, fetch_offset: int, max_bytes: int, *,
                 at_least_one: bool = True) -> bytes:
    """Magic-2 batches (as read from the log) as a message set of `magic` (0 or 1).

    Whole messages only, at most `max_bytes` of them, except that with `at_least_one` the first
    message goes out whatever its size. Raises `UnsupportedCompressionError` for a codec that
    cannot be converted (zstd never can before magic 2; snappy/lz4 have no codec here) and
    `CorruptRecordError` for batches whose records do not parse.
    """
    out: list[bytes] = []
    total = 0
    pos = 0
    end = len(data)
    unpack = _BATCH_HEADER.unpack_from
    while pos + _BATCH_HEADER_SIZE <= end:
        (base_offset, length, _epoch, batch_magic, _crc, attributes, last_delta, base_timestamp,
         max_timestamp, _pid, _pepoch, _seq, count) = unpack(data, pos)
        batch_end = pos + 12 + length
        if batch_magic != 2 or batch_end > end:
            raise CorruptRecordError("not a whole magic-2 batch", position=pos)
        if attributes & ATTR_CONTROL:
            pos = batch_end
            continue
        codec = attributes & CODEC_MASK
        append_time = max_timestamp if attributes & ATTR_LOG_APPEND_TIME else None
        message_attributes = LOG_APPEND_TIME if magic and append_time is not None else 0
        payload = data[pos + _BATCH_HEADER_SIZE:batch_end]
        if codec == CODEC_NONE:
            budget = max(max_bytes - total, 0)
            converted, used, full = _convert_records(
                payload, count, base_offset, base_timestamp, append_time, magic,
                message_attributes, fetch_offset,
                None if at_least_one and not out else budget, budget)
            out.extend(converted)
            total += used
            if full:
                break
        else:
            try:
                payload = decompress(codec, payload, position=pos)
            except UnsupportedCompressionError:
                if out:
                    break  # serve what converted; the next fetch starts at this batch
                raise
            inner, _, _ = _convert_records(
                payload, count, base_offset, base_timestamp, append_time, magic,
                message_attributes, -1, None, None,
                relative_to=base_offset if magic else None)
            if not inner:
                pos = batch_end
                continue
            # The wrapper's timestamp is its messages' largest, which the batch header holds
            # (and with LogAppendTime the append time, which it holds too).
            wrapper = encode_message(
                base_offset + last_delta, magic, codec | message_attributes,
                max_timestamp if magic else NO_TIMESTAMP, None,
                compress(codec, b"".join(inner), level=GZIP_LEVEL_FAST))
            if total + len(wrapper) > max_bytes and not (at_least_one and not out):
                break
            out.append(wrapper)
            total += len(wrapper)
        pos = batch_end
    return b"".join(out)


def _convert_records(payload: bytes, count: int, base_offset: int, base_timestamp: int,
                     append_time: int | None, magic: int, attributes: int, fetch_offset: int,
                     first_budget: int | None, budget: int | None, *,
                     relative_to: int | None = None) -> tuple[list[bytes], int, bool]:
    """Legacy messages for the records of one uncompressed payload.

    Returns (messages, their total size, whether the budget stopped the walk). The first
    message may use `first_budget` bytes, all of them together `budget`; None is no limit.
    The C loop (`storage/_legacy_speedups.c`) does the same when it was built.
    """
    if _speedups is None:
        return _convert_records_py(payload, count, base_offset, base_timestamp, append_time,
                                   magic, attributes, fetch_offset, first_budget, budget,
                                   relative_to=relative_to)
    try:
        chunk, used, full = _speedups.convert_records(
            payload, count, base_offset, base_timestamp, append_time is not None,
            append_time or 0, magic, attributes, fetch_offset,
            -1 if first_budget is None else first_budget, -1 if budget is None else budget,
            relative_to is not None, relative_to or 0)
    except ValueError as exc:
        raise CorruptRecordError(f"records of a batch do not parse: {exc}") from None
    return ([chunk] if chunk else []), used, full


def _convert_records_py(payload: bytes, count: int, base_offset: int, base_timestamp: int,
                     append_time: int | None, magic: int, attributes: int, fetch_offset: int,
                     first_budget: int | None, budget: int | None, *,
                     relative_to: int | None = None) -> tuple[list[bytes], int, bool]:
    out: list[bytes] = []
    used = 0
    limit = first_budget
    pos = 0
    size = len(payload)
    crc32 = zlib.crc32
    head = _MSG_HEAD.pack
    prefix = _V1_PREFIX.pack if magic else None
    prefix0 = _V0_PREFIX.pack
    i32 = _I32.pack
    try:
        for _ in range(count):
            # record length, attributes, timestamp delta, offset delta: zig-zag varints
            b = payload[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = read_varint(payload, pos)
            record_end = pos + length
            if length < 1 or record_end > size:
                raise CorruptRecordError(f"record length {length} out of range at byte {pos}")
            pos += 1  # record attributes (unused)
            b = payload[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = read_varint(payload, pos)
            b = payload[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = read_varint(payload, pos)
            offset = base_offset + offset_delta
            if offset < fetch_offset:
                pos = record_end
                continue
            b = payload[pos]
            if b < 0x80:
                key_length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                key_length, pos = read_varint(payload, pos)
            if key_length < 0:
                key = b""
            else:
                if pos + key_length > record_end:
                    raise CorruptRecordError(f"key runs past its record at byte {pos}")
                key = payload[pos:pos + key_length]
                pos += key_length
            b = payload[pos]
            if b < 0x80:
                value_length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                value_length, pos = read_varint(payload, pos)
            if value_length < 0:
                value_part = _NULL_LENGTH
            else:
                value_part = i32(value_length) + payload[pos:pos + value_length]
            if pos + max(value_length, 0) > record_end:
                raise CorruptRecordError(f"value runs past its record at byte {pos}")
            pos = record_end  # headers: dropped, they have no legacy form
            if relative_to is not None:
                offset -= relative_to
            if prefix is not None:
                timestamp = base_timestamp + ts_delta if append_time is None else append_time
                body = b"".join((prefix(1, attributes, timestamp, key_length), key, value_part))
            else:
                body = b"".join((prefix0(0, attributes, key_length), key, value_part))
            message = head(offset, len(body) + 4, crc32(body)) + body
            if limit is not None and used + len(message) > limit:
                return out, used, True
            limit = budget
            out.append(message)
            used += len(message)
    except (IndexError, VarintError):
        raise CorruptRecordError("records of a batch do not parse") from None
    return out, used, False
