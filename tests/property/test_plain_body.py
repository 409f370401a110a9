"""`protocol.codec.plain_body` (the body read for an answer from the frame) against
`decode_request`: for generated Heartbeat frames of every version, whole, cut short or with a
byte changed, it either declines (None) or reads exactly the body `decode_request` reads (a whole
frame it always reads); and it declines every frame `decode_request` refuses.
"""

from __future__ import annotations

import io
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from protocol.build import build
from protocol.codec import decode_request, load_codecs, plain_body
from protocol.errors import MalformedRequest

PROPS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEARTBEAT = 12

text = st.text(max_size=10) | st.sampled_from(["", "é", "x" * 130])


def frame_of(version: int, client_id: str | None, body: dict[str, Any]) -> bytes:
    cls = load_request_schema(HEARTBEAT, version)
    header_cls: Any = cls.__header_schema__  # type: ignore[attr-defined]
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header_cls(
        request_api_key=i16(HEARTBEAT), request_api_version=i16(version),
        correlation_id=i32(5), client_id=client_id))
    entity_writer(cls)(buffer, build(cls, body))
    return buffer.getvalue()


@st.composite
def frames(draw: st.DrawFn) -> tuple[int, bytes, bool]:
    version = draw(st.integers(0, 4))
    body: dict[str, Any] = {"group_id": draw(text), "member_id": draw(text),
                            "generation_id": draw(st.integers(-1, 2**31 - 1))}
    if version >= 3:
        body["group_instance_id"] = draw(st.none() | text)
    frame = bytearray(frame_of(version, draw(st.none() | text), body))
    damage = draw(st.sampled_from(["none", "cut", "byte"]))
    if damage == "cut":
        del frame[draw(st.integers(8, len(frame))):]
    elif damage == "byte":
        frame[draw(st.integers(8, len(frame) - 1))] = draw(st.integers(0, 255))
    return version, bytes(frame), damage == "none"


@PROPS
@given(frames())
def test_plain_body_reads_what_decode_request_reads_or_declines(
        case: tuple[int, bytes, bool]) -> None:
    version, frame, whole = case
    load_codecs(HEARTBEAT, version)
    body = plain_body(frame, HEARTBEAT, version)
    try:
        _, decoded = decode_request(frame)
    except MalformedRequest:
        assert body is None
        return
    assert body == decoded if whole else body is None or body == decoded
