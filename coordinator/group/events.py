"""Operator events (SPEC §12): what happened to a group, why, and who caused it.

The core returns them in `Result.events`; the runtime logs each `as_dict()` as one JSON line.
The forensics job reads these lines and joins them with exported records on
`(group_id, generation_id)`, so the `event` names and keys are a schema: change them
deliberately. Keys follow STYLE §13 (`group_id`, `generation_id`, `member_id`, `client_id`,
`client_host`, `reason`, `duration_ms`). `ts_ms` is the core's `now_ms`.

Durations: `JoinCompleted.duration_ms` runs from the rebalance start to the end of the join
phase; `GroupStabilized.duration_ms` from the rebalance start to the leader's assignment, i.e.
the time the group could not consume.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "AssignmentReceived",
    "Event",
    "GroupConverted",
    "GroupDead",
    "GroupEmpty",
    "GroupStabilized",
    "JoinCompleted",
    "MemberAdded",
    "MemberReconciled",
    "MemberRemoved",
    "RebalanceCause",
    "RebalanceStarted",
    "RemovalCause",
    "StaticMemberReplaced",
    "TargetAssignmentComputed",
]


class RemovalCause(enum.Enum):
    LEAVE = "leave"
    SESSION_EXPIRY = "session_expiry"
    REBALANCE_TIMEOUT = "rebalance_timeout"
    FENCED = "fenced"
    MAX_SIZE = "max_size"
    # A dynamic member's connection closed without LeaveGroup and nothing came back for it
    # within group.member.disconnect.grace.ms.
    DISCONNECT = "disconnect"


class RebalanceCause(enum.Enum):
    """Why a classic group's rebalance started, set where the rebalance is started. The values
    are the journal's `cause` vocabulary (docs/events.md), which the metrics use too."""

    MEMBER_JOIN = "member_join"
    MEMBER_REJOIN = "member_rejoin"  # a known member (or the leader, on its own) rejoined
    METADATA_CHANGE = "metadata_change"  # new subscription or assignor, a static member's new id
    MEMBER_LEAVE = "member_leave"
    SESSION_EXPIRY = "session_expiry"
    REBALANCE_TIMEOUT = "rebalance_timeout"  # members did not sync in time
    DISCONNECT = "disconnect"
    WRITE_FAILURE = "write_failure"  # the group metadata could not be written
    OTHER = "other"


@dataclass(frozen=True, slots=True, kw_only=True)
class _EventBase:
    event: ClassVar[str] = ""
    ts_ms: int
    group_id: str

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"event": self.event}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.value if isinstance(value, enum.Enum) else value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RebalanceStarted(_EventBase):
    event: ClassVar[str] = "rebalance_started"
    generation_id: int  # the old generation
    partition: int
    previous_state: str
    reason: str  # for people; `cause` for programs
    cause: RebalanceCause
    member_id: str | None = None  # the culprit, when one member caused it
    client_id: str | None = None
    client_host: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinCompleted(_EventBase):
    event: ClassVar[str] = "join_completed"
    generation_id: int  # the new generation
    protocol_name: str | None
    leader_id: str | None
    member_count: int
    duration_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignmentReceived(_EventBase):
    event: ClassVar[str] = "assignment_received"
    generation_id: int
    member_id: str  # the leader
    member_count: int
    missing_assignments: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupStabilized(_EventBase):
    event: ClassVar[str] = "group_stabilized"
    generation_id: int
    member_count: int
    duration_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberAdded(_EventBase):
    event: ClassVar[str] = "member_added"
    generation_id: int
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberRemoved(_EventBase):
    event: ClassVar[str] = "member_removed"
    generation_id: int
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    cause: RemovalCause
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StaticMemberReplaced(_EventBase):
    event: ClassVar[str] = "static_member_replaced"
    generation_id: int
    group_instance_id: str
    old_member_id: str
    member_id: str
    client_id: str
    client_host: str
    rebalance: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupEmpty(_EventBase):
    event: ClassVar[str] = "group_empty"
    generation_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDead(_EventBase):
    event: ClassVar[str] = "group_dead"
    generation_id: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConverted(_EventBase):
    """A group changed type with its members (`group.consumer.migration.policy`): `upgrade`
    (classic -> consumer, a consumer-protocol member joined) or `downgrade` (consumer ->
    classic, its last consumer-protocol member left). `generation_id` is the generation or
    group epoch carried over; `member_count` how many members the new group starts with."""

    event: ClassVar[str] = "group_converted"
    generation_id: int
    direction: str  # "upgrade" | "downgrade"
    from_type: str
    to_type: str
    member_count: int
    reason: str
    member_id: str | None = None  # the member whose join or departure caused it


