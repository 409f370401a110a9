"""Group changes that wait for their record to be durable, and how each is finished or undone.

State follows the log, as in Kafka's group coordinator: a command whose effect must not be seen
before it is written returns the record in `Result.records` and one of the values below in
`Result.writes`, leaving the group as it was (or, where the change cannot wait, as it will be
after the write, with what is needed to take it back). When the append completes `ClassicGroups`
calls `finish` (durable) or `undo` (the append or its fsync failed) with every value of the
Result, in order.

* `AssignmentWrite` - the leader's SyncGroup (Kafka `classicGroupSyncToClassicGroup`): the group
  stays CompletingRebalance, followers' SyncGroups park, and only once the assignment is
  durable is it given to the members, answered to every parked SyncGroup and the group made
  Stable. A failed write answers the parked SyncGroups with the error, clears the assignment
  and starts a new rebalance.
* `StaticMemberWrite` - a static member rejoining a Stable group under a new member id
  (KIP-345): on failure the old member id is restored (Kafka
  `updateStaticMemberThenRebalanceOrCompleteJoin`) and the JoinGroup gets the error.
* `GroupDeletionWrite` - DeleteGroups or offset expiry removed an Empty group: on failure the
  group comes back as it was, unless a new group of the same id was created meanwhile.

Checks on `finish`/`undo` that the group is still where the write left it (same state and
generation): a rebalance that started while the record was being written has already moved on,
and the write's outcome no longer decides anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.group import events as ev
from coordinator.group import record_helpers as rh
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.member import ClassicGroupMember
from coordinator.group.classic.state import GroupState
from coordinator.group.commands import Protocol
from coordinator.group.result import APPEND_FAILED

__all__ = [
    "AssignmentWrite",
    "GroupDeletionWrite",
    "StaticMemberWrite",
    "delete_empty_group",
    "finish",
    "undo",
]


@dataclass(frozen=True, slots=True)
class AssignmentWrite:
    group_id: str
    generation_id: int
    leader_id: str
    assignment: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class StaticMemberWrite:
    group_id: str
    group_instance_id: str
    old_member_id: str
    new_member_id: str
    generation_id: int
    old_protocols: tuple[Protocol, ...]
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int


@dataclass(frozen=True, slots=True)
class GroupDeletionWrite:
    group: ClassicGroup  # the removed group object, Dead now
    state_timestamp_ms: int
    pending_members: Mapping[str, int]


Write = AssignmentWrite | StaticMemberWrite | GroupDeletionWrite


def delete_empty_group(env: rb.Env, group: ClassicGroup, reason: str) -> None:
    """An Empty group goes Dead: its tombstone, a `GroupDeletionWrite` to bring it back if the
    tombstone is not made durable, its pending members and join timer dropped. The caller
    forgets it."""
    group_id = group.group_id
    env.result.writes.append(
        GroupDeletionWrite(
            group=group,
            state_timestamp_ms=group.state_timestamp_ms,
            pending_members=dict(group.pending_members),
        )
    )
    for member_id in list(group.pending_members):
        env.result.cancel(rb.heartbeat_key(group_id, member_id))
    group.clear_pending_members()
    if group.join_deadline_ms is not None:
        env.result.cancel(rb.join_key(group_id))
    group.transition_to(GroupState.DEAD, env.now_ms)
    env.result.records.append(
        rh.group_metadata_tombstone(group_id)
    )
    env.result.events.append(
        ev.GroupDead(
            ts_ms=env.now_ms,
            group_id=group_id,
            generation_id=group.generation_id,
            reason=reason,
        )
    )


def finish(env: rb.Env, groups: dict[str, ClassicGroup], write: Write) -> None:
    """The write's records are durable: make the change it was waiting for."""
    if isinstance(write, AssignmentWrite):
        group = groups.get(write.group_id)
        if group is not None and _still_syncing(group, write):
            _assignment_durable(env, group, write)


def undo(env: rb.Env, groups: dict[str, ClassicGroup], write: Write,
         error: ErrorCode = APPEND_FAILED) -> None:
    """The write failed: answer with `error` and take back what was already changed."""
    match write:
        case AssignmentWrite():
            group = groups.get(write.group_id)
            if group is not None and _still_syncing(group, write):
                rb.reset_and_propagate_assignment_error(env, group, error)
                rb.maybe_prepare_rebalance(
                    env,
                    group,
                    f"error {error.name} when storing the group assignment during "
                    f"SyncGroup (member: {write.leader_id})",
                    ev.RebalanceCause.OTHER,
                )
        case StaticMemberWrite():
            group = groups.get(write.group_id)
            if group is not None:
                _restore_static_member(env, group, write)
        case GroupDeletionWrite():
            if write.group.group_id not in groups:
                groups[write.group.group_id] = _restore_deleted(env, write)


def _still_syncing(group: ClassicGroup, write: AssignmentWrite) -> bool:
    return (
        group.is_state(GroupState.COMPLETING_REBALANCE)
        and group.generation_id == write.generation_id
    )


def _assignment_durable(env: rb.Env, group: ClassicGroup, write: AssignmentWrite) -> None:
    rb.set_and_propagate_assignment(env, group, dict(write.assignment))
    group.transition_to(GroupState.STABLE, env.now_ms)
    started = group.rebalance_started_ms
    group.rebalance_started_ms = None
    env.result.events.append(
        ev.GroupStabilized(
            ts_ms=env.now_ms,
            group_id=group.group_id,
            generation_id=group.generation_id,
            member_count=len(group.members),
            duration_ms=env.now_ms - started if started is not None else 0,
        )
    )


def _restore_static_member(env: rb.Env, group: ClassicGroup, write: StaticMemberWrite) -> None:
    """Give the instance id its old member id back, if nothing else happened to the group."""
    new = group.members.get(write.new_member_id)
    if (
        new is None
        or not group.is_state(GroupState.STABLE)
        or group.generation_id != write.generation_id
        or group.static_member_id(write.group_instance_id) != write.new_member_id
        or new.awaiting_join is not None
        or new.awaiting_sync is not None
    ):
        return
    rb.cancel_heartbeat(env, group, new)
    old = ClassicGroupMember(
        member_id=write.old_member_id,
        group_instance_id=write.group_instance_id,
        client_id=new.client_id,
        client_host=new.client_host,
        rebalance_timeout_ms=write.old_rebalance_timeout_ms,
        session_timeout_ms=write.old_session_timeout_ms,
        protocol_type=new.protocol_type,
        protocols=write.old_protocols,
        assignment=new.assignment,
    )
    group.replace_member(write.new_member_id, old)
    rb.schedule_heartbeat(env, group, old)


def _restore_deleted(env: rb.Env, write: GroupDeletionWrite) -> ClassicGroup:
    group = write.group
    # Dead is final for the state machine; this group never was Dead as far as the log knows.
    group.state = GroupState.EMPTY
    group.previous_state = GroupState.EMPTY
    group.state_timestamp_ms = write.state_timestamp_ms
    for member_id, deadline in write.pending_members.items():
        group.add_pending_member(member_id, deadline)
        env.result.schedule(rb.heartbeat_key(group.group_id, member_id), deadline)
    return group
