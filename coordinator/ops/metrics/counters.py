"""The hot path of `/metrics`: plain ints and lists that every request touches.

A request costs one slot increment in a flat list indexed by (API key, version) and a mask test;
one request in `SAMPLE_EVERY[api]` of the hot APIs (every request of the rare ones) is also
timed: two clock reads and a bisect into pre-computed bounds. Nothing here formats or allocates
metric objects: `prometheus.py` copies these at scrape time.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from itertools import compress
from typing import Any

from coordinator.api.context import RequestContext

# Hot APIs have only one request in N timed (N a power of two); every other request is timed.
# Heartbeats are the most frequent and the cheapest to answer, so they are sampled the most thinly.
SAMPLE_EVERY = {0: 16, 1: 16, 8: 8, 12: 64, 68: 64}  # Produce, Fetch, OffsetCommit, Heartbeat,
#                                                     ConsumerGroupHeartbeat
_VERSION_BITS = 5  # a request's slot is api_key << _VERSION_BITS | api_version
_MAX_API_KEYS = 128
MAX_VERSIONS = 1 << _VERSION_BITS
SLOTS = _MAX_API_KEYS * MAX_VERSIONS
_clock = time.perf_counter
_bucket = bisect.bisect_left

# Seconds. Request latency spans a sub-millisecond heartbeat to a parked JoinGroup or Fetch.
# Few buckets on purpose: formatting the samples is most of a scrape's cost.
LATENCY_BOUNDS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0, 30.0)


def _none() -> int:
    return 0


class Histogram:
    """Cumulative-at-export histogram: per-bucket counts, a count and a sum."""

    __slots__ = ("bounds", "buckets", "count", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.buckets[_bucket(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def copy(self) -> Histogram:
        other = Histogram(self.bounds)
        other.buckets = list(self.buckets)
        other.count = self.count
        other.total = self.total
        return other

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.buckets, strict=False):
            running += count
            out.append((repr(float(bound)), running))
        out.append(("+Inf", self.count))
        return out


class TimedRequestContext(RequestContext):
    """A request context that reports its latency when answered (used only with metrics on)."""

    __slots__ = ("histogram", "started")

    def __init__(self, connection: Any, slot: Any, header: Any, histogram: Histogram) -> None:
        # The fields set directly: the dataclass __init__ through super() costs a heartbeat
        # measurably more.
        self.connection = connection
        self.slot = slot
        self.header = header
        self.histogram = histogram
        self.started = _clock()

    def respond(self, response: Any) -> None:
        RequestContext.respond(self, response)
        self.histogram.observe(_clock() - self.started)

    def respond_raw(self, framed: bytes | None) -> None:
        self.connection.complete(self.slot, framed)
        self.histogram.observe(_clock() - self.started)


class RequestCounters:
    """Requests by (API key, version), sampled latencies, and the few counters the runtime
    bumps directly (offsets committed, expired, deleted; the fetch wake-up latency)."""

    def __init__(self) -> None:
        # Requests received per (api_key, api_version) slot: every request, exactly.
        self.request_counts = [0] * SLOTS
        # Per slot: 0 to time every request, N - 1 to time one in N (N a power of two).
        self._sample_masks = [0] * SLOTS
        for api_key, every in SAMPLE_EVERY.items():
            for version in range(MAX_VERSIONS):
                self._sample_masks[api_key << _VERSION_BITS | version] = every - 1
        # Latency of the timed requests per slot, created at a slot's first timed request.
        self._latency: list[Histogram | None] = [None] * SLOTS
        self.fetch_wakeup = Histogram(LATENCY_BOUNDS)
        self.offset_commits = 0  # offsets (partitions) committed
        self.offset_expirations = 0
        self.offset_deletions = 0
        # Requests refused by the authorizer, by (resource type, operation) names.
        self.authorization_denials: dict[tuple[str, str], int] = {}
        # Completed transactions by outcome (committed, aborted), and aborts by reason.
        self.transactions_completed: dict[str, int] = {}
        self.transactions_aborted: dict[str, int] = {}
        # The transactions begun and not completed, read at scrape time.
        self.open_transactions: Callable[[], int] = _none

    def transaction_ended(self, outcome: str, reason: str) -> None:
        completed = self.transactions_completed
        completed[outcome] = completed.get(outcome, 0) + 1
        if outcome == "aborted":
            self.transactions_aborted[reason] = self.transactions_aborted.get(reason, 0) + 1

    def authorization_denied(self, resource_type: str, operation: str) -> None:
        key = (resource_type, operation)
        self.authorization_denials[key] = self.authorization_denials.get(key, 0) + 1

    def context(self, connection: Any, slot: Any, header: Any) -> RequestContext:
        """The context of one request: counted always; timed always for the rare APIs and for
        one request in `SAMPLE_EVERY[api]` of the hot ones, whose latency histograms are
        therefore samples. Only requests the broker serves get here, so the slot is in range
        (`slot_of` is checked against the served versions at start)."""
        index = header.api_key << _VERSION_BITS | header.api_version
        counts = self.request_counts
        count = counts[index] = counts[index] + 1
        if count & self._sample_masks[index]:
            return RequestContext(connection, slot, header)
        histogram = self._latency[index]
        if histogram is None:
            histogram = self._latency[index] = Histogram(LATENCY_BOUNDS)
        return TimedRequestContext(connection, slot, header, histogram)

    def timed_next(self, api_key: int, api_version: int) -> bool:
        """Whether `context` would time the next request of this (key, version): a request
        answered without a context (`count`) must leave those to it."""
        index = api_key << _VERSION_BITS | api_version
        return not (self.request_counts[index] + 1) & self._sample_masks[index]

    def count(self, api_key: int, api_version: int) -> None:
        """A request answered without a context (one `timed_next` said is not timed)."""
        self.request_counts[api_key << _VERSION_BITS | api_version] += 1

    @staticmethod
    def slot_of(api_key: int, api_version: int) -> int | None:
        """A request's counter slot, or None for keys and versions beyond the table."""
        if 0 <= api_key < _MAX_API_KEYS and 0 <= api_version < MAX_VERSIONS:
            return api_key << _VERSION_BITS | api_version
        return None

    @property
    def requests(self) -> dict[tuple[int, int], Histogram]:
        """Latency of the timed requests by (api_key, api_version)."""
        used = compress(zip(range(SLOTS), self._latency, strict=True), self._latency)
        return {divmod(index, MAX_VERSIONS): histogram
                for index, histogram in used if histogram is not None}

    def request_count(self, api_key: int, api_version: int) -> int:
        return self.request_counts[api_key << _VERSION_BITS | api_version]

    def used_request_counts(self) -> dict[tuple[int, int], int]:
        """Requests by (api_key, api_version), for the slots that have any."""
        # compress: the few used slots of the table, found at C speed
        return {divmod(index, MAX_VERSIONS): self.request_counts[index]
                for index in compress(range(SLOTS), self.request_counts)}
