"""The broker's log lines: buffered, one flush per burst by the flusher thread, warnings at
once, and flushed while the event loop is stalled."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time

import structlog

from coordinator.ops.log_output import BufferedLines, BufferedLoggerFactory


class CountingStream(io.StringIO):
    """A text stream that counts its flushes: each is one write system call on a real file."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0
        self.flushed = ""

    def flush(self) -> None:
        self.flushes += 1
        self.flushed = self.getvalue()


def wait_for(condition: object, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.005)


def test_a_burst_of_lines_is_one_flush_later() -> None:
    stream = CountingStream()
    lines = BufferedLines(stream, flush_s=0.05)
    for i in range(100):
        lines.write(f"line {i}\n")
    assert stream.flushes == 0 and stream.flushed == ""
    wait_for(lambda: stream.flushes == 1)
    assert stream.flushed.count("\n") == 100
    time.sleep(0.15)
    assert stream.flushes == 1  # nothing written: the flusher sleeps, no flush
    lines.write("one more\n")
    wait_for(lambda: stream.flushes == 2)
    assert stream.flushed.endswith("one more\n")


def test_lines_from_several_threads_all_come_out() -> None:
    stream = CountingStream()
    lines = BufferedLines(stream, flush_s=0.01)

    def worker(n: int) -> None:
        for i in range(200):
            lines.write(f"{n}:{i}\n")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_for(lambda: stream.flushed.count("\n") == 800)
    assert stream.flushes < 800


async def test_lines_logged_before_the_loop_stalls_come_out_during_the_stall() -> None:
    stream = CountingStream()
    lines = BufferedLines(stream, flush_s=0.05)
    lines.write("rebalance started\n")
    stalled_until = time.monotonic() + 1.0
    seen_during_stall = False
    while time.monotonic() < stalled_until:  # the loop's thread computes, never yields
        if stream.flushed:
            seen_during_stall = True
            break
    assert seen_during_stall and stream.flushed == "rebalance started\n"
    await asyncio.sleep(0)


def test_info_lines_wait_for_the_flush_and_a_warning_goes_out_at_once() -> None:
    stream = CountingStream()
    lines = BufferedLines(stream, flush_s=0.05)
    logger = structlog.wrap_logger(BufferedLoggerFactory(lines)(),
                                   processors=[structlog.processors.JSONRenderer()])
    logger.info("member joined", group="g")
    assert stream.flushes == 0
    logger.warning("connection closed on bad input", problem="garbage")
    assert stream.flushes == 1  # with the info line before it, in order
    assert stream.flushed.splitlines() == [
        '{"group": "g", "event": "member joined"}',
        '{"problem": "garbage", "event": "connection closed on bad input"}']
    logger.info("member left", group="g")
    wait_for(lambda: stream.flushed.endswith('"event": "member left"}\n'))


def test_flush_writes_what_waits() -> None:
    stream = CountingStream()
    lines = BufferedLines(stream, flush_s=10.0)
    lines.write("last words\n")
    lines.flush()  # as the broker does at exit
    assert stream.flushed == "last words\n"


async def test_an_error_no_callback_caught_is_logged_after_the_lines_before_it() -> None:
    from coordinator.__main__ import _log_loop_error

    stream = CountingStream()
    lines = BufferedLines(stream, flush_s=10.0)
    structlog.configure(processors=[structlog.processors.format_exc_info,
                                    structlog.processors.JSONRenderer()],
                        logger_factory=BufferedLoggerFactory(lines),
                        cache_logger_on_first_use=False)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_log_loop_error)

    def broken() -> None:
        raise RuntimeError("a callback failed")

    try:
        structlog.get_logger().info("before the failing callback")
        loop.call_soon(broken)
        await asyncio.sleep(0.01)
        first, second = (json.loads(line) for line in stream.flushed.splitlines())
        assert first["event"] == "before the failing callback"
        assert second["event"] == "unhandled error in the event loop"
        assert "RuntimeError: a callback failed" in second["exception"]
        assert second["detail"].startswith("Exception in callback")
    finally:
        loop.set_exception_handler(None)
        structlog.reset_defaults()


class FailingOnceStream(CountingStream):
    """Its first flush fails as a pipe whose reader is slow fails (EAGAIN)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def flush(self) -> None:
        if not self.failed:
            self.failed = True
            raise BlockingIOError(11, "Resource temporarily unavailable")
        super().flush()


def test_a_failed_flush_is_tried_again_and_the_flusher_goes_on() -> None:
    stream = FailingOnceStream()
    lines = BufferedLines(stream, flush_s=0.02)
    lines.write("one\n")
    wait_for(lambda: stream.flushed == "one\n")
    lines.write("two\n")
    wait_for(lambda: stream.flushed == "one\ntwo\n")
    assert stream.failed


class ReenteringStream(CountingStream):
    """While a line is being written, another is logged on the same thread, as a finalizer
    that a collection runs in the middle of the write may log one (the event loop's handler of
    an exception nobody retrieved)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: BufferedLines | None = None

    def write(self, text: str) -> int:
        written = super().write(text)
        if text.startswith("outer") and self.lines is not None:
            self.lines.write_now("from a finalizer\n")
        return written


def test_a_line_logged_again_on_the_writing_thread_does_not_deadlock() -> None:
    stream = ReenteringStream()
    lines = BufferedLines(stream, flush_s=10.0)
    stream.lines = lines
    done = threading.Event()

    def log() -> None:
        lines.write("outer info line\n")
        done.set()

    thread = threading.Thread(target=log, daemon=True)
    thread.start()
    assert done.wait(2.0), "deadlocked on the log's own lock"
    # The finalizer's line is an error: written right after the line it interrupted, flushed.
    assert stream.flushed == "outer info line\nfrom a finalizer\n"
