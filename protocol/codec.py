"""Cached request decoders and response encoders over `kio.serial`.

Readers are native (fast); writers are pure Python, so hot fixed-shape responses may bypass
`encode_response` with hand-packed bytes (see `protocol.fastpath`). Versions older than kio's
schemas come from `protocol.legacy_versions` (which builds on kio's readers and writers); it is
imported the first time such a version is asked for, since loading its kio schemas is a fifth
of the broker's start-up and clients of Kafka 3.x and later never ask.
"""

from __future__ import annotations

import contextlib
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.primitive import i16, i32

from protocol.errors import AnsweredOverLimits, MalformedRequest, UnsupportedApi
from protocol.fast_requests import HAND_DECODERS
from protocol.guard import ELEMENT_LIMITS, ElementsToAnswer, Guard, compile_guard
from storage.varint import VarintError, read_uvarint

_FIXED_HEADER = struct.Struct(">hhi")
_CLIENT_ID_LENGTH = struct.Struct(">h")
# kio's readers of request headers v1 and v2 (cached by kio: the codecs hold these objects).
_HEADER_V1_READER = entity_reader(RequestHeaderV1)
_HEADER_V2_READER = entity_reader(RequestHeaderV2)
_SIZE = struct.Struct(">i")


class RequestHeader(NamedTuple):
    """Made for every request: a named tuple is built in a third of a frozen dataclass's
    time (no `object.__setattr__` per field) and is as immutable."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class _RequestCodec:
    request_type: type
    header_reader: Callable[[Any, int], tuple[Any, int]]
    body_reader: Callable[[Any, int], tuple[Any, int]]
    # Checks array counts before kio sees the body; None when the schema has no array.
    guard: Guard | None


@dataclass(frozen=True, slots=True)
class _ResponseCodec:
    response_type: type
    header_type: type
    header_writer: Callable[[Any, Any], None]
    body_writer: Callable[[Any, Any], None]


_request_codecs: dict[tuple[int, int], _RequestCodec] = {}
_response_codecs: dict[tuple[int, int], _ResponseCodec] = {}


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id: the 8 bytes every header version starts with."""
    if len(frame) < 8:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a header")
    key, version, correlation_id = _FIXED_HEADER.unpack_from(frame, 0)
    return key, version, correlation_id


def request_type(api_key: int, api_version: int) -> type:
    return _request_codec(api_key, api_version).request_type


def _request_codec(api_key: int, api_version: int) -> _RequestCodec:
    codec = _request_codecs.get((api_key, api_version))
    if codec is None:
        try:
            cls = load_request_schema(api_key, api_version)
        except KioIndexError as exc:
            from protocol.legacy_versions import legacy_request  # versions kio no longer carries

            legacy = legacy_request(api_key, api_version)
            if legacy is None:
                raise UnsupportedApi(api_key, api_version) from exc
            legacy_type, body_reader, header_type, kio_schema = legacy
            # Hand-written readers bound their own counts; kio-read old versions get the
            # guard of the kio schema that reads them.
            codec = _RequestCodec(legacy_type, entity_reader(header_type), body_reader,
                                  compile_guard(kio_schema, ELEMENT_LIMITS.get(api_key))
                                  if kio_schema is not None else None)
        else:
            codec = _RequestCodec(cls, entity_reader(cls.__header_schema__), entity_reader(cls),
                                  compile_guard(cls, ELEMENT_LIMITS.get(api_key)))
        _request_codecs[(api_key, api_version)] = codec
    return codec


# Read on every request by the connections: a dict lookup is cheaper than a call.
LOADED_REQUEST_CODECS = _request_codecs

# (api key, version) whose codecs failed to load: decoding them raises as it always did.
_load_failed: set[tuple[int, int]] = set()


def codec_needs_loading(api_key: int, api_version: int) -> bool:
    """Whether decoding a request of (api_key, api_version) would first import its schema
    module and compile its guard: 5-150 ms the first time, which a connection waits out in a
    worker thread instead of on the event loop (see `protocol.connection`)."""
    key = (api_key, api_version)
    if key in _request_codecs or key in _load_failed:
        return False
    if kio_has(api_key, api_version):
        return True
    from protocol.legacy_versions import LEGACY_REQUESTS

    return key in LEGACY_REQUESTS


def kio_has(api_key: int, api_version: int) -> bool:
    """Whether kio carries the schemas of (api_key, api_version); the versions it does not
    carry are older ones (`protocol.legacy_versions`), or unknown."""
    name = api_key_map.get(api_key)  # type: ignore[call-overload]
    return name is not None and api_version in schema_name_map[name]


