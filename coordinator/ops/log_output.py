"""The broker's log lines, written through a buffer and flushed once per burst of lines.

structlog's `WriteLogger` flushes after every line: one `write` system call per line, and a
join storm logs an event per member. Here an info or debug line goes into the stream's buffer,
and the first line after a flush wakes a flusher thread (`log-flush`), which writes the burst
out `FLUSH_S` later: a burst costs one `write` per `FLUSH_S`, and a quiet broker's flusher
sleeps without a timer. The flusher is a thread, not a timer on the event loop, so that the
lines logged before the loop stalls or hangs come out within `FLUSH_S` all the same. A warning
or an error is flushed at once, with whatever is buffered before it: they are rare (the
refusals of bad input are rate-limited), and an operator, or a process stopping right after,
must not wait for them. The process flushes what is left when it exits (`coordinator.__main__`,
which also stops cleanly on SIGHUP, as on SIGTERM and SIGINT), so only a process killed outright
(SIGKILL, a crash) can lose the info lines of its last `FLUSH_S`; the journal and the group log
do not go through here.
"""

from __future__ import annotations

import threading
import time
from typing import Any, TextIO

FLUSH_S = 0.1


class BufferedLines:
    """One stream's buffer and its flusher, shared by every logger writing to it."""

    def __init__(self, stream: TextIO, flush_s: float = FLUSH_S) -> None:
        self.stream = stream
        self.flush_s = flush_s
        self._lock = threading.Lock()
        # Lines were written since the last flush (the flusher has been or is being woken).
        self._unflushed = False
        self._wake = threading.Event()
        self._flusher: threading.Thread | None = None

    def write_now(self, line: str) -> None:
        with self._lock:
            self.stream.write(line)
            self.stream.flush()
            self._unflushed = False

    def write(self, line: str) -> None:
        with self._lock:
            self.stream.write(line)
            if self._unflushed:
                return
            self._unflushed = True
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_bursts, name="log-flush",
                                                 daemon=True)
                self._flusher.start()
        self._wake.set()

    def _flush_bursts(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(self.flush_s)  # the rest of the burst
            with self._lock:
                # Cleared under the lock: a line written after this sets both again.
                self._wake.clear()
                if self._unflushed:
                    self._unflushed = False
                    self.stream.flush()

    def flush(self) -> None:
        with self._lock:
            self.stream.flush()
            self._unflushed = False


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
