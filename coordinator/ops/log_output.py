"""The broker's log lines, written through a buffer and flushed once per burst of lines.

structlog's `WriteLogger` flushes after every line: one `write` system call per line, and a
join storm logs an event per member. Here an info or debug line goes into the stream's buffer,
and the first line after a flush schedules the next flush `FLUSH_S` later on the event loop,
so a burst costs one `write` per `FLUSH_S` and a quiet broker has no timer at all. A warning or
an error is flushed at once, with whatever is buffered before it: they are rare (the refusals
of bad input are rate-limited), and an operator, or a process stopping right after, must not
wait for them. Off the loop (a worker thread, start-up before the loop runs) every line is
flushed at once. The process flushes what is left when it exits (`coordinator.__main__`), so
only a SIGKILL can lose the last `FLUSH_S` of info lines; the journal and the group log do not
go through here.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, TextIO

FLUSH_S = 0.1


class BufferedLines:
    """One stream's buffer and its pending flush, shared by every logger writing to it."""

    def __init__(self, stream: TextIO, flush_s: float = FLUSH_S) -> None:
        self.stream = stream
        self.flush_s = flush_s
        self._lock = threading.Lock()
        # The loop a flush is scheduled on, if any.
        self._pending: asyncio.AbstractEventLoop | None = None

    def write_now(self, line: str) -> None:
        with self._lock:
            self.stream.write(line)
            self.stream.flush()

    def write(self, line: str) -> None:
        with self._lock:
            self.stream.write(line)
        pending = self._pending
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            self.flush()
        elif pending is loop:
            return
        elif pending is None or pending.is_closed():
            self._pending = loop
            loop.call_later(self.flush_s, self._scheduled_flush, loop)
        else:  # another loop (a test's second broker) has a flush pending: not ours to wait
            self.flush()

    def _scheduled_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._pending is loop:
            self._pending = None
        self.flush()

    def flush(self) -> None:
        with self._lock:
            self.stream.flush()


class BufferedLogger:
    """A structlog logger (`logger_factory`) over a `BufferedLines`."""

    __slots__ = ("_lines",)

    def __init__(self, lines: BufferedLines) -> None:
        self._lines = lines

    def msg(self, message: str) -> None:
        self._lines.write(message + "\n")

    def msg_now(self, message: str) -> None:
        self._lines.write_now(message + "\n")

    log = debug = info = msg
    warn = warning = fatal = failure = err = error = critical = exception = msg_now


class BufferedLoggerFactory:
    def __init__(self, lines: BufferedLines) -> None:
        self._lines = lines

    def __call__(self, *args: Any) -> BufferedLogger:
        return BufferedLogger(self._lines)
