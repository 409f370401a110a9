"""Heartbeat for a classic group (SPEC §6; Kafka `classicGroupHeartbeat`).

Versions: v3 adds group.instance.id (KIP-345); v4 is the flexible encoding only.
A heartbeat only moves the member's session deadline; the wheel is touched when it fires early.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.state import GroupState
from coordinator.group.outcomes import HeartbeatOutcome
from coordinator.group.result import Reply

__all__ = ["heartbeat"]


def heartbeat(env: rb.Env, group: ClassicGroup, cmd: c.Heartbeat) -> None:
    env.result.replies.append(Reply(cmd.ref, HeartbeatOutcome(error=_heartbeat(env, group, cmd))))


def _heartbeat(env: rb.Env, group: ClassicGroup, cmd: c.Heartbeat) -> ErrorCode:
    if group.is_state(GroupState.DEAD):
        return ErrorCode.coordinator_not_available
    error = rb.validate_current_member(group, cmd.member_id, cmd.group_instance_id)
    if error is not None:
        return error
    if cmd.generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    member = group.members[cmd.member_id]
    match group.state:
        case GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        case GroupState.COMPLETING_REBALANCE | GroupState.STABLE:
            rb.schedule_heartbeat(env, group, member)
            return ErrorCode.none
        case GroupState.PREPARING_REBALANCE:
            rb.schedule_heartbeat(env, group, member)
            return ErrorCode.rebalance_in_progress
        case GroupState.DEAD:
            raise AssertionError("validated above")
