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

__all__ = ["heartbeat", "steady_commit", "steady_heartbeat"]

_ANSWERED_NOW = (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)


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
            member.rejoin_told_on = cmd.ref.connection_id
            return ErrorCode.rebalance_in_progress
        case GroupState.DEAD:
            raise AssertionError("validated above")


def steady_heartbeat(group: ClassicGroup, member_id: str, generation_id: int,
                     group_instance_id: str | None, connection_id: int, now_ms: int,
                     tracks_connections: bool) -> bool:
    """The steady-state heartbeat, done without building a command or a Result: True when it
    was one (its session moved; the answer is NONE), False, having changed nothing, when the
    full path (`heartbeat`, then `ClassicGroups`' connection tracking) must run.

    Nearly every heartbeat of a stable group is one: the member exists (under its instance id
    too), at the group's generation, in a group that is Stable or CompletingRebalance, on the
    connection it last used with no disconnect grace running (when `ClassicGroups` tracks the
    connections of dynamic members: `tracks_connections`), and its session deadline only moves
    later than the wheel's armed wake-up. The full path then moves the deadline and
    answers NONE, with no timer change, record or event: exactly what is done here.
    `tests/unit/test_heartbeat.py` runs both on the same states and compares."""
    state = group.state
    if state is not _ANSWERED_NOW[0] and state is not _ANSWERED_NOW[1]:
        return False
    return _steady_session(group, member_id, generation_id, group_instance_id, connection_id,
                           now_ms, tracks_connections)


def steady_commit(group: ClassicGroup, member_id: str, generation_id: int,
                  group_instance_id: str | None, connection_id: int, now_ms: int,
                  tracks_connections: bool) -> bool:
    """The group side of an OffsetCommit by a current member in the steady state, done in
    place: True when it was one (its session moved, as a heartbeat moves it; the offsets may
    be stored), False, having changed nothing, when `GroupCoordinatorService.validate_offset_commit`
    must take it.

    Kafka restarts a member's session on a commit in Stable and PreparingRebalance; the
    member, instance id, generation, connection and wheel conditions are the steady
    heartbeat's. `tests/unit/test_offset_decisions.py` runs both on the same states and
    compares."""
    state = group.state
    if state is not _SESSION_MOVED_BY_COMMIT[0] and state is not _SESSION_MOVED_BY_COMMIT[1]:
        return False
    return _steady_session(group, member_id, generation_id, group_instance_id, connection_id,
                           now_ms, tracks_connections)


_SESSION_MOVED_BY_COMMIT = (GroupState.STABLE, GroupState.PREPARING_REBALANCE)


def _steady_session(group: ClassicGroup, member_id: str, generation_id: int,
                    group_instance_id: str | None, connection_id: int, now_ms: int,
                    tracks_connections: bool) -> bool:
    member = group.members.get(member_id)
    if member is None or generation_id != group.generation_id:
        return False
    if (tracks_connections and not member.is_static
            and (member.connection_id != connection_id
                 or member.disconnect_deadline_ms is not None)):
        return False  # `ClassicGroups` notes the member's new connection or ends its grace
    if group_instance_id is not None and group.static_members.get(group_instance_id) != member_id:
        return False
    deadline_ms = now_ms + member.session_timeout_ms
    armed_ms = member.heartbeat_armed_ms
    if armed_ms is None or armed_ms > deadline_ms:
        return False  # the wheel must be re-armed: the full path does it
    member.session_deadline_ms = deadline_ms
    return True
