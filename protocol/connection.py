"""One client connection: frames in, responses out in request order, with backpressure.

Kafka guarantees that responses on a connection follow request order, even when an earlier
request (a JoinGroup or a Fetch long-poll) is parked. Each decoded request reserves a
`ResponseSlot`; the handler fills it now or later, and whatever prefix of the queue is filled
goes out. Reading pauses while too many requests are in flight or the socket's write buffer is
full, so a fast producer cannot make the broker buffer without bound.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import itertools
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog

from protocol.codec import (
    LOADED_REQUEST_CODECS,
    RequestHeader,
    codec_needs_loading,
    decode_peeked,
    give_up_loading,
    load_codecs,
    peek_header,
)
from protocol.errors import AnsweredOverLimits, MalformedRequest, UnsupportedApi
from protocol.framing import FrameDecoder, FrameError
from protocol.guard import OverLimits
from protocol.refusals import RefusalLog, client_id_of

log = structlog.get_logger("rebalanced.connection")

_connection_ids = itertools.count(1)


class Activity:
    """Callbacks that want to know when any connection next receives bytes: the event-loop
    lag monitor, whose timer backs off while the loop idles and which then times the loop's
    turn that handles those bytes. While none waits, a read pays one None check."""

    __slots__ = ("_callbacks", "waiting")

    def __init__(self) -> None:
        self.waiting: Callable[[], None] | None = None
        self._callbacks: list[Callable[[], None]] = []

    def notify_next(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, on the next `data_received` of any connection."""
        if callback not in self._callbacks:
            self._callbacks.append(callback)
        self.waiting = self._notify

    def forget(self, callback: Callable[[], None]) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)
        if not self._callbacks:
            self.waiting = None

    def _notify(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        self.waiting = None
        for callback in callbacks:
            callback()


# The process's connections, all of them (there is one event loop serving them).
ACTIVITY = Activity()

# Frames one connection handles in one event-loop turn before letting the others run: a client
# that pipelines 20,000 requests answered at once (JoinGroups for new group ids) must not hold
# the loop for all of them. Its reading stays paused while the rest waits in its backlog.
FRAMES_PER_TURN = 64

_NO_FRAMES = ()

# Codec loads running in their own thread, shared by the connections that wait for them. One
# thread, started with the server (`start_codec_loader`): starting a thread waits until it
# runs, which on a busy machine held the event loop for tens of milliseconds.
_codec_loads: dict[tuple[int, int], asyncio.Future[None]] = {}
_codec_loader: concurrent.futures.ThreadPoolExecutor | None = None


def start_codec_loader() -> None:
    global _codec_loader
    if _codec_loader is None:
        _codec_loader = concurrent.futures.ThreadPoolExecutor(1, "codec-load")
        _codec_loader.submit(lambda: None).result()


def _codec_loaded(api_key: int, api_version: int) -> asyncio.Future[None] | None:
    """None once the codecs of (api_key, api_version) are ready (loaded here when no event loop
    runs); else a future that completes when a worker thread has loaded them."""
    key = (api_key, api_version)
    future = _codec_loads.get(key)
    if future is not None:
        return future
    try:
        start_codec_loader()
        future = asyncio.get_running_loop().run_in_executor(_codec_loader, load_codecs,
                                                             api_key, api_version)
    except RuntimeError:  # no event loop
        load_codecs(api_key, api_version)
        return None
    _codec_loads[key] = future

    def finished(done: asyncio.Future[None]) -> None:
        del _codec_loads[key]
        if done.cancelled() or done.exception() is not None:
            give_up_loading(api_key, api_version)  # decoded on the loop, as before
            return
        # A codec lives as long as the process: its classes, functions and tables (tens of
        # thousands of objects once a client has sent many versions) leave the collector's
        # generations, so that a full collection does not walk them every time (50-90 ms
        # under load with every version loaded). Freezing is O(1). What it also freezes, the
        # objects alive at this moment, is freed by reference counting as usual; only those
        # that later end in a reference cycle are never collected, and there is one freeze
        # per (API, version) in the life of the process.
        gc.freeze()

    future.add_done_callback(finished)
    return future


class ResponseSlot:
    """A place in a connection's response order; `data` is the framed response once known."""

    __slots__ = ("data", "done", "header")

    def __init__(self, header: RequestHeader | None) -> None:
        self.header = header
        self.data: bytes | None = None
        self.done = False


class ReadBudget:
    """Request bytes held broker-wide: partial frames and frames read but not yet handled.

    Above `limit`, connections stop being read as soon as they are between two frames (one in
    the middle of a frame keeps reading, so that the frame can complete and be released); they
    resume when the total falls back to the limit. A limit below zero means no limit.
    """

    __slots__ = ("exhausted", "limit", "used", "waiting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.exhausted = False
        self.waiting: set[Connection] = set()

    def change(self, delta: int) -> None:
        self.used += delta
        if self.limit < 0:
            return
        if not self.exhausted:
            if self.used > self.limit:
                self.exhausted = True
                log.warning("request buffer budget exhausted: reading paused",
                            buffered_bytes=self.used, queued_max_request_bytes=self.limit)
        elif self.used <= self.limit:
            self.exhausted = False
            waiting, self.waiting = self.waiting, set()
            log.info("request buffer budget available: reading resumed",
                     buffered_bytes=self.used, connections=len(waiting))
            for connection in waiting:
                connection._update_reading()


ANONYMOUS = "User:ANONYMOUS"


class SaslGate(Protocol):
    """A SASL listener's connection state, as the connection needs it to admit requests: none
    but ApiVersions, SaslHandshake and SaslAuthenticate before `authenticated`."""

    authenticated: bool
    # Authentication failed: the connection closes once the client has its answer.
    failed: bool
    # After a SaslHandshake v0, the frames are bare SASL tokens, not Kafka requests.
    raw_tokens: bool
    # Event-loop time after which only a re-authentication (KIP-368) is served.
    expires_at: float

    def raw_token(self, connection: Connection, slot: ResponseSlot, token: bytes) -> None:
        """Answer a bare token by completing `slot` with a size-prefixed bare token."""


# Answers a request from its frame at once, or declines (None) and the request goes the way
# of every request: (connection, frame, api version, correlation id) -> the framed answer.
ImmediateAnswer = Callable[["Connection", bytes, int, int], "bytes | None"]


class RequestHandler(Protocol):
    def handle(self, connection: Connection, slot: ResponseSlot, header: RequestHeader,
               request: Any) -> None:
        """Answer `request` by calling `connection.complete(slot, framed_bytes)`, now or later."""

    def unsupported(self, connection: Connection, slot: ResponseSlot, api_key: int,
                    api_version: int, correlation_id: int) -> bool:
        """Answer an unknown (key, version) if the API has a defined answer; else False."""

    def over_limits(self, connection: Connection, slot: ResponseSlot, header: RequestHeader,
                    request: Any, reason: str) -> None:
        """Answer a request over its API's element limit with INVALID_REQUEST for each
        element (or close the connection)."""

    def connection_closed(self, connection: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """Memory: a broker may hold tens of thousands of mostly idle connections (one per group
    member), so the connection has slots, the `drained` event is made only when asked for, and
    the response queue and the backlog are lists: a deque costs a 600-byte block even when it
    holds one request, and a connection rarely has more than a few in flight (popping the
    front of a list of `queued.max.requests` is still a short memmove).
    """

    __slots__ = (
        "_backlog", "_backlog_bytes", "_budget", "_decoder", "_drained", "_handler", "_held",
        "_immediate", "_loading_codec", "_max_in_flight", "_out", "_processing", "_queue",
        "_reading_paused", "_refusals", "_transport", "_write_scheduled", "_writing_paused",
        "active", "client_host", "closed", "closing", "id", "last_active", "listener",
        "principal", "sasl",
    )

    def __init__(self, handler: RequestHandler, *, max_frame_bytes: int,
                 max_in_flight: int = 1000, budget: ReadBudget | None = None,
                 refusals: RefusalLog | None = None) -> None:
        self.id = next(_connection_ids)
        self._handler = handler
        # API key -> the handler's answer at once (`ImmediateAnswer`), tried before decoding
        # when no earlier response is owed: the steady heartbeat, the hottest request.
        self._immediate: Mapping[int, ImmediateAnswer] | None = getattr(
            handler, "immediate_answers", None) or None
        # Where refused frames are logged: the server's (its broker's) log, shared by all.
        self._refusals = refusals if refusals is not None else RefusalLog()
        self._decoder = FrameDecoder(max_frame_bytes)
        # Requests answered or not, in arrival order.
        self._queue: list[ResponseSlot] = []
        # Frames read but not yet handled (too many requests in flight, or mid-batch); the
        # shared empty tuple while there are none, so that an idle connection holds no list.
        self._backlog: list[bytes] | tuple[()] = _NO_FRAMES
        self._backlog_bytes = 0
        self._processing = False
        # Waiting for a worker thread to load the codec of the frame at the backlog's head.
        self._loading_codec = False
        self._out: list[bytes] = []
        self._write_scheduled = False
        self._max_in_flight = max_in_flight
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._writing_paused = False
        self.closed = False
        # Set as soon as we decide to close: requests already read are then not handled.
        self.closing = False
        self.client_host = ""
        # The name of the listener it came in on (what Metadata and FindCoordinator advertise).
        self.listener = "PLAINTEXT"
        # Who the client is: "User:ANONYMOUS" until a client certificate or SASL says more.
        self.principal = ANONYMOUS
        # The SASL state of a connection to a SASL listener; None on the others.
        self.sasl: SaslGate | None = None
        self._drained: asyncio.Event | None = None
        self._budget = budget
        self._held = 0  # bytes counted against the budget
        # Set by a whole request read or a response written; the server's idle sweep clears
        # it and notes the time (a flag, so that the hot path reads no clock).
        self.active = False
        self.last_active = 0.0

    # asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport; duck typing suffices.
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        # Interned: members keep it, and a host usually has many connections.
        self.client_host = sys.intern(f"/{peer[0]}") if peer else ""

    @property
    def drained(self) -> asyncio.Event:
        """Set while no response is owed (a graceful shutdown waits for it); made on demand."""
        event = self._drained
        if event is None:
            event = self._drained = asyncio.Event()
            if not self._queue:
                event.set()
        return event

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        waiting = ACTIVITY.waiting
        if waiting is not None:
            waiting()
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            self._reject(str(exc))
            return
        if not frames:
            if self._budget is not None:
                self._update_reading()
            return
        self.active = True
        if (len(frames) == 1 and not self._backlog and not self._processing
                and not self._loading_codec and len(self._queue) < self._max_in_flight):
            # One request and nothing waiting before it (a member's heartbeat, a commit): the
            # batch below without its bookkeeping.
            self._processing = True
            try:
                handled = self._receive(frames[0])
            finally:
                self._processing = False
            if not handled:  # it waits for its codec
                self._backlog = frames
                self._backlog_bytes += len(frames[0])
            self._write_out()
            self._update_reading()
            return
        self._backlog_bytes += len(frames[0]) if len(frames) == 1 else sum(map(len, frames))
        backlog = self._backlog
        if backlog:
            backlog.extend(frames)  # type: ignore[union-attr]  # a non-empty backlog is a list
        else:
            self._backlog = frames
        self._process_backlog()

    def _process_backlog(self) -> None:
        if self._processing or self._loading_codec:
            # A handler answered synchronously (the outer loop carries on), or the next frame
            # waits for its codec.
            return
        self._processing = True
        backlog = self._backlog
        handled = 0
        handled_bytes = 0
        try:
            while (handled < len(backlog) and not self.closed and not self.closing
                   and len(self._queue) < self._max_in_flight):
                if handled == FRAMES_PER_TURN:
                    asyncio.get_running_loop().call_soon(self._process_backlog)
                    break
                frame = backlog[handled]
                if not self._receive(frame):
                    break
                handled += 1
                handled_bytes += len(frame)
        finally:
            self._processing = False
            if handled and self._backlog is backlog:  # `close` drops the whole backlog
                del backlog[:handled]  # type: ignore[union-attr]  # handled: a list
                self._backlog_bytes -= handled_bytes
                if not backlog:
                    self._backlog = _NO_FRAMES
        self._write_out()
        self._update_reading()

    def eof_received(self) -> bool | None:
        if self._decoder.buffered:
            self._reject(f"stream ended inside a frame ({self._decoder.buffered} bytes buffered)")
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._queue.clear()
        self._backlog = _NO_FRAMES
        self._backlog_bytes = 0
        if self._budget is not None:
            self._budget.waiting.discard(self)
            if self._held:
                self._budget.change(-self._held)
                self._held = 0
        if self._drained is not None:
            self._drained.set()
        # The transport refers to this protocol: without the reference back, a closed
        # connection is freed at once instead of waiting, as a cycle, for the collector.
        self._transport = None
        self._handler.connection_closed(self)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    # requests and responses -------------------------------------------------------------------

    def _receive(self, body: bytes) -> bool:
        """Handle one frame; False if it must wait for its codec (it stays in the backlog)."""
        try:
            api_key, api_version, correlation_id = peek_header(body)
        except MalformedRequest as exc:
            self._reject(str(exc))
            return True
        immediate = self._immediate
        if immediate is not None and not self._queue:
            # Nothing answered before it is still owed, so an answer now keeps the order.
            answer_now = immediate.get(api_key)
            if answer_now is not None:
                answer = answer_now(self, body, api_version, correlation_id)
                if answer is not None:
                    self._out.append(answer)
                    return True
        if ((api_key, api_version) not in LOADED_REQUEST_CODECS
                and codec_needs_loading(api_key, api_version)):
            # The first request of a version imports its schema: not on the event loop,
            # where a client sending many versions once could hold every group up.
            loading = _codec_loaded(api_key, api_version)
            if loading is not None:
                self._loading_codec = True
                loading.add_done_callback(self._codec_ready)
                return False
        try:
            header, request = decode_peeked(body, api_key, api_version)
        except UnsupportedApi:
            slot = self._reserve(None)
            if not self._handler.unsupported(self, slot, api_key, api_version, correlation_id):
                self._refusals.refuse_version(client_id=client_id_of(body), api_key=api_key,
                                        api_version=api_version, connection=self.id,
                                        client_host=self.client_host)
                self.close()
            return True
        except AnsweredOverLimits as over:
            slot = self._reserve(over.header)
            self._handler.over_limits(self, slot, over.header, over.request, over.reason)
            return True
        except OverLimits as exc:
            self._reject(str(exc), body, api_key, api_version, problem="request over limits",
                         advice="send fewer elements in one request (README: Hostile input)")
            return True
        except MalformedRequest as exc:
            self._reject(f"{exc}; frame starts {body[:48].hex()}", body, api_key, api_version)
            return True
        slot = self._reserve(header)
        self._handler.handle(self, slot, header, request)
        return True

    def _codec_ready(self, _: asyncio.Future[None]) -> None:
        self._loading_codec = False
        if not self.closed and not self.closing:
            self._process_backlog()

    def _reserve(self, header: RequestHeader | None) -> ResponseSlot:
        slot = ResponseSlot(header)
        self._queue.append(slot)
        if self._drained is not None:
            self._drained.clear()
        return slot

    def complete(self, slot: ResponseSlot, data: bytes | None) -> None:
        """Fill a slot; None means "no response" (Produce with acks=0)."""
        if self.closed or slot.done:
            return
        slot.data = data
        slot.done = True
        self._flush()

    def _flush(self) -> None:
        queue = self._queue
        transport = self._transport
        if transport is None:
            return
        out = self._out
        ready = 0
        for slot in queue:
            if not slot.done:
                break
            ready += 1
            if slot.data is not None:
                out.append(slot.data)
        if ready:
            del queue[:ready]
        if not queue and self._drained is not None:
            self._drained.set()
        if self._processing:
            # Responses completed while a batch of pipelined requests is being handled go
            # out in one write when the batch ends; one syscall instead of one per response.
            # The batch's end also handles what is left of the backlog and updates reading
            # (mid-batch the backlog still holds the frame being handled, so updating here
            # would pause reading and resume it at the end, for every request).
            return
        if out and not self._write_scheduled:
            # Outside a batch (answers to parked requests, commits made durable by one group
            # fsync) the write waits for the end of this event-loop turn, so the responses
            # completed together share it too.
            self._write_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_write)
        if self._backlog:
            self._process_backlog()
        else:
            self._update_reading()

    def _scheduled_write(self) -> None:
        self._write_scheduled = False
        self._write_out()

    def _write_out(self) -> None:
        out = self._out
        if out and self._transport is not None and not self.closed:
            self._transport.write(b"".join(out) if len(out) > 1 else out[0])
            self.active = True
        out.clear()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self.closed:
            return
        should_pause = (self._writing_paused or bool(self._backlog)
                        or len(self._queue) >= self._max_in_flight)
        budget = self._budget
        if budget is not None:
            held = self._decoder.buffered + self._backlog_bytes
            if held != self._held:
                budget.change(held - self._held)
                self._held = held
            if budget.exhausted and not self._decoder.buffered:
                should_pause = True
                budget.waiting.add(self)
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    @property
    def partial_frame_bytes(self) -> int:
        return self._decoder.buffered

    def release_buffers(self) -> None:
        """The idle sweep found nothing read or written since its last visit: a TLS layer
        hands back the record buffers it kept while the connection was busy."""
        release = getattr(self._transport, "release_record_buffers", None)
        if release is not None:
            release()

    def close_idle(self, idle_ms: int) -> None:
        """Closed by the server's idle sweep: nothing read or written for `idle_ms`."""
        log.info("idle connection closed", connection=self.id, client_host=self.client_host,
                 idle_ms=idle_ms, partial_frame_bytes=self._decoder.buffered)
        self.close()

    def _reject(self, reason: str, frame: bytes | None = None, api_key: int | None = None,
                api_version: int | None = None, *, problem: str = "malformed frame",
                advice: str | None = None) -> None:
        # Keyed by client id when the frame names one, else by host: a client reconnecting
        # and sending the same bad frame is logged once a minute, not once a connection.
        client_id = client_id_of(frame) if frame is not None else ""
        self._refusals.refused(
            "connection closed on bad input", client_id=client_id or self.client_host,
            api_key=api_key, api_version=api_version, problem=problem,
            advice=advice or ("check that the client's protocol setting (kafka-python "
                              "api_version, librdkafka broker.version.fallback) matches the "
                              "versions it sends" if api_key is not None
                              else "send Kafka protocol frames to this port"),
            connection=self.id, client_host=self.client_host, reason=reason)
        self.close()

    @property
    def refusals(self) -> RefusalLog:
        """Where this connection's refused input is logged (its broker's log)."""
        return self._refusals

    def close(self) -> None:
        self.closing = True
        self._backlog = _NO_FRAMES
        self._backlog_bytes = 0
        self._write_out()  # responses already answered go out before the close
        if self._transport is not None and not self.closed:
            self._transport.close()
        # connection_lost follows from the transport and notifies the handler.
