"""One request in flight: who asked, in which version, and how to answer it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.codec import RequestHeader, encode_response
from protocol.connection import Connection, ResponseSlot


@dataclass(slots=True)
class RequestContext:
    connection: Connection
    slot: ResponseSlot
    header: RequestHeader

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

    def respond(self, response: Any) -> None:
        header = self.header
        if self.connection.closed:
            return
        data = encode_response(header.api_key, header.api_version, header.correlation_id, response)
        self.connection.complete(self.slot, data)

    def respond_raw(self, framed: bytes | None) -> None:
        self.connection.complete(self.slot, framed)
