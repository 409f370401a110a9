"""The rebalance machinery shared by every classic API: prepare, complete join, propagate.

Longer than ~400 lines: the one rebalance state machine every classic API drives, with its
timers and disconnect grace; its parts call each other and read best in one place.

Theory of operation (Kafka `GroupCoordinator` / `GroupMetadataManager`, classic part)
----------------------------------------------------------------------------------------
A rebalance starts with `prepare_rebalance`: members parked in SyncGroup are told
REBALANCE_IN_PROGRESS, the group goes PreparingRebalance and a join deadline is set.

* From Empty the join phase is Kafka's `InitialDelayedJoin`: wait
  `group.initial.rebalance.delay.ms`; when it passes and new members arrived meanwhile, wait
  another delay, the total bounded by the rebalance timeout. It never completes early.
* Otherwise it is `DelayedJoin`: complete as soon as every known member has rejoined and no
  KIP-394 pending member is outstanding, or when the rebalance timeout (max over members)
  passes.

`complete_join` removes dynamic members that did not rejoin (static ones stay until their
session expires), re-elects a leader among the rejoined members if the old one is missing,
bumps the generation, selects the protocol and answers every parked JoinGroup. A group left
without members goes Empty and is persisted. Members then owe a SyncGroup within the rebalance
timeout (`pending_sync_members`, Kafka 3.x); those that do not send one are removed and the
group rebalances again.

Timers: deadlines live in the group/member (`join_deadline_ms`, `sync_deadline_ms`,
`session_deadline_ms`, `pending_members`); the wheel only holds wake-ups under the keys below.
The `on_*_deadline` functions re-check the stored deadline, so a stale or early wake-up is
harmless. Keys:

    ("heartbeat", group_id, member_id)   session / new-member join / pending-member deadline
    ("join", group_id)                   initial delay or rebalance timeout of the join phase
    ("sync", group_id)                   pending-sync deadline after the join phase
    ("disconnect", group_id, member_id)  disconnect grace of a dynamic member (below)

Disconnect-fast failover: a dynamic member is *connected* while a connection of its own is
open: one that carried an accepted Heartbeat or OffsetCommit for it, or an accepted JoinGroup
or SyncGroup after an earlier JoinGroup or SyncGroup on the same connection (the client keeps
it; `ClassicGroups` tells which). A client may have several. The grace
`group.member.disconnect.grace.ms` starts when

* the last of its session connections closes without a LeaveGroup (the process died, or the
  broker closed it on bad input), unless the member's latest Heartbeat on that connection was
  told to rejoin and the rebalance still waits for it: a client may close that connection on
  purpose and rejoin on another (kafka-go 0.2.1 does), and the rebalance timeout bounds the wait;
* or a connection closes while a JoinGroup or SyncGroup of the member is parked on it and no
  session connection of the member is open (the client died waiting for the answer).

A connection whose one group request was an answered JoinGroup or SyncGroup never starts it:
clients such as kafka-go open one per request and close it once answered. Any accepted
request for the member on any connection ends a running grace; when it passes, the member is
removed on the session-expiry path with cause `disconnect`. A rejected request (unknown member,
wrong generation, fenced instance) changes nothing: it binds no connection and ends no grace,
so an outsider who learnt a member id cannot make its connection count as the member's. A
client that lives on and reconnects within the grace costs nothing; one that stays away longer
costs one rebalance, as a session expiry would, only sooner. Static members are meant to come
back and keep Kafka's session semantics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.group import events as ev
from coordinator.group import record_helpers as rh
from coordinator.group.classic.group import ClassicGroup, InitialJoin
from coordinator.group.classic.member import ClassicGroupMember, Parked
from coordinator.group.classic.state import GroupState
from coordinator.group.config import GroupConfig
from coordinator.group.outcomes import JoinedMember, JoinGroupOutcome, Outcome, SyncGroupOutcome
from coordinator.group.result import Reply, Result, TimerKey
from coordinator.grouplog.placement import partition_for

__all__ = [
    "Env",
    "heartbeat_key",
    "join_key",
    "sync_key",
]


def heartbeat_key(group_id: str, member_id: str) -> TimerKey:
    return ("heartbeat", group_id, member_id)


def join_key(group_id: str) -> TimerKey:
    return ("join", group_id)


def sync_key(group_id: str) -> TimerKey:
    return ("sync", group_id)


def disconnect_key(group_id: str, member_id: str) -> TimerKey:
    return ("disconnect", group_id, member_id)


@dataclass(slots=True)
class Env:
    """What one command may use besides the group: settings, time, ids, and the output."""

    config: GroupConfig
    now_ms: int
    new_member_id: Callable[[str], str]
    result: Result

    def partition(self, group_id: str) -> int:
        return partition_for(group_id, self.config.offsets_topic_num_partitions)


# -- replies ---------------------------------------------------------------------------------


def answer(env: Env, parked: Parked | None, outcome: Outcome) -> bool:
    """Answer a parked request unless its connection is gone; True if it was parked."""
    if parked is None:
        return False
    if parked.ref is not None:
        env.result.replies.append(Reply(parked.ref, outcome))
    return True


def complete_join_of(
    env: Env, group: ClassicGroup, member: ClassicGroupMember, outcome: JoinGroupOutcome
) -> bool:
    return answer(env, group.unpark_join(member), outcome)


def complete_sync_of(
    env: Env, group: ClassicGroup, member: ClassicGroupMember, outcome: SyncGroupOutcome
) -> bool:
    return answer(env, group.unpark_sync(member), outcome)


def current_members(group: ClassicGroup) -> tuple[JoinedMember, ...]:
    """Every member's metadata for the selected protocol: what the leader assigns from."""
    assert group.protocol_name is not None
    protocol = group.protocol_name
    return tuple(
        JoinedMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            metadata=m.metadata(protocol),
        )
        for m in group.members.values()
    )