def give_up_loading(api_key: int, api_version: int) -> None:
    """Stop offering (api_key, api_version) for loading in a thread: its requests then load
    (or fail to) on the spot."""
    _load_failed.add((api_key, api_version))


def load_codecs(api_key: int, api_version: int) -> None:
    """Import and compile everything a request of (api_key, api_version) needs: its decoder,
    guard and, when there is one, its response encoder. Safe in a worker thread."""
    try:
        _request_codec(api_key, api_version)
    except Exception:
        give_up_loading(api_key, api_version)
        return
    # An answer that is never sent, or is built by hand, may have no encoder.
    with contextlib.suppress(Exception):
        response_codec(api_key, api_version)


def response_codec(api_key: int, api_version: int) -> _ResponseCodec:
    codec = _response_codecs.get((api_key, api_version))
    if codec is None:
        legacy = None
        if not kio_has(api_key, api_version):
            from protocol.legacy_versions import legacy_response

            legacy = legacy_response(api_key, api_version)
        if legacy is not None:
            legacy_type, body_writer, header_type = legacy
            codec = _ResponseCodec(legacy_type, header_type, entity_writer(header_type),
                                   body_writer)
        else:
            cls = load_response_schema(api_key, api_version)
            header_cls = cls.__header_schema__
            codec = _ResponseCodec(cls, header_cls, entity_writer(header_cls), entity_writer(cls))
        _response_codecs[(api_key, api_version)] = codec
    return codec


def response_type(api_key: int, api_version: int) -> type:
    return response_codec(api_key, api_version).response_type


def decode_response_frame(api_key: int, api_version: int, framed: bytes) -> Any:
    """Read back a response this broker encoded (size, correlation id, header tags, body): for
    the rare path that must amend a hand-packed answer."""
    cls = response_type(api_key, api_version)
    # Size and correlation id, then (flexible versions) the header's empty tag buffer.
    start = 9 if getattr(cls, "__flexible__", False) else 8
    response: Any
    response, _ = entity_reader(cls)(framed[start:], 0)
    return response


def decode_request(frame: bytes) -> tuple[RequestHeader, Any]:
    """Decode header and body.

    Bytes left after the body are ignored, as Kafka's request parser ignores them: librdkafka's
    admin Metadata v13 request carries a field that version no longer has. The body goes to
    kio's native reader only after `protocol.guard` has checked its array counts (a count
    larger than the frame would make kio abort the process) and non-nullable arrays. A few hot
    requests of a common shape are read by hand first (`protocol.fast_requests`).
    """
    api_key, api_version, _ = peek_header(frame)
    return decode_peeked(frame, api_key, api_version)


def decode_peeked(frame: bytes, api_key: int, api_version: int) -> tuple[RequestHeader, Any]:
    """`decode_request` of a frame whose key and version `peek_header` has read."""
    hand_decoder = HAND_DECODERS.get(api_key)
    if hand_decoder is not None:
        decoded = hand_decoder(frame)
        if decoded is not None:
            version, correlation_id, client_id, body = decoded
            return RequestHeader(api_key, version, correlation_id, client_id), body
    codec = _request_codecs.get((api_key, api_version)) or _request_codec(api_key, api_version)
    try:
        header, offset = codec.header_reader(frame, 0)
        if codec.guard is not None:
            try:
                codec.guard(frame, offset, len(frame))
            except ElementsToAnswer as over:
                # Walked whole and within the decoded budget: safe to decode, to answer.
                body, _ = codec.body_reader(frame, offset)
                raise AnsweredOverLimits(
                    RequestHeader(api_key, api_version, header.correlation_id, header.client_id),
                    body, str(over)) from None
        body, _ = codec.body_reader(frame, offset)
    except (MalformedRequest, AnsweredOverLimits):
        raise
    except (SerialError, KeyError, ValueError, TypeError, IndexError, OverflowError) as exc:
        # kio raises KeyError on tagged fields it does not know; see _skip_unknown_tags below.
        if isinstance(exc, KeyError) and "tagged field" in str(exc):
            return _decode_skipping_unknown_tags(frame, codec)
        raise MalformedRequest(f"cannot decode api_key={api_key} v{api_version}: {exc!r}") from exc
    return (
        RequestHeader(api_key, api_version, header.correlation_id, header.client_id),
        body,
    )


