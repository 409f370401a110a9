"""Commands: what the wire layer asks of the coordinator core, one frozen dataclass per API.

`coordinator/api/<api>.py::to_command` builds them from kio requests; the core never sees kio
request entities. Version-dependent behaviour is decided from `api_version` here, in one place
per rule, so the core reads `cmd.require_known_member_id` rather than comparing versions.
FindCoordinator has no command: it needs no group state (see `api/find_coordinator.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.group.result import RequestRef

__all__ = [
    "Command",
    "DescribeGroups",
    "Heartbeat",
    "JoinGroup",
    "LeaveGroup",
    "LeaveMember",
    "ListGroups",
    "Protocol",
    "SyncGroup",
]

GroupId = str
MemberId = str

UNKNOWN_MEMBER_ID: MemberId = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Protocol:
    """One (name, metadata) entry of a JoinGroup, in the member's order of preference."""

    name: str
    metadata: bytes


# A client's free-text reason (JoinGroup, LeaveGroup; KIP-800) is cut to this many characters
# before it goes into a rebalance reason, the journal and the logs, as Kafka's
# `JoinGroupRequest.maybeTruncateReason` does: it is repeated on every rebalance it causes.
MAX_REASON_CHARS = 255


def client_reason(reason: str | None) -> str | None:
    """`reason` cut to `MAX_REASON_CHARS`."""
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        return reason[:MAX_REASON_CHARS]
    return reason


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroup:
    ref: RequestRef
    api_version: int
    group_id: GroupId
    member_id: MemberId
    group_instance_id: str | None = None
    session_timeout_ms: int
    # JoinGroup v0 has no rebalance timeout: `to_command` passes the session timeout (Kafka).
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    reason: str | None = None
    client_id: str = ""
    client_host: str = ""

    @property
    def require_known_member_id(self) -> bool:
        """KIP-394: v4+ dynamic members first get MEMBER_ID_REQUIRED and an assigned id."""
        return self.api_version >= 4 and self.group_instance_id is None

    @property
    def supports_skip_assignment(self) -> bool:
        """KIP-814: v9+ lets a rejoining static leader skip running the assignor."""
        return self.api_version >= 9


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroup:
    ref: RequestRef
    api_version: int
    group_id: GroupId
    generation_id: int
    member_id: MemberId
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[MemberId, bytes], ...] = ()

    @property
    def requires_protocol(self) -> bool:
        """v5+ must carry protocol type and name (KIP-559), else INCONSISTENT_GROUP_PROTOCOL."""
        return self.api_version >= 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    ref: RequestRef
    api_version: int
    group_id: GroupId
    generation_id: int
    member_id: MemberId
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveMember:
    member_id: MemberId
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroup:
    """v0-v2 carry one member id; v3+ a batch of identities (KIP-345)."""

    ref: RequestRef
    api_version: int
    group_id: GroupId
    members: tuple[LeaveMember, ...]
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroups:
    ref: RequestRef
    api_version: int
    group_ids: tuple[GroupId, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ListGroups:
    ref: RequestRef
    api_version: int
    # Empty means "no filter". Kafka compares states case-insensitively (v4+, KIP-518) and
    # group types case-insensitively (v5+, KIP-848).
    states_filter: frozenset[str] = field(default_factory=frozenset)
    types_filter: frozenset[str] = field(default_factory=frozenset)


Command = JoinGroup | SyncGroup | Heartbeat | LeaveGroup | DescribeGroups | ListGroups
