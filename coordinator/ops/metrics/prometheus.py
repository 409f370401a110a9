"""`/metrics` in the Prometheus text format, built from copies taken at scrape time.

`snapshot()` copies the counters, the rebalance history and the group counts on the event loop
(cheap, bounded); `exposition_parts()` turns a snapshot into prometheus-client metric families
and their text, a bounded step at a time, reusing the text of what did not change since the
last scrape (formatting is most of a scrape's cost). Nothing here runs on a request's path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

from coordinator.ops.metrics.counters import (
    LATENCY_BOUNDS,
    SAMPLE_EVERY,
    Histogram,
    RequestCounters,
)
from coordinator.ops.metrics.history import CLASSIC, CONSUMER, RebalanceHistory

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup",
    14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups", 18: "ApiVersions",
    17: "SaslHandshake", 19: "CreateTopics", 20: "DeleteTopics", 22: "InitProducerId",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 28: "TxnOffsetCommit",
    29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls", 36: "SaslAuthenticate",
    37: "CreatePartitions", 42: "DeleteGroups", 47: "OffsetDelete",
    50: "DescribeUserScramCredentials", 51: "AlterUserScramCredentials",
    65: "DescribeTransactions", 66: "ListTransactions",
    68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe",
}

_SAMPLING_HELP = "sampled: " + ", ".join(
    f"one request in {every} of {API_NAMES[api_key]}" for api_key, every in SAMPLE_EVERY.items()
) + "; every request of the other APIs."


class GroupCounts:
    """Groups by type and state, counted a slice at a time (a broker may hold 100,000)."""

    __slots__ = ("by_state", "classic", "consumer", "consumer_by_state")

    def __init__(self) -> None:
        self.by_state: dict[str, int] = {}
        self.consumer_by_state: dict[str, int] = {}
        self.classic = 0
        self.consumer = 0

    def add_classic(self, by_state: Mapping[str, int]) -> None:
        """Classic groups by state (Kafka's names: `Stable`, `PreparingRebalance`, ...)."""
        counts = self.by_state
        for name, count in by_state.items():
            counts[name] = counts.get(name, 0) + count
            self.classic += count

    def add_consumer(self, by_state: Mapping[str, int]) -> None:
        """Consumer groups by state; Kafka's consumer-group-count labels them in lower case."""
        counts = self.consumer_by_state
        for name, count in by_state.items():
            lowered = name.lower()
            counts[lowered] = counts.get(lowered, 0) + count
            self.consumer += count


def snapshot(counters: RequestCounters, history: RebalanceHistory, counts: GroupCounts,
             num_offsets: int, connections: int, now_ms: int,
             loop: dict[str, Any] | None) -> dict[str, Any]:
    """Copies of everything the families export, taken on the event loop."""
    return {
        "requests": {k: h.copy() for k, h in counters.requests.items()},
        "request_counts": counters.used_request_counts(),
        "fetch_wakeup": counters.fetch_wakeup.copy(),
        "offset_commits": counters.offset_commits,
        "offset_expirations": counters.offset_expirations,
        "offset_deletions": counters.offset_deletions,
        "authorization_denials": dict(counters.authorization_denials),
        "transactions_open": counters.open_transactions(),
        "transactions_completed": dict(counters.transactions_completed),
        "transactions_aborted": dict(counters.transactions_aborted),
        "completed_rebalances": history.completed_rebalances,
        "consumer_rebalances": history.consumer_rebalances,
        "consumer_groups_by_state": counts.consumer_by_state,
        "rebalances_by_cause": dict(history.rebalances_by_cause),
        "members_removed": dict(history.members_removed),
        "group_version": history.group_version,
        "rebalance_seconds": {g: {p: h.copy() for p, h in phases.items()}
                              for g, phases in history.rebalance_seconds.items()},
        "since_last": history.since_last(now_ms),
        "groups_by_state": counts.by_state,
        "groups_by_protocol": {CLASSIC: counts.classic, CONSUMER: counts.consumer},
        "num_offsets": num_offsets,
        "connections": connections,
        "loop": loop,
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
    denials = CounterMetricFamily(
        "rebalanced_authorization_denied",
        "Requests (or parts of them) refused by the authorizer, by resource type and operation.",
        labels=["resource_type", "operation"])
    for (resource_type, operation), count in sorted(snap.get("authorization_denials",
                                                             {}).items()):
        denials.add_metric([resource_type, operation], count)
    yield denials
    yield from transaction_families(snap)
    yield from loop_families(snap.get("loop"))


_TXN_OUTCOMES = ("committed", "aborted")


def transaction_families(snap: dict[str, Any]) -> Iterator[Any]:
    """The transaction coordinator's: open transactions, completions by outcome, aborts by
    reason (the journal's `transaction_aborted` reasons)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    yield GaugeMetricFamily("rebalanced_transactions_open",
                            "Transactions begun and not yet completed (Ongoing, PrepareCommit "
                            "or PrepareAbort).", value=snap.get("transactions_open", 0))
    completed = CounterMetricFamily("rebalanced_transactions_completed",
                                    "Transactions completed (their markers written), by "
                                    "outcome.", labels=["outcome"])
    done: dict[str, int] = snap.get("transactions_completed", {})
    for outcome in _TXN_OUTCOMES:
        completed.add_metric([outcome], done.get(outcome, 0))
    yield completed
    aborted = CounterMetricFamily("rebalanced_transactions_aborted",
                                  "Transactions aborted, by reason: client, timeout, fenced, "
                                  "reinitialised, coordinator_restart.", labels=["reason"])
    for reason, count in sorted(snap.get("transactions_aborted", {}).items()):
        aborted.add_metric([reason], count)
    yield aborted


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
