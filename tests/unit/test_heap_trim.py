"""The heap trim after a burst: once per burst, later, at most once per interval, on a thread."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from coordinator.runtime.heap import HeapTrimmer, glibc_malloc_trim


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []
        self.called = asyncio.Event()

    def __call__(self, pad: int) -> int:
        self.calls.append((pad, threading.current_thread().name))
        return 1


async def test_a_burst_trims_once_later_on_a_worker_thread() -> None:
    trim = Recorder()
    heap = HeapTrimmer(trim, delay_s=0.05, min_interval_s=10.0)
    heap.after_burst()
    heap.after_burst()  # the same burst's second signal shares the trim
    assert trim.calls == []
    await asyncio.sleep(0.3)
    assert [pad for pad, _ in trim.calls] == [0]
    assert trim.calls[0][1] != threading.current_thread().name
    assert heap.trims == 1


async def test_bursts_close_together_wait_for_the_interval() -> None:
    trim = Recorder()
    heap = HeapTrimmer(trim, delay_s=0.0, min_interval_s=0.4)
    heap.after_burst()
    await asyncio.sleep(0.1)
    assert len(trim.calls) == 1
    heap.after_burst()
    await asyncio.sleep(0.1)
    assert len(trim.calls) == 1  # not before the interval since the last trim
    await asyncio.sleep(0.4)
    assert len(trim.calls) == 2


async def test_a_failed_trim_is_logged_and_the_next_burst_tries_again() -> None:
    def broken(pad: int) -> int:
        raise OSError("no")

    heap = HeapTrimmer(broken, delay_s=0.0, min_interval_s=0.0)
    heap.after_burst()
    await asyncio.sleep(0.1)
    assert heap.trims == 1
    heap.after_burst()
    await asyncio.sleep(0.1)
    assert heap.trims == 2


async def test_close_cancels_a_trim_not_yet_started() -> None:
    trim = Recorder()
    heap = HeapTrimmer(trim, delay_s=0.2)
    heap.after_burst()
    heap.close()
    await asyncio.sleep(0.3)
    assert trim.calls == []


def test_outside_a_loop_nothing_is_scheduled() -> None:
    trim = Recorder()
    HeapTrimmer(trim).after_burst()
    assert trim.calls == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's call")
def test_the_c_library_trim_runs() -> None:
    trim = glibc_malloc_trim()
    if trim is None:
        pytest.skip("this C library has no malloc_trim")
    assert trim(0) in (0, 1)


async def test_a_trim_due_after_the_executor_shut_down_is_dropped_and_the_next_burst_trims(
        ) -> None:
    trim = Recorder()
    loop = asyncio.get_running_loop()
    await loop.shutdown_default_executor()  # as at the end of `asyncio.run`
    raised: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: raised.append(context))
    try:
        heap = HeapTrimmer(trim, delay_s=0.0, min_interval_s=0.0)
        heap.after_burst()
        await asyncio.sleep(0.05)
        assert raised == [] and trim.calls == [] and heap.trims == 0
        assert heap._scheduled is None  # the next burst is not left waiting for this trim
        heap.after_burst()
        assert heap._scheduled is not None
        heap.close()
    finally:
        loop.set_exception_handler(None)
