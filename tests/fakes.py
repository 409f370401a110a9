"""In-memory stand-ins: a `RequestContext` that records responses, a disk that stalls fsyncs.

Tests that drive the group runtime in-process (no sockets) hand it a `FakeContext`; hand-packed
responses are decoded with kio so a test reads them like any other response entity.
`GatedFileSystem` holds fsyncs until the test lets them through: a disk as slow as a test needs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.serial import entity_reader

from protocol.codec import response_codec
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


@dataclass
class FakeContext:
    """What the group runtime uses of a `RequestContext`: the response lands in `responses`."""

    header: FakeHeader
    connection: FakeConnection
    responses: list[Any] = field(default_factory=list)

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def client_host(self) -> str:
        return self.connection.client_host

    @property
    def open(self) -> bool:
        return not self.connection.closed

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
