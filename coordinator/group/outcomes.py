"""Outcomes: what the core answers, one frozen dataclass per API, still free of wire versions.

`coordinator/api/<api>.py::to_response` turns an outcome into the kio response of the
request's version (nullability, renamed fields and v0-v2 LeaveGroup folding happen there).
`error_outcome` answers any command with one error, for failed appends and for groups this
node does not serve now (`refused_outcome`: COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group import offset_commands as oc
from coordinator.group.consumer import commands as cc
from coordinator.group.result import Refusal

__all__ = [
    "DescribeGroupsOutcome",
    "DescribedGroup",
    "DescribedMember",
    "HeartbeatOutcome",
    "JoinGroupOutcome",
    "JoinedMember",
    "LeaveGroupOutcome",
    "LeaveMemberOutcome",
    "ListGroupsOutcome",
    "ListedGroup",
    "Outcome",
    "SyncGroupOutcome",
    "error_outcome",
    "refused_outcome",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupOutcome:
    error: ErrorCode = ErrorCode.none
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupOutcome:
    error: ErrorCode = ErrorCode.none
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatOutcome:
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveMemberOutcome:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupOutcome:
    error: ErrorCode = ErrorCode.none
    members: tuple[LeaveMemberOutcome, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()
    # Kafka's bit field of ACL operations; INT32 MIN means "not requested".
    authorized_operations: int = -(2**31)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsOutcome:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True, kw_only=True)
class ListGroupsOutcome:
    error: ErrorCode = ErrorCode.none
    groups: tuple[ListedGroup, ...] = ()


Outcome = (
    JoinGroupOutcome
    | SyncGroupOutcome
    | HeartbeatOutcome
    | LeaveGroupOutcome
    | DescribeGroupsOutcome
    | ListGroupsOutcome
)


def error_outcome(cmd: c.Command | cc.ConsumerGroupHeartbeat | cc.ConsumerGroupDescribe
                  | oc.OffsetCommit | oc.OffsetDelete | oc.DeleteGroups,
                  error: ErrorCode, answer: Any = None) -> Outcome | Any:
    """The whole-request error answer for `cmd`, shaped like Kafka's for that API; `answer`
    is the answer the request would have had (DeleteGroups keeps its other groups' errors).

    Kafka softens COORDINATOR_LOAD_IN_PROGRESS for two APIs: a Heartbeat is answered NONE (the
    member keeps going until the group is loaded) and a SyncGroup REBALANCE_IN_PROGRESS (the
    rebalance state was lost with the load, so the member must rejoin; older clients do not
    expect the load error there).
    """
    loading = error is ErrorCode.coordinator_load_in_progress
    match cmd:
        case c.JoinGroup():
            return JoinGroupOutcome(error=error, member_id=cmd.member_id)
        case c.SyncGroup():
            return SyncGroupOutcome(error=ErrorCode.rebalance_in_progress if loading else error)
        case c.Heartbeat():
            return HeartbeatOutcome(error=ErrorCode.none if loading else error)
        case c.LeaveGroup():
            return LeaveGroupOutcome(error=error)
        case c.DescribeGroups():
            return DescribeGroupsOutcome(
                groups=tuple(DescribedGroup(group_id=g, error=error) for g in cmd.group_ids)
            )
        case c.ListGroups():
            return ListGroupsOutcome(error=error)
        case cc.ConsumerGroupHeartbeat():
            return cc.ConsumerGroupHeartbeatOutcome(error=error, member_id=cmd.member_id or None,
                                                    member_epoch=cmd.member_epoch)
        case cc.ConsumerGroupDescribe():
            return cc.ConsumerGroupDescribeOutcome(groups=tuple(
                cc.DescribedConsumerGroup(group_id=g, error=error) for g in cmd.group_ids))
        case oc.OffsetCommit():
            return oc.OffsetCommitOutcome.failed(cmd, error)
        case oc.OffsetDelete():
            return oc.OffsetDeleteOutcome(error=error)
        case oc.DeleteGroups():
            if isinstance(answer, oc.DeleteGroupsOutcome):
                return answer.append_failed(error)
            return oc.DeleteGroupsOutcome(results=tuple((g, error) for g in cmd.group_ids))


def refused_outcome(cmd: c.Command | cc.ConsumerGroupHeartbeat | cc.ConsumerGroupDescribe,
                    refusal: Refusal, unserved: ErrorCode) -> Outcome | Any | None:
    """The answer to a request that touches a group whose log partition is not served now,
    None when it touches none. `refusal(group_id)` is the runtime's answer per group;
    `unserved` its answer for the partitions not served as a whole. ListGroups reads every
    partition: it is refused while any is not served (Kafka fails the listing on a loading
    shard). A request naming several groups is refused as a whole when one of them is."""
    if isinstance(cmd, c.ListGroups):
        return error_outcome(cmd, unserved)
    group_ids = getattr(cmd, "group_ids", None)
    if group_ids is not None:
        refused = any(refusal(group_id) is not None for group_id in group_ids)
        return error_outcome(cmd, unserved) if refused else None
    group_id = getattr(cmd, "group_id", None)
    error = None if group_id is None else refusal(group_id)
    return None if error is None else error_outcome(cmd, error)
