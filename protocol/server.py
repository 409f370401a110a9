"""The asyncio TCP edge: accept connections, run until a signal, shut down gracefully."""

from __future__ import annotations

import asyncio
import functools
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from protocol.connection import Connection, ReadBudget, RequestHandler, start_codec_loader
from protocol.refusals import RefusalLog

log = structlog.get_logger("rebalanced.server")


_UNLIMITED = 2**31 - 1
# Refused connections are logged at most this often (with a count), not once each: a flood of
# connection attempts must not become a flood of log lines.
_REFUSAL_LOG_INTERVAL_S = 10.0


class KafkaServer:
    """Accepts connections within `max_connections` (and `max_connections_per_ip`), closes
    those idle for `idle_ms` (no whole request read and no response written, nothing in
    flight; a connection that stopped inside a frame is idle), and shares one `ReadBudget` of
    buffered request bytes between all connections."""

    def __init__(self, handler: RequestHandler, *, host: str = "", port: int = 0,
                 listeners: Sequence[tuple[str, str, int]] = (),
                 max_frame_bytes: int, max_in_flight: int = 1000, idle_ms: int = -1,
                 max_connections: int = _UNLIMITED, max_connections_per_ip: int = _UNLIMITED,
                 max_buffered_bytes: int = -1, refusals: RefusalLog | None = None) -> None:
        self._handler = handler
        # One log of refused frames for every connection (the broker's, when it passes it).
        self.refusals = refusals if refusals is not None else RefusalLog()
        # (name, host, port) of each listening socket; `host`/`port` alone are one PLAINTEXT.
        self._listeners = list(listeners) or [("PLAINTEXT", host, port)]
        self._port = self._listeners[0][2]
        # The port each listener is bound to, by name (known after `start`).
        self.bound: dict[str, int] = {}
        self._max_frame_bytes = max_frame_bytes
        self._max_in_flight = max_in_flight
        self._servers: list[asyncio.base_events.Server] = []
        self.connections: set[Connection] = set()
        self.idle_ms = idle_ms
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip: dict[str, int] = {}
        self.budget = ReadBudget(max_buffered_bytes)
        self._sweeper: asyncio.Task[None] | None = None
        self._refused = 0
        self._refusal_logged_at = -_REFUSAL_LOG_INTERVAL_S

    def _make_connection(self, listener: str) -> Connection:
        connection = _TrackedConnection(
            self, self._handler, max_frame_bytes=self._max_frame_bytes,
            max_in_flight=self._max_in_flight, budget=self.budget, refusals=self.refusals,
        )
        connection.listener = listener
        return connection

    def admit(self, connection: Connection, host: str) -> bool:
        """Count a new connection in, or refuse it (False) when a limit is reached."""
        if len(self.connections) >= self.max_connections:
            self._refuse(host, "max.connections", self.max_connections)
            return False
        if self.per_ip.get(host, 0) >= self.max_connections_per_ip:
            self._refuse(host, "max.connections.per.ip", self.max_connections_per_ip)
            return False
        self.connections.add(connection)
        self.per_ip[host] = self.per_ip.get(host, 0) + 1
        return True

    def release(self, connection: Connection, host: str) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            left = self.per_ip.get(host, 1) - 1
            if left:
                self.per_ip[host] = left
            else:
                self.per_ip.pop(host, None)

    def _refuse(self, host: str, limit: str, value: int) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged_at >= _REFUSAL_LOG_INTERVAL_S:
            log.warning("connection refused", client_host=host, limit=limit, value=value,
                        refused_since_last_warning=self._refused)
            self._refusal_logged_at = now
            self._refused = 0

    async def _sweep_idle(self) -> None:
        """Every quarter of `idle_ms`: note which connections were active, close the rest
        once idle for `idle_ms` (so a connection is closed after 1 to 1.25 times `idle_ms`)."""
        loop = asyncio.get_running_loop()
        interval = self.idle_ms / 4000
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            limit = self.idle_ms / 1000
            for connection in list(self.connections):
                if connection.active or connection.in_flight:
                    connection.active = False
                    connection.last_active = now
                elif now - connection.last_active >= limit and not connection.closing:
                    connection.close_idle(self.idle_ms)

    async def start(self) -> int:
        start_codec_loader()
        loop = asyncio.get_running_loop()
        for name, host, port in self._listeners:
            server = await loop.create_server(
                functools.partial(self._make_connection, name), host or None, port,
                reuse_address=True, backlog=1024)
            self._servers.append(server)
            sockets = server.sockets
            self.bound[name] = int(sockets[0].getsockname()[1]) if sockets else port
        self._port = self.bound[self._listeners[0][0]]
        if self.idle_ms > 0:
            self._sweeper = loop.create_task(self._sweep_idle())
        return self._port

    @property
    def port(self) -> int:
        return self._port

    async def stop(self, grace_seconds: float = 5.0) -> None:
        """Stop accepting, let in-flight responses go out (bounded), then close connections."""
        for server in self._servers:
            server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        pending = [c.drained.wait() for c in list(self.connections) if not c.drained.is_set()]
        if pending:
            await asyncio.wait([asyncio.ensure_future(p) for p in pending], timeout=grace_seconds)
        for connection in list(self.connections):
            connection.close()
        for server in self._servers:
            await server.wait_closed()


class _TrackedConnection(Connection):
    __slots__ = ("_server_ref",)

    def __init__(self, server: KafkaServer, handler: RequestHandler, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._server_ref = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if not self._server_ref.admit(self, self.client_host):
            # Never handed to the handler: nothing is read, nothing reported when it closes.
            self.closing = True
            self.closed = True
            transport.close()
            return
        self.last_active = asyncio.get_running_loop().time()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server_ref.release(self, self.client_host)
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