def join_outcome(group: ClassicGroup, member_id: str, *, with_members: bool) -> JoinGroupOutcome:
    return JoinGroupOutcome(
        generation_id=group.generation_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader=group.leader_id or "",
        member_id=member_id,
        members=current_members(group) if with_members else (),
    )


# -- liveness --------------------------------------------------------------------------------


def arm(env: Env, key: TimerKey, armed_ms: int | None, deadline_ms: int) -> int:
    """Make sure the wheel wakes us no later than `deadline_ms`; returns the armed time.

    A later deadline does not touch the wheel: the early wake-up re-arms (STYLE §6), so a
    heartbeat costs no timer operation.
    """
    if armed_ms is None or armed_ms > deadline_ms:
        env.result.schedule(key, deadline_ms)
        return deadline_ms
    return armed_ms


def schedule_heartbeat(
    env: Env, group: ClassicGroup, member: ClassicGroupMember, timeout_ms: int | None = None
) -> None:
    """Kafka `rescheduleClassicGroupMemberHeartbeat`: the session starts again now."""
    timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
    member.session_deadline_ms = env.now_ms + timeout
    member.heartbeat_armed_ms = arm(
        env,
        heartbeat_key(group.group_id, member.member_id),
        member.heartbeat_armed_ms,
        member.session_deadline_ms,
    )


def cancel_heartbeat(env: Env, group: ClassicGroup, member: ClassicGroupMember) -> None:
    if member.heartbeat_armed_ms is not None:
        env.result.cancel(heartbeat_key(group.group_id, member.member_id))
    member.heartbeat_armed_ms = None
    member.session_deadline_ms = None


def validate_current_member(
    group: ClassicGroup, member_id: str, group_instance_id: str | None
) -> ErrorCode | None:
    """Kafka `validateCurrentMember`: the instance id maps to this member id, which exists."""
    if group_instance_id is not None:
        current = group.static_member_id(group_instance_id)
        if current is None:
            return ErrorCode.unknown_member_id
        if current != member_id:
            return ErrorCode.fenced_instance_id
    if not group.has_member(member_id):
        return ErrorCode.unknown_member_id
    return None


# -- persistence -----------------------------------------------------------------------------


def store_group(env: Env, group: ClassicGroup) -> None:
    """Emit the group's snapshot (Kafka `storeGroup`); the runtime makes it durable first."""
    env.result.records.append(
        rh.group_metadata_record(group.group_id, group.snapshot())
    )


# -- membership ------------------------------------------------------------------------------


