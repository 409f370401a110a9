"""KIP-599's controller mutation quota: partitions created per second, per client id.

Kafka meters topic and partition creations (and deletions) with a token bucket per (user,
client id): `controller.mutation.rate` tokens a second, a burst of that rate times the quota
window (11 one-second samples by default). A request that finds the bucket already empty is
refused, each of its topics with THROTTLING_QUOTA_EXCEEDED and the time until the bucket is
back to zero as the throttle time; a request that finds tokens is accepted whole, even when it
takes the bucket below zero (so one request of many partitions still goes through, and the
next waits for it). Creations by Metadata auto-create are not metered, as in Kafka. A rate
below zero (the default, as Kafka has no quota by default) means no quota.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Kafka's quota.window.num x quota.window.size.seconds: the burst is this many seconds' rate.
BURST_SECONDS = 11
# Client ids remembered at most; an idle full bucket is the same as a forgotten one.
_MAX_CLIENTS = 10_000


class MutationQuota:
    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client id -> (tokens, at)

    @property
    def enabled(self) -> bool:
        return self.rate >= 0

    def throttle_ms(self, client_id: str) -> int:
        """0 when `client_id` may mutate now, else how long until it may (milliseconds)."""
        if not self.enabled:
            return 0
        tokens = self._tokens(client_id)
        if tokens >= 0:
            return 0
        if self.rate == 0:
            return 2**31 - 1
        return int(-tokens / self.rate * 1000) + 1

    def record(self, client_id: str, partitions: int) -> None:
        """Take `partitions` tokens (after `throttle_ms` said 0)."""
        if not self.enabled:
            return
        tokens = self._tokens(client_id) - partitions
        if len(self._buckets) >= _MAX_CLIENTS and client_id not in self._buckets:
            self._forget_full()
        self._buckets[client_id] = (tokens, self.clock())

    def _tokens(self, client_id: str) -> float:
        burst = self.rate * BURST_SECONDS
        entry = self._buckets.get(client_id)
        if entry is None:
            return burst
        tokens, at = entry
        return min(burst, tokens + (self.clock() - at) * self.rate)

    def _forget_full(self) -> None:
        burst = self.rate * BURST_SECONDS
        for client_id in [c for c in self._buckets if self._tokens(c) >= burst]:
            del self._buckets[client_id]
