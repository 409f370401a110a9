"""Kafka's legacy message format (magic 0 and 1): the records of Produce v0-v2 and Fetch v0-v3.

A legacy *message set* is a plain run of entries, all big-endian:

    offset        i64
    message_size  i32   bytes of the message that follows
    crc           u32   CRC-32 (IEEE, zlib's) of magic .. end of the message
    magic         i8    0 or 1
    attributes    i8    bits 0-2: codec (0 none, 1 gzip, 2 snappy, 3 lz4);
                        bit 3 (magic 1 only): timestamp type, 1 = LogAppendTime
    timestamp     i64   magic 1 only
    key           i32 length (-1 = null) + bytes
    value         i32 length (-1 = null) + bytes

A *compressed* message (codec != 0) is a wrapper: its key is null and its value is a compressed
message set, the inner messages. Inner offsets are absolute for magic 0; for magic 1 they are
relative (0, 1, ...) and the wrapper carries the absolute offset of the last inner message. A
magic-1 wrapper's timestamp is its inner messages' largest (CreateTime) or the broker's append
time (LogAppendTime, which then also stands for every inner message's timestamp).

This module only reads and writes that format; `storage.legacy_convert` turns it into magic-2
batches and back. gzip comes from the standard library. snappy and lz4 would need third-party
codecs this broker does not carry, so those messages raise `UnsupportedCompressionError`.

Raises `CorruptRecordError` (bad CRC, framing, truncation), `InvalidRecordError` (well framed
but not acceptable: nested compression, a null wrapper value), `UnsupportedCompressionError`.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass

from storage.batch import CorruptRecordError, InvalidRecordError

__all__ = [
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_MASK",
    "CODEC_NONE",
    "CODEC_SNAPPY",
    "CODEC_ZSTD",
    "LOG_APPEND_TIME",
    "LegacyMessage",
    "UnsupportedCompressionError",
    "compress",
    "decompress",
    "encode_message",
    "inner_messages",
    "message_size",
    "read_message_set",
]

CODEC_MASK = 0x07
CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4
LOG_APPEND_TIME = 0x08
NO_TIMESTAMP = -1
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

LOG_OVERHEAD = 12  # offset + message_size
_ENTRY_V0 = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_ENTRY_V1 = struct.Struct(">qiIbbq")  # ... and timestamp
_V0_TAIL = struct.Struct(">bb")  # magic, attributes: what the CRC covers first
_V1_TAIL = struct.Struct(">bbq")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">qiI")  # offset, size, crc
_MIN_SIZE = {0: 4 + 2 + 4 + 4, 1: 4 + 2 + 8 + 4 + 4}  # crc .. value length, no key/value bytes
_NULL = b"\xff\xff\xff\xff"
# Kafka writes gzip with the JDK's default level; the exact bytes are not part of the format.
GZIP_LEVEL = 6
# A down-converted wrapper lives for one response: the fastest level, not the smallest output.
GZIP_LEVEL_FAST = 1


class UnsupportedCompressionError(CorruptRecordError):
    """A codec this broker cannot (de)compress. Answered as UNSUPPORTED_COMPRESSION_TYPE."""

    def __init__(self, codec: int, *, position: int = -1) -> None:
        name = CODEC_NAMES.get(codec, f"codec {codec}")
        super().__init__(f"{name} compression is not supported by this broker for legacy "
                         "(magic 0/1) messages; use gzip or no compression",
                         position=position)
        self.codec = codec


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    offset: int
    magic: int
    attributes: int
    timestamp: int  # NO_TIMESTAMP for magic 0
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return self.magic > 0 and bool(self.attributes & LOG_APPEND_TIME)


def message_size(magic: int, key: bytes | None, value: bytes | None) -> int:
    """Bytes of one entry, offset and size fields included."""
    return (LOG_OVERHEAD + _MIN_SIZE[magic] + (len(key) if key is not None else 0)
            + (len(value) if value is not None else 0))


def encode_message(offset: int, magic: int, attributes: int, timestamp: int,
                   key: bytes | None, value: bytes | None) -> bytes:
    """One entry: offset, size, CRC-32 and the message."""
    tail = _V1_TAIL.pack(1, attributes, timestamp) if magic else _V0_TAIL.pack(0, attributes)
    key_part = _NULL if key is None else _I32.pack(len(key)) + key
    value_part = _NULL if value is None else _I32.pack(len(value)) + value
    body = tail + key_part + value_part
    return _HEAD.pack(offset, len(body) + 4, zlib.crc32(body)) + body


def read_message_set(data: bytes | bytearray | memoryview, *,
                     allow_truncated_tail: bool = False) -> list[LegacyMessage]:
    """Every entry of a message set, CRC-checked. Nothing is decompressed here.

    A producer's set must end on an entry boundary; a set read back from a fetch may end inside
    its last entry (`allow_truncated_tail`), which is then dropped, as clients do.
    """
    mv = memoryview(data)
    end = len(mv)
    pos = 0
    out: list[LegacyMessage] = []
    while pos < end:
        if end - pos < LOG_OVERHEAD + 6:
            if allow_truncated_tail:
                break
            raise CorruptRecordError(f"truncated: {end - pos} bytes cannot hold a message",
                                     position=pos, truncated=True)
        offset, size, crc, magic, attributes = _ENTRY_V0.unpack_from(mv, pos)
        if magic not in (0, 1):
            raise CorruptRecordError(f"magic {magic} in a legacy message set (expected 0 or 1)",
                                     position=pos)
        if size < _MIN_SIZE[magic]:
            raise CorruptRecordError(f"message size {size} is below the minimum "
                                     f"{_MIN_SIZE[magic]} for magic {magic}", position=pos)
        stop = pos + LOG_OVERHEAD + size
        if stop > end:
            if allow_truncated_tail:
                break
            raise CorruptRecordError(f"truncated: message size {size} runs past the end",
                                     position=pos, truncated=True)
        covered = mv[pos + 16:stop]
        actual = zlib.crc32(covered)
        if actual != crc:
            raise CorruptRecordError(
                f"CRC-32 mismatch (stored {crc:#010x}, computed {actual:#010x})", position=pos)
        cursor = pos + 18
        timestamp = NO_TIMESTAMP
        if magic:
            timestamp = _ENTRY_V1.unpack_from(mv, pos)[5]
            cursor += 8
        key, cursor = _read_bytes(mv, cursor, stop, pos)
        value, cursor = _read_bytes(mv, cursor, stop, pos)
        if cursor != stop:
            raise CorruptRecordError(f"{stop - cursor} bytes after the value of a message",
                                     position=pos)
        out.append(LegacyMessage(offset, magic, attributes, timestamp, key, value))
        pos = stop
    return out


def _read_bytes(mv: memoryview, cursor: int, stop: int, entry: int) -> tuple[bytes | None, int]:
    if cursor + 4 > stop:
        raise CorruptRecordError("message too short for its key/value lengths", position=entry)
    (length,) = _I32.unpack_from(mv, cursor)
    cursor += 4
    if length < 0:
        if length != -1:
            raise CorruptRecordError(f"negative length {length}", position=entry)
        return None, cursor
    if cursor + length > stop:
        raise CorruptRecordError(f"key/value length {length} runs past the message",
                                 position=entry)
    return bytes(mv[cursor:cursor + length]), cursor + length


def compress(codec: int, data: bytes, *, level: int = GZIP_LEVEL) -> bytes:
    if codec == CODEC_GZIP:
        return gzip.compress(data, compresslevel=level, mtime=0)
    raise UnsupportedCompressionError(codec)


def decompress(codec: int, data: bytes, *, position: int = -1) -> bytes:
    if codec == CODEC_GZIP:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise CorruptRecordError(f"gzip payload does not decompress: {exc}",
                                     position=position) from None
    raise UnsupportedCompressionError(codec, position=position)


def inner_messages(wrapper: LegacyMessage, *, position: int = -1) -> list[LegacyMessage]:
    """The messages inside a compressed wrapper, offsets as written (relative for magic 1).

    A wrapper may not nest another compressed message, nor hold messages of another magic.
    """
    if wrapper.value is None:
        raise InvalidRecordError("a compressed message with a null value", position=position)
    payload = decompress(wrapper.codec, wrapper.value, position=position)
    inner = read_message_set(payload)
    if not inner:
        raise InvalidRecordError("a compressed message with no messages inside",
                                 position=position)
    for message in inner:
        if message.codec != CODEC_NONE:
            raise InvalidRecordError("compressed message nested inside a compressed message",
                                     position=position)
        if message.magic != wrapper.magic:
            raise InvalidRecordError(f"magic {message.magic} message inside a magic "
                                     f"{wrapper.magic} wrapper", position=position)
    return inner