def plain_body(frame: bytes, api_key: int, api_version: int) -> Any | None:
    """The body of a request already peeked, read without a header object, for a caller that
    answers it at once: only when its codec is loaded and has no array guard, its header has
    no tagged fields, and kio reads it; else None (`decode_request` then decodes it, and refuses
    what it must)."""
    codec = _request_codecs.get((api_key, api_version))
    if codec is None or codec.guard is not None:
        return None
    try:
        (client_length,) = _CLIENT_ID_LENGTH.unpack_from(frame, 8)
        if client_length < -1:
            return None
        offset = 10 + max(client_length, 0)
        if client_length > 0:
            frame[10:offset].decode()  # a client id that is not UTF-8 is refused as before
        if codec.header_reader is _HEADER_V2_READER:
            if frame[offset] != 0:  # header tags
                return None
            offset += 1
        elif codec.header_reader is not _HEADER_V1_READER:
            return None
        return codec.body_reader(frame, offset)[0]
    except (SerialError, KeyError, ValueError, TypeError, IndexError, OverflowError,
            struct.error):
        return None


def _decode_skipping_unknown_tags(frame: bytes, codec: _RequestCodec) -> tuple[RequestHeader, Any]:
    """Kafka decoders skip tagged fields they do not know; kio raises instead.

    Only the top-level tagged section of the body is rewritten: requests with unknown tags in
    nested structs are still refused (no client sends those to a broker of this version).
    """
    api_key, api_version, _ = peek_header(frame)
    try:
        header, offset = codec.header_reader(frame, 0)
    except (SerialError, KeyError, ValueError) as exc:
        # An unknown tag in the header itself: drop the header's tag section.
        header, offset = _header_without_tags(frame)
        if header is None:
            raise MalformedRequest(f"bad request header: {exc!r}") from exc
    body_bytes = frame[offset:]
    stripped = _strip_trailing_tags(body_bytes, codec)
    if stripped is None:
        raise MalformedRequest(f"api_key={api_key} v{api_version}: undecodable tagged fields")
    body, _ = codec.body_reader(stripped, 0)
    return RequestHeader(api_key, api_version, header.correlation_id, header.client_id), body


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    try:
        return read_uvarint(data, pos)
    except (IndexError, VarintError):
        raise MalformedRequest("bad varint") from None


def _header_without_tags(frame: bytes) -> tuple[Any, int]:
    # Header v2: 8 fixed bytes, int16-length client id, then tags.
    (length,) = _CLIENT_ID_LENGTH.unpack_from(frame, 8)
    pos = 10 + max(length, 0)
    client_id = None if length < 0 else frame[10:pos].decode()
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
    _, api_version, correlation_id = peek_header(frame)
    api_key = struct.unpack_from(">h", frame, 0)[0]
    header = RequestHeaderV2(
        request_api_key=api_key,
        request_api_version=i16(api_version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return header, pos


# Bounds on the search for an unknown tag section: clients put a few small tags at the end of
# small requests, and an unbounded search would let one hostile frame stall the event loop.
_TAGGED_BODY_MAX_BYTES = 64 * 1024
_TAG_SECTION_MAX_BYTES = 1024
_TAG_SECTION_MAX_FIELDS = 64


def _strip_trailing_tags(body: bytes, codec: _RequestCodec) -> bytes | None:
    """Find the body's final tag section by trying each suffix start, and drop it."""
    if len(body) > _TAGGED_BODY_MAX_BYTES:
        return None
    lowest = max(len(body) - _TAG_SECTION_MAX_BYTES, 0)
    for cut in range(len(body) - 1, lowest - 1, -1):
        try:
            count, pos = _read_uvarint(body, cut)
            if count > _TAG_SECTION_MAX_FIELDS:
                continue
            for _ in range(count):
                _, pos = _read_uvarint(body, pos)
                size, pos = _read_uvarint(body, pos)
                pos += size
        except MalformedRequest:
            continue
        if pos != len(body) or count == 0:
            continue
        candidate = body[:cut] + b"\x00"
        try:
            if codec.guard is not None:
                codec.guard(candidate, 0, len(candidate))
            _, size = codec.body_reader(candidate, 0)
        except (SerialError, KeyError, ValueError, TypeError, IndexError, OverflowError,
                MalformedRequest):
            continue
        if size == len(candidate):
            return candidate
    return None


def encode_response(api_key: int, api_version: int, correlation_id: int, response: Any) -> bytes:
    """Header (v0, or v1 for flexible versions; ApiVersions always v0) + body, size-prefixed."""
    codec = response_codec(api_key, api_version)
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    codec.header_writer(buffer, codec.header_type(correlation_id=correlation_id))
    codec.body_writer(buffer, response)
    data = buffer.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    del data
    return out
