"""Requests pipelined behind one that closes the connection are never run (real sockets to an
in-process broker)."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.runtime.broker import Broker
from protocol.server import KafkaServer
from tests.fakes import framed, request_bytes
from tests.integration.in_process import started_broker


def frame(api_key: int, version: int, body: dict[str, Any], correlation_id: int = 1) -> bytes:
    return framed(request_bytes(api_key, version, body, correlation_id, client_id="pipelining"))


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Broker, int]]:
    broker = await started_broker(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"},
                                  partitions=None)
    server = KafkaServer(broker, host="127.0.0.1", port=0, max_frame_bytes=1 << 20)
    port = await server.start()
    try:
        yield broker, port
    finally:
        await server.stop(grace_seconds=0.5)
        await broker.stop()


async def _send_and_drain(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout=3)
    writer.close()
    return data


async def test_requests_pipelined_after_a_malformed_frame_are_not_executed(
    served: tuple[Broker, int],
) -> None:
    broker, port = served
    garbage = struct.pack(">i", 12) + struct.pack(">hhi", 3, 12, 1) + b"\x00\x00\xff\xff"
    create = frame(3, 4, {"topics": [{"name": "created-after-reject"}],
                          "allow_auto_topic_creation": True}, correlation_id=2)
    assert await _send_and_drain(port, garbage + create) == b""  # closed, nothing answered
    # Kafka stops reading a connection it closes on bad input: the second request must not run.
    assert broker.topics.get("created-after-reject") is None


async def test_requests_pipelined_after_a_failing_handler_are_not_executed(
    served: tuple[Broker, int],
) -> None:
    broker, port = served
    # OffsetCommit v10 decodes (kio knows it) but is not advertised; its handler raises on the
    # topic-id layout, and the runtime closes the connection.
    failing = frame(8, 10, {"group_id": "g", "generation_id_or_member_epoch": -1,
                            "member_id": "", "group_instance_id": None, "topics": [
                                {"topic_id": uuid.uuid4(), "partitions": []}]})
    create = frame(3, 4, {"topics": [{"name": "created-after-failure"}],
                          "allow_auto_topic_creation": True}, correlation_id=2)
    assert await _send_and_drain(port, failing + create) == b""
    assert broker.topics.get("created-after-failure") is None