def member_removed_event(
    env: Env,
    group: ClassicGroup,
    member: ClassicGroupMember,
    cause: ev.RemovalCause,
    reason: str | None = None,
) -> ev.MemberRemoved:
    return ev.MemberRemoved(
        ts_ms=env.now_ms,
        group_id=group.group_id,
        generation_id=group.generation_id,
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
        client_id=member.client_id,
        client_host=member.client_host,
        cause=cause,
        reason=reason,
    )


def drop_member(
    env: Env,
    group: ClassicGroup,
    member: ClassicGroupMember,
    cause: ev.RemovalCause,
    reason: str | None = None,
) -> None:
    """Remove a member, answering anything it has parked with UNKNOWN_MEMBER_ID.

    Kafka answers only a parked JoinGroup here and forgets a parked SyncGroup; we answer both,
    because an unanswered request would block its connection (responses go out in order).
    """
    complete_join_of(env, group, member, JoinGroupOutcome(error=ErrorCode.unknown_member_id))
    complete_sync_of(env, group, member, SyncGroupOutcome(error=ErrorCode.unknown_member_id))
    group.remove_member(member.member_id)
    cancel_heartbeat(env, group, member)
    env.result.events.append(member_removed_event(env, group, member, cause, reason))


def remove_member_and_update_group(
    env: Env,
    group: ClassicGroup,
    member: ClassicGroupMember,
    cause: ev.RemovalCause,
    reason: str,
) -> None:
    """Kafka `removeMemberAndUpdateClassicGroup`."""
    drop_member(env, group, member, cause, reason)
    match group.state:
        case GroupState.STABLE | GroupState.COMPLETING_REBALANCE:
            prepare_rebalance(env, group, reason, _REBALANCE_CAUSE[cause], culprit=member)
        case GroupState.PREPARING_REBALANCE:
            maybe_complete_join(env, group)
        case GroupState.EMPTY | GroupState.DEAD:
            pass


def remove_pending_member_and_update_group(env: Env, group: ClassicGroup, member_id: str) -> None:
    """Kafka `removePendingMemberAndUpdateGroup`: a KIP-394 id that never came back."""
    if group.pop_pending_member(member_id) is not None:
        env.result.cancel(heartbeat_key(group.group_id, member_id))
    maybe_complete_join(env, group)


# The rebalance a member's removal starts, by why it was removed (those that start one here).
_REBALANCE_CAUSE = {
    ev.RemovalCause.LEAVE: ev.RebalanceCause.MEMBER_LEAVE,
    ev.RemovalCause.SESSION_EXPIRY: ev.RebalanceCause.SESSION_EXPIRY,
    ev.RemovalCause.DISCONNECT: ev.RebalanceCause.DISCONNECT,
    ev.RemovalCause.REBALANCE_TIMEOUT: ev.RebalanceCause.REBALANCE_TIMEOUT,
    ev.RemovalCause.FENCED: ev.RebalanceCause.OTHER,
    ev.RemovalCause.MAX_SIZE: ev.RebalanceCause.OTHER,
}


# -- the join phase --------------------------------------------------------------------------


def maybe_prepare_rebalance(
    env: Env, group: ClassicGroup, reason: str, cause: ev.RebalanceCause,
    culprit: ClassicGroupMember | None = None
) -> None:
    """Prepare a rebalance if the state allows one; otherwise try to finish the join phase."""
    if group.can_rebalance():
        prepare_rebalance(env, group, reason, cause, culprit)
    else:
        maybe_complete_join(env, group)


def prepare_rebalance(
    env: Env, group: ClassicGroup, reason: str, cause: ev.RebalanceCause,
    culprit: ClassicGroupMember | None = None
) -> None:
    assert group.can_rebalance(), f"cannot rebalance group {group.group_id} in {group.state}"
    if group.is_state(GroupState.COMPLETING_REBALANCE):
        reset_and_propagate_assignment_error(env, group, ErrorCode.rebalance_in_progress)
    remove_sync_expiration(env, group)

    initial = group.is_state(GroupState.EMPTY)
    previous = group.state
    group.transition_to(GroupState.PREPARING_REBALANCE, env.now_ms)
    group.rebalance_started_ms = env.now_ms
    env.result.events.append(
        ev.RebalanceStarted(
            ts_ms=env.now_ms,
            group_id=group.group_id,
            generation_id=group.generation_id,
            partition=env.partition(group.group_id),
            previous_state=previous.value,
            reason=reason,
            cause=cause,
            member_id=culprit.member_id if culprit else None,
            client_id=culprit.client_id if culprit else None,
            client_host=culprit.client_host if culprit else None,
        )
    )
    if initial:
        delay = env.config.group_initial_rebalance_delay_ms
        group.initial_join = InitialJoin(
            delay_ms=delay, remaining_ms=max(group.rebalance_timeout_ms() - delay, 0)
        )
        group.new_member_added = False
        schedule_join(env, group, delay)
    elif group.has_all_members_joined():
        complete_join(env, group)
    else:
        schedule_join(env, group, group.rebalance_timeout_ms())


