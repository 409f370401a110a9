"""How the event-loop lag monitor reports a stall, by where the stall starts, with the timer at
25 ms and while it is backed off.

    python -m tests.bench.loop_lag_cases --stall-ms 300

On a real uvloop loop, a `LoopLagMonitor` started as the broker starts it (with
`protocol.connection.ACTIVITY`, so that it backs off while the loop idles) or without the
activity hook (never backed off). After 1.6 s of idling, a stall of `--stall-ms` of CPU starts
50 ms after the monitor's next firing, in one of four places: a timer's callback (a session
expiry, an offset expiry pass), a callback another thread posts (an fsync's completion handing
out answers), a connection's `data_received`, and a callback a request's turn queued (an answer
completed through a future). Printed per case: the largest lag the monitor saw and the lags it
warned about.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import uvloop

from coordinator.ops.loop_lag import LoopLag, LoopLagMonitor, schedstat_reader
from protocol.connection import ACTIVITY


def _spin(seconds: float) -> None:
    busy_until = time.thread_time() + seconds
    while time.thread_time() < busy_until:
        pass


class _Request(asyncio.Protocol):
    """Calls the activity hook as `Connection.data_received` does, then stalls: in the turn
    itself, or in a callback the turn queued."""

    def __init__(self, stall_s: float, deferred: bool) -> None:
        self.stall_s = stall_s
        self.deferred = deferred

    def data_received(self, data: bytes) -> None:
        waiting = ACTIVITY.waiting
        if waiting is not None:
            waiting()
        if self.deferred:
            answered = asyncio.get_running_loop().create_future()
            answered.add_done_callback(lambda _: _spin(self.stall_s))
            answered.set_result(None)
        else:
            _spin(self.stall_s)


async def _timer(stall_s: float) -> None:
    asyncio.get_running_loop().call_later(0.0, _spin, stall_s)
    await asyncio.sleep(stall_s + 0.1)


async def _thread(stall_s: float) -> None:
    loop = asyncio.get_running_loop()
    threading.Thread(target=loop.call_soon_threadsafe, args=(_spin, stall_s)).start()
    await asyncio.sleep(stall_s + 0.1)


async def _request(stall_s: float, deferred: bool) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Request(stall_s, deferred), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"x")
    await asyncio.sleep(stall_s + 0.2)
    writer.close()
    server.close()


async def _case(stall: Callable[[], Awaitable[None]], backed_off: bool) -> tuple[float, list[int]]:
    loop = asyncio.get_running_loop()
    lags: list[LoopLag] = []
    monitor = LoopLagMonitor(warn_ms=100, runqueue_wait=schedstat_reader(), on_lag=lags.append)
    if backed_off:
        monitor.start(loop.call_later, activity=ACTIVITY, call_soon=loop.call_soon)
    else:
        monitor.start(loop.call_later)
    try:
        await asyncio.sleep(1.6)  # an idle broker
        await asyncio.sleep(max(monitor._due - time.monotonic(), 0) + 0.05)
        await stall()
        await asyncio.sleep(1.5)
    finally:
        monitor.stop()
    return monitor.lag_max_s * 1000, [round(lag.lag_ms) for lag in lags]


async def _all(stall_s: float) -> None:
    cases: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("a timer's callback", lambda: _timer(stall_s)),
        ("a callback another thread posted", lambda: _thread(stall_s)),
        ("a connection's data_received", lambda: _request(stall_s, False)),
        ("a callback the request's turn queued", lambda: _request(stall_s, True)),
    ]
    for backed_off in (False, True):
        for name, stall in cases:
            lag_max, warned = await _case(stall, backed_off)
            print(f"{'backs off' if backed_off else 'always 25 ms':12s}  stall in {name:38s}"
                  f"  largest lag {lag_max:6.1f} ms  warned {warned}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.loop_lag_cases",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stall-ms", type=float, default=300.0)
    args = parser.parse_args(argv)
    uvloop.run(_all(args.stall_ms / 1000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
