"""In-memory stand-ins: a `RequestContext` that records responses, a disk that stalls fsyncs, a
request handler that parks requests.

Tests that drive the group runtime in-process (no sockets) hand it a `FakeContext`; hand-packed
responses are decoded with kio so a test reads them like any other response entity.
`GatedFileSystem` holds fsyncs until the test lets them through: a disk as slow as a test needs.
"""

from __future__ import annotations

import io
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from coordinator.api.context import ClientRequest, ConnectionView, HeaderView, RequestFacts
from protocol.build import build
from protocol.codec import RequestHeader, encode_response, response_codec, response_type
from protocol.connection import Connection, ResponseSlot
from storage.fs import FaultyFileSystem

_MAIN = threading.main_thread()


@dataclass
class FakeHeader:
    api_key: int
    api_version: int
    correlation_id: int = 1
    client_id: str | None = "test"


@dataclass
class FakeConnection:
    id: int
    closed: bool = False
    client_host: str = "/127.0.0.1"
    listener: str = "PLAINTEXT"


class FakeContext(RequestFacts, ClientRequest):
    """A request answered in memory, for the group runtime and the data plane (the
    `ClientRequest` protocol, as the broker's `RequestContext`): responses land in `responses`."""

    def __init__(self, header: FakeHeader, connection: FakeConnection) -> None:
        self._header: HeaderView = header
        self._connection: ConnectionView = connection
        self._slot = object()
        self.responses: list[Any] = []

    # Properties, as the protocol declares them; settable, as the broker's context's fields are.
    @property
    def header(self) -> HeaderView:
        return self._header

    @header.setter
    def header(self, header: HeaderView) -> None:
        self._header = header

    @property
    def connection(self) -> ConnectionView:
        return self._connection

    @connection.setter
    def connection(self, connection: ConnectionView) -> None:
        self._connection = connection

    @property
    def slot(self) -> object:
        return self._slot

    @property
    def answer(self) -> Any:
        """The one response this request got."""
        (response,) = self.responses
        return response

    def respond(self, response: Any) -> None:
        self.responses.append(response)

    def respond_raw(self, framed: bytes | None) -> None:
        """A hand-packed response: decoded with kio, so tests read it like `respond`'s."""
        assert framed is not None
        codec = response_codec(self.header.api_key, self.header.api_version)
        _, used = entity_reader(codec.header_type)(framed, 4)
        body: Any
        body, _ = entity_reader(codec.response_type)(framed, 4 + used)
        self.responses.append(body)


class GatedFileSystem(FaultyFileSystem):
    """Every fsync of a worker thread (the group log's flushes, seals) waits for `let_through`
    while the gate is closed; those on the event loop's thread (cutting a failed write back) do
    not wait, and are counted in `loop_fsyncs`."""

    def __init__(self) -> None:
        super().__init__()
        self._permits = threading.Semaphore(0)
        self.closed = False
        self.held = 0  # fsyncs waiting at the gate now
        self.loop_fsyncs = 0  # fsyncs on the main thread while the gate was closed

    def _take(self, op: str, path: Path | None = None) -> tuple[OSError, int] | None:
        if op == "fsync" and self.closed:
            if threading.current_thread() is _MAIN:
                self.loop_fsyncs += 1
            else:
                self.held += 1
                try:
                    assert self._permits.acquire(timeout=60), "fsync held too long"
                finally:
                    self.held -= 1
        return super()._take(op, path)

    def close(self) -> None:
        self.closed = True

    def let_through(self, count: int = 1) -> None:
        for _ in range(count):
            self._permits.release()

    def open(self) -> None:
        self.closed = False
        self.let_through(100)  # whatever is waiting now


class ParkingHandler:
    """Answers Heartbeats at once, except generation 0 which is parked until released."""

    def __init__(self) -> None:
        self.parked: list[tuple[Connection, ResponseSlot, RequestHeader]] = []
        self.closed: list[int] = []

    def answer(self, connection: Connection, slot: ResponseSlot, header: RequestHeader) -> None:
        body = build(response_type(12, header.api_version), error_code=ErrorCode.none)
        data = encode_response(12, header.api_version, header.correlation_id, body)
        connection.complete(slot, data)

    def handle(self, connection: Connection, slot: ResponseSlot, header: RequestHeader,
               request: Any) -> None:
        if request.generation_id == 0:
            self.parked.append((connection, slot, header))
        else:
            self.answer(connection, slot, header)

    def unsupported(self, *args: Any) -> bool:
        return False

    def over_limits(self, connection: Connection, *args: Any) -> None:
        connection.close()

    def connection_closed(self, connection: Connection) -> None:
        self.closed.append(connection.id)


def request_bytes(api_key: int, version: int, body: Any, correlation_id: int = 1,
                  client_id: str = "t") -> bytes:
    """A request as it follows the size prefix: kio's header and body. `body` is the kio
    entity, or a dict of its fields."""
    cls: Any = load_request_schema(api_key, version)  # kio's schemas are looked up at run time
    header_cls = cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header_cls(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
        client_id=client_id))
    entity_writer(cls)(buffer, build(cls, body) if isinstance(body, dict) else body)
    return buffer.getvalue()


def framed(request: bytes) -> bytes:
    return struct.pack(">i", len(request)) + request


def heartbeat_frame(correlation_id: int, generation: int, version: int = 3) -> bytes:
    return framed(request_bytes(12, version, {
        "group_id": "g", "generation_id": generation, "member_id": "m",
        "group_instance_id": None}, correlation_id))
