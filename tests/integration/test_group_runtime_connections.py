"""A closed connection forgets its own parked group requests, found through a per-connection
index: thousands of connections closing at once cost time linear in their number."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from coordinator.runtime.broker import Broker
from coordinator.runtime.heap import HeapTrimmer
from coordinator.settings import defaults
from protocol.build import build
from tests.fakes import FakeConnection, FakeContext, FakeHeader


def join(broker: Broker, group: str, connection: int) -> FakeContext:
    request = build(load_request_schema(11, 3), {
        "group_id": group, "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": "",
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"m"}],
    })
    ctx = FakeContext(FakeHeader(11, 3), FakeConnection(connection))
    broker._handlers[11](ctx, request)  # type: ignore[arg-type]
    return ctx


@contextlib.asynccontextmanager
async def loaded_broker(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker in this process, its group log loaded, joins parked in a long initial delay."""
    settings = defaults().with_overrides({"log.dirs": str(tmp_path / "data"),
                                          "group.initial.rebalance.delay.ms": "60000"})
    broker = Broker(settings)
    await broker.start()
    try:
        for _ in range(300):
            if not broker.groups.loading:
                break
            await asyncio.sleep(0.01)
        yield broker
    finally:
        await broker.stop()


class ScanCountingDict(dict):  # type: ignore[type-arg]
    scans = 0

    def __iter__(self) -> Any:
        ScanCountingDict.scans += 1
        return super().__iter__()


async def test_closed_connections_drop_only_their_parked_joins(tmp_path: Path) -> None:
    async with loaded_broker(tmp_path) as broker:
        runtime = broker.groups.applier  # where requests wait for their replies
        runtime._pending = ScanCountingDict()
        connections = 2_000
        contexts = [join(broker, f"g{i // 20}", connection=i) for i in range(connections)]
        assert not any(ctx.responses for ctx in contexts)  # parked in the initial delay
        assert len(runtime._pending) == connections
        for connection in range(connections):
            broker.groups.connection_closed(connection)
        assert ScanCountingDict.scans == 0
        assert not runtime._pending and not runtime._pending_by_connection


async def test_the_end_of_a_burst_gives_the_heap_back(tmp_path: Path) -> None:
    """Past `_SHRINK_FROM` parked requests, the applier's tables are made anew once they are
    all answered, and the C heap is trimmed once, on a worker thread, a little later."""
    async with loaded_broker(tmp_path) as broker:
        applier = broker.groups.applier
        trims: list[int] = []

        def trim(pad: int) -> int:
            trims.append(pad)
            return 1

        applier.heap = HeapTrimmer(trim, delay_s=0.05)
        for i in range(1_100):
            join(broker, f"g{i}", connection=i)
        for connection in range(1_099):
            broker.groups.connection_closed(connection)
        await asyncio.sleep(0.2)
        assert trims == []  # one request still parked: the burst is not over
        broker.groups.connection_closed(1_099)
        await asyncio.sleep(0.2)
        assert trims == [0]
        assert applier.heap.trims == 1
