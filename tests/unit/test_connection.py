"""The connection layer over a recording transport: how responses are written and drained."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from protocol.codec import load_codecs
from protocol.connection import Connection
from tests.fakes import ParkingHandler, heartbeat_frame


@pytest.fixture(autouse=True)
def _heartbeat_codec_loaded() -> None:
    """Loaded up front: a first-seen version's codec loads in a worker thread while the frame
    waits, and these tests look at the connection right after feeding it."""
    load_codecs(12, 3)


class RecordingTransport:
    """Collects each `write` call, to count the syscalls a real transport would make."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else None

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.writes.append(bytes(data))

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None:
        self.closed = True


def _connection(handler: ParkingHandler) -> tuple[Connection, RecordingTransport]:
    connection = Connection(handler, max_frame_bytes=1 << 20)
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def _correlation_ids(writes: list[bytes]) -> list[int]:
    data = b"".join(writes)
    ids = []
    while data:
        (size,) = struct.unpack_from(">i", data)
        ids.append(struct.unpack_from(">i", data, 4)[0])
        data = data[4 + size:]
    return ids


async def test_parked_responses_completed_together_share_one_write() -> None:
    handler = ParkingHandler()
    connection, transport = _connection(handler)
    connection.data_received(b"".join(heartbeat_frame(i, 0) for i in range(3)))
    assert len(handler.parked) == 3 and transport.writes == []
    for parked in handler.parked:  # e.g. commits made durable by one fsync
        handler.answer(*parked)
    assert transport.writes == []  # written at the end of this event-loop turn
    await asyncio.sleep(0)
    assert len(transport.writes) == 1
    assert _correlation_ids(transport.writes) == [0, 1, 2]
    assert connection.drained.is_set()


async def test_close_writes_the_answered_responses_first() -> None:
    handler = ParkingHandler()
    connection, transport = _connection(handler)
    connection.data_received(heartbeat_frame(7, 0))
    handler.answer(*handler.parked.pop())
    connection.close()
    assert _correlation_ids(transport.writes) == [7]
    assert transport.closed
    await asyncio.sleep(0)  # the scheduled write finds nothing left to send
    assert len(transport.writes) == 1


async def test_drained_follows_the_responses_owed() -> None:
    handler = ParkingHandler()
    connection, _ = _connection(handler)
    assert connection.drained.is_set()
    connection.data_received(heartbeat_frame(1, 0))
    assert not connection.drained.is_set()
    handler.answer(*handler.parked.pop())
    assert connection.drained.is_set()
    assert connection.in_flight == 0


class _AnsweringHandler:
    """Answers every request it is handed with an empty frame."""

    def handle(self, connection: Connection, slot: Any, header: Any, request: Any) -> None:
        connection.complete(slot, struct.pack(">ii", 4, header.correlation_id))

    def unsupported(self, *args: Any) -> bool:
        return False

    def over_limits(self, connection: Connection, *args: Any) -> None:
        connection.close()

    def connection_closed(self, connection: Connection) -> None: ...


def test_bad_frames_leave_no_garbage_cycles_for_the_collector() -> None:
    """A hostile client's frames (flipped bytes, bad lengths, huge counts, wrong versions) and
    the closes they cause are freed by reference counting: nothing waits for a collection,
    whose pause every group would feel."""
    import gc
    import random

    from tests.bench.live_fuzz import mutate

    rng = random.Random(7)
    body = heartbeat_frame(1, 5)[4:]
    frames = [mutate(rng, body) for _ in range(2000)]

    def feed() -> None:
        for frame in frames:
            connection, _ = _connection(_AnsweringHandler())  # type: ignore[arg-type]
            connection.data_received(frame)
            connection.connection_lost(None)

    feed()  # first: codecs of the versions met load (imports make their own garbage)
    gc.collect()
    gc.disable()
    try:
        feed()
        assert gc.collect() == 0
    finally:
        gc.enable()


async def test_received_bytes_call_who_waits_for_activity_once() -> None:
    """The loop-lag monitor, backed off while the loop idles, waits for the next bytes."""
    from protocol.connection import ACTIVITY

    connection, _ = _connection(ParkingHandler())
    woken: list[int] = []

    def wake() -> None:
        woken.append(1)

    ACTIVITY.notify_next(wake)
    try:
        connection.data_received(heartbeat_frame(1, 0)[:3])  # any bytes, even part of a frame
        connection.data_received(heartbeat_frame(1, 0)[3:])
        assert woken == [1] and ACTIVITY.waiting is None
    finally:
        ACTIVITY.forget(wake)
