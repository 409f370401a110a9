"""The connection layer over a real loopback socket: ordering, parking, bad frames, pausing."""

from __future__ import annotations

import asyncio
import struct

from protocol.server import KafkaServer
from tests.fakes import ParkingHandler, heartbeat_frame


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
    await asyncio.sleep(0.05)
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
