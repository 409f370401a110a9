from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.framing import FrameDecoder, FrameError, frame


def test_split_and_coalesced_frames() -> None:
    stream = frame(b"one") + frame(b"") + frame(b"three")
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder(1024)
        frames = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert frames == [b"one", b"", b"three"]
        assert decoder.buffered == 0


def test_byte_at_a_time() -> None:
    decoder = FrameDecoder(1024)
    out = []
    for byte in frame(b"hello") + frame(b"world"):
        out += decoder.feed(bytes([byte]))
    assert out == [b"hello", b"world"]


def test_negative_size_is_rejected() -> None:
    with pytest.raises(FrameError, match="negative"):
        FrameDecoder(1024).feed(struct.pack(">i", -1))


def test_size_above_limit_is_rejected_before_buffering() -> None:
    with pytest.raises(FrameError, match=r"socket\.request\.max\.bytes"):
        FrameDecoder(1024).feed(struct.pack(">i", 1025))


@given(st.lists(st.binary(max_size=64), max_size=20), st.lists(st.integers(0, 2000)))
def test_any_split_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(frame(p) for p in payloads)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    decoder = FrameDecoder(1 << 20)
    out: list[bytes] = []
    last = 0
    for point in [*points, len(stream)]:
        out += decoder.feed(stream[last:point])
        last = point
    assert out == payloads
