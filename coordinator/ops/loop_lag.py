"""How late the broker's event loop runs, and what held it: its own work, the collector, or a
machine that gave its thread no CPU.

A timer asks to run every `interval_s` (25 ms); how much later than asked it runs is the loop's
lag. Every client of the broker waits at least that long for an answer, whatever it asked. A
late firing is split into what the loop's thread did since the previous firing:

* `busy_ms`: CPU time the thread used (`time.thread_time`): callbacks that ran long, and
  collections;
* `runqueue_wait_ms`: time the thread was ready to run but waited for a CPU (the kernel's
  schedstat for this thread; Linux only, else None): the machine's share of the lag;
* `gc_ms`, `gc_gen2_ms`: time spent in collections, all and full ones (`gc.callbacks`).

A lag of `warn_ms` or more is logged as one warning line with this split. Every firing feeds a
histogram of lags and every collection a histogram of pauses per generation, exported at
`/metrics`. The cost is one timer callback per interval (three clock reads and one `pread`)
and one callback per collection.

While the loop idles (its thread busy under `IDLE_BUSY_SHARE` of the time between two firings),
the timer backs off to `IDLE_INTERVAL_S` (100 ms): each firing is a wake-up of the process,
which costs about 0.1 ms of CPU on a virtual machine, and at 40 a second that was most of an
idle broker's CPU. Meanwhile the first bytes any connection receives
(`protocol.connection.ACTIVITY`, one None check per read) are timed to the end of the loop's
turn that handles them and of the callbacks that turn queued (`call_soon`, twice; no extra
wake-up): a turn of `interval_s` or longer is a stall, reported as a lag as long as the turn,
and the short interval resumes; a shorter one leaves the timer backed off. So a stall a request
causes is measured in full after an idle stretch too. A stall that starts elsewhere during one
(timer work such as a session expiry or an offset expiry pass, an fsync's completion handing
out answers) delays the backed-off timer: it is reported as a lag of at least its length less
`IDLE_INTERVAL_S`, and the firing that sees the loop busy brings the short interval back.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from coordinator.ops.metrics.counters import Histogram

INTERVAL_S = 0.025
IDLE_INTERVAL_S = 0.1
# The share of the time between two firings under which the loop's thread counts as idle: a
# firing's own cost (the wake-up, the clock reads, the pread) is 0.1-0.2 ms of 25.
IDLE_BUSY_SHARE = 0.04
# Seconds. A lag under a few ms is the timer's own granularity and an ordinary busy loop.
LAG_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
GC_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)
GENERATIONS = (0, 1, 2)

log = structlog.get_logger("rebalanced.loop")


class Activity(Protocol):
    """Where the monitor asks to be told of the next bytes a connection receives (the wire
    layer's `protocol.connection.ACTIVITY`, given by the broker's entry point)."""

    def notify_next(self, callback: Callable[[], None]) -> None: ...

    def forget(self, callback: Callable[[], None]) -> None: ...


@dataclass(frozen=True, slots=True)
class LoopLag:
    """One late firing of the timer: how late, and what the loop's thread did meanwhile."""

    lag_ms: float
    interval_ms: float  # since the previous firing: the lag plus the asked-for interval
    busy_ms: float
    runqueue_wait_ms: float | None
    gc_ms: float
    gc_gen2_ms: float
    collections: int

    @property
    def cause(self) -> str:
        """`machine` when the thread waited for a CPU longer than it ran, else `broker`."""
        waited = self.runqueue_wait_ms
        return "machine" if waited is not None and waited > self.busy_ms else "broker"

    def fields(self) -> dict[str, Any]:
        return {"lag_ms": round(self.lag_ms, 1), "interval_ms": round(self.interval_ms, 1),
                "busy_ms": round(self.busy_ms, 1),
                "runqueue_wait_ms": None if self.runqueue_wait_ms is None
                else round(self.runqueue_wait_ms, 1),
                "gc_ms": round(self.gc_ms, 1), "gc_gen2_ms": round(self.gc_gen2_ms, 1),
                "collections": self.collections, "cause": self.cause}


def schedstat_reader() -> Callable[[], float] | None:
    """Seconds the calling thread has waited, runnable, for a CPU; None where the kernel does
    not say. The file stays open: each reading is one `pread`."""
    path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
    try:
        fd = os.open(path, os.O_RDONLY)
        int(os.pread(fd, 128, 0).split()[1])
    except (OSError, ValueError, IndexError):
        return None

    def read() -> float:
        return int(os.pread(fd, 128, 0).split()[1]) / 1e9

    return read


