"""A minimal asyncio Kafka wire client for load generation.

Requests are kio entities built with `protocol.build.build` (any version, plain values in) and
encoded with kio's writers; responses are decoded with kio's native readers. Hot loops avoid the
pure-Python writers by encoding a request once (`encode`) and re-sending the same bytes with only
the correlation id patched (`send_raw`), reading back just the fields they need.

Responses on one connection come back in request order (the protocol guarantees it), so a FIFO of
futures is enough; the correlation id is still checked. The connection is a plain asyncio
Protocol: the client must cost far less per request than the brokers it measures.
"""

from __future__ import annotations

import asyncio
import io
import ssl
import struct
from collections import deque
from collections.abc import Mapping
from typing import Any, cast

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from protocol.build import build

_SIZE = struct.Struct(">i")
_CORR = struct.Struct(">i")

_writers: dict[type, Any] = {}
_readers: dict[type, Any] = {}


class WireError(RuntimeError):
    """The connection failed or the broker answered something we cannot read."""


def _writer(cls: type) -> Any:
    fn = _writers.get(cls)
    if fn is None:
        fn = _writers[cls] = entity_writer(cls)
    return fn


def _reader(cls: type) -> Any:
    fn = _readers.get(cls)
    if fn is None:
        fn = _readers[cls] = entity_reader(cls)
    return fn


def request_class(api_key: int, version: int) -> type:
    return load_request_schema(api_key, version)


def encode(api_key: int, version: int, body: Mapping[str, Any] | Any,
           client_id: str = "bench") -> bytearray:
    """A size-prefixed request frame with correlation id 0 (patched at send time)."""
    cls = load_request_schema(api_key, version)
    entity = body if isinstance(body, cls) else build(cls, body)
    header_cls: Any = cls.__header_schema__  # type: ignore[attr-defined]
    header = header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                        correlation_id=i32(0), client_id=client_id)
    buffer = io.BytesIO()
    buffer.write(b"\x00\x00\x00\x00")
    _writer(header_cls)(buffer, header)
    _writer(cls)(buffer, entity)
    data = bytearray(buffer.getvalue())
    _SIZE.pack_into(data, 0, len(data) - 4)
    return data


def decode(api_key: int, version: int, frame: bytes) -> Any:
    """Decode a response frame (without its size prefix)."""
    cls = load_response_schema(api_key, version)
    header_cls = cls.__header_schema__  # type: ignore[attr-defined]
    _, offset = _reader(header_cls)(frame, 0)
    body, _ = _reader(cls)(frame, offset)
    return body


def response_header_size(api_key: int, version: int) -> int:
    """4 for response header v0, 5 for v1 (correlation id + an empty tag section)."""
    cls = load_response_schema(api_key, version)
    name = cls.__header_schema__.__module__  # type: ignore[attr-defined]
    return 5 if ".v1." in name else 4


class _Protocol(asyncio.Protocol):
    """Splits the byte stream into response frames and resolves the oldest pending request."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending: deque[tuple[int, asyncio.Future[bytes]]] = deque()
        self.buffer = bytearray()
        self.error: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        start = 0
        end = len(buffer)
        pending = self.pending
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(buffer, start)
            if end - start - 4 < size:
                break
            frame = bytes(buffer[start + 4:start + 4 + size])
            start += 4 + size
            (corr,) = _CORR.unpack_from(frame, 0)
            if not pending:
                self._fail(WireError(f"unsolicited response correlation id {corr}"))
                return
            expected, future = pending.popleft()
            if corr != expected:
                self._fail(WireError(f"correlation id {corr}, expected {expected}"))
                return
            if not future.done():
                future.set_result(frame)
        if start:
            del buffer[:start]

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or WireError("connection closed by the broker"))

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        while self.pending:
            _, future = self.pending.popleft()
            if not future.done():
                future.set_exception(WireError(f"connection lost: {exc!r}"))
        if self.transport is not None:
            self.transport.close()


class Connection:
    """One TCP connection; any number of requests may be in flight (pipelined)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._next_corr = 1

    @classmethod
    async def open(cls, host: str, port: int, timeout: float = 10.0,
                   tls: ssl.SSLContext | None = None) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await asyncio.wait_for(
                loop.create_connection(_Protocol, host, port, ssl=tls), timeout)
        except (OSError, TimeoutError) as exc:
            raise WireError(f"connect {host}:{port}: {exc!r}") from exc
        return cls(cast(asyncio.Transport, transport), protocol)

    def send_raw(self, frame: bytearray) -> asyncio.Future[bytes]:
        """Send a pre-encoded frame (its correlation id is overwritten); resolve to the reply."""
        protocol = self._protocol
        if protocol.error is not None:
            raise WireError(f"connection lost: {protocol.error!r}")
        corr = self._next_corr
        self._next_corr = (corr + 1) & 0x7FFFFFFF
        _CORR.pack_into(frame, 8, corr)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        protocol.pending.append((corr, future))
        self._transport.write(bytes(frame))
        return future

    async def call(self, api_key: int, version: int, body: Mapping[str, Any] | Any,
                   timeout: float = 60.0) -> Any:
        frame = await asyncio.wait_for(self.send_raw(encode(api_key, version, body)), timeout)
        return decode(api_key, version, frame)

    async def close(self) -> None:
        self._transport.close()
        await asyncio.sleep(0)


async def api_versions(conn: Connection) -> dict[int, tuple[int, int]]:
    reply = await conn.call(18, 0, {})
    if reply.error_code.value != 0:
        raise WireError(f"ApiVersions error {reply.error_code!r}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in reply.api_keys}


def pick_version(ranges: Mapping[int, tuple[int, int]], api_key: int, wanted: int) -> int:
    """The highest version <= `wanted` the broker supports, or raise."""
    if api_key not in ranges:
        raise WireError(f"broker does not support api_key {api_key}")
    lo, hi = ranges[api_key]
    version = min(hi, wanted)
    if version < lo:
        raise WireError(f"api_key {api_key}: broker supports v{lo}-v{hi}, need <= v{wanted}")
    return version


async def group_log_loaded(conn: Connection, timeout_s: float = 15.0) -> None:
    """Wait until the broker's group log has loaded: until then FindCoordinator answers
    COORDINATOR_LOAD_IN_PROGRESS (and the group APIs refuse)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        found = await conn.call(10, 4, {"key_type": 0, "coordinator_keys": ["any"]})
        if found.coordinators[0].error_code.value == 0:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise WireError("the group log did not load")
        await asyncio.sleep(0.05)
