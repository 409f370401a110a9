"""Counting for `/metrics`, split by job:

* `counters.py`: the hot path, a slot increment per request and a sampled latency;
* `history.py`: the rebalances, built from the core's group events;
* `prometheus.py`: the text format, built from copies at scrape time.

`BrokerMetrics` is what the runtime holds: the counters, with the rebalance history beside them
fed by `on_event`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import coordinator.group.events as ev
from coordinator.ops.metrics.counters import (
    LATENCY_BOUNDS,
    SAMPLE_EVERY,
    Histogram,
    RequestCounters,
    TimedRequestContext,
)
from coordinator.ops.metrics.history import (
    CLASSIC,
    CONSUMER,
    OTHER_GROUPS,
    RebalanceHistory,
)
from coordinator.ops.metrics.prometheus import (
    API_NAMES,
    GroupCounts,
    exposition,
    exposition_parts,
    snapshot,
)

__all__ = [
    "API_NAMES",
    "CLASSIC",
    "CONSUMER",
    "LATENCY_BOUNDS",
    "OTHER_GROUPS",
    "SAMPLE_EVERY",
    "BrokerMetrics",
    "GroupCounts",
    "Histogram",
    "LoopLagSource",
    "RebalanceHistory",
    "TimedRequestContext",
    "exposition",
    "exposition_parts",
]


class LoopLagSource(Protocol):
    """The event-loop lag monitor (`coordinator.ops.loop_lag`), as a scrape reads it."""

    def snapshot(self) -> dict[str, Any]: ...


class BrokerMetrics(RequestCounters):
    """The request counters (inherited, so the hot path is one method call), the rebalance
    history and the loop-lag monitor: everything `/metrics` exports."""

    def __init__(self, max_groups: int = 200) -> None:
        super().__init__()
        self.rebalances = RebalanceHistory(max_groups)
        # Set when the broker serves.
        self.loop_lag: LoopLagSource | None = None

    def on_event(self, event: ev.Event | ev.GroupConverted) -> None:
        self.rebalances.on_event(event)

    def on_events(self, events: Iterable[ev.Event | ev.GroupConverted]) -> None:
        self.rebalances.on_events(events)

    def snapshot(self, counts: GroupCounts, num_offsets: int, connections: int,
                 now_ms: int) -> dict[str, Any]:
        """Copies of everything `/metrics` exports, taken on the event loop. `counts` are the
        groups by type and state, counted by the caller (in slices)."""
        loop = self.loop_lag.snapshot() if self.loop_lag is not None else None
        return snapshot(self, self.rebalances, counts, num_offsets, connections, now_ms, loop)