def schedule_join(env: Env, group: ClassicGroup, delay_ms: int) -> None:
    group.join_deadline_ms = env.now_ms + delay_ms
    env.result.schedule(join_key(group.group_id), group.join_deadline_ms)


def maybe_complete_join(env: Env, group: ClassicGroup) -> None:
    """Finish the join phase early once everyone is in (never during the initial delay)."""
    if (
        group.is_state(GroupState.PREPARING_REBALANCE)
        and group.initial_join is None
        and group.has_all_members_joined()
    ):
        complete_join(env, group)


def on_join_deadline(env: Env, group: ClassicGroup) -> None:
    deadline = group.join_deadline_ms
    if deadline is None or not group.is_state(GroupState.PREPARING_REBALANCE):
        return
    if deadline > env.now_ms:
        env.result.schedule(join_key(group.group_id), deadline)
        return
    group.join_deadline_ms = None
    step = group.initial_join
    if step is not None and group.new_member_added and step.remaining_ms != 0:
        # Kafka `InitialDelayedJoin.onComplete`: someone joined during the delay; wait again.
        group.new_member_added = False
        delay = min(env.config.group_initial_rebalance_delay_ms, step.remaining_ms)
        group.initial_join = InitialJoin(
            delay_ms=delay, remaining_ms=max(step.remaining_ms - step.delay_ms, 0)
        )
        schedule_join(env, group, delay)
        return
    complete_join(env, group)


def complete_join(env: Env, group: ClassicGroup) -> None:
    """Kafka `completeClassicGroupJoin`."""
    if group.join_deadline_ms is not None:
        env.result.cancel(join_key(group.group_id))
    group.join_deadline_ms = None
    group.initial_join = None
    group.new_member_added = False

    for member in [m for m in group.members.values() if not m.is_awaiting_join]:
        if not member.is_static:
            drop_member(
                env,
                group,
                member,
                ev.RemovalCause.REBALANCE_TIMEOUT,
                "did not rejoin before the rebalance timeout",
            )

    if group.is_state(GroupState.DEAD):
        return
    if group.members and not maybe_elect_new_joined_leader(group):
        # Only static members that have not rejoined are left: wait for them (or for their
        # sessions to expire), as Kafka does.
        schedule_join(env, group, group.rebalance_timeout_ms())
        return

    started = group.rebalance_started_ms if group.rebalance_started_ms is not None else env.now_ms
    group.generation_id += 1
    group.clear_pending_sync()
    if not group.members:
        group.protocol_name = None
        group.leader_id = None
        group.transition_to(GroupState.EMPTY, env.now_ms)
        group.rebalance_started_ms = None
        store_group(env, group)
        env.result.events.append(
            ev.GroupEmpty(
                ts_ms=env.now_ms, group_id=group.group_id, generation_id=group.generation_id
            )
        )
        return

    group.protocol_name = group.select_protocol()
    group.transition_to(GroupState.COMPLETING_REBALANCE, env.now_ms)
    env.result.events.append(
        ev.JoinCompleted(
            ts_ms=env.now_ms,
            group_id=group.group_id,
            generation_id=group.generation_id,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id,
            member_count=len(group.members),
            duration_ms=env.now_ms - started,
        )
    )
    for member in group.members.values():
        complete_join_of(
            env,
            group,
            member,
            join_outcome(group, member.member_id, with_members=group.is_leader(member.member_id)),
        )
        schedule_heartbeat(env, group, member)
        member.is_new = False
        group.add_pending_sync(member.member_id)
    group.sync_deadline_ms = env.now_ms + group.rebalance_timeout_ms()
    env.result.schedule(sync_key(group.group_id), group.sync_deadline_ms)


