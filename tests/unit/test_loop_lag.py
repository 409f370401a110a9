"""The event-loop lag monitor, driven by the test clock: late timers, what held the loop, and
the collector's pauses; then one real loop held by a blocking callback."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.ops import metrics as om
from coordinator.ops.loop_lag import LoopLag, LoopLagMonitor, schedstat_reader
from coordinator.runtime.clock import ManualClock
from protocol.connection import Activity


class Timers:
    """`call_later` for the monitor: remembers the one timer it sets at a time."""

    def __init__(self) -> None:
        self.pending: list[tuple[float, Callable[[], None]]] = []

    def __call__(self, delay: float, callback: Callable[[], None]) -> Any:
        self.pending.append((delay, callback))
        return self

    def cancel(self) -> None:
        self.pending.clear()

    def fire(self) -> None:
        _, callback = self.pending.pop()
        callback()


class Thread:
    """What the loop's thread did: CPU time and time waiting for a CPU, in ms."""

    def __init__(self) -> None:
        self.cpu_ms = 0
        self.waited_ms = 0


@contextlib.contextmanager
def _monitored(**start: Any) -> Iterator[tuple[ManualClock, Thread, Timers, LoopLagMonitor,
                                                list[LoopLag]]]:
    """A monitor on the test clock and the fake thread, started with `start`'s hooks."""
    clock, thread, timers = ManualClock(), Thread(), Timers()
    lags: list[LoopLag] = []
    # The monitor hooks the interpreter's real collections; the tests feed it theirs, so a
    # real collection in between must not be counted.
    was_enabled = gc.isenabled()
    gc.disable()
    monitor = LoopLagMonitor(interval_s=0.025, idle_interval_s=1.0, warn_ms=100,
                             clock=lambda: clock.monotonic_ms() / 1000,
                             cpu_clock=lambda: thread.cpu_ms / 1000,
                             runqueue_wait=lambda: thread.waited_ms / 1000,
                             on_lag=lags.append).start(timers, **start)
    try:
        yield clock, thread, timers, monitor, lags
    finally:
        monitor.stop()
        if was_enabled:
            gc.enable()


def _spin(seconds: float) -> None:
    """Hold the loop's thread for `seconds` of CPU."""
    busy_until = time.thread_time() + seconds
    while time.thread_time() < busy_until:
        pass


@contextlib.asynccontextmanager
async def _backed_off(lags: list[LoopLag], activity: Activity,
                      **settings: Any) -> AsyncIterator[LoopLagMonitor]:
    """A monitor on the running loop, as the broker starts it, once it has backed off."""
    loop = asyncio.get_running_loop()
    monitor = LoopLagMonitor(interval_s=0.01, warn_ms=100, runqueue_wait=schedstat_reader(),
                             on_lag=lags.append, **settings)
    monitor.start(loop.call_later, activity=activity, call_soon=loop.call_soon)
    try:
        deadline = loop.time() + 5
        while not monitor.idle and loop.time() < deadline:
            await asyncio.sleep(0.005)
        assert monitor.idle, "an idle loop kept the short interval"
        yield monitor
    finally:
        monitor.stop()


