"""A stand-in for `coordinator.context.RequestContext` that records responses in memory.

Tests that drive the group runtime in-process (no sockets) hand it one of these; hand-packed
responses are decoded with kio so a test reads them like any other response entity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kio.serial import entity_reader

from protocol.codec import response_codec


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
