"""Build magic-2 record batches of key/value records, and read the records back out.

The group log stores its records exactly as Kafka stores `__consumer_offsets`: uncompressed
record batches whose records carry the serialized key and value (a null value is a tombstone).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from storage.crc import crc32c
from storage.varint import read_varint, varint_bytes

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_CRC_START = 21  # attributes onwards are covered by the CRC


# Zigzag varints of 0..1023, where the lengths and offset deltas of nearly every group-log
# record fall; larger values are encoded as they come.
_SMALL_VARINTS = [varint_bytes(n) for n in range(1 << 10)]
_NULL_LENGTH = varint_bytes(-1)
_HEAD = struct.Struct(">qiibI")  # base offset .. crc: what the CRC does not cover
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count: covered by the CRC
_ATTRIBUTES_AND_TIMESTAMP_DELTA = b"\x00\x00"  # no attributes, timestamp delta 0
_NO_HEADERS = b"\x00"


def encode_batch(records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int,
                 base_offset: int = 0, leader_epoch: int = 0) -> bytes:
    small = _SMALL_VARINTS
    limit = len(small)
    parts: list[bytes] = []
    append = parts.append
    join = b"".join
    for delta, (key, value) in enumerate(records):
        key_len = len(key)
        keyed = (_ATTRIBUTES_AND_TIMESTAMP_DELTA,
                 small[delta] if delta < limit else varint_bytes(delta),
                 small[key_len] if key_len < limit else varint_bytes(key_len),
                 key)
        if value is None:
            record = join((*keyed, _NULL_LENGTH, _NO_HEADERS))
        else:
            value_len = len(value)
            record = join((*keyed, small[value_len] if value_len < limit
                           else varint_bytes(value_len), value, _NO_HEADERS))
        length = len(record)
        append(small[length] if length < limit else varint_bytes(length))
        append(record)
    count = len(records)
    tail = _TAIL.pack(0, count - 1, timestamp_ms, timestamp_ms, -1, -1, -1, count)
    body = join(parts)
    crc = crc32c(body, crc32c(tail))
    head = _HEAD.pack(base_offset, HEADER_SIZE - 12 + len(body), leader_epoch, 2, crc)
    return join((head, tail, body))


def iter_records(batches: bytes | memoryview) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in a run of uncompressed batches already verified."""
    data = memoryview(batches)
    pos = 0
    end = len(data)
    while pos + HEADER_SIZE <= end:
        (base_offset, length, _, magic, _, attributes, _, _, _, _, _, _, count) = (
            _HEADER.unpack_from(data, pos))
        batch_end = pos + 12 + length
        if magic != 2 or attributes & 0x07:
            raise ValueError(f"unsupported batch at {pos}: magic {magic}, attributes {attributes}")
        if attributes & 0x20:  # control batch (transaction markers): no data records
            pos = batch_end
            continue
        cursor = pos + HEADER_SIZE
        for _ in range(count):
            _, cursor = read_varint(data, cursor)  # record length
            cursor += 1  # attributes
            _, cursor = read_varint(data, cursor)  # timestamp delta
            offset_delta, cursor = read_varint(data, cursor)
            key_len, cursor = read_varint(data, cursor)
            key = None if key_len < 0 else bytes(data[cursor:cursor + key_len])
            cursor += max(key_len, 0)
            value_len, cursor = read_varint(data, cursor)
            value = None if value_len < 0 else bytes(data[cursor:cursor + value_len])
            cursor += max(value_len, 0)
            headers, cursor = read_varint(data, cursor)
            for _ in range(headers):
                header_key_len, cursor = read_varint(data, cursor)
                cursor += header_key_len
                header_value_len, cursor = read_varint(data, cursor)
                cursor += max(header_value_len, 0)
            yield base_offset + offset_delta, key, value
        pos = batch_end


def _fold_latest_py(chunk: bytes | memoryview,
                    latest: dict[bytes, tuple[int, bytes | None]], min_offset: int) -> None:
    """`fold_latest` in Python: the reference for the C loop, and used without it."""
    for offset, key, value in iter_records(chunk):
        if key is not None and offset >= min_offset:
            latest.pop(key, None)  # re-insert so the dict's order follows the last write
            latest[key] = (offset, value)


try:
    from storage._legacy_speedups import fold_latest as _fold_latest_c  # type: ignore[import-not-found]
except ImportError:  # built without a C compiler: the Python loop does the same
    _fold_latest_c = None


def fold_latest(chunk: bytes | memoryview,
                latest: dict[bytes, tuple[int, bytes | None]], min_offset: int) -> None:
    """Fold the keyed records at or past `min_offset` of a run of uncompressed,
    non-transactional batches into `latest` (key -> (offset, value)): each key's entry is
    removed and set again, so the dict holds the last value of every key in the order of the
    last writes, which is what replaying the whole history amounts to. Raises `ValueError` (or
    `IndexError`, from the Python loop) when a record does not parse."""
    if _fold_latest_c is not None:
        _fold_latest_c(chunk, latest, min_offset)
    else:
        _fold_latest_py(chunk, latest, min_offset)