def _log_lag(lag: LoopLag) -> None:
    log.warning("event loop lagged", **lag.fields())


class LoopLagMonitor:
    """Start it on the loop it watches (`start(loop.call_later)`): the CPU time and the schedstat
    it reads are those of the thread that runs the timer."""

    def __init__(self, *, interval_s: float = INTERVAL_S, warn_ms: float = 100.0,
                 idle_interval_s: float = IDLE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.thread_time,
                 runqueue_wait: Callable[[], float] | None = None,
                 on_lag: Callable[[LoopLag], None] = _log_lag) -> None:
        self.interval_s = interval_s
        self.idle_interval_s = idle_interval_s
        self.warn_ms = warn_ms
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._runqueue_wait = runqueue_wait
        self._on_lag = on_lag
        self.lag = Histogram(LAG_BOUNDS)
        self.lag_max_s = 0.0
        self.lags_over_warn = 0
        self.gc_pauses = {generation: Histogram(GC_BOUNDS) for generation in GENERATIONS}
        # Objects found unreachable (garbage in reference cycles), by generation.
        self.gc_collected = dict.fromkeys(GENERATIONS, 0)
        self._call_later: Callable[..., Any] | None = None
        self._handle: Any = None
        self._activity: Activity | None = None
        self._call_soon: Callable[..., Any] | None = None
        self._thread = 0
        self._woke = self._woke_cpu = 0.0
        # Collections before the bytes came (since the previous firing): not the turn's.
        self._woke_gc = (0.0, 0.0, 0)
        # Bytes woke the backed-off loop and their turn is not looked at yet (`_after_wake`).
        self._turn_open = False
        # `_after_wake` looks once more after the callbacks the turn queued.
        self._second_look = False
        # Backed off to `idle_interval_s`, waiting for a connection's bytes.
        self.idle = False
        self._due = self._last = self._last_cpu = self._last_wait = 0.0
        # Collections since the previous firing.
        self._gc_started: float | None = None
        self._gc_s = self._gc_gen2_s = 0.0
        self._collections = 0

    def start(self, call_later: Callable[..., Any], activity: Activity | None = None,
              call_soon: Callable[..., Any] | None = None) -> LoopLagMonitor:
        """With `activity` and `call_soon`, the timer backs off while the loop idles (see the
        module's doc)."""
        self._call_later = call_later
        self._call_soon = call_soon
        self._activity = activity if call_soon is not None else None
        self._thread = threading.get_ident()
        self._last = self._clock()
        self._last_cpu = self._cpu_clock()
        self._last_wait = self._runqueue_wait() if self._runqueue_wait else 0.0
        self._due = self._last + self.interval_s
        self._handle = call_later(self.interval_s, self._fire)
        gc.callbacks.append(self.on_gc)
        return self

    def _wake(self) -> None:
        """A connection received bytes while the timer was backed off: note when, and look
        again once this turn of the loop has run what they brought (`_after_wake`)."""
        if not self.idle or self._call_soon is None:
            return
        if threading.get_ident() != self._thread:  # another loop's connection (tests)
            if self._activity is not None:
                self._activity.notify_next(self._wake)
            return
        self._woke = self._clock()
        self._woke_cpu = self._cpu_clock()
        self._woke_gc = (self._gc_s, self._gc_gen2_s, self._collections)
        self._turn_open = True
        self._second_look = True
        self._call_soon(self._after_wake)

    def _after_wake(self) -> None:
        """The turn that read the bytes is over; looked at twice, the second time after the
        callbacks it queued (an answer completed through a future). Shorter than `interval_s`:
        no timer set then would have run late, so the timer stays backed off (and no wake-up
        was spent). Longer: that was a stall, a lag as long as the turn, and the short interval
        resumes. (A firing due during the turn measures it the same way: `_fire`.) Its runqueue
        wait is counted from the previous firing (an idle thread does not wait for a CPU); its
        collections from the bytes."""
        if not self._turn_open or self._call_later is None or self._call_soon is None:
            return
        now = self._clock()
        if now - self._woke < self.interval_s:
            if self._second_look:
                self._second_look = False
                self._call_soon(self._after_wake)
                return
            self._turn_open = False
            if self._activity is not None:
                self._activity.notify_next(self._wake)
            return
        self._turn_open = False
        self.idle = False
        self._handle.cancel()
        cpu = self._cpu_clock()
        waited = self._runqueue_wait() if self._runqueue_wait else None
        self._measure_from_wake()
        self._observe(now, cpu, waited)
        self._next(now, self.interval_s)

    def _measure_from_wake(self) -> None:
        """The lag about to be observed started with the bytes: measure it, the thread's CPU
        and its collections from them."""
        self._due = min(self._due, self._woke)
        self._last, self._last_cpu = self._woke, self._woke_cpu
        gc_s, gc_gen2_s, collections = self._woke_gc
        self._gc_s -= gc_s
        self._gc_gen2_s -= gc_gen2_s
        self._collections -= collections

    def stop(self) -> None:
        if self._activity is not None:
            self._activity.forget(self._wake)
        if self.on_gc in gc.callbacks:
            gc.callbacks.remove(self.on_gc)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._call_later = None

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        """`gc.callbacks`: time each collection, in whatever thread triggered it (a collection
        holds the interpreter, so it holds the loop too)."""
        now = self._clock()
        if phase == "start":
            self._gc_started = now
            return
        if self._gc_started is None:
            return
        paused = now - self._gc_started
        self._gc_started = None
        generation = info.get("generation", 2)
        if generation not in self.gc_pauses:
            generation = 2
        self.gc_pauses[generation].observe(paused)
        self.gc_collected[generation] += info.get("collected", 0)
        self._gc_s += paused
        self._collections += 1
        if generation == 2:
            self._gc_gen2_s += paused

    def _fire(self) -> None:
        now = self._clock()
        cpu = self._cpu_clock()
        waited = self._runqueue_wait() if self._runqueue_wait else None
        idle = cpu - self._last_cpu < IDLE_BUSY_SHARE * (now - self._last)
        woken = self._turn_open  # the turn of bytes that woke the backed-off loop runs on
        if woken:
            self._turn_open = False
            self._measure_from_wake()
        self._observe(now, cpu, waited)
        interval = self.interval_s
        if self._activity is not None and idle:
            interval = self.idle_interval_s
            if not self.idle or woken:
                self.idle = True
                self._activity.notify_next(self._wake)
        elif self.idle:  # timer work kept the loop busy: watch closely until it idles again
            self.idle = False
            if self._activity is not None:
                self._activity.forget(self._wake)
        self._next(now, interval)

    def _observe(self, now: float, cpu: float, waited: float | None) -> None:
        """A lag from `_due` to `now`, with what the thread did since `_last`."""
        lag = max(now - self._due, 0.0)
        self.lag.observe(lag)
        if lag > self.lag_max_s:
            self.lag_max_s = lag
        if lag * 1000 >= self.warn_ms:
            self.lags_over_warn += 1
            self._report(LoopLag(
                lag_ms=lag * 1000, interval_ms=(now - self._last) * 1000,
                busy_ms=(cpu - self._last_cpu) * 1000,
                runqueue_wait_ms=None if waited is None else (waited - self._last_wait) * 1000,
                gc_ms=self._gc_s * 1000, gc_gen2_ms=self._gc_gen2_s * 1000,
                collections=self._collections))
        self._last, self._last_cpu = now, cpu
        if waited is not None:
            self._last_wait = waited
        self._gc_s = self._gc_gen2_s = 0.0
        self._collections = 0

    def _report(self, lag: LoopLag) -> None:
        # A warning that cannot be written (a closed stderr) must not stop the monitor.
        with contextlib.suppress(Exception):
            self._on_lag(lag)

    def _next(self, now: float, interval: float) -> None:
        self._due = now + interval
        if self._call_later is not None:
            self._handle = self._call_later(interval, self._fire)

    def snapshot(self) -> dict[str, Any]:
        """Copies for a scrape, taken on the loop."""
        return {"lag": self.lag.copy(), "lag_max_s": self.lag_max_s,
                "lags_over_warn": self.lags_over_warn, "warn_ms": self.warn_ms,
                "gc_pauses": {g: h.copy() for g, h in self.gc_pauses.items()},
                "gc_collected": dict(self.gc_collected)}