# -- consumer groups (KIP-848) -----------------------------------------------------------------
#
# Consumer groups reuse `member_added`, `member_removed` (causes `leave`, `session_expiry`,
# `rebalance_timeout`, `fenced`), `static_member_replaced` (always without a rebalance),
# `group_empty` and `group_dead`, with `generation_id` holding the group epoch. Two events are
# their own: a new target assignment, and each step of a member towards it.


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetAssignmentComputed(_EventBase):
    event: ClassVar[str] = "target_assignment_computed"
    group_type: str
    generation_id: int  # the group epoch the target assignment is for
    assignor: str
    member_count: int
    partition_count: int
    moved_partitions: int  # partitions whose target owner changed
    reason: str
    member_id: str | None = None  # the member whose heartbeat caused it


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberReconciled(_EventBase):
    event: ClassVar[str] = "member_reconciled"
    group_type: str
    generation_id: int  # the member epoch after this step
    previous_generation_id: int
    member_id: str
    member_state: str  # stable | unrevoked_partitions | unreleased_partitions
    assigned_partitions: int  # owned after this step (usable now)
    partitions_assigned: int  # newly given in this step
    partitions_revoked: int  # given back since the previous step
    partitions_pending_revocation: int  # asked to give back


Event = (
    RebalanceStarted
    | JoinCompleted
    | AssignmentReceived
    | GroupStabilized
    | MemberAdded
    | MemberRemoved
    | StaticMemberReplaced
    | GroupEmpty
    | GroupDead
    | TargetAssignmentComputed
    | MemberReconciled
)


# -- the journal line (docs/events.md) -------------------------------------------------------

JOURNAL_SCHEMA_VERSION = 1

# Event attribute -> journal field, where the contract's name differs from the attribute's.
_JOURNAL_FIELD = {
    "generation_id": "generation",
    "member_count": "num_members",
    "previous_state": "from_state",
}

# States an event type implies (the core records only the state it came from).
_IMPLIED_STATES: dict[str, dict[str, str]] = {
    "rebalance_started": {"to_state": "PreparingRebalance"},
    "join_completed": {"from_state": "PreparingRebalance", "to_state": "CompletingRebalance"},
    "group_stabilized": {"to_state": "Stable"},
    "group_empty": {"to_state": "Empty"},
    "group_dead": {"to_state": "Dead"},
}

def rebalance_cause(event: RebalanceStarted) -> str:
    """The fixed category of a `rebalance_started` event (docs/events.md): its typed cause."""
    return event.cause.value


def journal_record(payload: dict[str, object], wall_ms: int) -> dict[str, object]:
    """An event's `as_dict()` (or a runtime event of the same shape) as a journal line object:
    contract field names, the schema version, the wall-clock `ts` and the implied states."""
    event_type = str(payload.get("event", "unknown"))
    out: dict[str, object] = {"v": JOURNAL_SCHEMA_VERSION, "event_type": event_type,
                              "ts": wall_ms}
    for key, value in payload.items():
        if key in ("event", "ts_ms"):
            continue  # `ts_ms` is the core's clock; the journal's time is the wall clock
        out[_JOURNAL_FIELD.get(key, key)] = value
    for key, value in _IMPLIED_STATES.get(event_type, {}).items():
        out.setdefault(key, value)
    if event_type == "rebalance_started" and "cause" in out:
        out["cause"] = out.pop("cause")  # after the implied states, where readers have seen it
    return out
