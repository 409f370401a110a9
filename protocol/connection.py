"""One client connection: frames in, responses out in request order, with backpressure.

Kafka guarantees that responses on a connection follow request order, even when an earlier
request (a JoinGroup or a Fetch long-poll) is parked. Each decoded request reserves a
`ResponseSlot`; the handler fills it now or later, and whatever prefix of the queue is filled
goes out. Reading pauses while too many requests are in flight or the socket's write buffer is
full, so a fast producer cannot make the broker buffer without bound.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import Any, Protocol

import structlog

from protocol.codec import RequestHeader, decode_request, peek_header
from protocol.errors import MalformedRequest, UnsupportedApi
from protocol.framing import FrameDecoder, FrameError

log = structlog.get_logger("rebalanced.connection")

_connection_ids = itertools.count(1)


class ResponseSlot:
    """A place in a connection's response order; `data` is the framed response once known."""

    __slots__ = ("data", "done", "header")

    def __init__(self, header: RequestHeader | None) -> None:
        self.header = header
        self.data: bytes | None = None
        self.done = False


class RequestHandler(Protocol):
    def handle(self, connection: Connection, slot: ResponseSlot, header: RequestHeader,
               request: Any) -> None:
        """Answer `request` by calling `connection.complete(slot, framed_bytes)`, now or later."""

    def unsupported(self, connection: Connection, slot: ResponseSlot, api_key: int,
                    api_version: int, correlation_id: int) -> bool:
        """Answer an unknown (key, version) if the API has a defined answer; else False."""

    def connection_closed(self, connection: Connection) -> None: ...


class Connection(asyncio.Protocol):
    def __init__(self, handler: RequestHandler, *, max_frame_bytes: int,
                 max_in_flight: int = 1000) -> None:
        self.id = next(_connection_ids)
        self._handler = handler
        self._decoder = FrameDecoder(max_frame_bytes)
        self._queue: deque[ResponseSlot] = deque()
        # Frames already read but not yet handled because too many requests are in flight.
        self._backlog: deque[bytes] = deque()
        self._processing = False
        self._out: list[bytes] = []
        self._max_in_flight = max_in_flight
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._writing_paused = False
        self.closed = False
        # Set as soon as we decide to close: requests already read are then not handled.
        self.closing = False
        self.client_host = ""
        self.drained: asyncio.Event = asyncio.Event()
        self.drained.set()

    # asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport; duck typing suffices.
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client_host = f"/{peer[0]}" if peer else ""

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            self._reject(str(exc))
            return
        self._backlog.extend(frames)
        self._process_backlog()

    def _process_backlog(self) -> None:
        if self._processing:
            return  # a handler answered synchronously; the outer loop carries on
        self._processing = True
        try:
            backlog = self._backlog
            while (backlog and not self.closed and not self.closing
                   and len(self._queue) < self._max_in_flight):
                self._receive(backlog.popleft())
        finally:
            self._processing = False
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
        self._backlog.clear()
        self.drained.set()
        self._handler.connection_closed(self)

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    # requests and responses -------------------------------------------------------------------

    def _receive(self, body: bytes) -> None:
        try:
            api_key, api_version, correlation_id = peek_header(body)
        except MalformedRequest as exc:
            self._reject(str(exc))
            return
        try:
            header, request = decode_request(body)
        except UnsupportedApi:
            slot = self._reserve(None)
            if not self._handler.unsupported(self, slot, api_key, api_version, correlation_id):
                self._reject(f"unsupported api_key={api_key} api_version={api_version}")
            return
        except MalformedRequest as exc:
            self._reject(f"{exc}; frame starts {body[:48].hex()}")
            return
        slot = self._reserve(header)
        self._handler.handle(self, slot, header, request)

    def _reserve(self, header: RequestHeader | None) -> ResponseSlot:
        slot = ResponseSlot(header)
        self._queue.append(slot)
        self.drained.clear()
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
        while queue and queue[0].done:
            data = queue.popleft().data
            if data is not None:
                out.append(data)
        if not self._processing:
            # Responses completed while a batch of pipelined requests is being handled go
            # out in one write when the batch ends; one syscall instead of one per response.
            self._write_out()
        if not queue:
            self.drained.set()
        if self._backlog:
            self._process_backlog()
        else:
            self._update_reading()

    def _write_out(self) -> None:
        out = self._out
        if out and self._transport is not None and not self.closed:
            self._transport.write(b"".join(out) if len(out) > 1 else out[0])
        out.clear()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or self.closed:
            return
        should_pause = (self._writing_paused or bool(self._backlog)
                        or len(self._queue) >= self._max_in_flight)
        if should_pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not should_pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def _reject(self, reason: str) -> None:
        log.warning("connection closed on bad input", connection=self.id,
                    client_host=self.client_host, reason=reason)
        self.close()

    def close(self) -> None:
        self.closing = True
        self._backlog.clear()
        if self._transport is not None and not self.closed:
            self._transport.close()
        # connection_lost follows from the transport and notifies the handler.
