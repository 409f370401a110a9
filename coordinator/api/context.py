"""One request in flight: who asked, in which version, and how to answer it.

`ClientRequest` is what the API handlers (the group runtime, the data plane) may use of it;
`RequestContext` is the broker's, over a real connection. Tests answer requests in memory with
their own implementation of the same protocol (`tests/fakes.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from protocol.codec import RequestHeader, encode_response
from protocol.connection import Connection, ResponseSlot
from protocol.slices import encode_in_slices


@dataclass(frozen=True, slots=True)
class ApiVersionRange:
    """The versions of one API that its module answers. Each API module declares its own, and
    the broker registers it with the API's handler: ApiVersions advertises what is registered,
    and a version outside the range closes the connection, as Kafka does."""

    api_key: int
    min_version: int
    max_version: int


class HeaderView(Protocol):
    @property
    def api_key(self) -> int: ...

    @property
    def api_version(self) -> int: ...

    @property
    def correlation_id(self) -> int: ...

    @property
    def client_id(self) -> str | None: ...


class ConnectionView(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def client_host(self) -> str: ...

    @property
    def listener(self) -> str:
        """The name of the listener the connection came in on."""
        ...


class ClientRequest(Protocol):
    """One request as its handler sees it. `respond` encodes a kio response; `respond_raw`
    takes a frame already encoded (hand-packed hot paths). Answering a request whose connection
    has closed does nothing."""

    @property
    def header(self) -> HeaderView: ...

    @property
    def connection(self) -> ConnectionView: ...

    @property
    def slot(self) -> object:
        """Its place in the connection's response order (an identity, for parking)."""
        ...

    @property
    def version(self) -> int: ...

    @property
    def client_id(self) -> str: ...

    @property
    def client_host(self) -> str: ...

    @property
    def open(self) -> bool: ...

    def respond(self, response: Any) -> None: ...

    def respond_raw(self, framed: bytes | None) -> None: ...


class RequestFacts:
    """What every request context derives from its header and connection alike (the broker's
    and the one tests answer in memory)."""

    __slots__ = ()
    header: HeaderView
    connection: ConnectionView

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


@dataclass(slots=True)
class RequestContext(RequestFacts):
    connection: Connection
    slot: ResponseSlot
    header: RequestHeader

    def respond(self, response: Any) -> None:
        header = self.header
        if self.connection.closed:
            return
        data = encode_response(header.api_key, header.api_version, header.correlation_id, response)
        self.connection.complete(self.slot, data)

    def respond_raw(self, framed: bytes | None) -> None:
        self.connection.complete(self.slot, framed)


def respond_in_slices(ctx: ClientRequest, values: Mapping[str, Any]) -> None:
    """Answer with the response `values` describe (as for `protocol.build`), built and encoded
    a slice of elements per event-loop turn (`protocol.slices`): an answer of thousands of
    topics or partitions must not hold every group up. A small one is answered at once."""
    header = ctx.header
    pieces = encode_in_slices(header.api_key, header.api_version, header.correlation_id, values)

    def step() -> None:
        if not ctx.open:
            pieces.close()
            return
        for piece in pieces:
            if piece is not None:
                ctx.respond_raw(piece)
                return
            try:
                asyncio.get_running_loop().call_soon(step)
            except RuntimeError:  # no event loop (a test answering in memory): carry on
                continue
            return

    step()