async def _until_seen(lags: list[LoopLag], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not lags and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


@pytest.fixture
def rig() -> Any:
    with _monitored() as monitored:
        yield monitored


def test_a_timer_on_time_is_no_lag_and_a_late_one_says_what_held_the_loop(rig: Any) -> None:
    clock, thread, timers, monitor, lags = rig
    for _ in range(4):
        clock.advance(25)
        thread.cpu_ms += 5
        timers.fire()
    assert monitor.lag.count == 4 and monitor.lag_max_s == 0 and lags == []

    # 30 ms late: counted, not logged.
    clock.advance(55)
    timers.fire()
    assert monitor.lag_max_s == pytest.approx(0.030) and lags == []

    # 160 ms late; the thread ran 150 ms of it, 120 ms of which a full collection took.
    clock.advance(10)
    monitor.on_gc("start", {"generation": 2})
    clock.advance(120)
    monitor.on_gc("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    clock.advance(55)
    thread.cpu_ms += 150
    thread.waited_ms += 20
    timers.fire()
    [lag] = lags
    assert lag.lag_ms == pytest.approx(160)
    assert lag.interval_ms == pytest.approx(185)
    assert (lag.busy_ms, lag.runqueue_wait_ms) == (pytest.approx(150), pytest.approx(20))
    assert (lag.gc_ms, lag.gc_gen2_ms, lag.collections) == (pytest.approx(120),
                                                            pytest.approx(120), 1)
    assert lag.cause == "broker"
    assert monitor.lags_over_warn == 1
    assert monitor.gc_pauses[2].count == 1 and monitor.gc_pauses[0].count == 0

    # 200 ms late while the thread waited for a CPU: the machine's; the collections of the
    # previous interval are not counted again.
    clock.advance(225)
    thread.cpu_ms += 3
    thread.waited_ms += 190
    timers.fire()
    assert lags[-1].cause == "machine" and lags[-1].gc_ms == 0 and lags[-1].collections == 0
    assert monitor.lag_max_s == pytest.approx(0.200)


def test_young_collections_are_timed_by_generation(rig: Any) -> None:
    clock, _, timers, monitor, lags = rig
    for generation, ms in ((0, 2), (0, 3), (1, 7)):
        monitor.on_gc("start", {"generation": generation})
        clock.advance(ms)
        monitor.on_gc("stop", {"generation": generation, "collected": ms})
    assert [monitor.gc_pauses[g].count for g in (0, 1, 2)] == [2, 1, 0]
    assert monitor.gc_collected == {0: 5, 1: 7, 2: 0}
    assert monitor.gc_pauses[1].total == pytest.approx(0.007)
    clock.advance(200)
    timers.fire()
    assert lags[-1].gc_ms == pytest.approx(12) and lags[-1].gc_gen2_ms == 0


def test_without_schedstat_a_lag_is_the_brokers(rig: Any) -> None:
    lag = LoopLag(lag_ms=150, interval_ms=175, busy_ms=10, runqueue_wait_ms=None, gc_ms=0,
                  gc_gen2_ms=0, collections=0)
    assert lag.cause == "broker"
    assert lag.fields()["runqueue_wait_ms"] is None


def test_stop_removes_the_collector_callback_and_the_timer() -> None:
    timers = Timers()
    monitor = LoopLagMonitor(on_lag=lambda lag: None).start(timers)
    assert monitor.on_gc in gc.callbacks and timers.pending
    monitor.stop()
    assert monitor.on_gc not in gc.callbacks and not timers.pending


def test_the_lag_and_the_pauses_are_exported(rig: Any) -> None:
    clock, _, timers, monitor, _ = rig
    clock.advance(150)
    timers.fire()
    monitor.on_gc("start", {"generation": 2})
    clock.advance(40)
    monitor.on_gc("stop", {"generation": 2})
    metrics = om.BrokerMetrics()
    metrics.loop_lag = monitor
    snap = metrics.snapshot(om.GroupCounts(), num_offsets=0, connections=0, now_ms=0)
    text = om.exposition(snap).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    assert samples[("rebalanced_event_loop_lag_seconds_count", ())] == 1
    assert samples[("rebalanced_event_loop_lag_seconds_sum", ())] == pytest.approx(0.125)
    assert samples[("rebalanced_event_loop_lag_max_seconds", ())] == pytest.approx(0.125)
    assert samples[("rebalanced_event_loop_stalls_total", ())] == 1
    assert samples[("rebalanced_gc_pause_seconds_count", (("generation", "2"),))] == 1
    assert samples[("rebalanced_gc_pause_seconds_sum", (("generation", "0"),))] == 0
    assert samples[("rebalanced_gc_collected_objects_total", (("generation", "2"),))] == 0


def test_a_blocking_callback_on_a_real_loop_is_seen_as_the_brokers_lag() -> None:
    lags: list[LoopLag] = []

    async def hold_the_loop() -> None:
        loop = asyncio.get_running_loop()
        monitor = LoopLagMonitor(interval_s=0.01, warn_ms=100, runqueue_wait=schedstat_reader(),
                                 on_lag=lags.append).start(loop.call_later)
        try:
            await asyncio.sleep(0.05)
            _spin(0.15)  # 150 ms of CPU on the loop
            await _until_seen(lags, 10)
        finally:
            monitor.stop()

    asyncio.run(hold_the_loop())
    assert lags, "the held loop was not seen"
    assert lags[0].lag_ms >= 100 and lags[0].busy_ms >= 140


@pytest.fixture
def idle_rig() -> Any:
    soon: list[Callable[[], None]] = []
    activity = Activity()
    with _monitored(activity=activity, call_soon=soon.append) as monitored:
        yield (*monitored, activity, soon)


def _go_idle(clock: ManualClock, timers: Timers, monitor: LoopLagMonitor) -> None:
    clock.advance(25)  # no CPU used: idle, one firing a second, waiting for bytes
    timers.fire()
    assert timers.pending[-1][0] == pytest.approx(1.0) and monitor.idle


def test_an_idle_loop_backs_the_timer_off_and_times_the_turns_that_read(idle_rig: Any) -> None:
    clock, thread, timers, monitor, lags, activity, soon = idle_rig
    clock.advance(25)
    thread.cpu_ms += 5  # busy (20 % of the interval): the short interval again
    timers.fire()
    assert timers.pending[-1][0] == pytest.approx(0.025) and not monitor.idle
    assert activity.waiting is None

    _go_idle(clock, timers, monitor)
    assert activity.waiting is not None
    clock.advance(1000)
    timers.fire()
    assert timers.pending[-1][0] == pytest.approx(1.0) and monitor.lag_max_s == 0

    # Bytes arrive; the turn that handles them takes 2 ms: no timer would have run late, the
    # timer stays backed off, and the next bytes are waited for again. No lag is counted.
    count = monitor.lag.count
    clock.advance(300)
    activity.waiting()
    assert activity.waiting is None and len(soon) == 1
    clock.advance(2)
    thread.cpu_ms += 2
    soon.pop()()
    assert len(soon) == 1 and activity.waiting is None  # a second look, after its callbacks
    soon.pop()()
    assert monitor.idle and activity.waiting is not None
    assert [delay for delay, _ in timers.pending] == [pytest.approx(1.0)]
    assert monitor.lag.count == count and lags == []

    # A request that holds the loop 160 ms after an idle stretch: a lag as long as the turn,
    # what the thread did in it, and the short interval from then on.
    activity.waiting()
    clock.advance(160)
    thread.cpu_ms += 150
    thread.waited_ms += 5
    soon.pop()()
    [lag] = lags
    assert lag.lag_ms == pytest.approx(160) and lag.interval_ms == pytest.approx(160)
    assert (lag.busy_ms, lag.runqueue_wait_ms) == (pytest.approx(150), pytest.approx(5))
    assert not monitor.idle and activity.waiting is None
    assert [delay for delay, _ in timers.pending] == [pytest.approx(0.025)]
    clock.advance(25)
    timers.fire()  # on time, and idle again
    assert len(lags) == 1 and monitor.idle


def test_timer_work_during_an_idle_stretch_brings_the_short_interval_back(
        idle_rig: Any) -> None:
    clock, thread, timers, monitor, _, activity, _ = idle_rig
    _go_idle(clock, timers, monitor)
    clock.advance(1000)
    thread.cpu_ms += 60  # a session expiry or a maintenance pass ran: 6 % of the second
    timers.fire()
    assert not monitor.idle and activity.waiting is None
    assert timers.pending[-1][0] == pytest.approx(0.025)


def test_a_few_requests_in_an_idle_second_leave_the_timer_backed_off(idle_rig: Any) -> None:
    clock, thread, timers, monitor, _, activity, soon = idle_rig
    _go_idle(clock, timers, monitor)
    for _ in range(16):  # a heartbeat every 60 ms, 0.1 ms each
        clock.advance(60)
        activity.waiting()
        thread.cpu_ms += 0.1
        soon.pop()()
        soon.pop()()
    clock.advance(40)
    timers.fire()
    assert monitor.idle and timers.pending[-1][0] == pytest.approx(1.0)


def test_a_stall_in_the_callbacks_a_turn_queued_is_measured_from_the_bytes(
        idle_rig: Any) -> None:
    """An answer completed through a future runs after the turn that read the request: the
    second look sees it. A collection before the bytes came is not the stall's."""
    clock, thread, timers, monitor, lags, activity, soon = idle_rig
    _go_idle(clock, timers, monitor)
    clock.advance(300)
    monitor.on_gc("start", {"generation": 2})
    clock.advance(50)
    monitor.on_gc("stop", {"generation": 2})
    clock.advance(100)
    activity.waiting()
    clock.advance(3)
    soon.pop()()  # the turn that read the request: short
    assert lags == [] and len(soon) == 1
    clock.advance(200)  # the callbacks it queued: the answers, 200 ms of them
    thread.cpu_ms += 195
    soon.pop()()
    [lag] = lags
    assert lag.lag_ms == pytest.approx(203) and lag.busy_ms == pytest.approx(195)
    assert (lag.gc_ms, lag.collections) == (0, 0)
    assert not monitor.idle and timers.pending[-1][0] == pytest.approx(0.025)


def test_a_firing_due_during_the_turn_of_the_bytes_measures_it_from_them(
        idle_rig: Any) -> None:
    clock, thread, timers, monitor, lags, activity, soon = idle_rig
    _go_idle(clock, timers, monitor)
    clock.advance(950)
    activity.waiting()  # bytes 50 ms before the backed-off firing is due
    clock.advance(160)
    thread.cpu_ms += 150
    timers.fire()  # the firing, late: the turn still holds the loop
    [lag] = lags
    assert lag.lag_ms == pytest.approx(160) and lag.busy_ms == pytest.approx(150)
    assert not monitor.idle and timers.pending[-1][0] == pytest.approx(0.025)
    soon.pop()()  # the turn's own look finds it measured already
    assert len(lags) == 1 and not soon


def test_a_firing_after_a_short_turn_leaves_the_monitor_waiting_for_bytes(
        idle_rig: Any) -> None:
    clock, thread, timers, monitor, lags, activity, soon = idle_rig
    _go_idle(clock, timers, monitor)
    clock.advance(999)
    activity.waiting()
    clock.advance(1)
    thread.cpu_ms += 0.5
    timers.fire()  # due right after a 1 ms turn, before the turn's own look
    assert lags == [] and monitor.idle and activity.waiting is not None
    soon.pop()()
    assert not soon and activity.waiting is not None


def test_a_warning_that_cannot_be_written_does_not_stop_the_monitor() -> None:
    clock, timers = ManualClock(), Timers()

    def broken_pipe(lag: LoopLag) -> None:
        raise BrokenPipeError("stderr is gone")

    monitor = LoopLagMonitor(interval_s=0.025, warn_ms=100,
                             clock=lambda: clock.monotonic_ms() / 1000,
                             on_lag=broken_pipe).start(timers)
    try:
        clock.advance(300)
        timers.fire()
        assert monitor.lags_over_warn == 1 and timers.pending
        clock.advance(25)
        timers.fire()
        assert timers.pending
    finally:
        monitor.stop()


def test_timer_work_stalling_a_backed_off_loop_is_seen_on_a_real_loop() -> None:
    """A stall that no bytes started (a timer's callback), while the timer is backed off to
    its default 100 ms: reported as at least the stall less that interval."""
    lags: list[LoopLag] = []
    activity = Activity()

    async def idle_then_timer_stall() -> None:
        async with _backed_off(lags, activity):
            asyncio.get_running_loop().call_later(0.02, _spin, 0.3)  # a session expiry pass
            await _until_seen(lags, 5)

    asyncio.run(idle_then_timer_stall())
    assert lags, "the timer's stall was not seen"
    assert lags[0].lag_ms >= 300 - 100 - 10


def test_without_activity_the_interval_never_changes(rig: Any) -> None:
    clock, _, timers, monitor, _ = rig
    for _ in range(3):
        clock.advance(25)
        timers.fire()
    assert not monitor.idle and timers.pending[-1][0] == pytest.approx(0.025)


def test_a_stall_right_after_an_idle_stretch_is_seen_on_a_real_loop() -> None:
    lags: list[LoopLag] = []
    activity = Activity()

    async def idle_then_hold() -> None:
        async with _backed_off(lags, activity, idle_interval_s=5.0) as monitor:
            assert activity.waiting is not None
            activity.waiting()  # what a connection's data_received does
            _spin(0.15)  # the request it carries holds the loop
            await _until_seen(lags, 5)
            assert not monitor.idle or lags

    asyncio.run(idle_then_hold())
    assert lags, "the stall after the idle stretch was not seen"
    assert lags[0].lag_ms >= 140 and lags[0].busy_ms >= 140


def test_activity_calls_each_waiting_callback_once() -> None:
    activity = Activity()
    calls: list[str] = []
    activity.notify_next(lambda: calls.append("a"))
    second = lambda: calls.append("b")  # noqa: E731
    activity.notify_next(second)
    activity.notify_next(second)
    assert activity.waiting is not None
    activity.waiting()
    assert calls == ["a", "b"] and activity.waiting is None
    activity.notify_next(second)
    activity.forget(second)
    assert activity.waiting is None
