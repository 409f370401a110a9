"""The asyncio TCP edge: accept connections, run until a signal, shut down gracefully."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

import structlog

from protocol.connection import Connection, RequestHandler

log = structlog.get_logger("rebalanced.server")


class KafkaServer:
    def __init__(self, handler: RequestHandler, *, host: str, port: int,
                 max_frame_bytes: int, max_in_flight: int = 1000) -> None:
        self._handler = handler
        self._host = host
        self._port = port
        self._max_frame_bytes = max_frame_bytes
        self._max_in_flight = max_in_flight
        self._server: asyncio.base_events.Server | None = None
        self.connections: set[Connection] = set()

    def _make_connection(self) -> Connection:
        connection = _TrackedConnection(
            self, self._handler, max_frame_bytes=self._max_frame_bytes,
            max_in_flight=self._max_in_flight,
        )
        return connection

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._make_connection, self._host, self._port, reuse_address=True, backlog=1024
        )
        sockets = self._server.sockets
        port = sockets[0].getsockname()[1] if sockets else self._port
        self._port = port
        return int(port)

    @property
    def port(self) -> int:
        return self._port

    async def stop(self, grace_seconds: float = 5.0) -> None:
        """Stop accepting, let in-flight responses go out (bounded), then close connections."""
        if self._server is not None:
            self._server.close()
        pending = [c.drained.wait() for c in list(self.connections) if not c.drained.is_set()]
        if pending:
            await asyncio.wait([asyncio.ensure_future(p) for p in pending], timeout=grace_seconds)
        for connection in list(self.connections):
            connection.close()
        if self._server is not None:
            await self._server.wait_closed()


class _TrackedConnection(Connection):
    __slots__ = ("_server_ref",)

    def __init__(self, server: KafkaServer, handler: RequestHandler, **kwargs: int) -> None:
        super().__init__(handler, **kwargs)
        self._server_ref = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._server_ref.connections.add(self)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server_ref.connections.discard(self)
        super().connection_lost(exc)


def install_signal_handlers(stop: Callable[[], None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed, the standard loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
