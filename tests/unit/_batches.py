"""Build and decode magic-2 record batches for storage tests.

`make_batch` writes batches by hand (struct + zig-zag varints), so tests control every header
field, including ones a producer would never send. `decode` reads them back with kio's
independent reader, which also checks the CRC.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c
from kio.records.readers import read_batch

_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount


def varint(value: int) -> bytes:
    """Kafka's zig-zag varint/varlong encoding."""
    n = (value << 1) ^ (value >> 63)
    n &= (1 << 64) - 1
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _blob(value: bytes | None) -> bytes:
    if value is None:
        return varint(-1)
    return varint(len(value)) + value


def record(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None
) -> bytes:
    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta) + _blob(key) + _blob(value)
    body += varint(0)  # no headers
    return varint(len(body)) + body


def make_batch(
    values: Sequence[bytes | None],
    *,
    base_offset: int = 0,
    timestamp_ms: int = 1_700_000_000_000,
    timestamps: Sequence[int] | None = None,
    keys: Sequence[bytes | None] | None = None,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    last_offset_delta: int | None = None,
    records_count: int | None = None,
) -> bytes:
    """One batch holding `values` (one record each), as a producer would send it."""
    stamps = list(timestamps) if timestamps is not None else [timestamp_ms] * len(values)
    assert len(stamps) == len(values)
    base_ts = stamps[0] if stamps else timestamp_ms
    max_ts = max(stamps) if stamps else timestamp_ms
    key_list = list(keys) if keys is not None else [None] * len(values)
    records = b"".join(
        record(i, ts - base_ts, k, v)
        for i, (ts, k, v) in enumerate(zip(stamps, key_list, values, strict=True))
    )
    delta = len(values) - 1 if last_offset_delta is None else last_offset_delta
    count = len(values) if records_count is None else records_count
    after_crc = (
        _HEADER_AFTER_CRC.pack(
            attributes, delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count
        )
        + records
    )
    crc = crc32c(after_crc)
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch + magic + crc + the rest
    return struct.pack(">qiibI", base_offset, length, partition_leader_epoch, 2, crc) + after_crc


def make_batches(count: int, *, per_batch: int = 1, size: int = 100, start_ts: int = 1_000,
                 step_ms: int = 1) -> list[bytes]:
    """`count` batches of `per_batch` records with `size`-byte values and rising timestamps."""
    out = []
    for b in range(count):
        values = [bytes([(b + i) % 251]) * size for i in range(per_batch)]
        stamps = [start_ts + (b * per_batch + i) * step_ms for i in range(per_batch)]
        out.append(make_batch(values, timestamps=stamps))
    return out


def decode(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in a run of batches, read with kio (checks the CRC)."""
    out: list[tuple[int, bytes | None]] = []
    pos = 0
    while pos < len(data):
        batch, size = read_batch(data, pos)
        out.extend((int(r.offset), r.value) for r in batch.records)
        pos += size
    return out


def base_offsets(data: bytes) -> list[int]:
    """The base offset of every batch in a run of batches."""
    out = []
    pos = 0
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        out.append(base)
        pos += 12 + length
    return out
