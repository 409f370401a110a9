"""Rebalances as the operators see them, built from the core's group events (which are rare).

Per group: the last `HISTORY_PER_GROUP` rebalances with their phases, outcome and culprit (the
page draws them) and the members removed; per group and phase, duration histograms; per group
type and cause, how many rebalances started and members were removed. A consumer group's
rebalance runs from a new target assignment until every member has reconciled to it, which only
the live group knows: `consumer_groups` is the runtime's read-only view of them
(`coordinator.ops.view.LiveConsumerGroups`).

Label cardinality is bounded: per-group series (rebalance durations, time since the last
rebalance) exist for the first `metrics.max.groups` groups seen; later groups are counted under
`group="__other__"`. Causes are the journal's small fixed vocabularies (`rebalance_cause`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import coordinator.group.events as ev
from coordinator.ops.metrics.counters import Histogram
from coordinator.ops.view import CLASSIC, CONSUMER, ClientOf, LiveConsumerGroups, ReconcileProgress

OTHER_GROUPS = "__other__"
HISTORY_PER_GROUP = 10  # rebalances kept per group for the page
HISTORY_GROUPS = 1000  # groups whose rebalance history is kept (oldest forgotten first)
# Seconds.
REBALANCE_BOUNDS = (0.05, 0.25, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

# Rebalance phases per group type. A consumer group has no join or sync barrier: its rebalance
# runs from a new target assignment until every member has reconciled to it.
PHASES = {CLASSIC: ("join", "sync", "total"), CONSUMER: ("total",)}

# A consumer group's new target assignment says why its group epoch moved, in one of a few fixed
# reasons (`coordinator/group/consumer/heartbeat.py`), named here with the journal's causes.
# A removed member's cause is the journal's `member_removed` cause, which is the rebalance cause
# of the same name but for a graceful leave.
_CONSUMER_CAUSES = {
    "member joined": "member_join",
    "subscription changed": "metadata_change",
    "subscribed topic metadata changed": "metadata_change",
    **{f"member removed ({removal.value})": (
        "member_leave" if removal is ev.RemovalCause.LEAVE else removal.value)
       for removal in ev.RemovalCause},
}


def rebalance_cause(event: ev.RebalanceStarted | ev.TargetAssignmentComputed) -> str:
    """A rebalance's `cause` label in the journal's vocabulary (docs/events.md): a classic
    group's is the `cause` of its `rebalance_started` line, so `/metrics`, the page and the
    journal name the same rebalance alike."""
    if isinstance(event, ev.RebalanceStarted):
        return event.cause.value
    return _CONSUMER_CAUSES.get(event.reason, "other")


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


@dataclass(frozen=True, slots=True, kw_only=True)
class RemovedMember:
    ts_ms: int
    member_id: str
    client_id: str
    client_host: str
    cause: str  # the journal's `member_removed` cause (`leave`, `session_expiry`, ...)
    reason: str | None


@dataclass(slots=True)
class GroupHistory:
    rebalances: deque[Rebalance] = field(default_factory=lambda: deque(maxlen=HISTORY_PER_GROUP))
    removed: deque[RemovedMember] = field(default_factory=lambda: deque(
        maxlen=HISTORY_PER_GROUP))
    last_stabilized_ms: int | None = None


class RebalanceHistory:
    def __init__(self, max_groups: int = 200) -> None:
        self.max_groups = max_groups
        self.completed_rebalances = 0  # classic groups (Kafka's group-completed-rebalance)
        self.consumer_rebalances = 0  # consumer groups' new target assignments (Kafka's
        #                               consumer-group-rebalance)
        # (group type, cause) -> count
        self.rebalances_by_cause: dict[tuple[str, str], int] = {}
        self.members_removed: dict[tuple[str, str], int] = {}
        # The live consumer groups (a read-only view the runtime sets): tells a consumer
        # group's events apart and whether its members have all reconciled.
        self.consumer_groups: LiveConsumerGroups = _NO_CONSUMER_GROUPS
        # group (or OTHER_GROUPS) -> phase -> histogram, capped at max_groups groups
        self.rebalance_seconds: dict[str, dict[str, Histogram]] = {}
        self.history: dict[str, GroupHistory] = {}
        self.group_version = 0  # bumped by every group event: the rebalance series changed


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

    def on_event(self, event: ev.Event | ev.GroupConverted) -> None:
        self.group_version += 1
        if isinstance(event, ev.GroupConverted):
            # The group goes on as the other type: a rebalance of the old one ends here.
            current = self._open_rebalance(event.group_id)
            if current is not None:
                current.outcome = "converted"
                current.total_ms = max(event.ts_ms - current.started_ms, 0)
            return
        if self.consumer_groups.is_consumer_group(event.group_id) or isinstance(
                event, ev.TargetAssignmentComputed | ev.MemberReconciled):
            self._on_consumer_event(event)
            return
        if isinstance(event, ev.RebalanceStarted):
            cause = rebalance_cause(event)
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
        cause = event.cause.value
        self._count(self.members_removed, group_type, cause)
        self._history(event.group_id).removed.append(RemovedMember(
            ts_ms=event.ts_ms, member_id=event.member_id, client_id=event.client_id,
            client_host=event.client_host, cause=cause, reason=event.reason))

    def _on_consumer_event(self, event: ev.Event) -> None:
        """A consumer group's rebalance: from a new target assignment (a group epoch bump) until
        every member has reconciled to it; members keep their other partitions meanwhile."""
        group_id = event.group_id
        if isinstance(event, ev.TargetAssignmentComputed):
            cause = rebalance_cause(event)
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
                member_id: str | None
                client_id: str | None
                client_host: str | None
                member_id, client_id, client_host = (
                    removed.member_id, removed.client_id, removed.client_host)
            else:
                culprit = (self.consumer_groups.client_of(group_id, event.member_id)
                           if event.member_id else None)
                member_id = event.member_id
                client_id = culprit.client_id if culprit is not None else None
                client_host = culprit.client_host if culprit is not None else None
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
        group = self.consumer_groups.progress(group_id)
        if group is None:
            return
        if group.state == "Empty":
            current.outcome = "emptied"
        elif group.state == "Stable" and group.assignment_epoch > current.generation_id:
            current.outcome = "stabilized"
        else:
            return
        current.total_ms = max(now_ms - current.started_ms, 0)
        current.members = group.member_count
        self._history(group_id).last_stabilized_ms = now_ms
        if current.outcome == "stabilized":
            self._group_series(group_id, CONSUMER)["total"].observe(current.total_ms / 1000)

    def _open_rebalance(self, group_id: str) -> Rebalance | None:
        history = self.history.get(group_id)
        if history is None or not history.rebalances:
            return None
        last = history.rebalances[-1]
        return last if last.outcome == "in progress" else None

    def on_events(self, events: Iterable[ev.Event | ev.GroupConverted]) -> None:
        for event in events:
            self.on_event(event)

    def since_last(self, now_ms: int) -> dict[str, float]:
        """Seconds since each group with its own series last completed a rebalance."""
        out: dict[str, float] = {}
        for group_id, history in self.history.items():
            # Only groups with their own series: the same cap bounds this gauge.
            if history.last_stabilized_ms is not None and group_id in self.rebalance_seconds:
                out[group_id] = max(now_ms - history.last_stabilized_ms, 0) / 1000
        return out


class _NoConsumerGroups:
    """Before the runtime sets its view (and in tests of classic groups): none."""

    def is_consumer_group(self, group_id: str) -> bool:
        return False

    def progress(self, group_id: str) -> ReconcileProgress | None:
        return None

    def client_of(self, group_id: str, member_id: str) -> ClientOf | None:
        return None


_NO_CONSUMER_GROUPS = _NoConsumerGroups()
