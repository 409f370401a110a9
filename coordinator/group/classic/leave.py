"""LeaveGroup for a classic group (SPEC §7; Kafka `classicGroupLeave`).

Versions: v0-v2 name one member id; v3+ carry a batch of (member id, group instance id) with
an error per member (KIP-345); v5 adds a reason per member. A member id of "" with an instance
id removes that static member administratively (`kafka-consumer-groups --delete` style).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group import events as ev
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.state import GroupState
from coordinator.group.outcomes import LeaveGroupOutcome, LeaveMemberOutcome
from coordinator.group.result import Reply

__all__ = ["leave_group"]


def leave_group(env: rb.Env, group: ClassicGroup, cmd: c.LeaveGroup) -> None:
    if group.is_state(GroupState.DEAD):
        outcome = LeaveGroupOutcome(error=ErrorCode.coordinator_not_available)
    else:
        outcome = LeaveGroupOutcome(
            members=tuple(
                LeaveMemberOutcome(
                    member_id=leaving.member_id,
                    group_instance_id=leaving.group_instance_id,
                    error=leave_member(env, group, leaving),
                )
                for leaving in cmd.members
            )
        )
    env.result.replies.append(Reply(cmd.ref, outcome))


def leave_member(env: rb.Env, group: ClassicGroup, leaving: c.LeaveMember) -> ErrorCode:
    if leaving.member_id == c.UNKNOWN_MEMBER_ID:
        current = (
            group.static_member_id(leaving.group_instance_id)
            if leaving.group_instance_id is not None
            else None
        )
        if current is None:
            return ErrorCode.unknown_member_id
        remove_current_member(env, group, current, leaving.reason)
        return ErrorCode.none
    if leaving.member_id in group.pending_members:
        rb.remove_pending_member_and_update_group(env, group, leaving.member_id)
        return ErrorCode.none
    error = rb.validate_current_member(group, leaving.member_id, leaving.group_instance_id)
    if error is not None:
        return error
    remove_current_member(env, group, leaving.member_id, leaving.reason)
    return ErrorCode.none


def remove_current_member(
    env: rb.Env, group: ClassicGroup, member_id: str, reason: str | None
) -> None:
    member = group.members[member_id]
    rb.remove_member_and_update_group(
        env,
        group,
        member,
        ev.RemovalCause.LEAVE,
        f"removing member {member_id} on LeaveGroup; client reason: {reason or 'not provided'}",
    )
