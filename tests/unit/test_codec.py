from __future__ import annotations

import struct

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from protocol import codec
from protocol.build import build
from protocol.codec import decode_request, encode_response, response_type
from protocol.errors import MalformedRequest, UnsupportedApi
from tests.fakes import request_bytes


def _request_bytes(key: int, version: int, correlation_id: int, body: object) -> bytes:
    return request_bytes(key, version, body, correlation_id, client_id="cid")


def heartbeat(version: int) -> object:
    cls = load_request_schema(12, version)
    fields = {"group_id": "g", "generation_id": 3, "member_id": "m"}
    if version >= 3:
        fields["group_instance_id"] = None
    return cls(**fields)


@pytest.mark.parametrize("version", range(5))
def test_header_versions_round_trip(version: int) -> None:
    raw = _request_bytes(12, version, 77, heartbeat(version))
    header, body = decode_request(raw)
    assert (header.api_key, header.api_version, header.correlation_id) == (12, version, 77)
    assert header.client_id == "cid"
    assert body == heartbeat(version)


def test_header_v2_bytes_match_kafka_layout() -> None:
    raw = _request_bytes(12, 4, 7, heartbeat(4))
    assert raw.startswith(bytes.fromhex("000c0004000000070003636964" "00"))


def test_unknown_tagged_field_is_skipped() -> None:
    raw = _request_bytes(12, 4, 7, heartbeat(4))
    assert raw.endswith(b"\x00")
    tagged = raw[:-1] + bytes([1, 9, 2]) + b"zz"
    _, body = decode_request(tagged)
    assert body == heartbeat(4)


def test_trailing_bytes_are_ignored_as_kafka_does() -> None:
    _, body = decode_request(_request_bytes(12, 3, 1, heartbeat(3)) + b"\x01\x00\x00")
    assert body == heartbeat(3)


def test_truncated_body_is_malformed() -> None:
    with pytest.raises(MalformedRequest):
        decode_request(_request_bytes(12, 3, 1, heartbeat(3))[:-3])


def test_unknown_api_is_unsupported() -> None:
    with pytest.raises(UnsupportedApi):
        decode_request(struct.pack(">hhi", 999, 0, 1) + b"\xff\xff")


def test_api_versions_response_always_uses_header_v0() -> None:
    cls = response_type(18, 3)
    data = encode_response(18, 3, 9, build(cls, error_code=0, api_keys=[]))
    # size, correlation id, then the error code straight away: no tagged header byte.
    assert struct.unpack_from(">iih", data) == (len(data) - 4, 9, 0)


def test_flexible_response_uses_header_v1() -> None:
    cls = response_type(12, 4)
    data = encode_response(12, 4, 9, build(cls, error_code=ErrorCode.none))
    assert data[8] == 0  # the response header's empty tagged-field section


def heartbeat_v4_with_unknown_tag(tail: bytes = b"") -> bytes:
    """A flexible Heartbeat whose top-level tag section carries tag 5, then `tail`."""
    data = bytearray(request_bytes(12, 4, {"group_id": "g", "generation_id": 1,
                                           "member_id": "m", "group_instance_id": None},
                                   client_id="x"))
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
