"""The `metrics.listener` HTTP endpoint: `/metrics` (Prometheus) and `/` (the group page).

A minimal HTTP/1.1 server on the broker's event loop that lives within its own budget, so that
no load on this port can hurt the Kafka port:

* **Connections**: at most `metrics.max.connections` at once (kept well below the process's
  open-files limit, see `connection_limit`); one more is answered 503 and closed at once, so
  a flood of connections costs a file descriptor for a moment, never a log roll's.
* **Time**: a request's head (request line and headers) must arrive within
  `metrics.header.timeout.ms` of the connection or of its first byte, a kept-alive connection
  is closed after `metrics.idle.timeout.ms` without a request, and so is one whose client does
  not take its answer. A half-sent request holds one connection slot for that long, nothing
  else: requests are answered one at a time per connection, independently of the others.
* **Request rate**: at most `metrics.max.request.rate` answers a second (a second's worth may
  come at once); more requests wait their turn. Even a cached answer costs the loop an accept,
  a parse and a write of up to a megabyte, and clients fetching back to back would otherwise
  take as much of the loop (and, on the same machine, of the CPU) as they can.
* **Render cost**: each document is built at most once per `metrics.cache.ms` and shared by
  every request in that interval (a request arriving during a build waits for it). Building
  copies the broker's state on the loop in slices of at most `_SLICE_S` of work (a broker may
  hold 100,000 groups), then formats it in slices on the loop too (see `Builder`).

Anything but a GET or HEAD of a known path gets a 4xx answer.
"""

from __future__ import annotations

import asyncio
import resource
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import structlog

from coordinator.ops import metrics as om
from coordinator.ops import page
from coordinator.ops.access import OpsAccess
from coordinator.ops.metrics.history import RebalanceHistory
from coordinator.ops.view import CLASSIC, CONSUMER, BrokerView

log = structlog.get_logger("rebalanced.ops")

_MAX_REQUEST_BYTES = 16 * 1024
# The loop is given back after this much building work (seconds): a commit that arrives while a
# page is built waits at most about this long for it.
_SLICE_S = 0.001
_REFUSAL_LOG_INTERVAL_S = 10.0
# At most this share of the process's open-files limit goes to HTTP connections: the rest is the
# Kafka port's, the group log's and the partitions'.
_FD_SHARE = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class OpsLimits:
    max_connections: int = 32
    header_timeout_s: float = 5.0
    idle_timeout_s: float = 10.0
    cache_s: float = 1.0
    max_request_rate: float = 20.0

    @classmethod
    def from_settings(cls, settings: Any) -> OpsLimits:
        return cls(max_connections=settings["metrics.max.connections"],
                   header_timeout_s=settings["metrics.header.timeout.ms"] / 1000,
                   idle_timeout_s=settings["metrics.idle.timeout.ms"] / 1000,
                   cache_s=settings["metrics.cache.ms"] / 1000,
                   max_request_rate=settings["metrics.max.request.rate"])


class Pacer:
    """At most `rate` turns a second on average, up to a second's worth at once after a
    quiet spell; a turn beyond that waits for its time (first come, first served)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = 1 / rate
        self.burst_s = 1.0
        self._clock = clock
        self._next_at = -self.burst_s

    def delay(self) -> float:
        """Take a turn: how long to wait for it (seconds)."""
        now = self._clock()
        at = max(self._next_at, now - self.burst_s)
        self._next_at = at + self.interval_s
        return max(at - now, 0.0)


def connection_limit(wanted: int) -> int:
    """`wanted`, or less: at most 1/`_FD_SHARE` of the open-files limit (soft) goes to HTTP."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft // _FD_SHARE))


