"""The connection layer over a real loopback socket: ordering, parking, bad frames, pausing."""

from __future__ import annotations

import asyncio
import gc
import struct
import threading

import pytest

import protocol.connection as connection_module
from protocol import codec
from protocol.server import KafkaServer
from tests.fakes import ParkingHandler, heartbeat_frame
from tests.integration.in_process import until


async def read_correlation_ids(reader: asyncio.StreamReader, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        body = await reader.readexactly(size)
        ids.append(struct.unpack_from(">i", body)[0])
    return ids


async def test_responses_follow_request_order_even_when_first_is_parked() -> None:
    handler = ParkingHandler()
    server = KafkaServer(handler, host="127.0.0.1", port=0, max_frame_bytes=1 << 20)
    port = await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(heartbeat_frame(1, 0) + heartbeat_frame(2, 5) + heartbeat_frame(3, 5))
    await writer.drain()
    while not handler.parked:
        await asyncio.sleep(0.001)
    connection = handler.parked[0][0]
    for _ in range(2000):  # until requests 2 and 3 are handled too (answered, held behind 1)
        if connection.in_flight == 3:
            break
        await asyncio.sleep(0.001)
    connection, slot, header = handler.parked.pop()
    handler.answer(connection, slot, header)
    assert await asyncio.wait_for(read_correlation_ids(reader, 3), 2) == [1, 2, 3]
    writer.close()
    await server.stop()


async def test_bad_frame_closes_only_its_connection() -> None:
    handler = ParkingHandler()
    server = KafkaServer(handler, host="127.0.0.1", port=0, max_frame_bytes=1 << 20)
    port = await server.start()
    good_reader, good_writer = await asyncio.open_connection("127.0.0.1", port)
    bad_reader, bad_writer = await asyncio.open_connection("127.0.0.1", port)
    bad_writer.write(struct.pack(">i", -7))
    assert await asyncio.wait_for(bad_reader.read(), 2) == b""
    good_writer.write(heartbeat_frame(9, 1))
    assert await asyncio.wait_for(read_correlation_ids(good_reader, 1), 2) == [9]
    assert len(handler.closed) == 1
    good_writer.close()
    await server.stop()


async def test_reading_pauses_when_too_many_requests_are_in_flight() -> None:
    handler = ParkingHandler()
    server = KafkaServer(handler, host="127.0.0.1", port=0, max_frame_bytes=1 << 20,
                         max_in_flight=4)
    port = await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(heartbeat_frame(i, 0) for i in range(20)))
    await writer.drain()
    await until(lambda: len(handler.parked) == 4
                and handler.parked[0][0]._reading_paused)
    # Paused with 4 in flight, so no fifth is handled however long we look.
    assert len(handler.parked) == 4  # reading stopped at the in-flight bound
    while handler.parked:
        handler.answer(*handler.parked.pop(0))
        await asyncio.sleep(0.005)
    assert await asyncio.wait_for(read_correlation_ids(reader, 20), 2) == list(range(20))
    writer.close()
    await server.stop()


async def test_many_pipelined_requests_answered_synchronously() -> None:
    handler = ParkingHandler()
    server = KafkaServer(handler, host="127.0.0.1", port=0, max_frame_bytes=1 << 20,
                         max_in_flight=8)
    port = await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"".join(heartbeat_frame(i, 1) for i in range(5000)))
    await writer.drain()
    assert await asyncio.wait_for(read_correlation_ids(reader, 5000), 10) == list(range(5000))
    writer.close()
    await server.stop()


async def test_a_first_seen_version_loads_its_codec_off_the_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing a schema takes up to ~150 ms: a client sending many versions once must not
    hold the event loop (and every group) for that long. The connection waits alone."""
    codec.load_codecs(12, 4)
    monkeypatch.delitem(codec._request_codecs, (12, 3), raising=False)
    monkeypatch.delitem(codec._response_codecs, (12, 3), raising=False)
    release = threading.Event()
    loaded_in: list[int] = []

    def held_load(api_key: int, api_version: int) -> None:
        loaded_in.append(threading.get_ident())
        assert release.wait(10)
        codec.load_codecs(api_key, api_version)

    monkeypatch.setattr(connection_module, "load_codecs", held_load)
    handler = ParkingHandler()
    server = KafkaServer(handler, host="127.0.0.1", port=0, max_frame_bytes=1 << 20)
    port = await server.start()
    waiting_reader, waiting_writer = await asyncio.open_connection("127.0.0.1", port)
    waiting_writer.write(heartbeat_frame(1, 5) + heartbeat_frame(2, 5))
    deadline = asyncio.get_running_loop().time() + 10
    while not loaded_in and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert loaded_in and loaded_in[0] != threading.get_ident()
    # The loop keeps answering other connections while the load is held in its thread.
    other_reader, other_writer = await asyncio.open_connection("127.0.0.1", port)
    other_writer.write(heartbeat_frame(7, 5, version=4))
    assert await asyncio.wait_for(read_correlation_ids(other_reader, 1), 5) == [7]
    frozen_before = gc.get_freeze_count()
    release.set()
    assert await asyncio.wait_for(read_correlation_ids(waiting_reader, 2), 5) == [1, 2]
    assert len(loaded_in) == 1
    # The loaded codec left the collector's generations: full collections do not walk it.
    assert gc.get_freeze_count() > frozen_before
    gc.unfreeze()
    for writer in (waiting_writer, other_writer):
        writer.close()
    await server.stop()
