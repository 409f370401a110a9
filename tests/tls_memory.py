"""A TLS layer and a real TLS client over memory, their bytes carried by hand: what the record
path tests drive (`tests/unit/test_tls_records.py`, `tests/property/test_tls_records_props.py`).
No sockets: the client is an `ssl.SSLObject`, the layer's TCP side a list of what it wrote."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path
from typing import Any

from tests.tls_material import Pki


def tls_contexts(root: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A listener's context (a throwaway CA's certificate for localhost) and a client's that
    trusts it."""
    pki = Pki.create(root)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(pki.issue("server", server=True, CN="localhost")))
    return server, ssl.create_default_context(cafile=str(pki.ca_path))


class MemoryTransport:
    """The TCP side of the layer: keeps what the layer writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 9092) if name == "peername" else default


class Echo(asyncio.Protocol):
    """Answers every piece of data with b"re:" and the data; remembers the end of stream."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.received: list[bytes] = []
        self.eof = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received.append(data)
        self.transport.write(b"re:" + data)

    def eof_received(self) -> bool:
        self.eof = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


def layer_class(base: type, in_c: bool) -> type:
    class Layer(base):  # type: ignore[valid-type, misc]
        __slots__ = ("app", "failures")
        records_in_c = in_c

        def handshake_completed(self) -> asyncio.Protocol | None:
            self.app = Echo()
            return self.app

        def stream_failed(self, reason: str) -> None:
            self.failures.append(reason)

    return Layer


class Pair:
    """A client `SSLObject` and a layer, their bytes carried over memory by hand."""

    def __init__(self, layer_class: type, contexts: tuple[ssl.SSLContext, ssl.SSLContext]):
        server_context, client_context = contexts
        self.raw = MemoryTransport()
        self.layer = layer_class(server_context, 10.0)
        self.layer.failures = []
        self.layer.connection_made(self.raw)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.client = client_context.wrap_bio(self.incoming, self.outgoing,
                                              server_hostname="localhost")
        for _ in range(10):
            with contextlib.suppress(ssl.SSLWantReadError):
                self.client.do_handshake()
            self.to_layer()
            self.to_client()
        assert self.layer._app is not None, "no handshake"

    def to_layer(self, pieces: int = 1) -> None:
        if not self.outgoing.pending:
            return
        stream = self.outgoing.read()
        size = max(1, -(-len(stream) // pieces))
        for start in range(0, len(stream), size):
            self.layer.data_received(stream[start:start + size])

    def to_client(self) -> None:
        for data in self.raw.written:
            self.incoming.write(data)
        self.raw.written.clear()

    def answers(self) -> bytes:
        self.to_client()
        out = bytearray()
        with contextlib.suppress(ssl.SSLWantReadError):
            while chunk := self.client.read(65536):
                out += chunk
        return bytes(out)
