"""The broker's log lines: buffered, one flush per burst on the loop, at once off it."""

from __future__ import annotations

import asyncio
import io
import threading

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


async def test_a_burst_of_lines_on_the_loop_is_one_flush_later() -> None:
    stream = CountingStream()
    lines = BufferedLines(stream, flush_s=0.05)
    for i in range(100):
        lines.write(f"line {i}\n")
    assert stream.flushes == 0 and stream.flushed == ""
    await asyncio.sleep(0.15)
    assert stream.flushes == 1 and stream.flushed.count("\n") == 100
    await asyncio.sleep(0.15)
    assert stream.flushes == 1  # nothing written: no timer, no flush
    lines.write("one more\n")
    await asyncio.sleep(0.15)
    assert stream.flushes == 2 and stream.flushed.endswith("one more\n")


def test_off_the_loop_each_line_is_flushed_at_once() -> None:
    stream = CountingStream()
    lines = BufferedLines(stream)
    lines.write("before the loop\n")
    assert stream.flushes == 1

    def worker() -> None:
        lines.write("from a worker thread\n")

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert stream.flushes == 2 and stream.flushed.endswith("from a worker thread\n")


def test_a_flush_left_pending_on_a_closed_loop_does_not_hold_later_lines() -> None:
    stream = CountingStream()
    lines = BufferedLines(stream, flush_s=10.0)

    async def write(text: str) -> None:
        lines.write(text)

    asyncio.run(write("first loop\n"))  # its flush never ran: the loop closed first
    lines.flush()

    async def second() -> None:
        lines.write("second loop\n")
        lines.flush_s = 0.01
        await asyncio.sleep(0.05)

    lines.flush_s = 0.01
    asyncio.run(second())
    assert stream.flushed.endswith("second loop\n")


async def test_info_lines_wait_for_the_flush_and_a_warning_goes_out_at_once() -> None:
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
    await asyncio.sleep(0.15)
    assert stream.flushes == 2 and stream.flushed.endswith('"event": "member left"}\n')
