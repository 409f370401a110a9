from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from coordinator.runtime.broker import Broker
from storage.fs import FaultyFileSystem
from tests.bench import wire
from tests.broker_process import BrokerProcess
from tests.integration.in_process import started_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
async def faulty_disk_broker(tmp_path: Path) -> AsyncIterator[tuple[Broker, FaultyFileSystem]]:
    """An in-process broker whose group log writes through a filesystem that faults on
    demand, with topic `TOPIC` of 4 partitions."""
    fs = FaultyFileSystem()
    broker = await started_broker(tmp_path / "data", groups_fs=fs, partitions=4)
    try:
        yield broker, fs
    finally:
        await broker.stop()


@pytest.fixture
async def connection(tmp_path: Path) -> AsyncIterator[wire.Connection]:
    """A raw Kafka connection to a fresh broker process whose group log has loaded; the
    broker must have logged no traceback by the end."""
    broker = BrokerProcess(tmp_path / "data").start()
    conn = await wire.Connection.open("127.0.0.1", broker.port)
    try:
        await wire.group_log_loaded(conn)
        yield conn
    finally:
        await conn.close()
        broker.stop()
    assert "Traceback" not in broker.log_text()
