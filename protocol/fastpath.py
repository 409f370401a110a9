"""Hand-packed Kafka response primitives, for responses too hot or too large for kio's writer.

kio's writers are pure Python and reach every field through generic dispatch: answering the
leader of a 5,000-member JoinGroup that way costs more CPU than the rebalance itself. An api
module may instead pack its response from these primitives into a list of byte strings and
frame it with `frame`, as a module-level `encode(outcome, version, correlation_id)` that the
runtime prefers over `to_response`. Every such `encode` keeps a byte-equality test against
`protocol.codec.encode_response` for each version it serves (`tests/unit/test_api_roundtrip.py`);
that test, not this module, is the definition of correct.

Legacy encoding: int16-length strings, int32-length bytes and arrays, length -1 for null.
Compact encoding (flexible versions, KIP-482): unsigned-varint length + 1, 0 for null, and an
empty tagged-field section (one zero byte) closing every struct and the response header.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from storage.varint import uvarint_bytes

__all__ = [
    "COMPACT",
    "I16",
    "I32",
    "LEGACY",
    "ZERO_I32",
    "Encoding",
    "frame",
]

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
ZERO_I32 = I32.pack(0)
def _string(value: str) -> bytes:
    data = value.encode()
    return I16.pack(len(data)) + data


def _nullable_string(value: str | None) -> bytes:
    return b"\xff\xff" if value is None else _string(value)


def _bytes(value: bytes) -> bytes:
    return I32.pack(len(value)) + value


def _compact_string(value: str) -> bytes:
    data = value.encode()
    return uvarint_bytes(len(data) + 1) + data


def _compact_nullable_string(value: str | None) -> bytes:
    return b"\x00" if value is None else _compact_string(value)


def _compact_bytes(value: bytes) -> bytes:
    return uvarint_bytes(len(value) + 1) + value


def _compact_array_length(length: int) -> bytes:
    return uvarint_bytes(length + 1)


@dataclass(frozen=True, slots=True)
class Encoding:
    """The primitives of one encoding, so that one function can pack every version."""

    flexible: bool
    string: Callable[[str], bytes]
    nullable_string: Callable[[str | None], bytes]
    bytes_: Callable[[bytes], bytes]
    array_length: Callable[[int], bytes]
    tags: bytes  # what closes a struct: nothing, or an empty tagged-field section


LEGACY = Encoding(False, _string, _nullable_string, _bytes, I32.pack, b"")
COMPACT = Encoding(
    True, _compact_string, _compact_nullable_string, _compact_bytes, _compact_array_length, b"\x00"
)


def frame(correlation_id: int, flexible: bool, body: list[bytes]) -> bytes:
    """Size prefix, response header (v1, with its empty tag section, when flexible), body."""
    header = I32.pack(correlation_id)
    if flexible:
        header += b"\x00"
    size = len(header) + sum(map(len, body))
    return b"".join([I32.pack(size), header, *body])
