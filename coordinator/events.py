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
    "GroupDead",
    "GroupEmpty",
    "GroupStabilized",
    "JoinCompleted",
    "MemberAdded",
    "MemberRemoved",
    "RebalanceStarted",
    "RemovalCause",
    "StaticMemberReplaced",
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
    reason: str
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
)