class Builder:
    """One document (the /metrics text or the page), rebuilt at most once per `max_age_s`.

    `build` is a coroutine function that returns the body, giving the loop back between bounded
    steps of its work (`in_slices`). `get()` answers the cached body while it is
    younger than `max_age_s`, else starts one build that every request waits for: the cost of
    this port is bounded by time, not by how many ask.

    Why on the loop and not in a thread: while a worker thread runs Python it holds the
    interpreter lock, and the loop, woken by a commit's bytes or its fsync, waits up to the
    switch interval (5 ms) for it at every wake-up. Rendered in a thread of its own, the page
    and /metrics of a 20,000-group broker raised the commit p99 1.75-1.9x under scrape, in
    slices on the loop 1.07-1.18x in the runs right after (BENCHMARKS.md, "The ops port under
    load"): the same CPU, but a commit waits at most one slice of `_SLICE_S`.
    """

    def __init__(self, build: Callable[[], Awaitable[bytes]], max_age_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._build = build
        self.max_age_s = max_age_s
        self._clock = clock
        self._body: bytes | None = None
        self._built_at = 0.0
        self._building: asyncio.Future[bytes] | None = None
        self.builds = 0

    async def get(self) -> bytes:
        if self._body is not None and self._clock() - self._built_at < self.max_age_s:
            return self._body
        if self._building is None:
            self._building = asyncio.ensure_future(self._run())
        # Shielded: a client that goes away does not cancel the build the others wait for.
        return await asyncio.shield(self._building)

    async def _run(self) -> bytes:
        started = self._clock()
        try:
            body = await self._build()
        finally:
            self._building = None
        self.builds += 1
        self._body, self._built_at = body, started
        return body


async def in_slices(steps: Iterator[Any]) -> None:
    """Run `steps` (a generator doing a bounded piece of work per step), giving the loop back
    whenever `_SLICE_S` of work is done."""
    deadline = time.perf_counter() + _SLICE_S
    for _ in steps:
        if time.perf_counter() >= deadline:
            await asyncio.sleep(0)
            deadline = time.perf_counter() + _SLICE_S


class OpsServer:
    def __init__(self, view: BrokerView, metrics: om.BrokerMetrics,
                 connections: Callable[[], int], limits: OpsLimits | None = None,
                 access: OpsAccess | None = None) -> None:
        self.access = access or OpsAccess("none")
        self._view = view
        self._metrics = metrics
        self._connections = connections
        self.limits = limits or OpsLimits()
        self.max_connections = connection_limit(self.limits.max_connections)
        self._server: asyncio.base_events.Server | None = None
        self._exposition_cache: dict[str, Any] = {}
        self.open: set[_HttpConnection] = set()
        self.metrics_text = Builder(self._build_metrics, self.limits.cache_s)
        self.page_html = Builder(self._build_page, self.limits.cache_s)
        self.pacer = Pacer(self.limits.max_request_rate)
        self._refused = 0
        self._refusal_logged_at = -_REFUSAL_LOG_INTERVAL_S

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        # prometheus-client is imported at start, not by the first scrape (the import takes
        # tens of milliseconds of the broker's CPU while it serves).
        import prometheus_client  # noqa: F401

        if self.max_connections < self.limits.max_connections:
            log.warning("metrics.max.connections lowered to keep file descriptors for the "
                        "Kafka port and the logs", wanted=self.limits.max_connections,
                        max_connections=self.max_connections,
                        open_files_limit=resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _HttpConnection(self), host, port,
                                                reuse_address=True, ssl=tls)
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.open):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()

    def admit(self, connection: _HttpConnection) -> bool:
        if len(self.open) >= self.max_connections:
            self._refused += 1
            now = time.monotonic()
            if now - self._refusal_logged_at >= _REFUSAL_LOG_INTERVAL_S:
                log.warning("metrics connection refused", limit="metrics.max.connections",
                            value=self.max_connections,
                            refused_since_last_warning=self._refused)
                self._refusal_logged_at = now
                self._refused = 0
            return False
        self.open.add(connection)
        return True

    async def answer(self, head: bytes) -> tuple[str, str, bytes]:
        wait_s = self.pacer.delay()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(request_line) != 3:
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target, _ = request_line
        if not self.access.allows(head):
            return "401 Unauthorized", "text/plain", b"authentication required\n"
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            return ("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                    await self.metrics_text.get())
        if path in ("/", "/index.html"):
            return "200 OK", "text/html; charset=utf-8", await self.page_html.get()
        return "404 Not Found", "text/plain", b"not found: try / or /metrics\n"

    # building --------------------------------------------------------------------------------

    async def _build_metrics(self) -> bytes:
        view = self._view
        counts = om.GroupCounts()
        await in_slices(_count_groups(view, counts))
        num_offsets = [0]
        await in_slices(_count_offsets(view, num_offsets))
        snap = self._metrics.snapshot(counts, num_offsets[0], self._connections(),
                                      view.wall_ms())
        parts: list[bytes] = []
        await in_slices(om.exposition_parts(snap, self._exposition_cache, parts))
        return b"".join(parts)

    async def _build_page(self) -> bytes:
        view = self._view
        now_ms = view.wall_ms()
        chosen: list[list[str]] = [[]]
        await in_slices(_first_ids(view.group_ids(), chosen))
        views: list[dict[str, Any]] = []
        await in_slices(_group_views(view, self._metrics.rebalances, chosen[0], now_ms, views))
        snap = page.page_data(view.node_id, now_ms, views, view.group_count())
        parts: list[str] = []
        await in_slices(page.render_parts(snap, parts))
        return "".join(parts).encode()


_CHUNK = 1000  # groups or ids handled per step


def _count_groups(view: BrokerView, counts: om.GroupCounts) -> Iterator[None]:
    for by_state in view.count_group_states(CLASSIC, _CHUNK):
        counts.add_classic(by_state)
        yield
    for by_state in view.count_group_states(CONSUMER, _CHUNK):
        counts.add_consumer(by_state)
        yield


def _count_offsets(view: BrokerView, total: list[int]) -> Iterator[None]:
    """Committed offsets held, for Kafka's NumOffsets."""
    for count in view.count_committed_offsets(_CHUNK):
        total[0] += count
        yield


def _first_ids(ids: list[str], chosen: list[list[str]]) -> Iterator[None]:
    for start in range(0, len(ids), _CHUNK * 5):  # ids are cheaper than groups
        chosen[0] = page.first_group_ids(ids[start:start + _CHUNK * 5], chosen[0])
        yield


def _group_views(view: BrokerView, history: RebalanceHistory, group_ids: list[str],
                 now_ms: int, views: list[dict[str, Any]]) -> Iterator[None]:
    for group_id in group_ids:
        group = page.group_view(view, history, group_id, now_ms)
        if group is not None:
            views.append(group)
        yield


# A connection's states: waiting for a request's head (the header timeout runs), kept alive
# between requests (the idle timeout runs), answering (reading paused), answered but the client
# not yet taking the answer (the idle timeout runs), closed.
_HEAD, _IDLE, _ANSWERING, _DRAINING, _CLOSED = range(5)


class _HttpConnection(asyncio.Protocol):
    """One client connection: requests read and answered one at a time (keep-alive when the
    client asks for it, as HTTP/1.1 clients do by default)."""

    def __init__(self, server: OpsServer) -> None:
        self._server = server
        self._limits = server.limits
        self._transport: Any = None
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._answering: asyncio.Task[None] | None = None
        self._state = _HEAD
        self._writing_paused = False

    # asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        if not self._server.admit(self):
            self._state = _CLOSED
            self._transport.write(_response("503 Service Unavailable", "text/plain",
                                            b"too many connections\n", keep_alive=False))
            self._transport.close()
            return
        # The first request's head is due within the header timeout of the connection.
        self._arm(self._limits.header_timeout_s, self._header_timeout)

    def data_received(self, data: bytes) -> None:
        if self._state == _CLOSED:
            return
        self._buffer += data
        if self._state == _IDLE:
            # The first byte of the next request on a kept-alive connection: its head is due.
            self._state = _HEAD
            self._arm(self._limits.header_timeout_s, self._header_timeout)
        if self._state == _HEAD:
            self._next_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._state = _CLOSED
        self._cancel_timer()
        self._server.open.discard(self)
        if self._answering is not None:
            self._answering.cancel()

    def pause_writing(self) -> None:
        # The client stopped reading its answer: it has the idle timeout to take the rest.
        self._writing_paused = True
        self._arm(self._limits.idle_timeout_s, self.abort)

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._cancel_timer()
        if self._state == _DRAINING:
            self._ready_for_next()

    # requests ---------------------------------------------------------------------------------

    def _next_request(self) -> None:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0 or end + 4 > _MAX_REQUEST_BYTES:
            if end >= 0 or len(self._buffer) > _MAX_REQUEST_BYTES:
                self._finish("431 Request Header Fields Too Large", b"too large\n")
            return
        head = bytes(self._buffer[:end + 4])
        del self._buffer[:end + 4]
        self._cancel_timer()
        self._state = _ANSWERING
        self._transport.pause_reading()  # one request at a time; the next waits in the socket
        self._answering = asyncio.get_running_loop().create_task(self._answer(head))

    async def _answer(self, head: bytes) -> None:
        try:
            status, content_type, body = await self._server.answer(head)
        except Exception:
            log.exception("ops request failed")
            status, content_type, body = "500 Internal Server Error", "text/plain", b"error\n"
        self._answering = None
        if self._state == _CLOSED:
            return
        # Anything but a GET or HEAD may have sent a body this server does not read: close.
        keep_alive = head.startswith((b"GET ", b"HEAD ")) and _keep_alive(head)
        response = _response(status, content_type, body, keep_alive,
                             self._server.access.challenge if status.startswith("401")
                             else None)
        if head.startswith(b"HEAD ") and body:
            response = response[:-len(body)]
        if not keep_alive:
            self._state = _CLOSED
            self._transport.write(response)  # may pause writing: see pause_writing
            self._transport.close()  # after the answer is written
            return
        self._state = _DRAINING
        self._transport.write(response)
        if not self._writing_paused:
            self._ready_for_next()

    def _ready_for_next(self) -> None:
        self._transport.resume_reading()
        if self._buffer:
            self._state = _HEAD
            self._arm(self._limits.header_timeout_s, self._header_timeout)
            self._next_request()
        else:
            self._state = _IDLE
            self._arm(self._limits.idle_timeout_s, self.abort)

    def _finish(self, status: str, body: bytes) -> None:
        """Answer an error and close."""
        self._cancel_timer()
        self._state = _CLOSED
        self._transport.write(_response(status, "text/plain", body, keep_alive=False))
        self._transport.close()

    # timers -----------------------------------------------------------------------------------

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        self._cancel_timer()
        self._timer = asyncio.get_running_loop().call_later(seconds, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_timeout(self) -> None:
        self._timer = None
        if self._state == _HEAD:
            self._finish("408 Request Timeout", b"request head not received in time\n")

    def abort(self) -> None:
        self._state = _CLOSED
        self._cancel_timer()
        if self._transport is not None:
            self._transport.abort()


def _keep_alive(head: bytes) -> bool:
    """HTTP/1.1 keeps the connection unless the client says `Connection: close`; HTTP/1.0
    closes it unless the client says `Connection: keep-alive`."""
    first, _, headers = head.partition(b"\r\n")
    connection = b""
    for line in headers.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"connection":
            connection = value.strip().lower()
    if first.rstrip().endswith(b"HTTP/1.0"):
        return connection == b"keep-alive"
    return connection != b"close"


def _response(status: str, content_type: str, body: bytes, keep_alive: bool,
              challenge: str | None = None) -> bytes:
    authenticate = f"WWW-Authenticate: {challenge}\r\n" if challenge else ""
    return (f"HTTP/1.1 {status}\r\n{authenticate}Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n").encode() + body
