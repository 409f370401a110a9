"""Kafka's variable-length integers: the one reader and writer every part of the code uses.

Two encodings, both little-endian base-128 groups with the high bit saying "more follows":

* signed (`read_varint`, `write_varint`): zig-zag, so small negatives stay short. Record
  fields in a magic-2 batch (lengths, timestamp and offset deltas, header counts); Kafka's
  `ByteUtils.readVarint`/`readVarlong`. Up to 10 bytes (a varlong).
* unsigned (`read_uvarint`, `uvarint_bytes`): the compact lengths, counts and tags of flexible
  versions (KIP-482), in requests and in the group log's flexible records; Kafka's
  `ByteUtils.readUnsignedVarint`. Up to 5 bytes, as Kafka allows.

Readers take `(buf, pos)` and return `(value, next position)`. They raise `VarintError` (a
`ValueError`) for a varint longer than its limit and let `IndexError` through when the buffer
ends inside one: bounds are checked by indexing, never by an extra comparison per byte, because
batch decoding and the request guard call these per field. Callers turn both into their own
layer's error (`CorruptRecordError`, `MalformedRequest`, `RecordDecodeError`).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["VarintError", "read_uvarint", "read_varint", "uvarint_bytes", "varint_bytes",
           "write_varint"]


class Buffer(Protocol):
    def __getitem__(self, index: int, /) -> int: ...


class VarintError(ValueError):
    """A varint runs past its longest form (10 bytes signed, 5 unsigned)."""


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """The zig-zag varint at `pos`; raises `VarintError`, or `IndexError` past the end."""
    byte = buf[pos]
    if byte < 0x80:  # nearly every record field: one byte
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise VarintError(f"varint longer than 10 bytes before byte {pos}")


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos`; raises `VarintError`, or `IndexError` past the end."""
    result = 0
    for shift in (0, 7, 14, 21, 28):
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
    raise VarintError(f"unsigned varint longer than 5 bytes before byte {pos}")


def write_varint(value: int, out: bytearray) -> None:
    """Append `value` (a signed 64-bit integer) zig-zag encoded to `out`."""
    value = (value << 1) ^ (value >> 63)
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def varint_bytes(value: int) -> bytes:
    """`value` zig-zag encoded."""
    out = bytearray()
    write_varint(value, out)
    return bytes(out)


_ONE_BYTE_UVARINTS = [bytes((i,)) for i in range(0x80)]


def uvarint_bytes(value: int) -> bytes:
    """`value` (non-negative) as an unsigned varint; the one-byte ones are shared objects."""
    if value < 0x80:
        return _ONE_BYTE_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
