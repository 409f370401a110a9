"""Give the C heap's free pages back to the system once a burst of requests is over.

A join storm parks every member's request at once. When they are answered, the C library keeps
the freed memory inside its heap: glibc returns only the top of the heap by itself, so a few
live blocks above the storm's transients hold megabytes of free pages resident. `malloc_trim`
hands every whole free page back. The broker asks for it when a burst ends (the applier's
parked requests, past `_SHRINK_FROM`, have all been answered), a little later so that the
burst's last transients are gone too, and at most once per interval. The trim runs on a worker
thread: ctypes releases the interpreter lock for the call, and it walks the whole heap. It
does hold the heap's lock while it walks it, so an allocation the event loop makes from the C
heap meanwhile (an object over 512 bytes, a new pymalloc arena) waits for it: a few
milliseconds for a heap of tens of megabytes, once per burst and at most once per
`TRIM_MIN_INTERVAL_S`, where the burst itself held the loop for seconds.
Where the C library has no `malloc_trim` (musl, macOS), nothing is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

log = structlog.get_logger("rebalanced.coordinator")

# After the burst ends: its last answers are still being written and freed.
TRIM_DELAY_S = 2.0
# Bursts close together (a rolling restart of consumers) share one trim.
TRIM_MIN_INTERVAL_S = 30.0


def glibc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim(pad)`, or None where the C library has none."""
    import ctypes  # only on first use: a broker that never sees a burst does not load it

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class HeapTrimmer:
    """Trims the process's C heap on a worker thread, once per burst, at most once per
    `min_interval_s`. `trim` is the C call (found on first use when not given)."""

    def __init__(self, trim: Callable[[int], int] | None = None, *,
                 delay_s: float = TRIM_DELAY_S,
                 min_interval_s: float = TRIM_MIN_INTERVAL_S) -> None:
        self._trim = trim
        self._looked_up = trim is not None
        self.delay_s = delay_s
        self.min_interval_s = min_interval_s
        self._scheduled: asyncio.TimerHandle | None = None
        self._last_s: float | None = None
        self.trims = 0

    def after_burst(self) -> None:
        """A burst of requests is over: trim soon, unless a trim is already due."""
        if self._scheduled is not None:
            return
        if not self._looked_up:
            self._trim = glibc_malloc_trim()
            self._looked_up = True
        if self._trim is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # driven outside a loop (a test of the applier alone)
            return
        at = loop.time() + self.delay_s
        if self._last_s is not None:
            at = max(at, self._last_s + self.min_interval_s)
        self._scheduled = loop.call_at(at, self._start, loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._last_s = loop.time()
        trim = self._trim
        assert trim is not None
        try:
            future = loop.run_in_executor(None, trim, 0)
        except RuntimeError:  # the loop's executor is already shut down: the process stops
            self._scheduled = None
            return
        future.add_done_callback(self._done)

    def _done(self, future: asyncio.Future[int]) -> None:
        self._scheduled = None
        self.trims += 1
        if future.cancelled():
            return
        if (exc := future.exception()) is not None:
            # Not a fault of the broker's state: the next burst tries again.
            log.warning("heap trim failed", error=repr(exc))

    def close(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
