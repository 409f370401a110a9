"""Counting for `/metrics`: plain ints and lists on the hot path, Prometheus families at scrape.

A request costs one slot increment in a flat list indexed by (API key, version) and a mask test;
one request in `SAMPLE_EVERY[api]` of the hot APIs (every request of the rare ones) is also
timed: two clock reads and a bisect into pre-computed bounds. Group events (rare) update
per-group histograms and the rebalance history the group page shows. Nothing here formats or
allocates metric objects until Prometheus scrapes: `snapshot()` copies the counters on the event
loop (cheap, bounded), and `exposition()` turns a snapshot into prometheus-client metric
families and their text off the loop.

Label cardinality is bounded: per-group series (rebalance durations, time since the last
rebalance) exist for the first `metrics.max.groups` groups seen; later groups are counted under
`group="__other__"`. Causes and reasons are small fixed vocabularies; API keys and versions are
the few this broker answers.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import compress
from operator import attrgetter
from typing import Any

from coordinator.api.context import RequestContext
from coordinator.group import events as ev

OTHER_GROUPS = "__other__"
# Hot APIs have only one request in N timed (N a power of two); every other request is timed.
# Heartbeats are the most frequent and the cheapest to answer, so they are sampled the most thinly.
SAMPLE_EVERY = {0: 16, 1: 16, 8: 8, 12: 64, 68: 64}  # Produce, Fetch, OffsetCommit, Heartbeat,
#                                                     ConsumerGroupHeartbeat
_VERSION_BITS = 5  # a request's slot is api_key << _VERSION_BITS | api_version
_MAX_API_KEYS = 128
_MAX_VERSIONS = 1 << _VERSION_BITS
_SLOTS = _MAX_API_KEYS * _MAX_VERSIONS
_clock = time.perf_counter
_bucket = bisect.bisect_left
HISTORY_PER_GROUP = 10  # rebalances kept per group for the page
HISTORY_GROUPS = 1000  # groups whose rebalance history is kept (oldest forgotten first)

# Seconds. Request latency spans a sub-millisecond heartbeat to a parked JoinGroup or Fetch.
# Few buckets on purpose: formatting the samples is most of a scrape's cost.
LATENCY_BOUNDS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0, 30.0)
REBALANCE_BOUNDS = (0.05, 0.25, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup",
    14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups", 18: "ApiVersions",
    19: "CreateTopics", 20: "DeleteTopics", 22: "InitProducerId", 37: "CreatePartitions",
    42: "DeleteGroups", 47: "OffsetDelete", 68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
}

# Rebalance reasons are sentences naming members; the cause label is one of these words.
# The first match wins: a disconnect's reason ("its connection closed ... without LeaveGroup")
# names LeaveGroup too.
_CAUSES = (
    ("heartbeat expiration", "session_expiry"),
    ("session", "session_expiry"),
    ("disconnect", "disconnect"),
    ("connection closed", "disconnect"),
    ("leavegroup", "leave"),
    ("pending sync", "sync_timeout"),
    ("rebalance timeout", "rebalance_timeout"),
    ("connection", "disconnect"),
    ("adding new member", "member_join"),
    ("joining group during rebalance", "member_rejoin"),
    ("static member", "static_member"),
    ("updating metadata", "metadata_change"),
    ("persist", "persist_failure"),
)


_SAMPLING_HELP = "sampled: " + ", ".join(
    f"one request in {every} of {API_NAMES[api_key]}" for api_key, every in SAMPLE_EVERY.items()
) + "; every request of the other APIs."


def rebalance_cause(reason: str) -> str:
    lowered = reason.lower()
    for needle, cause in _CAUSES:
        if needle in lowered:
            return cause
    return "other"


# A consumer group's new target assignment says why its group epoch moved.
_CONSUMER_CAUSES = (
    ("member joined", "member_join"),
    ("subscription changed", "subscription_change"),
    ("metadata changed", "metadata_change"),
    ("(leave)", "leave"),
    ("(session_expiry)", "session_expiry"),
    ("(rebalance_timeout)", "rebalance_timeout"),
    ("(fenced)", "fenced"),
    ("(max_size)", "max_size"),
    ("(disconnect)", "disconnect"),
)


def consumer_rebalance_cause(reason: str) -> str:
    for needle, cause in _CONSUMER_CAUSES:
        if needle in reason:
            return cause
    return "other"


CLASSIC = "classic"
CONSUMER = "consumer"
# Rebalance phases per group type. A consumer group has no join or sync barrier: its rebalance
# runs from a new target assignment until every member has reconciled to it.
PHASES = {CLASSIC: ("join", "sync", "total"), CONSUMER: ("total",)}


class GroupCounts:
    """Groups by type and state, counted a slice at a time (a broker may hold 100,000)."""

    __slots__ = ("by_state", "classic", "consumer", "consumer_by_state")

    def __init__(self) -> None:
        self.by_state: dict[str, int] = {}
        self.consumer_by_state: dict[str, int] = {}
        self.classic = 0
        self.consumer = 0

    def add_classic(self, groups: Iterable[Any]) -> None:
        # Counted by state object at C speed, named once per state: 5x faster than naming each.
        by_state = self.by_state
        for state, count in Counter(map(_state_of, groups)).items():
            name = getattr(state, "value", str(state))
            by_state[name] = by_state.get(name, 0) + count
            self.classic += count

    def add_consumer(self, groups: Iterable[Any]) -> None:
        by_state = self.consumer_by_state
        for state, count in Counter(map(_state_of, groups)).items():
            name = getattr(state, "value", str(state)).lower()
            by_state[name] = by_state.get(name, 0) + count
            self.consumer += count


_state_of = attrgetter("state")


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


@dataclass(slots=True)
class Rebalance:
    """One rebalance of one group, as the page draws it."""

    started_ms: int
    generation_id: int
    reason: str
    cause: str
    member_id: str | None
    client_id: str | None
    client_host: str | None
    previous_state: str
    join_ms: int | None = None
    total_ms: int | None = None
    # stabilized | emptied | in progress | dead | superseded | converted
    outcome: str = "in progress"
    members: int | None = None
    group_type: str = CLASSIC


@dataclass(slots=True)
class GroupHistory:
    rebalances: deque[Rebalance] = field(default_factory=lambda: deque(maxlen=HISTORY_PER_GROUP))
    removed: deque[dict[str, Any]] = field(default_factory=lambda: deque(
        maxlen=HISTORY_PER_GROUP))
    last_stabilized_ms: int | None = None


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


class BrokerMetrics:
    def __init__(self, max_groups: int = 200) -> None:
        self.max_groups = max_groups
        # Requests received per (api_key, api_version) slot: every request, exactly.
        self.request_counts = [0] * _SLOTS
        # Per slot: 0 to time every request, N - 1 to time one in N (N a power of two).
        self._sample_masks = [0] * _SLOTS
        for api_key, every in SAMPLE_EVERY.items():
            for version in range(_MAX_VERSIONS):
                self._sample_masks[api_key << _VERSION_BITS | version] = every - 1
        # Latency of the timed requests per slot, created at a slot's first timed request.
        self._latency: list[Histogram | None] = [None] * _SLOTS
        self.fetch_wakeup = Histogram(LATENCY_BOUNDS)
        self.offset_commits = 0  # offsets (partitions) committed
        self.offset_expirations = 0
        self.offset_deletions = 0
        self.completed_rebalances = 0  # classic groups (Kafka's group-completed-rebalance)
        self.consumer_rebalances = 0  # consumer groups' new target assignments (Kafka's
        #                               consumer-group-rebalance)
        # (group type, cause) -> count
        self.rebalances_by_cause: dict[tuple[str, str], int] = {}
        self.members_removed: dict[tuple[str, str], int] = {}
        # The live consumer groups by id (a read-only view the runtime sets): tells a consumer
        # group's events apart and whether its members have all reconciled.
        self.consumer_groups: Mapping[str, Any] = {}
        # group (or OTHER_GROUPS) -> phase -> histogram, capped at max_groups groups
        self.rebalance_seconds: dict[str, dict[str, Histogram]] = {}
        self.history: dict[str, GroupHistory] = {}
        self.group_version = 0  # bumped by every group event: the rebalance series changed
        # The event-loop lag monitor (coordinator.ops.loop_lag), set when the broker serves.
        self.loop_lag: Any = None

    # hot path --------------------------------------------------------------------------------

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

    @staticmethod
    def slot_of(api_key: int, api_version: int) -> int | None:
        """A request's counter slot, or None for keys and versions beyond the table."""
        if 0 <= api_key < _MAX_API_KEYS and 0 <= api_version < _MAX_VERSIONS:
            return api_key << _VERSION_BITS | api_version
        return None

    @property
    def requests(self) -> dict[tuple[int, int], Histogram]:
        """Latency of the timed requests by (api_key, api_version)."""
        used = compress(zip(range(_SLOTS), self._latency, strict=True), self._latency)
        return {divmod(index, _MAX_VERSIONS): histogram
                for index, histogram in used if histogram is not None}

    def request_count(self, api_key: int, api_version: int) -> int:
        return self.request_counts[api_key << _VERSION_BITS | api_version]

    # events ----------------------------------------------------------------------------------

    def _group_series(self, group_id: str, group_type: str = CLASSIC) -> dict[str, Histogram]:
        series = self.rebalance_seconds.get(group_id)
        if series is None:
            own = len(self.rebalance_seconds) - (OTHER_GROUPS in self.rebalance_seconds)
            if own >= self.max_groups:
                group_id = OTHER_GROUPS
            series = self.rebalance_seconds.setdefault(group_id, {})
        for phase in PHASES[group_type]:
            if phase not in series:
                series[phase] = Histogram(REBALANCE_BOUNDS)
        return series

    def _group_type(self, group_id: str) -> str:
        return CONSUMER if group_id in self.consumer_groups else CLASSIC

    def _count(self, table: dict[tuple[str, str], int], group_type: str, cause: str) -> None:
        key = (group_type, cause)
        table[key] = table.get(key, 0) + 1

    def _history(self, group_id: str) -> GroupHistory:
        history = self.history.get(group_id)
        if history is None:
            if len(self.history) >= HISTORY_GROUPS:
                del self.history[next(iter(self.history))]
            history = self.history[group_id] = GroupHistory()
        return history

    def on_event(self, event: Any) -> None:
        self.group_version += 1
        if isinstance(event, ev.GroupConverted):
            # The group goes on as the other type: a rebalance of the old one ends here.
            current = self._open_rebalance(event.group_id)
            if current is not None:
                current.outcome = "converted"
                current.total_ms = max(event.ts_ms - current.started_ms, 0)
            return
        if event.group_id in self.consumer_groups or isinstance(
                event, ev.TargetAssignmentComputed | ev.MemberReconciled):
            self._on_consumer_event(event)
            return
        if isinstance(event, ev.RebalanceStarted):
            cause = rebalance_cause(event.reason)
            self._count(self.rebalances_by_cause, CLASSIC, cause)
            self._history(event.group_id).rebalances.append(Rebalance(
                started_ms=event.ts_ms, generation_id=event.generation_id, reason=event.reason,
                cause=cause, member_id=event.member_id, client_id=event.client_id,
                client_host=event.client_host, previous_state=event.previous_state))
        elif isinstance(event, ev.JoinCompleted):
            current = self._open_rebalance(event.group_id)
            if current is not None:
                current.join_ms = event.duration_ms
                current.members = event.member_count
            self._group_series(event.group_id)["join"].observe(event.duration_ms / 1000)
        elif isinstance(event, ev.GroupStabilized):
            self.completed_rebalances += 1
            history = self._history(event.group_id)
            history.last_stabilized_ms = event.ts_ms
            current = self._open_rebalance(event.group_id)
            series = self._group_series(event.group_id)
            series["total"].observe(event.duration_ms / 1000)
            if current is not None:
                current.total_ms = event.duration_ms
                current.outcome = "stabilized"
                current.members = event.member_count
                if current.join_ms is not None:
                    series["sync"].observe(max(event.duration_ms - current.join_ms, 0) / 1000)
        elif isinstance(event, ev.MemberRemoved):
            self._member_removed(event, CLASSIC)
        elif isinstance(event, ev.GroupEmpty | ev.GroupDead):
            current = self._open_rebalance(event.group_id)
            if current is not None:
                current.outcome = "emptied" if isinstance(event, ev.GroupEmpty) else "dead"
                current.total_ms = max(event.ts_ms - current.started_ms, 0)
            if isinstance(event, ev.GroupDead):
                # A deleted group frees its slot under the per-group cap.
                self.history.pop(event.group_id, None)
                self.rebalance_seconds.pop(event.group_id, None)

    def _member_removed(self, event: ev.MemberRemoved, group_type: str) -> None:
        cause = getattr(event.cause, "value", str(event.cause))
        self._count(self.members_removed, group_type, cause)
        self._history(event.group_id).removed.append({
            "ts_ms": event.ts_ms, "member_id": event.member_id, "client_id": event.client_id,
            "client_host": event.client_host, "cause": cause, "reason": event.reason})

    def _on_consumer_event(self, event: Any) -> None:
        """A consumer group's rebalance: from a new target assignment (a group epoch bump) until
        every member has reconciled to it; members keep their other partitions meanwhile."""
        group_id = event.group_id
        if isinstance(event, ev.TargetAssignmentComputed):
            cause = consumer_rebalance_cause(event.reason)
            self._count(self.rebalances_by_cause, CONSUMER, cause)
            self.consumer_rebalances += 1
            history = self._history(group_id)
            current = self._open_rebalance(group_id)
            if current is not None:  # a newer target before the members got to the last one
                current.outcome = "superseded"
                current.total_ms = max(event.ts_ms - current.started_ms, 0)
            if event.reason.startswith("member removed") and history.removed:
                # The target is computed at the next heartbeat of someone else: the culprit is
                # the member that was removed, not that one.
                removed = history.removed[-1]
                member_id, client_id, client_host = (
                    removed["member_id"], removed["client_id"], removed["client_host"])
            else:
                group = self.consumer_groups.get(group_id)
                culprit = (group.members.get(event.member_id)
                           if group is not None and event.member_id else None)
                member_id = event.member_id
                client_id = getattr(culprit, "client_id", None)
                client_host = getattr(culprit, "client_host", None)
            history.rebalances.append(Rebalance(
                started_ms=event.ts_ms, generation_id=event.generation_id - 1,
                reason=event.reason, cause=cause, member_id=member_id, client_id=client_id,
                client_host=client_host, previous_state="", members=event.member_count,
                group_type=CONSUMER))
        elif isinstance(event, ev.MemberRemoved):
            self._member_removed(event, CONSUMER)
        elif isinstance(event, ev.GroupDead):
            self.history.pop(group_id, None)
            self.rebalance_seconds.pop(group_id, None)
            return
        self._maybe_reconciled(group_id, event.ts_ms)

    def _maybe_reconciled(self, group_id: str, now_ms: int) -> None:
        current = self._open_rebalance(group_id)
        if current is None:
            return
        group = self.consumer_groups.get(group_id)
        if group is None:
            return
        state = getattr(group.state, "value", "")
        if state == "Empty":
            current.outcome = "emptied"
        elif state == "Stable" and group.assignment_epoch > current.generation_id:
            current.outcome = "stabilized"
        else:
            return
        current.total_ms = max(now_ms - current.started_ms, 0)
        current.members = len(group.members)
        self._history(group_id).last_stabilized_ms = now_ms
        if current.outcome == "stabilized":
            self._group_series(group_id, CONSUMER)["total"].observe(current.total_ms / 1000)

    def _open_rebalance(self, group_id: str) -> Rebalance | None:
        history = self.history.get(group_id)
        if history is None or not history.rebalances:
            return None
        last = history.rebalances[-1]
        return last if last.outcome == "in progress" else None

    def on_events(self, events: Iterable[Any]) -> None:
        for event in events:
            self.on_event(event)

    # scrape ----------------------------------------------------------------------------------

    def snapshot(self, groups: Iterable[Any], num_offsets: int, connections: int,
                 now_ms: int, consumer_groups: Iterable[Any] = (),
                 counts: GroupCounts | None = None) -> dict[str, Any]:
        """Copies of everything `families` exports, taken on the event loop. `counts`, when
        given, are the groups already counted (in slices, by the caller); `groups` and
        `consumer_groups` are then not read."""
        if counts is None:
            counts = GroupCounts()
            counts.add_classic(groups)
            counts.add_consumer(consumer_groups)
        by_state = counts.by_state
        consumer_by_state = counts.consumer_by_state
        by_protocol = {CLASSIC: counts.classic, CONSUMER: counts.consumer}
        since_last: dict[str, float] = {}
        for group_id, history in self.history.items():
            # Only groups with their own series: the same cap bounds this gauge.
            if history.last_stabilized_ms is not None and group_id in self.rebalance_seconds:
                since_last[group_id] = max(now_ms - history.last_stabilized_ms, 0) / 1000
        return {
            "requests": {k: h.copy() for k, h in self.requests.items()},
            # compress: the few used slots of the table, found at C speed
            "request_counts": {divmod(index, _MAX_VERSIONS): self.request_counts[index]
                               for index in compress(range(_SLOTS), self.request_counts)},
            "fetch_wakeup": self.fetch_wakeup.copy(),
            "offset_commits": self.offset_commits,
            "offset_expirations": self.offset_expirations,
            "offset_deletions": self.offset_deletions,
            "completed_rebalances": self.completed_rebalances,
            "consumer_rebalances": self.consumer_rebalances,
            "consumer_groups_by_state": consumer_by_state,
            "rebalances_by_cause": dict(self.rebalances_by_cause),
            "members_removed": dict(self.members_removed),
            "group_version": self.group_version,
            "rebalance_seconds": {g: {p: h.copy() for p, h in phases.items()}
                                  for g, phases in self.rebalance_seconds.items()},
            "since_last": since_last,
            "groups_by_state": by_state,
            "groups_by_protocol": by_protocol,
            "num_offsets": num_offsets,
            "connections": connections,
            "loop": self.loop_lag.snapshot() if self.loop_lag is not None else None,
        }


