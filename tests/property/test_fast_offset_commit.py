"""The hand decoder of OffsetCommit v8/v9 (`protocol.fast_requests`) against kio's reader.

For generated requests (of the shape the hand decoder reads, and others, where it must decline)
and for damaged frames, decoding with the hand decoder gives what decoding with kio alone
gives: the same header and the same command, or the same refusal.
"""

from __future__ import annotations

import io
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from coordinator.api import offset_commit as api
from coordinator.group.result import RequestRef
from protocol import fast_requests
from protocol.build import build
from protocol.codec import decode_request
from protocol.errors import MalformedRequest
from tests.property.test_fast_requests import damaged_copy

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

text = st.text(max_size=8) | st.sampled_from(["", "é", "x" * 126, "y" * 127, "z" * 200])
metadata = st.sampled_from(["", None]) | text


def frame_of(version: int, client_id: str | None, correlation_id: int, body: dict[str, Any]
             ) -> bytes:
    cls = load_request_schema(api.API_KEY, version)
    header_cls: Any = cls.__header_schema__  # type: ignore[attr-defined]
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header_cls(
        request_api_key=i16(api.API_KEY), request_api_version=i16(version),
        correlation_id=i32(correlation_id), client_id=client_id))
    entity_writer(cls)(buffer, build(cls, body))
    return buffer.getvalue()


partitions = st.lists(st.fixed_dictionaries({
    "partition_index": st.sampled_from([0, 1, 9, -1, 2**31 - 1]),
    "committed_offset": st.sampled_from([0, 5, -1, 2**63 - 1, -(2**63)]),
    "committed_leader_epoch": st.sampled_from([-1, 0, 3, 2**31 - 1]),
    "committed_metadata": metadata,
}), max_size=4) | st.lists(st.fixed_dictionaries({
    "partition_index": st.integers(0, 200),
    "committed_offset": st.integers(0, 2**40),
    "committed_leader_epoch": st.just(-1),
    "committed_metadata": st.just(""),
}), min_size=100, max_size=130)


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.sampled_from([2, 5, 7, 8, 8, 9, 9]))
    body: dict[str, Any] = {
        "group_id": draw(text),
        "generation_id_or_member_epoch": draw(st.sampled_from([-1, 0, 1, 7, 2**31 - 1])),
        "member_id": draw(text),
        "topics": draw(st.lists(st.fixed_dictionaries({
            "name": text, "partitions": partitions}), max_size=3)),
    }
    if version >= 7:
        body["group_instance_id"] = draw(st.none() | text)
    if version <= 4:
        body["retention_time"] = -1
    client_id = draw(st.none() | text)
    correlation_id = draw(st.integers(-(2**31), 2**31 - 1))
    return version, frame_of(version, client_id, correlation_id, body)


def decoded(frame: bytes, hand: bool) -> object:
    """(header, command) as the runtime builds them, or the refusal's type."""
    decoders = fast_requests.HAND_DECODERS if hand else {}
    with mock.patch.dict(fast_requests.HAND_DECODERS, decoders, clear=True):
        try:
            header, request = decode_request(frame)
        except MalformedRequest:
            return MalformedRequest
    return header, api.to_command(request, header.api_version, RequestRef(1, 1))


@PROPS
@given(requests())
def test_the_hand_decoder_reads_what_kio_reads(request: tuple[int, bytes]) -> None:
    _, frame = request
    assert decoded(frame, hand=True) == decoded(frame, hand=False)


@PROPS
@given(requests(), st.data())
def test_a_damaged_frame_is_read_or_refused_as_kio_does(request: tuple[int, bytes],
                                                        data: st.DataObject) -> None:
    _, frame = request
    damaged = damaged_copy(frame, data)
    assert decoded(damaged, hand=True) == decoded(damaged, hand=False)


def test_the_commit_of_kafka_python_is_read_by_hand() -> None:
    """What kafka-python sends (v8): one topic, plain partitions, empty metadata."""
    frame = frame_of(8, "kafka-python-2.0.2", 11, {
        "group_id": "orders", "generation_id_or_member_epoch": 3,
        "member_id": "kafka-python-2.0.2-9c1f", "group_instance_id": None,
        "topics": [{"name": "events", "partitions": [
            {"partition_index": p, "committed_offset": 100 + p, "committed_leader_epoch": -1,
             "committed_metadata": ""} for p in range(10)]}]})
    hand = fast_requests.decode_offset_commit(frame)
    assert hand is not None
    version, correlation_id, client_id, fields = hand
    assert (version, correlation_id, client_id) == (8, 11, "kafka-python-2.0.2")
    assert fields.topics == (("events", tuple((p, 100 + p, -1, "") for p in range(10))),)
    assert decoded(frame, hand=True) == decoded(frame, hand=False)
