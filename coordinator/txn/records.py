"""`__transaction_state` records in Kafka's format: TransactionLogKey v0 and TransactionLogValue.

The key is `int16 version (0)` then the transactional id as an int16-length string. The value is
written as version 0 (the non-flexible layout every Kafka version reads): producer id (int64),
producer epoch (int16), transaction timeout (int32), status (int8), the nullable array of
(topic, [partition]) in the transaction, the last update and the start timestamps (int64). An
Empty transaction carries a null partition array, as Kafka writes it. Version 1 (flexible: compact
strings and arrays, tagged fields) is read too, so a log written by a newer peer loads. A removed
transactional id is a tombstone: the key with a null value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum


class TxnState(IntEnum):
    """Kafka's `TransactionState` ids, the status byte of the value."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


class TxnRecordError(ValueError):
    """A `__transaction_state` record that does not decode."""


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    last_update_ms: int
    start_ms: int


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version != 0:
            raise TxnRecordError(f"transaction log key version {version} is not 0")
        (length,) = _I16.unpack_from(data, 2)
        if length < 0 or 4 + length != len(data):
            raise TxnRecordError("transaction log key has a bad length")
        return data[4:4 + length].decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise TxnRecordError(f"transaction log key does not decode: {exc}") from exc


def encode_value(value: TxnLogValue) -> bytes:
    parts = [_HEAD.pack(0, value.producer_id, value.producer_epoch, value.timeout_ms,
                        int(value.state))]
    if value.state == TxnState.EMPTY and not value.partitions:
        parts.append(_I32.pack(-1))
    else:
        parts.append(_I32.pack(len(value.partitions)))
        for topic, partition_ids in value.partitions:
            parts.append(_string(topic))
            parts.append(_I32.pack(len(partition_ids)))
            parts.extend(_I32.pack(p) for p in partition_ids)
    parts.append(_TAIL.pack(value.last_update_ms, value.start_ms))
    return b"".join(parts)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.data):
                raise TxnRecordError("truncated varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise TxnRecordError("varint too long")

    def text(self, length: int) -> str:
        if length < 0 or self.pos + length > len(self.data):
            raise TxnRecordError("string runs past the record")
        out = self.data[self.pos:self.pos + length].decode()
        self.pos += length
        return out

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            size = self.uvarint()
            self.pos += size
            if self.pos > len(self.data):
                raise TxnRecordError("tagged field runs past the record")


def decode_value(data: bytes) -> TxnLogValue:
    try:
        reader = _Reader(data, 0)
        version = reader.take(_I16)
        if version not in (0, 1):
            raise TxnRecordError(f"transaction log value version {version} is not known")
        flexible = version == 1
        producer_id = reader.take(_I64)
        epoch = reader.take(_I16)
        timeout_ms = reader.take(_I32)
        status = reader.data[reader.pos]
        reader.pos += 1
        count = reader.uvarint() - 1 if flexible else reader.take(_I32)
        partitions: list[tuple[str, tuple[int, ...]]] = []
        for _ in range(max(count, 0)):
            topic = reader.text(reader.uvarint() - 1 if flexible else reader.take(_I16))
            ids_count = reader.uvarint() - 1 if flexible else reader.take(_I32)
            partitions.append((topic, tuple(reader.take(_I32) for _ in range(ids_count))))
            if flexible:
                reader.skip_tags()
        last_update_ms = reader.take(_I64)
        start_ms = reader.take(_I64)
        if flexible:
            reader.skip_tags()
        return TxnLogValue(producer_id, epoch, timeout_ms, TxnState(status), tuple(partitions),
                           last_update_ms, start_ms)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, TxnRecordError):
            raise
        raise TxnRecordError(f"transaction log value does not decode: {exc}") from exc
