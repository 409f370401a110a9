"""Review findings on request decoding."""

from __future__ import annotations

import io

import pytest
from kio.index import load_request_schema
from kio.serial import entity_writer

from protocol import codec
from protocol.build import build
from protocol.errors import MalformedRequest


def heartbeat_v4_with_unknown_tag(tail: bytes = b"") -> bytes:
    """A flexible Heartbeat whose top-level tag section carries tag 5, then `tail`."""
    cls = load_request_schema(12, 4)
    buffer = io.BytesIO()
    header_cls = cls.__header_schema__
    entity_writer(header_cls)(buffer, header_cls(
        request_api_key=12, request_api_version=4, correlation_id=1, client_id="x"))
    entity_writer(cls)(buffer, build(cls, {"group_id": "g", "generation_id": 1,
                                           "member_id": "m", "group_instance_id": None}))
    data = bytearray(buffer.getvalue())
    assert data[-1] == 0  # the empty tag section
    data[-1:] = b"\x01\x05\x01\x00"  # one tag: id 5, one byte of value
    return bytes(data) + tail


def test_an_unknown_top_level_tag_is_skipped() -> None:
    header, request = codec.decode_request(heartbeat_v4_with_unknown_tag())
    assert header.api_key == 12 and request.member_id == "m"


def test_decoding_cost_of_an_unknown_tag_frame_is_linear_with_a_small_constant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = 0
    real = codec._read_uvarint

    def counting(data: bytes, pos: int) -> tuple[int, int]:
        nonlocal calls
        calls += 1
        return real(data, pos)

    monkeypatch.setattr(codec, "_read_uvarint", counting)
    frame = heartbeat_v4_with_unknown_tag(b"\x7f" * 16384)
    with pytest.raises(MalformedRequest):
        codec.decode_request(frame)
    # A tag section is parsed a bounded number of times, not once per trailing byte position.
    assert calls <= 16 * len(frame), f"{calls} varint reads for a {len(frame)}-byte frame"
