"""Parked fetches are forgotten per connection: a close touches only that connection's fetches,
so thousands of connections closing at once cost time linear in their number."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from coordinator.dataplane.fetch import FetchPurgatory, ParkedFetch


class Scheduler:
    def __init__(self) -> None:
        self.armed: set[tuple[Any, ...]] = set()

    def schedule(self, key: tuple[Any, ...], deadline_ms: int) -> None:
        self.armed.add(key)

    def cancel(self, key: tuple[Any, ...]) -> None:
        self.armed.discard(key)


class ScanCountingDict(dict):  # type: ignore[type-arg]
    """Counts whole-table scans, which a per-connection close must not do."""

    scans = 0

    def values(self) -> Any:
        ScanCountingDict.scans += 1
        return super().values()


def parked(connection_id: int, request: int) -> ParkedFetch:
    ctx = SimpleNamespace(connection=SimpleNamespace(id=connection_id), open=True)
    fetch = ParkedFetch(ctx, None, ("fetch", connection_id, request))  # type: ignore[arg-type]
    fetch.partitions.append(("t", connection_id % 3))
    return fetch


def test_closing_connections_forgets_only_their_parked_fetches_without_scanning() -> None:
    scheduler = Scheduler()
    purgatory = FetchPurgatory(scheduler)  # type: ignore[arg-type]
    purgatory._by_key = ScanCountingDict()
    connections = 10_000
    for connection_id in range(connections):
        for request in range(2 if connection_id % 10 == 0 else 1):
            purgatory.park(parked(connection_id, request), deadline_ms=1_000)
    assert len(purgatory) == connections + connections // 10
    for connection_id in range(0, connections, 2):
        purgatory.connection_closed(connection_id)
    assert ScanCountingDict.scans == 0
    assert len(purgatory) == connections // 2
    assert all(key[1] % 2 == 1 for key in scheduler.armed)
    for connection_id in range(1, connections, 2):
        purgatory.connection_closed(connection_id)
    assert len(purgatory) == 0 and not scheduler.armed
    assert not purgatory._by_partition and not purgatory._by_connection