def maybe_elect_new_joined_leader(group: ClassicGroup) -> bool:
    """Keep the leader if it rejoined, else pick the first rejoined member; False if none."""
    if group.leader_id is None:
        return False
    leader = group.members.get(group.leader_id)
    if leader is not None and leader.is_awaiting_join:
        return True
    for member in group.members.values():
        if member.is_awaiting_join:
            group.leader_id = member.member_id
            return True
    return False


# -- the sync phase --------------------------------------------------------------------------


def remove_sync_expiration(env: Env, group: ClassicGroup) -> None:
    group.clear_pending_sync()
    if group.sync_deadline_ms is not None:
        env.result.cancel(sync_key(group.group_id))
    group.sync_deadline_ms = None


def remove_pending_sync_member(env: Env, group: ClassicGroup, member_id: str) -> None:
    group.discard_pending_sync(member_id)
    if not group.pending_sync_members:
        remove_sync_expiration(env, group)


def on_sync_deadline(env: Env, group: ClassicGroup) -> None:
    """Kafka `expirePendingSync`: members that never sent SyncGroup are removed (Kafka 3.x)."""
    deadline = group.sync_deadline_ms
    if deadline is None:
        return
    if deadline > env.now_ms:
        env.result.schedule(sync_key(group.group_id), deadline)
        return
    group.sync_deadline_ms = None
    if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
        return
    if not group.pending_sync_members:
        return
    pending = sorted(group.pending_sync_members)
    for member_id in pending:
        member = group.members.get(member_id)
        if member is not None:
            drop_member(
                env,
                group,
                member,
                ev.RemovalCause.REBALANCE_TIMEOUT,
                "did not send SyncGroup before the rebalance timeout",
            )
    prepare_rebalance(env, group, f"removing {pending} on pending sync request expiration",
                      ev.RebalanceCause.REBALANCE_TIMEOUT)


def reset_and_propagate_assignment_error(env: Env, group: ClassicGroup, error: ErrorCode) -> None:
    assert group.is_state(GroupState.COMPLETING_REBALANCE)
    for member in group.members.values():
        member.assignment = b""
    propagate_assignment(env, group, error)


def set_and_propagate_assignment(
    env: Env, group: ClassicGroup, assignment: dict[str, bytes]
) -> None:
    assert group.is_state(GroupState.COMPLETING_REBALANCE)
    for member in group.members.values():
        member.assignment = assignment.get(member.member_id, b"")
    propagate_assignment(env, group, ErrorCode.none)


def propagate_assignment(env: Env, group: ClassicGroup, error: ErrorCode) -> None:
    ok = error is ErrorCode.none
    for member in group.members.values():
        outcome = SyncGroupOutcome(
            error=error,
            protocol_type=group.protocol_type if ok else None,
            protocol_name=group.protocol_name if ok else None,
            assignment=member.assignment,
        )
        if complete_sync_of(env, group, member, outcome):
            # The member was parked, so its session deadline may have lapsed unnoticed.
            schedule_heartbeat(env, group, member)


# -- disconnects -----------------------------------------------------------------------------


def note_alive(env: Env, group: ClassicGroup, member: ClassicGroupMember) -> None:
    """An accepted request spoke for `member`, so it is alive: any disconnect grace ends."""
    if member.disconnect_deadline_ms is not None:
        member.disconnect_deadline_ms = None
        env.result.cancel(disconnect_key(group.group_id, member.member_id))


def bind_connection(env: Env, group: ClassicGroup, member: ClassicGroupMember,
                    connection_id: int) -> bool:
    """An accepted Heartbeat or OffsetCommit for `member` arrived on `connection_id`: it is
    alive, and the connection becomes its latest session connection. True when the connection
    is new to the member (the caller indexes it)."""
    note_alive(env, group, member)
    previous = member.connection_id
    if previous == connection_id:
        return False
    member.connection_id = connection_id
    others = member.other_connections
    known = others is not None and connection_id in others
    if others is not None:
        others.discard(connection_id)
    if previous is not None:
        if others is None:
            member.other_connections = others = set()
        others.add(previous)
    if others is not None and not others:
        member.other_connections = None
    return not known


