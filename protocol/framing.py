"""Kafka framing: a 4-byte big-endian signed size, then that many bytes of request."""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(ValueError):
    """The byte stream cannot be a Kafka frame; the connection must be closed."""


class FrameDecoder:
    """Turns an arbitrary split of the byte stream into whole frame bodies.

    Bytes arrive split or coalesced at any boundary; `feed` returns every frame completed by the
    new data, in order. A negative size or one above `max_frame_bytes` raises `FrameError`
    before any of the body is buffered, so a hostile size never makes us allocate.
    """

    __slots__ = ("_buffer", "_max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        # Only while a frame is incomplete: an idle connection holds no buffer.
        self._buffer: bytearray | None = None
        self._max_frame_bytes = max_frame_bytes

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame_bytes

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        self._max_frame_bytes = value

    def feed(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        if buffer is None and len(data) > 4:
            # Most reads hold exactly one request (a heartbeat, a commit).
            (size,) = _SIZE.unpack_from(data, 0)
            if size == len(data) - 4 and size <= self._max_frame_bytes:
                return [data[4:]]
        if buffer is not None:
            buffer += data
            source: bytes | bytearray = buffer
        else:
            # The common case: nothing pending, so frames are sliced out of `data` itself,
            # one copy each, and only an incomplete tail is buffered.
            source = data
        frames: list[bytes] = []
        start = 0
        end = len(source)
        with memoryview(source) as view:
            while end - start >= 4:
                (size,) = _SIZE.unpack_from(source, start)
                if size < 0:
                    raise FrameError(f"negative frame size {size}")
                if size > self._max_frame_bytes:
                    raise FrameError(f"frame size {size} exceeds socket.request.max.bytes "
                                     f"{self._max_frame_bytes}")
                if end - start - 4 < size:
                    break
                frames.append(bytes(view[start + 4 : start + 4 + size]))
                start += 4 + size
        if buffer is not None:
            if start:
                del buffer[:start]
                if not buffer:
                    self._buffer = None
        elif start < end:
            self._buffer = bytearray(_tail(data, start))
        return frames

    @property
    def buffered(self) -> int:
        buffer = self._buffer
        return 0 if buffer is None else len(buffer)


def _tail(data: bytes, start: int) -> memoryview | bytes:
    """`data[start:]` without copying it first (it is copied once, into the buffer)."""
    return memoryview(data)[start:] if start else data


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload
