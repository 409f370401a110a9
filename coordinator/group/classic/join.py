"""JoinGroup for a classic group (SPEC §4, §8; Kafka `classicGroupJoinToClassicGroup`).

`ClassicGroups` has already validated the group id, the session timeout and the protocol list,
and found or created the group. Versions (decided in `commands.JoinGroup`):

* v0: no rebalance timeout; the session timeout stands in for it.
* v4: an unknown dynamic member gets MEMBER_ID_REQUIRED and a member id to rejoin with (KIP-394).
* v5: group.instance.id, static membership (KIP-345).
* v9: a rejoining static leader may be told to skip the assignment (KIP-814).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group import events as ev
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.member import ClassicGroupMember, Parked
from coordinator.group.classic.state import GroupState
from coordinator.group.classic.writes import StaticMemberWrite
from coordinator.group.outcomes import JoinGroupOutcome, SyncGroupOutcome
from coordinator.group.result import Reply

__all__ = ["join_group", "joined_member_id"]


def join_group(env: rb.Env, group: ClassicGroup, cmd: c.JoinGroup) -> None:
    if not accept_joining_member(env, group, cmd.member_id):
        member = group.members.get(cmd.member_id)
        if member is not None:
            # Kafka kicks out the latest rejoining members when the group is over capacity.
            rb.drop_member(env, group, member, ev.RemovalCause.MAX_SIZE, "group.max.size reached")
        elif cmd.member_id in group.pending_members:
            # A KIP-394 id handed out before the group filled up: forgotten too, or the join
            # phase would wait for it until its session timeout.
            group.pop_pending_member(cmd.member_id)
            env.result.cancel(rb.heartbeat_key(group.group_id, cmd.member_id))
        reply(env, cmd, JoinGroupOutcome(error=ErrorCode.group_max_size_reached))
    elif cmd.member_id == c.UNKNOWN_MEMBER_ID:
        join_new_member(env, group, cmd)
    else:
        join_existing_member(env, group, cmd)
    rb.maybe_complete_join(env, group)


def reply(env: rb.Env, cmd: c.JoinGroup, outcome: JoinGroupOutcome) -> None:
    env.result.replies.append(Reply(cmd.ref, outcome))


def accept_joining_member(env: rb.Env, group: ClassicGroup, member_id: str) -> bool:
    """Kafka `acceptJoiningMember`: room for a new member under group.max.size?"""
    max_size = env.config.group_max_size
    match group.state:
        case GroupState.EMPTY | GroupState.DEAD:
            return True
        case GroupState.PREPARING_REBALANCE:
            # Counting members already rejoined (not the group size) lets the last rejoining
            # members be refused when max size was lowered.
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or (
                group.num_awaiting_join() < max_size
            )
        case GroupState.COMPLETING_REBALANCE | GroupState.STABLE:
            return group.has_member(member_id) or len(group.members) < max_size


def join_new_member(env: rb.Env, group: ClassicGroup, cmd: c.JoinGroup) -> None:
    if group.is_state(GroupState.DEAD):
        reply(env, cmd, JoinGroupOutcome(error=ErrorCode.coordinator_not_available))
        return
    if not group.supports_protocols(cmd.protocol_type, {p.name for p in cmd.protocols}):
        reply(env, cmd, JoinGroupOutcome(error=ErrorCode.inconsistent_group_protocol))
        return
    prefix = cmd.group_instance_id if cmd.group_instance_id is not None else cmd.client_id
    new_member_id = env.new_member_id(prefix)
    if cmd.group_instance_id is not None:
        old_member_id = group.static_member_id(cmd.group_instance_id)
        if old_member_id is not None:
            update_static_member_and_rebalance(env, group, cmd, old_member_id, new_member_id)
        else:
            add_member_and_rebalance(env, group, cmd, new_member_id)
    elif cmd.require_known_member_id:
        deadline = env.now_ms + cmd.session_timeout_ms
        group.add_pending_member(new_member_id, deadline)
        env.result.schedule(rb.heartbeat_key(group.group_id, new_member_id), deadline)
        reply(
            env,
            cmd,
            JoinGroupOutcome(error=ErrorCode.member_id_required, member_id=new_member_id),
        )
    else:
        add_member_and_rebalance(env, group, cmd, new_member_id)


def join_existing_member(env: rb.Env, group: ClassicGroup, cmd: c.JoinGroup) -> None:
    def fail(error: ErrorCode) -> None:
        reply(env, cmd, JoinGroupOutcome(error=error, member_id=cmd.member_id))

    if group.is_state(GroupState.DEAD):
        return fail(ErrorCode.coordinator_not_available)
    if not group.supports_protocols(cmd.protocol_type, {p.name for p in cmd.protocols}):
        return fail(ErrorCode.inconsistent_group_protocol)
    if cmd.member_id in group.pending_members:
        if cmd.group_instance_id is not None:
            # Pending ids are only handed to dynamic members; Kafka treats this as a broken
            # invariant, but it is the peer's doing, so it is answered, not asserted.
            return fail(ErrorCode.invalid_request)
        add_member_and_rebalance(env, group, cmd, cmd.member_id)
        return None
    error = rb.validate_current_member(group, cmd.member_id, cmd.group_instance_id)
    if error is not None:
        return fail(error)

    member = group.members[cmd.member_id]
    match group.state:
        case GroupState.PREPARING_REBALANCE:
            update_member_and_rebalance(
                env, group, member, cmd,
                f"member {member.member_id} joining group during rebalance",
                ev.RebalanceCause.MEMBER_REJOIN,
            )
        case GroupState.COMPLETING_REBALANCE:
            if member.matches(cmd.protocols):
                # It probably missed the JoinGroup answer: give it the current generation again.
                reply(
                    env,
                    cmd,
                    rb.join_outcome(
                        group, member.member_id, with_members=group.is_leader(member.member_id)
                    ),
                )
            else:
                update_member_and_rebalance(
                    env, group, member, cmd, f"updating metadata for member {member.member_id}",
                    ev.RebalanceCause.METADATA_CHANGE,
                )
        case GroupState.STABLE:
            if group.is_leader(member.member_id):
                # The leader rejoins to make the group reassign (e.g. topic metadata changed).
                update_member_and_rebalance(
                    env, group, member, cmd, f"leader {member.member_id} re-joining group",
                    ev.RebalanceCause.MEMBER_REJOIN,
                )
            elif not member.matches(cmd.protocols):
                update_member_and_rebalance(
                    env, group, member, cmd, f"updating metadata for member {member.member_id}",
                    ev.RebalanceCause.METADATA_CHANGE,
                )
            else:
                reply(env, cmd, rb.join_outcome(group, member.member_id, with_members=False))
        case GroupState.EMPTY | GroupState.DEAD:
            fail(ErrorCode.unknown_member_id)
    return None


def park_join(
    env: rb.Env, group: ClassicGroup, member: ClassicGroupMember, cmd: c.JoinGroup
) -> None:
    """Park `cmd` for `member`; a JoinGroup it had parked already is told to rejoin.

    Kafka silently replaces the callback; we answer the older request so that it cannot block
    its connection.
    """
    rb.complete_join_of(
        env,
        group,
        member,
        JoinGroupOutcome(error=ErrorCode.rebalance_in_progress, member_id=member.member_id),
    )
    group.park_join(member, Parked(cmd.ref))


def update_member(
    env: rb.Env, group: ClassicGroup, member: ClassicGroupMember, cmd: c.JoinGroup
) -> None:
    group.update_member(
        member,
        protocols=cmd.protocols,
        rebalance_timeout_ms=cmd.rebalance_timeout_ms,
        session_timeout_ms=cmd.session_timeout_ms,
    )
    park_join(env, group, member, cmd)


def update_member_and_rebalance(
    env: rb.Env, group: ClassicGroup, member: ClassicGroupMember, cmd: c.JoinGroup, reason: str,
    cause: ev.RebalanceCause
) -> None:
    update_member(env, group, member, cmd)
    rb.maybe_prepare_rebalance(env, group, with_client_reason(reason, cmd), cause, member)


def with_client_reason(reason: str, cmd: c.JoinGroup) -> str:
    return f"{reason}; client reason: {cmd.reason or 'not provided'}"


def add_member_and_rebalance(
    env: rb.Env, group: ClassicGroup, cmd: c.JoinGroup, member_id: str
) -> None:
    member = ClassicGroupMember(
        member_id=member_id,
        group_instance_id=cmd.group_instance_id,
        client_id=cmd.client_id,
        client_host=cmd.client_host,
        rebalance_timeout_ms=cmd.rebalance_timeout_ms,
        session_timeout_ms=cmd.session_timeout_ms,
        protocol_type=cmd.protocol_type,
        protocols=cmd.protocols,
        awaiting_join=Parked(cmd.ref),
        is_new=True,
    )
    if group.is_state(GroupState.PREPARING_REBALANCE) and group.initial_join is not None:
        group.new_member_added = True
    group.add_member(member)
    env.result.events.append(
        ev.MemberAdded(
            ts_ms=env.now_ms,
            group_id=group.group_id,
            generation_id=group.generation_id,
            member_id=member_id,
            group_instance_id=cmd.group_instance_id,
            client_id=cmd.client_id,
            client_host=cmd.client_host,
        )
    )
    # A new member cannot heartbeat before its JoinGroup is answered; bound its wait instead.
    rb.schedule_heartbeat(env, group, member, env.config.group_new_member_join_timeout_ms)
    rb.maybe_prepare_rebalance(
        env,
        group,
        with_client_reason(
            f"adding new member {member_id} with group instance id {cmd.group_instance_id}", cmd
        ),
        ev.RebalanceCause.MEMBER_JOIN,
        member,
    )


def replace_static_member(
    env: rb.Env, group: ClassicGroup, instance_id: str, old_member_id: str, new_member_id: str
) -> ClassicGroupMember:
    """Give a static member a new id; whatever the old id had parked is fenced (KIP-345)."""
    old = group.members[old_member_id]
    assert old.group_instance_id == instance_id
    fenced = ErrorCode.fenced_instance_id
    rb.complete_join_of(env, group, old, JoinGroupOutcome(error=fenced, member_id=old_member_id))
    rb.complete_sync_of(env, group, old, SyncGroupOutcome(error=fenced))
    rb.cancel_heartbeat(env, group, old)
    new = ClassicGroupMember(
        member_id=new_member_id,
        group_instance_id=old.group_instance_id,
        client_id=old.client_id,
        client_host=old.client_host,
        rebalance_timeout_ms=old.rebalance_timeout_ms,
        session_timeout_ms=old.session_timeout_ms,
        protocol_type=old.protocol_type,
        protocols=old.protocols,
        assignment=old.assignment,
    )
    group.replace_member(old_member_id, new)
    env.result.events.append(
        rb.member_removed_event(
            env, group, old, ev.RemovalCause.FENCED, f"replaced by static member {new_member_id}"
        )
    )
    return new


def update_static_member_and_rebalance(
    env: rb.Env, group: ClassicGroup, cmd: c.JoinGroup, old_member_id: str, new_member_id: str
) -> None:
    """Kafka `updateStaticMemberAndRebalance`."""
    assert cmd.group_instance_id is not None
    assert group.state not in (GroupState.EMPTY, GroupState.DEAD), "static member in empty group"
    current_leader = group.leader_id
    old = group.members[old_member_id]
    # Kept to restore the old member id should the write of the new one fail.
    restore = StaticMemberWrite(
        group_id=group.group_id,
        group_instance_id=cmd.group_instance_id,
        old_member_id=old_member_id,
        new_member_id=new_member_id,
        generation_id=group.generation_id,
        old_protocols=old.protocols,
        old_rebalance_timeout_ms=old.rebalance_timeout_ms,
        old_session_timeout_ms=old.session_timeout_ms,
    )
    member = replace_static_member(env, group, cmd.group_instance_id, old_member_id, new_member_id)
    rb.schedule_heartbeat(env, group, member)
    update_member(env, group, member, cmd)

    rebalance = True
    match group.state:
        case GroupState.STABLE:
            if group.select_protocol() == group.protocol_name:
                rebalance = False
                # Persist the new member id, then answer at once: no rebalance (KIP-345).
                rb.store_group(env, group)
                env.result.writes.append(restore)
                is_leader = group.is_leader(new_member_id)
                if cmd.supports_skip_assignment:
                    # KIP-814: the leader learns it leads, but must not run the assignor.
                    outcome = rb.join_outcome(group, new_member_id, with_members=is_leader)
                    outcome = JoinGroupOutcome(
                        generation_id=outcome.generation_id,
                        protocol_type=outcome.protocol_type,
                        protocol_name=outcome.protocol_name,
                        leader=outcome.leader,
                        skip_assignment=is_leader,
                        member_id=new_member_id,
                        members=outcome.members,
                    )
                else:
                    # Before v9 the old leader id is returned, so a replaced leader does not
                    # believe it leads and does not compute an assignment nobody would use.
                    outcome = JoinGroupOutcome(
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader or "",
                        member_id=new_member_id,
                    )
                rb.complete_join_of(env, group, member, outcome)
            else:
                rb.maybe_prepare_rebalance(
                    env,
                    group,
                    with_client_reason(
                        f"static member {new_member_id} with instance id "
                        f"{cmd.group_instance_id} changed the selected protocol",
                        cmd,
                    ),
                    ev.RebalanceCause.METADATA_CHANGE,
                    member,
                )
        case GroupState.COMPLETING_REBALANCE:
            # KAFKA-9801: the leader may already be assigning to the old id; rebalance so that
            # the new id gets an assignment.
            rb.prepare_rebalance(
                env,
                group,
                with_client_reason(
                    f"updating metadata for static member {new_member_id} with instance id "
                    f"{cmd.group_instance_id}",
                    cmd,
                ),
                ev.RebalanceCause.METADATA_CHANGE,
                member,
            )
        case GroupState.PREPARING_REBALANCE:
            pass
        case GroupState.EMPTY | GroupState.DEAD:
            raise AssertionError("unreachable")
    env.result.events.append(
        ev.StaticMemberReplaced(
            ts_ms=env.now_ms,
            group_id=group.group_id,
            generation_id=group.generation_id,
            group_instance_id=cmd.group_instance_id,
            old_member_id=old_member_id,
            member_id=new_member_id,
            client_id=cmd.client_id,
            client_host=cmd.client_host,
            rebalance=rebalance,
        )
    )


def joined_member_id(env: rb.Env, group: ClassicGroup, cmd: c.JoinGroup) -> str | None:
    """The dynamic member a handled JoinGroup spoke for, if it is one now."""
    if cmd.member_id != c.UNKNOWN_MEMBER_ID:
        return cmd.member_id
    if cmd.group_instance_id is not None or cmd.require_known_member_id:
        return None  # static (no disconnect grace) or only handed a KIP-394 id
    # Before v4 a dynamic member is added at once with a fresh id: the newest member,
    # still parked on this request, or named by the answer when the join completed.
    newest = next(reversed(group.members), None)
    if newest is not None:
        parked = group.members[newest].awaiting_join
        if parked is not None and parked.ref == cmd.ref:
            return newest
    for reply in env.result.replies:
        if reply.ref == cmd.ref:
            return getattr(reply.outcome, "member_id", None) or None
    return None