def connection_lost(env: Env, group: ClassicGroup, member: ClassicGroupMember,
                    connection_id: int, parked_on_it: bool) -> None:
    """`connection_id` closed without a LeaveGroup: start the grace when that leaves the member
    disconnected (module doc). `parked_on_it`: a request of the member was parked on it."""
    was_session = False
    others = member.other_connections
    if member.connection_id == connection_id:
        member.connection_id = others.pop() if others else None
        was_session = True
    elif others is not None and connection_id in others:
        others.discard(connection_id)
        was_session = True
    if others is not None and not others:
        member.other_connections = None
    if not (was_session or parked_on_it) or member.is_connected():
        return
    if (not parked_on_it and member.rejoin_told_on == connection_id
            and group.is_state(GroupState.PREPARING_REBALANCE) and not member.is_awaiting_join):
        return  # closed to rejoin elsewhere; the rebalance timeout bounds the wait
    start_disconnect_grace(env, group, member)


def start_disconnect_grace(env: Env, group: ClassicGroup, member: ClassicGroupMember) -> None:
    """No connection of the member is left open (`connection_lost`)."""
    grace = env.config.group_member_disconnect_grace_ms
    if grace < 0 or member.is_static or member.disconnect_deadline_ms is not None:
        return
    member.disconnect_deadline_ms = env.now_ms + grace
    env.result.schedule(disconnect_key(group.group_id, member.member_id),
                        member.disconnect_deadline_ms)


def on_disconnect_deadline(env: Env, group: ClassicGroup, member_id: str) -> None:
    """The grace after a closed connection passed with no request for the member: remove it
    the way a session expiry does, whatever it had parked (its connection is gone)."""
    member = group.members.get(member_id)
    if member is None or member.disconnect_deadline_ms is None:
        return
    if member.disconnect_deadline_ms > env.now_ms:
        env.result.schedule(disconnect_key(group.group_id, member_id),
                            member.disconnect_deadline_ms)
        return
    member.disconnect_deadline_ms = None
    remove_member_and_update_group(
        env,
        group,
        member,
        ev.RemovalCause.DISCONNECT,
        f"removing member {member_id}: its connection closed "
        f"{env.config.group_member_disconnect_grace_ms} ms ago without LeaveGroup",
    )


# -- session expiry --------------------------------------------------------------------------


def early_heartbeat_wakeup(group: ClassicGroup, member_id: str, now_ms: int) -> int | None:
    """The wheel woke a current member's session check before its deadline (its heartbeats
    moved the deadline without touching the wheel): note the deadline as armed and return it,
    for the caller to re-arm the wheel there. None, having changed nothing, when
    `on_heartbeat_deadline` must decide: a pending member, no such member, no session, or the
    deadline reached. The steady-state case of `on_heartbeat_deadline`, without a Result: at
    10,000 members it runs hundreds of times a second."""
    if member_id in group.pending_members:
        return None
    member = group.members.get(member_id)
    if member is None:
        return None
    deadline = member.session_deadline_ms
    if deadline is None or deadline <= now_ms:
        return None
    member.heartbeat_armed_ms = deadline
    return deadline


def on_heartbeat_deadline(env: Env, group: ClassicGroup, member_id: str) -> None:
    """Kafka `expireClassicGroupMemberHeartbeat`, plus the early-wake-up re-arm."""
    pending_deadline = group.pending_members.get(member_id)
    if pending_deadline is not None:
        if pending_deadline > env.now_ms:
            env.result.schedule(heartbeat_key(group.group_id, member_id), pending_deadline)
        else:
            remove_pending_member_and_update_group(env, group, member_id)
        return
    member = group.members.get(member_id)
    if member is None:
        return
    member.heartbeat_armed_ms = None
    deadline = member.session_deadline_ms
    if deadline is None:
        return
    if deadline > env.now_ms:
        member.heartbeat_armed_ms = arm(
            env, heartbeat_key(group.group_id, member_id), None, deadline
        )
        return
    member.session_deadline_ms = None
    if member.has_satisfied_heartbeat():
        # Parked in JoinGroup/SyncGroup: alive; the session restarts when it is answered.
        return
    remove_member_and_update_group(
        env,
        group,
        member,
        ev.RemovalCause.SESSION_EXPIRY,
        f"removing member {member_id} on heartbeat expiration",
    )
