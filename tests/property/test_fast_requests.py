"""The hand decoder of ConsumerGroupHeartbeat (`protocol.fast_requests`) against kio's reader.

For generated requests (steady-state ones, where the hand decoder answers, and others, where it
must decline) and for damaged frames, decoding with the hand decoder gives what decoding with
kio alone gives: the same header and the same command, or the same refusal.
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

from coordinator.api import consumer_group_heartbeat as api
from coordinator.group.result import RequestRef
from protocol import fast_requests
from protocol.build import build
from protocol.codec import decode_request
from protocol.errors import MalformedRequest

PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

text = st.text(max_size=8) | st.sampled_from(["", "é", "x" * 126, "y" * 127, "z" * 200])
names = st.text(min_size=1, max_size=6)


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


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, bytes]:
    version = draw(st.sampled_from([0, 1]))
    steady = draw(st.booleans())
    body: dict[str, Any] = {
        "group_id": draw(text), "member_id": draw(text),
        "member_epoch": draw(st.sampled_from([-2, -1, 0, 1, 7, 2**31 - 1])),
        "instance_id": draw(st.none() | text), "rack_id": draw(st.none() | text),
        "rebalance_timeout": draw(st.sampled_from([-1, 0, 45_000])),
        "subscribed_topic_names": None if steady else draw(st.none() | st.lists(names,
                                                                                 max_size=3)),
        "server_assignor": draw(st.none() | st.sampled_from(["uniform", "range", ""])),
        "topic_partitions": None if steady else draw(st.none() | st.lists(st.fixed_dictionaries({
            "topic_id": st.uuids(), "partitions": st.lists(st.integers(0, 9), max_size=3)}),
            max_size=2)),
    }
    if version >= 1:
        body["subscribed_topic_regex"] = draw(st.none() | st.sampled_from(["", "^a.*"]))
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
    return header, api.to_command(request, header.api_version, RequestRef(1, 1),
                                  header.client_id or "", "/127.0.0.1")


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


def damaged_copy(frame: bytes, data: st.DataObject) -> bytes:
    """`frame` with a byte flipped (past the api key and version), cut short, or with bytes
    appended."""
    damaged = bytearray(frame)
    how = data.draw(st.sampled_from(["flip", "cut", "append"]))
    if how == "flip":
        at = data.draw(st.integers(4, len(damaged) - 1))  # keep the api key and version
        damaged[at] = data.draw(st.integers(0, 255))
    elif how == "cut":
        del damaged[data.draw(st.integers(8, len(damaged) - 1)):]
    else:
        damaged += data.draw(st.binary(min_size=1, max_size=4))
    return bytes(damaged)


def test_the_steady_state_heartbeat_of_librdkafka_is_read_by_hand() -> None:
    """What librdkafka 2.16 sends every heartbeat interval once reconciled: member id and
    epoch, every other field null."""
    frame = frame_of(1, "rdkafka", 9, {
        "group_id": "orders", "member_id": "ULJ19AQ/SNmjLvDTJ1ZyWg", "member_epoch": 4,
        "instance_id": None, "rack_id": None, "rebalance_timeout": -1,
        "subscribed_topic_names": None, "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": None})
    hand = fast_requests.decode_consumer_group_heartbeat(frame)
    assert hand is not None
    assert hand[:3] == (1, 9, "rdkafka")
    assert decoded(frame, hand=True) == decoded(frame, hand=False)


# A steady-state heartbeat as librdkafka 2.16 (confluent-kafka, `group.protocol=consumer`) sent
# it to this broker, once reconciled: group "capg", epoch 1, every optional field null.
LIBRDKAFKA_STEADY_FRAME = bytes.fromhex(
    "0044000100000007000772646b61666b6100056361706717476d7772424e484e53576146727130386e62"
    "51357351000000010000ffffffff0000000000")


def test_a_frame_librdkafka_sent_is_read_by_hand_as_kio_reads_it() -> None:
    hand = fast_requests.decode_consumer_group_heartbeat(LIBRDKAFKA_STEADY_FRAME)
    assert hand is not None
    version, _, client_id, fields = hand
    assert (version, client_id, fields.group_id, fields.member_epoch) == (1, "rdkafka", "capg", 1)
    assert (decoded(LIBRDKAFKA_STEADY_FRAME, hand=True)
            == decoded(LIBRDKAFKA_STEADY_FRAME, hand=False))