_KAFKA = "kafka_server_group_coordinator_metrics_"
_GMM = "kafka_coordinator_group_groupmetadatamanager_"
_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
_CONSUMER_STATES = ("empty", "assigning", "reconciling", "stable", "dead")


def _histogram(family: Any, labels: list[str], histogram: Histogram) -> None:
    family.add_metric(labels, histogram.cumulative(), histogram.total)


def state_families(snap: dict[str, Any]) -> Iterator[Any]:
    """The families that change only with the groups and the commits."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
    )

    by_state: dict[str, int] = snap["groups_by_state"]
    total_groups = sum(by_state.values())
    family = GaugeMetricFamily(_KAFKA + "group_count", "Groups by protocol (Kafka group-count).",
                               labels=["protocol"])
    for protocol in sorted(set(snap["groups_by_protocol"]) | {CLASSIC, CONSUMER}):
        family.add_metric([protocol], snap["groups_by_protocol"].get(protocol, 0))
    yield family
    family = GaugeMetricFamily(_KAFKA + "classic_group_count",
                               "Classic groups by state (Kafka classic-group-count).",
                               labels=["state"])
    for state in _STATES:
        family.add_metric([state], by_state.get(state, 0))
    yield family
    family = GaugeMetricFamily(_KAFKA + "consumer_group_count",
                               "Consumer groups by state (Kafka consumer-group-count).",
                               labels=["state"])
    for state in _CONSUMER_STATES:
        family.add_metric([state], snap["consumer_groups_by_state"].get(state, 0))
    yield family
    yield GaugeMetricFamily(_GMM + "numgroups", "Classic groups (Kafka NumGroups).",
                            value=total_groups)
    for state in _STATES:
        yield GaugeMetricFamily(_GMM + "numgroups" + state.lower(),
                                f"Groups in {state} (Kafka NumGroups{state}).",
                                value=by_state.get(state, 0))
    yield GaugeMetricFamily(_GMM + "numoffsets", "Committed offsets held (Kafka NumOffsets).",
                            value=snap["num_offsets"])
    yield CounterMetricFamily(_KAFKA + "group_completed_rebalance",
                              "Classic group rebalances completed "
                              "(Kafka group-completed-rebalance-total).",
                              value=snap["completed_rebalances"])
    yield CounterMetricFamily(_KAFKA + "consumer_group_rebalance",
                              "Consumer group rebalances: new target assignments "
                              "(Kafka consumer-group-rebalance-total).",
                              value=snap["consumer_rebalances"])
    yield CounterMetricFamily(_KAFKA + "offset_commit",
                              "Offsets committed (Kafka offset-commit-total).",
                              value=snap["offset_commits"])
    yield CounterMetricFamily(_KAFKA + "offset_expiration",
                              "Offsets expired (Kafka offset-expiration-total).",
                              value=snap["offset_expirations"])
    yield CounterMetricFamily(_KAFKA + "offset_deletion",
                              "Offsets deleted (Kafka offset-deletion-total).",
                              value=snap["offset_deletions"])

    counter = CounterMetricFamily(
        "rebalanced_rebalances",
        "Rebalances started (classic) or new target assignments (consumer), by group type "
        "and cause.", labels=["protocol", "cause"])
    for (protocol, cause), count in sorted(snap["rebalances_by_cause"].items()):
        counter.add_metric([protocol, cause], count)
    yield counter
    counter = CounterMetricFamily("rebalanced_members_removed",
                                  "Members removed, by group type and cause.",
                                  labels=["protocol", "cause"])
    for (protocol, cause), count in sorted(snap["members_removed"].items()):
        counter.add_metric([protocol, cause], count)
    yield counter


# What `state_families` reads: while these are unchanged its text is reused.
_STATE_KEYS = ("groups_by_state", "groups_by_protocol", "consumer_groups_by_state",
               "num_offsets", "completed_rebalances", "consumer_rebalances", "offset_commits",
               "offset_expirations", "offset_deletions", "rebalances_by_cause", "members_removed")


def activity_families(snap: dict[str, Any]) -> Iterator[Any]:
    """The families that move with the traffic and the clock."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    gauge = GaugeMetricFamily("rebalanced_seconds_since_last_rebalance",
                              "Seconds since each group last completed a rebalance.",
                              labels=["group"])
    for group_id, seconds in sorted(snap["since_last"].items()):
        gauge.add_metric([group_id], seconds)
    yield gauge

    requests = CounterMetricFamily("rebalanced_requests", "Requests answered, by API and version.",
                                   labels=["api", "version"])
    commit = HistogramMetricFamily(
        "rebalanced_offset_commit_latency_seconds",
        "OffsetCommit from arrival to the durable answer, all versions.")
    merged = Histogram(LATENCY_BOUNDS)
    for (api_key, version), count in sorted(snap["request_counts"].items()):
        requests.add_metric([API_NAMES.get(api_key, str(api_key)), str(version)], count)
    for (api_key, _), values in sorted(snap["requests"].items()):
        if api_key == 8:
            merged.count += values.count
            merged.total += values.total
            merged.buckets = [a + b for a, b in zip(merged.buckets, values.buckets, strict=True)]
    yield requests
    commit.add_metric([], merged.cumulative(), merged.total)
    yield commit
    wakeup = HistogramMetricFamily(
        "rebalanced_fetch_wakeup_latency_seconds",
        "From an append to the answer of a Fetch parked on that partition.")
    _histogram(wakeup, [], snap["fetch_wakeup"])
    yield wakeup
    yield GaugeMetricFamily("rebalanced_open_connections", "Open client connections.",
                            value=snap["connections"])
    yield from loop_families(snap.get("loop"))


