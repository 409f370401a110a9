"""The edge against clients that hold resources: idle and half-sent connections, connection
floods, and buffered request bytes, over real loopback sockets (waits are bounded polls)."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from coordinator.settings import ConfigError, load
from protocol.server import KafkaServer
from tests.fakes import ParkingHandler, heartbeat_frame
from tests.integration.in_process import until
from tests.integration.test_connection_sockets import read_correlation_ids


async def closed_by_peer(reader: asyncio.StreamReader, timeout: float = 10.0) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), timeout) == b""
    except ConnectionError:  # reset, or a broken pipe seen by the trickling writer
        return True


async def test_idle_and_half_frame_connections_are_closed_active_ones_kept() -> None:
    handler = ParkingHandler()
    server = KafkaServer(handler, host="127.0.0.1", port=0, max_frame_bytes=1 << 20,
                         idle_ms=300)
    port = await server.start()
    idle_reader, _idle = await asyncio.open_connection("127.0.0.1", port)
    half_reader, half_writer = await asyncio.open_connection("127.0.0.1", port)
    busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
    half_writer.write(struct.pack(">i", 1000))  # a frame it never finishes (slowloris)
    # Busy: a request every 50 ms for 1.5 s, five times the idle limit.
    started = time.monotonic()
    correlation = 0
    while time.monotonic() - started < 1.5:
        busy_writer.write(heartbeat_frame(correlation, 1))
        assert await asyncio.wait_for(read_correlation_ids(busy_reader, 1), 5) == [correlation]
        correlation += 1
        if not half_writer.is_closing():
            half_writer.write(b"\x00")  # a trickle that never completes the frame
        await asyncio.sleep(0.05)
    assert await closed_by_peer(idle_reader)
    assert await closed_by_peer(half_reader)
    busy_writer.write(heartbeat_frame(99, 1))
    assert await asyncio.wait_for(read_correlation_ids(busy_reader, 1), 5) == [99]
    busy_writer.close()
    await server.stop()


async def test_a_connection_with_a_parked_request_is_not_idle() -> None:
    handler = ParkingHandler()
    server = KafkaServer(handler, host="127.0.0.1", port=0, max_frame_bytes=1 << 20,
                         idle_ms=200)
    port = await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(heartbeat_frame(7, 0))  # generation 0: parked until answered
    await until(lambda: bool(handler.parked))
    # A control connection that only stays idle: once the idle sweep has closed it, the
    # parked one has been idle as long, and must still be open.
    idle_reader, _idle = await asyncio.open_connection("127.0.0.1", port)
    assert await closed_by_peer(idle_reader)
    handler.answer(*handler.parked.pop())
    assert await asyncio.wait_for(read_correlation_ids(reader, 1), 5) == [7]
    writer.close()
    await server.stop()


async def test_connections_beyond_the_limits_are_refused() -> None:
    handler = ParkingHandler()
    server = KafkaServer(handler, host="127.0.0.1", port=0, max_frame_bytes=1 << 20,
                         max_connections=3, max_connections_per_ip=2)
    port = await server.start()
    first = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    refused_reader, _ = await asyncio.open_connection("127.0.0.1", port)
    assert await closed_by_peer(refused_reader)  # a third from 127.0.0.1
    # Another loopback address is another client address: the broker-wide limit applies.
    second = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
    refused_elsewhere, _ = await asyncio.open_connection("127.0.0.1", port,
                                                         local_addr=("127.0.0.2", 0))
    assert await closed_by_peer(refused_elsewhere)
    for reader, writer in [*first, second]:
        writer.write(heartbeat_frame(5, 1))
        assert await asyncio.wait_for(read_correlation_ids(reader, 1), 5) == [5]
    first[0][1].close()
    await until(lambda: len(server.connections) == 2)
    again_reader, again_writer = await asyncio.open_connection("127.0.0.1", port)
    again_writer.write(heartbeat_frame(6, 1))
    assert await asyncio.wait_for(read_correlation_ids(again_reader, 1), 5) == [6]
    assert len(handler.closed) == 1  # refused connections never reach the handler
    for _, writer in [*first[1:], second, (again_reader, again_writer)]:
        writer.close()
    await server.stop()


async def test_reading_pauses_broker_wide_while_buffered_bytes_exceed_the_budget() -> None:
    handler = ParkingHandler()
    budget = 64 * 1024
    server = KafkaServer(handler, host="127.0.0.1", port=0, max_frame_bytes=1 << 20,
                         max_buffered_bytes=budget)
    port = await server.start()
    # One client sends most of a large frame: those bytes are held, over the budget.
    big_reader, big_writer = await asyncio.open_connection("127.0.0.1", port)
    body = heartbeat_frame(1, 1)[4:] + b"\x00" * (200 * 1024)
    big_writer.write(struct.pack(">i", len(body)) + body[: len(body) - 10])
    await until(lambda: server.budget.exhausted)
    # Meanwhile a second client's requests are not read...
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(heartbeat_frame(2, 1))
    await until(lambda: bool(server.budget.waiting))  # its reading is paused
    assert not handler.parked and server.budget.used >= budget
    # ...until the large frame completes and is handled; then both are answered.
    big_writer.write(body[len(body) - 10:])
    assert await asyncio.wait_for(read_correlation_ids(big_reader, 1), 5) == [1]
    assert await asyncio.wait_for(read_correlation_ids(reader, 1), 5) == [2]
    assert not server.budget.exhausted and server.budget.used == 0
    big_writer.close()
    writer.close()
    await server.stop()


def test_edge_settings_have_kafka_defaults_and_a_budget_below_a_frame_is_refused() -> None:
    settings, _ = load([], environ={})
    assert settings["connections.max.idle.ms"] == 600_000
    assert settings["max.connections"] == settings["max.connections.per.ip"] == 2**31 - 1
    assert settings["queued.max.request.bytes"] >= settings["socket.request.max.bytes"]
    unlimited, _ = load(["--queued.max.request.bytes", "-1"], environ={})
    assert unlimited["queued.max.request.bytes"] == -1
    with pytest.raises(ConfigError, match=r"queued\.max\.request\.bytes is smaller"):
        load(["--queued.max.request.bytes", "1000"], environ={})
