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

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

FLUSH_S = 0.1


class BufferedLines:
    """One stream's buffer and its flusher, shared by every logger writing to it."""

    def __init__(self, stream: TextIO, flush_s: float = FLUSH_S) -> None:
        self.stream = stream
        self.flush_s = flush_s
        self._lock = threading.Lock()
        # The thread inside the lock, if any: a line logged again on that thread while it
        # writes (a finalizer a collection runs mid-write, a signal handler) must not wait for
        # the lock it holds itself; it is queued, and written by the call it interrupted.
        self._holder: int | None = None
        self._reentered: list[tuple[str, bool]] = []
        # Lines were written since the last flush (the flusher has been or is being woken).
        self._unflushed = False
        self._wake = threading.Event()
        self._flusher: threading.Thread | None = None

    def write_now(self, line: str) -> None:
        self._write(line, now=True)

    def write(self, line: str) -> None:
        if self._write(line, now=False):
            self._wake.set()

    def _write(self, line: str, *, now: bool) -> bool:
        """Write `line` (and flush when `now`); True when the flusher must be woken."""
        if self._holder == threading.get_ident():
            self._reentered.append((line, now))
            return False
        with self._held():
            self.stream.write(line)
            if self._write_reentered(now):
                self.stream.flush()
                self._unflushed = False
                return False
            if self._unflushed:
                return False
            self._unflushed = True
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_bursts, name="log-flush",
                                                 daemon=True)
                self._flusher.start()
            return True

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """The lock, with this thread noted as its holder (see `_holder`)."""
        with self._lock:
            self._holder = threading.get_ident()
            try:
                yield
            finally:
                self._holder = None

    def _write_reentered(self, now: bool) -> bool:
        """Under the lock: write the lines logged while it was held by this thread."""
        while self._reentered:
            line, line_now = self._reentered.pop(0)
            self.stream.write(line)
            now = now or line_now
        return now

    def _flush_bursts(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(self.flush_s)  # the rest of the burst
            with self._held():
                # Cleared under the lock: a line written after this sets both again.
                self._wake.clear()
                self._write_reentered(False)
                if not self._unflushed:
                    continue
                try:
                    self.stream.flush()
                except ValueError:  # the stream was closed: the process is ending
                    return
                except OSError:
                    # A pipe whose reader is slow (EAGAIN), a full disk: the lines stay
                    # buffered; try again after another interval.
                    self._wake.set()
                    continue
                self._unflushed = False

    def flush(self) -> None:
        with self._held():
            self._write_reentered(False)
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