def loop_families(loop: dict[str, Any] | None) -> Iterator[Any]:
    """The event loop's lag and the collector's pauses (coordinator.ops.loop_lag)."""
    if loop is None:
        return
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    lag = HistogramMetricFamily(
        "rebalanced_event_loop_lag_seconds",
        "How much later than asked the event loop ran a timer set every 25 ms: the least "
        "every request waited then.")
    _histogram(lag, [], loop["lag"])
    yield lag
    yield GaugeMetricFamily("rebalanced_event_loop_lag_max_seconds",
                            "The largest event-loop lag since the broker started.",
                            value=loop["lag_max_s"])
    yield CounterMetricFamily(
        "rebalanced_event_loop_stalls",
        f"Event-loop lags of loop.lag.warn.ms ({loop['warn_ms']:g} ms) or more, each logged "
        "as one warning line.", value=loop["lags_over_warn"])
    pauses = HistogramMetricFamily("rebalanced_gc_pause_seconds",
                                   "Collections by generation (2: full), how long each held "
                                   "the interpreter.", labels=["generation"])
    for generation, histogram in sorted(loop["gc_pauses"].items()):
        _histogram(pauses, [str(generation)], histogram)
    yield pauses
    collected = CounterMetricFamily("rebalanced_gc_collected_objects",
                                    "Objects the collector found unreachable (garbage in "
                                    "reference cycles), by generation.", labels=["generation"])
    for generation, count in sorted(loop["gc_collected"].items()):
        collected.add_metric([str(generation)], count)
    yield collected


