"""The asyncio TCP edge: accept connections, run until a signal, shut down gracefully."""

from __future__ import annotations

import asyncio
import functools
import math
import signal
import ssl
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from protocol.codec import peek_header
from protocol.connection import (
    Connection,
    ReadBudget,
    RequestHandler,
    SaslGate,
    start_codec_loader,
)
from protocol.errors import MalformedRequest
from protocol.refusals import RefusalLog, client_id_of
from protocol.tls import TlsLayer

log = structlog.get_logger("rebalanced.server")


_UNLIMITED = 2**31 - 1
# Refused connections are logged at most this often (with a count), not once each: a flood of
# connection attempts must not become a flood of log lines.
_REFUSAL_LOG_INTERVAL_S = 10.0
# A TLS handshake not finished by then is abandoned (Kafka leaves it to the idle timeout).
_TLS_HANDSHAKE_TIMEOUT_S = 10.0
# Served on a SASL listener before authentication: ApiVersions, SaslHandshake, SaslAuthenticate.
_BEFORE_AUTHENTICATION = frozenset({18, 17, 36})
_REAUTHENTICATION = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate
# Kafka's sasl.server.max.receive.size: the largest frame a client may send before it is
# authenticated, so that an anonymous peer cannot make the broker buffer 100 MB frames.
SASL_MAX_RECEIVE_BYTES = 524288


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How a listener's connections are secured: TLS with `tls` (SSL, SASL_SSL), the
    principal of a client certificate by `certificate_principal` (raises ValueError when no
    rule maps it), SASL state made by `sasl` for each connection (SASL_PLAINTEXT, SASL_SSL)."""

    tls: ssl.SSLContext | None = None
    certificate_principal: Callable[[dict[str, Any]], str] | None = None
    sasl: Callable[[], SaslGate] | None = None


class KafkaServer:
    """Accepts connections within `max_connections` (and `max_connections_per_ip`), closes
    those idle for `idle_ms` (no whole request read and no response written, nothing in
    flight; a connection that stopped inside a frame is idle), and shares one `ReadBudget` of
    buffered request bytes between all connections."""

    def __init__(self, handler: RequestHandler, *, host: str = "", port: int = 0,
                 listeners: Sequence[tuple[str, str, int]] = (),
                 security: Mapping[str, ListenerSecurity] | None = None,
                 max_frame_bytes: int, max_in_flight: int = 1000, idle_ms: int = -1,
                 max_connections: int = _UNLIMITED, max_connections_per_ip: int = _UNLIMITED,
                 max_buffered_bytes: int = -1, refusals: RefusalLog | None = None) -> None:
        self._handler = handler
        # One log of refused frames for every connection (the broker's, when it passes it).
        self.refusals = refusals if refusals is not None else RefusalLog()
        # (name, host, port) of each listening socket; `host`/`port` alone are one PLAINTEXT.
        self._listeners = list(listeners) or [("PLAINTEXT", host, port)]
        # By listener name; a listener not named here is PLAINTEXT.
        self._security = dict(security or {})
        # TLS connections whose handshake is under way (closed at once by `stop`).
        self._handshakes: set[TlsLayer] = set()
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
        self.handshaking = 0
        self.handshakes_per_ip: dict[str, int] = {}
        self.budget = ReadBudget(max_buffered_bytes)
        self._sweeper: asyncio.Task[None] | None = None
        self._refused = 0
        self._refusal_logged_at = -_REFUSAL_LOG_INTERVAL_S

    def _make_connection(self, listener: str) -> Connection:
        security = self._security.get(listener)
        sasl = security.sasl if security is not None else None
        # Only SASL listeners' connections check each request: a PLAINTEXT or SSL connection
        # is the plain class, with nothing added to its request path.
        kind = _TrackedConnection if sasl is None else _SaslConnection
        connection = kind(
            self, self._handler, max_frame_bytes=self._max_frame_bytes,
            max_in_flight=self._max_in_flight, budget=self.budget, refusals=self.refusals,
        )
        connection.listener = listener
        if sasl is not None:
            connection.sasl = sasl()
            connection._decoder.max_frame_bytes = min(self._max_frame_bytes,
                                                      SASL_MAX_RECEIVE_BYTES)
        return connection

    def _make_protocol(self, listener: str) -> asyncio.Protocol:
        security = self._security.get(listener)
        if security is not None and security.tls is not None:
            return _TlsAcceptor(self, listener, security)
        return self._make_connection(listener)

    def _within_limits(self, host: str) -> bool:
        # TLS handshakes under way count: a flood of them holds sockets as connections do.
        if len(self.connections) + self.handshaking >= self.max_connections:
            self._refuse(host, "max.connections", self.max_connections)
            return False
        if (self.per_ip.get(host, 0) + self.handshakes_per_ip.get(host, 0)
                >= self.max_connections_per_ip):
            self._refuse(host, "max.connections.per.ip", self.max_connections_per_ip)
            return False
        return True

    def admit(self, connection: Connection, host: str) -> bool:
        """Count a new connection in, or refuse it (False) when a limit is reached."""
        if not self._within_limits(host):
            return False
        self.connections.add(connection)
        self.per_ip[host] = self.per_ip.get(host, 0) + 1
        return True

    def begin_handshake(self, host: str) -> bool:
        """Count a TLS handshake in, or refuse it (False) when a limit is reached."""
        if not self._within_limits(host):
            return False
        self.handshaking += 1
        self.handshakes_per_ip[host] = self.handshakes_per_ip.get(host, 0) + 1
        return True

    def end_handshake(self, host: str) -> None:
        self.handshaking -= 1
        left = self.handshakes_per_ip.get(host, 1) - 1
        if left:
            self.handshakes_per_ip[host] = left
        else:
            self.handshakes_per_ip.pop(host, None)

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
        once idle for `idle_ms` (so a connection is closed after 1 to 1.25 times `idle_ms`);
        one idle since the last visit hands back the TLS buffers it kept while busy."""
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
                else:
                    connection.release_buffers()

    async def start(self) -> int:
        start_codec_loader()
        loop = asyncio.get_running_loop()
        for name, host, port in self._listeners:
            server = await loop.create_server(
                functools.partial(self._make_protocol, name), host or None, port,
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
        for handshake in list(self._handshakes):
            handshake.abort()
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


class _SaslConnection(_TrackedConnection):
    """A connection to a SASL listener: until authenticated, only ApiVersions and the SASL
    requests are served; any other request closes it, as Kafka's SaslServerAuthenticator
    does. Once a KIP-368 session has expired, only a re-authentication is."""

    __slots__ = ()

    def authenticated(self) -> None:
        """Authentication succeeded: frames up to socket.request.max.bytes from now on."""
        self._decoder.max_frame_bytes = self._server_ref._max_frame_bytes
        sasl = self.sasl
        if sasl is not None and sasl.expires_at == math.inf and not sasl.failed:
            # A session without an end: every later frame is served as on any listener (a
            # SASL request again is answered ILLEGAL_SASL_STATE by its handler), so the checks
            # leave the path of each request.
            self.__class__ = _AuthenticatedSaslConnection

    def _receive(self, body: bytes) -> bool:
        sasl = self.sasl
        assert sasl is not None
        if sasl.authenticated and sasl.expires_at == math.inf:
            return super()._receive(body)
        if sasl.failed:
            return True  # closing once the failure's answer is out
        if sasl.raw_tokens and not sasl.authenticated:
            sasl.raw_token(self, self._reserve(None), body)
            return True
        try:
            api_key, api_version, _ = peek_header(body)
        except MalformedRequest as exc:
            return self._refuse_unauthenticated(body, None, None, str(exc))
        if sasl.authenticated:
            # A re-authentication begun before the end may finish after it.
            if (api_key not in _REAUTHENTICATION
                    and asyncio.get_running_loop().time() >= sasl.expires_at):
                return self._refuse_unauthenticated(
                    body, api_key, api_version, "the SASL session expired without "
                    "re-authentication (connections.max.reauth.ms)")
            return super()._receive(body)
        if api_key not in _BEFORE_AUTHENTICATION:
            return self._refuse_unauthenticated(body, api_key, api_version,
                                                "request before SASL authentication")
        return super()._receive(body)

    def _refuse_unauthenticated(self, body: bytes, api_key: int | None,
                                api_version: int | None, reason: str) -> bool:
        self._refusals.refused(
            "connection closed on bad input", client_id=client_id_of(body) or self.client_host,
            api_key=api_key, api_version=api_version, problem="not authenticated",
            advice="configure the client for this listener's security protocol "
                   "(security.protocol=SASL_PLAINTEXT or SASL_SSL, sasl.mechanism and its "
                   "credentials)",
            connection=self.id, client_host=self.client_host, listener=self.listener,
            reason=reason)
        self.close()
        return True


class _AuthenticatedSaslConnection(_SaslConnection):
    """A connection to a SASL listener, authenticated for good (no connections.max.reauth.ms)."""

    __slots__ = ()

    _receive = _TrackedConnection._receive


class _TlsAcceptor(TlsLayer):
    """The TLS layer of a TLS listener's connection: it counts as a handshake under way until
    its handshake is done, then starts the Kafka connection on itself. A failed handshake (a
    plaintext client, an untrusted or missing client certificate, garbage, the timeout) is one
    rate-limited line and a close."""

    __slots__ = ("_counted", "_host", "_listener", "_security", "_server")

    def __init__(self, server: KafkaServer, listener: str, security: ListenerSecurity) -> None:
        assert security.tls is not None
        super().__init__(security.tls, _TLS_HANDSHAKE_TIMEOUT_S)
        self._server = server
        self._listener = listener
        self._security = security
        self._host = ""
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self._host = sys.intern(f"/{peer[0]}") if peer else ""
        self._counted = self._server.begin_handshake(self._host)
        if not self._counted:
            self._closing = True
            transport.close()
            return
        super().connection_made(transport)
        self._server._handshakes.add(self)

    def handshake_ended(self) -> None:
        self._server._handshakes.discard(self)
        if self._counted:
            self._counted = False
            self._server.end_handshake(self._host)

    def handshake_failed(self, reason: str) -> None:
        self._refuse("TLS handshake failed", reason,
                     "configure the client with security.protocol=SSL or SASL_SSL and the CA "
                     "that signed this listener's certificate (and, with ssl.client.auth, a "
                     "client certificate this listener trusts)")

    def stream_failed(self, reason: str) -> None:
        self._refuse("TLS record refused", reason,
                     "the client's TLS stream broke off or was altered on the way")

    def handshake_completed(self) -> asyncio.Protocol | None:
        principal = None
        certificate = self.get_extra_info("peercert")
        mapping = self._security.certificate_principal
        if certificate and mapping is not None:
            try:
                principal = "User:" + mapping(certificate)
            except ValueError as exc:
                self._refuse("client certificate not mapped to a principal", str(exc),
                             "add a rule for this subject to ssl.principal.mapping.rules")
                return None
        connection = self._server._make_connection(self._listener)
        if principal is not None:
            connection.principal = principal
        return connection

    def _refuse(self, problem: str, reason: str, advice: str) -> None:
        host = self._host
        self._server.refusals.refused(
            "connection closed on bad input", client_id=host, api_key=None, api_version=None,
            problem=problem, advice=advice, client_host=host, listener=self._listener,
            reason=reason)


def install_signal_handlers(stop: Callable[[], None]) -> None:
    """SIGTERM, SIGINT and SIGHUP stop the broker gracefully (SIGHUP as the JVM's shutdown
    hooks take it for Kafka: a closed terminal or session stops the broker cleanly rather than
    killing it mid-write). A SIGHUP the broker was started ignoring (`nohup`) stays ignored, as
    the JVM leaves it."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        loop.add_signal_handler(sig, stop)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed, the standard loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
