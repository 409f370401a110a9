"""SyncGroup for a classic group (SPEC §5; Kafka `classicGroupSync`).

Versions:

* v3: group.instance.id (KIP-345), checked against the member id.
* v5: protocol type and name are mandatory and must match the group's (KIP-559).

The leader's assignment is persisted as a group snapshot; the group stays CompletingRebalance
(followers' SyncGroups park, the leader's too) until the record is durable. Only then does
`writes.finish` give the members their assignment, answer every parked SyncGroup and make the
group Stable; a failed write answers them with the error instead and rebalances
(`classic/writes.py`, Kafka's append callback of `classicGroupSyncToClassicGroup`).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group import events as ev
from coordinator.group import record_helpers as rh
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.member import Parked
from coordinator.group.classic.state import GroupState
from coordinator.group.classic.writes import AssignmentWrite
from coordinator.group.outcomes import SyncGroupOutcome
from coordinator.group.result import Reply

__all__ = ["sync_group", "validate_sync_group"]


def reply(env: rb.Env, cmd: c.SyncGroup, outcome: SyncGroupOutcome) -> None:
    env.result.replies.append(Reply(cmd.ref, outcome))


def validate_sync_group(group: ClassicGroup, cmd: c.SyncGroup) -> ErrorCode | None:
    if group.is_state(GroupState.DEAD):
        return ErrorCode.coordinator_not_available
    error = rb.validate_current_member(group, cmd.member_id, cmd.group_instance_id)
    if error is not None:
        return error
    if cmd.generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    if cmd.protocol_type is not None and cmd.protocol_type != group.protocol_type:
        return ErrorCode.inconsistent_group_protocol
    if cmd.protocol_name is not None and cmd.protocol_name != group.protocol_name:
        return ErrorCode.inconsistent_group_protocol
    return None


def sync_group(env: rb.Env, group: ClassicGroup, cmd: c.SyncGroup) -> None:
    error = validate_sync_group(group, cmd)
    if error is not None:
        reply(env, cmd, SyncGroupOutcome(error=error))
        return
    member = group.members[cmd.member_id]
    match group.state:
        case GroupState.EMPTY:
            reply(env, cmd, SyncGroupOutcome(error=ErrorCode.unknown_member_id))
        case GroupState.PREPARING_REBALANCE:
            reply(env, cmd, SyncGroupOutcome(error=ErrorCode.rebalance_in_progress))
        case GroupState.COMPLETING_REBALANCE:
            # A SyncGroup parked earlier by the same member (a client retry) is told to rejoin
            # rather than left unanswered.
            retry = SyncGroupOutcome(error=ErrorCode.rebalance_in_progress)
            rb.complete_sync_of(env, group, member, retry)
            group.park_sync(member, Parked(cmd.ref))
            rb.remove_pending_sync_member(env, group, member.member_id)
            if group.is_leader(member.member_id):
                complete_sync(env, group, cmd)
        case GroupState.STABLE:
            rb.remove_pending_sync_member(env, group, member.member_id)
            reply(
                env,
                cmd,
                SyncGroupOutcome(
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                ),
            )
            rb.schedule_heartbeat(env, group, member)
        case GroupState.DEAD:
            raise AssertionError("validated above")


def complete_sync(env: rb.Env, group: ClassicGroup, cmd: c.SyncGroup) -> None:
    """The leader's assignment: fill the gaps and persist it; once durable, answer everyone
    and go Stable (`writes.finish`)."""
    assignment = dict(cmd.assignments)
    missing = [m for m in group.members if m not in assignment]
    for member_id in missing:
        assignment[member_id] = b""
    env.result.events.append(
        ev.AssignmentReceived(
            ts_ms=env.now_ms,
            group_id=group.group_id,
            generation_id=group.generation_id,
            member_id=cmd.member_id,
            member_count=len(group.members),
            missing_assignments=len(missing),
        )
    )
    env.result.records.append(
        rh.group_metadata_record(group.group_id, group.snapshot(assignment))
    )
    env.result.writes.append(
        AssignmentWrite(
            group_id=group.group_id,
            generation_id=group.generation_id,
            leader_id=cmd.member_id,
            assignment=assignment,
        )
    )