def _format(collect: Callable[[], Iterator[Any]]) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest

    class _Snapshot:
        def collect(self) -> Iterator[Any]:
            return collect()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot())  # type: ignore[arg-type]
    return bytes(generate_latest(registry))


def _latency_family(series: list[tuple[list[str], Histogram]]) -> Iterator[Any]:
    from prometheus_client.core import HistogramMetricFamily

    family = HistogramMetricFamily(
        "rebalanced_request_latency_seconds",
        "From a request's arrival to its answer (parked JoinGroup/Fetch included); "
        + _SAMPLING_HELP,
        labels=["api", "version"])
    for labels, histogram in series:
        _histogram(family, labels, histogram)
    yield family


def _request_latency(snap: dict[str, Any], cache: dict[str, Any] | None) -> bytes:
    """The request latency histograms: most of the samples of a scrape, and between two
    scrapes usually only the few busy APIs' change. Each (API, version) is formatted on its own
    and its lines kept until its count moves."""
    if cache is None:
        cache = {}
    header = cache.get("latency_header")
    if header is None:
        header = cache["latency_header"] = _format(lambda: _latency_family([]))
    by_key: dict[tuple[int, int], tuple[int, bytes]] = cache.setdefault("latency", {})
    parts = [header]
    for key, histogram in sorted(snap["requests"].items()):
        kept = by_key.get(key)
        if kept is None or kept[0] != histogram.count:
            series = [([API_NAMES.get(key[0], str(key[0])), str(key[1])], histogram)]
            text = _format(partial(_latency_family, series))
            kept = by_key[key] = (histogram.count, text[len(header):])
        parts.append(kept[1])
    return b"".join(parts)


def _rebalance_family(series: list[tuple[str, dict[str, Histogram]]]) -> Iterator[Any]:
    from prometheus_client.core import HistogramMetricFamily

    histogram = HistogramMetricFamily(
        "rebalanced_rebalance_duration_seconds",
        "Rebalance duration per group and phase. Classic groups: join (start to JoinGroup "
        "answers), sync (to the leader's assignment) and total (the time the group could not "
        "consume). Consumer groups: total (a new target assignment until every member "
        "reconciled to it).",
        labels=["group", "phase"])
    for group_id, phases in series:
        for phase, values in phases.items():
            _histogram(histogram, [group_id, phase], values)
    yield histogram


def _rebalance_parts(snap: dict[str, Any], cache: dict[str, Any],
                     parts: list[bytes]) -> Iterator[None]:
    """The per-group rebalance histograms (up to `metrics.max.groups` groups, most of the
    samples), a group at a time: each group's lines are kept until its counts move."""
    header = cache.get("rebalance_header")
    if header is None:
        header = cache["rebalance_header"] = _format(lambda: _rebalance_family([]))
    kept: dict[str, tuple[tuple[int, ...], bytes]] = cache.get("rebalance", {})
    fresh: dict[str, tuple[tuple[int, ...], bytes]] = {}
    parts.append(header)
    for group_id, phases in sorted(snap["rebalance_seconds"].items()):
        signature = (*(h.count for h in phases.values()), len(phases))
        entry = kept.get(group_id)
        formatted = entry is None or entry[0] != signature
        if formatted:
            text = _format(partial(_rebalance_family, [(group_id, phases)]))
            entry = (signature, text[len(header):])
        assert entry is not None
        fresh[group_id] = entry
        parts.append(entry[1])
        if formatted:
            yield
    cache["rebalance"] = fresh


def exposition_parts(snap: dict[str, Any], cache: dict[str, Any],
                     parts: list[bytes]) -> Iterator[None]:
    """The text format into `parts`, a bounded piece of work per step (the endpoint gives the
    event loop back between steps). `cache` (one per endpoint) keeps what did not change since
    the last scrape: the state families' text until a state or a count moves, each request
    latency histogram's and each group's rebalance histograms' lines until their counts move:
    formatting is most of a scrape's cost."""
    state_key = repr([snap[key] for key in _STATE_KEYS])
    if cache.get("state_key") == state_key:
        parts.append(cache["state"])
    else:
        parts.append(_format(lambda: state_families(snap)))
        cache.update(state_key=state_key, state=parts[-1])
    yield
    parts.append(_format(lambda: activity_families(snap)))
    yield
    parts.append(_request_latency(snap, cache))
    yield
    yield from _rebalance_parts(snap, cache, parts)


def exposition(snap: dict[str, Any], cache: dict[str, Any] | None = None) -> bytes:
    """The text format in one go (see `exposition_parts`)."""
    parts: list[bytes] = []
    for _ in exposition_parts(snap, {} if cache is None else cache, parts):
        pass
    return b"".join(parts)
