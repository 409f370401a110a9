"""Classic-protocol members inside a consumer group (Kafka's `classicGroupJoinToConsumerGroup`,
`classicGroupSyncToConsumerGroup`, `classicGroupHeartbeatToConsumerGroup`,
`classicGroupLeaveToConsumerGroup`).

A consumer that speaks JoinGroup/SyncGroup/Heartbeat/LeaveGroup stays in a consumer group
(one upgraded from a classic group, or one it joins) as an ordinary member whose
ConsumerGroupMemberMetadata carries its classic metadata (session timeout, protocols). The
broker computes its target like any other member's; the classic APIs map onto reconciliation:

* JoinGroup: subscription and owned partitions come from the member's ConsumerProtocolSubscription;
  the member takes one reconciliation step (revoke before assign, as for everyone) and is
  answered with its member epoch as generation and no leader (it never runs an assignor).
* SyncGroup: answers the member's current assignment as a ConsumerProtocolAssignment, in the
  version of its subscription.
* Heartbeat: REBALANCE_IN_PROGRESS while the member must rejoin to move on: the group epoch is
  ahead of its epoch, it has partitions to revoke, or partitions it waits for have been
  released. An eager client then gives up everything it owns and rejoins; a cooperative one
  keeps what it still owns. Either way no partition has two owners: a partition is only handed
  to another member once the member that had it reported (by rejoining) that it let it go.
* LeaveGroup: the member is removed and the group epoch bumped.

A static classic member (instance id) joining under a new member id replaces its old
incarnation, inheriting its assignment, without a new group epoch.

Timers: the session uses the member's own session timeout; after REBALANCE_IN_PROGRESS the
member must rejoin, and after a JoinGroup it must sync, within its rebalance timeout, else it is
fenced: `("consumer-classic", group_id, member_id)`, deadline in `group.classic_deadlines`.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group import events as ev
from coordinator.group import record_helpers as rh
from coordinator.group.consumer.group import ConsumerGroup, TopicImage
from coordinator.group.consumer.heartbeat import (
    ConsumerEnv,
    HeartbeatError,
    apply,
    compute_target,
    fence_member,
    maybe_reconcile,
    refresh_metadata,
    session_key,
)
from coordinator.group.consumer.heartbeat import _replace_static_member as replace_static_member
from coordinator.group.consumer.member import Assignment, ConsumerGroupMember, MemberState
from coordinator.group.embedded_protocol import (
    EmbeddedProtocolError,
    encode_assignment,
    parse_subscription,
    protocol_version,
)
from coordinator.group.outcomes import (
    HeartbeatOutcome,
    JoinGroupOutcome,
    LeaveGroupOutcome,
    LeaveMemberOutcome,
    SyncGroupOutcome,
)
from coordinator.group.result import TimerKey
from coordinator.grouplog.records import ClassicMemberMetadata

__all__ = [
    "CLASSIC_TIMER_KIND",
    "PROTOCOL_TYPE",
    "classic_heartbeat",
    "classic_join",
    "classic_leave",
    "classic_sync",
    "on_classic_deadline",
]

PROTOCOL_TYPE = "consumer"
CLASSIC_TIMER_KIND = "consumer-classic"


def classic_key(group_id: str, member_id: str) -> TimerKey:
    return (CLASSIC_TIMER_KIND, group_id, member_id)


def to_ids(partitions: dict[str, frozenset[int]], image: TopicImage
           ) -> dict[uuid.UUID, frozenset[int]]:
    """Topic names -> ids; topics the broker does not know are dropped."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for name, parts in partitions.items():
        info = image.by_name.get(name)
        if info is not None and parts:
            out[info.topic_id] = out.get(info.topic_id, frozenset()) | parts
    return out


def to_names(group: ConsumerGroup, assignment: Assignment, image: TopicImage
             ) -> dict[str, frozenset[int]]:
    names = {m.topic_id: m.topic_name for m in group.subscription_metadata.values()}
    out: dict[str, frozenset[int]] = {}
    for topic_id, parts in assignment.items():
        name = names.get(topic_id) or image.name_of(topic_id)
        if name and parts:
            out[name] = parts
    return out


def assignment_bytes(group: ConsumerGroup, member: ConsumerGroupMember, image: TopicImage,
                     assignment: Assignment) -> bytes:
    """`assignment` as a ConsumerProtocolAssignment in the version of the member's first
    protocol's subscription (what its client reads)."""
    version = 0
    if member.classic is not None and member.classic.supported_protocols:
        version = protocol_version(member.classic.supported_protocols[0][1])
    return encode_assignment(to_names(group, assignment, image), version)


def _set_deadline(env: ConsumerEnv, group: ConsumerGroup, member_id: str, kind: str,
                  timeout_ms: int) -> None:
    deadline = env.now_ms + max(timeout_ms, 0)
    group.classic_deadlines[member_id] = (kind, deadline)
    env.result.schedule(classic_key(group.group_id, member_id), deadline)


def _clear_deadline(env: ConsumerEnv, group: ConsumerGroup, member_id: str) -> None:
    if group.classic_deadlines.pop(member_id, None) is not None:
        env.result.cancel(classic_key(group.group_id, member_id))


def touch_classic_session(env: ConsumerEnv, group: ConsumerGroup,
                          member: ConsumerGroupMember) -> None:
    timeout = member.classic.session_timeout_ms if member.classic else \
        env.config.session_timeout_ms
    deadline = env.now_ms + timeout
    had = member.member_id in group.session_deadlines
    group.session_deadlines[member.member_id] = deadline
    if not had:
        env.result.schedule(session_key(group.group_id, member.member_id), deadline)


def supports_protocols(group: ConsumerGroup, member_id: str, protocol_type: str,
                       names: set[str]) -> bool:
    """Kafka's `ConsumerGroup.supportsClassicProtocols`: the `consumer` protocol type, and one
    protocol every other classic member supports too."""
    if protocol_type != PROTOCOL_TYPE or not names:
        return False
    for other in group.members.values():
        if other.member_id == member_id or other.classic is None:
            continue
        names = names & {name for name, _ in other.classic.supported_protocols}
        if not names:
            return False
    return True


# -- the four APIs -------------------------------------------------------------------------


def _current_member(group: ConsumerGroup, member_id: str, instance_id: str | None
                    ) -> ConsumerGroupMember:
    """Kafka's `validateConsumerGroupMember` + `throwIfMemberDoesNotUseClassicProtocol`."""
    if instance_id is not None:
        member = group.static_member(instance_id)
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id)
        if member.member_id != member_id:
            raise HeartbeatError(ErrorCode.fenced_instance_id)
    else:
        found = group.members.get(member_id)
        if found is None:
            raise HeartbeatError(ErrorCode.unknown_member_id)
        member = found
    if member.classic is None:
        raise HeartbeatError(ErrorCode.unknown_member_id)
    return member


def classic_join(env: ConsumerEnv, group: ConsumerGroup, cmd: c.JoinGroup) -> JoinGroupOutcome:
    """A JoinGroup to a consumer group. Raises HeartbeatError for an error answer."""
    member_id = cmd.member_id or env.new_member_id(cmd.client_id or "consumer")
    known = member_id in group.members
    if not known and len(group.members) >= env.config.max_size:
        raise HeartbeatError(ErrorCode.group_max_size_reached)
    if not supports_protocols(group, member_id, cmd.protocol_type,
                              {p.name for p in cmd.protocols}):
        raise HeartbeatError(ErrorCode.inconsistent_group_protocol)
    if cmd.member_id == c.UNKNOWN_MEMBER_ID and cmd.require_known_member_id:
        return JoinGroupOutcome(error=ErrorCode.member_id_required, member_id=member_id)
    if cmd.group_instance_id is not None:
        existing = group.static_member(cmd.group_instance_id)
        if existing is not None and existing.member_id != member_id:
            # A static member back under a new member id takes the place of the old one, with
            # its assignment and without a new group epoch (Kafka's static member replacement;
            # unlike the consumer protocol, the old one need not have left first).
            replace_static_member(env, group, existing, replace(
                existing, member_id=member_id, member_epoch=0, previous_member_epoch=0))
    try:
        subscription = parse_subscription(cmd.protocols[0].metadata)
    except EmbeddedProtocolError:
        raise HeartbeatError(ErrorCode.inconsistent_group_protocol) from None
    member = group.members.get(member_id)
    if member is None:
        if known:  # pragma: no cover - checked above
            raise AssertionError(member_id)
        member = ConsumerGroupMember(member_id=member_id)
        env.result.events.append(ev.MemberAdded(
            ts_ms=env.now_ms, group_id=group.group_id, generation_id=group.group_epoch,
            member_id=member_id, group_instance_id=cmd.group_instance_id,
            client_id=cmd.client_id, client_host=cmd.client_host))
    elif member.classic is None:
        raise HeartbeatError(ErrorCode.unknown_member_id)
    updated = replace(
        member,
        instance_id=cmd.group_instance_id if cmd.group_instance_id is not None
        else member.instance_id,
        rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=cmd.rebalance_timeout_ms,
        subscribed_topic_names=tuple(sorted(set(subscription.topics))),
        client_id=cmd.client_id,
        client_host=cmd.client_host,
        classic=ClassicMemberMetadata(
            session_timeout_ms=cmd.session_timeout_ms,
            supported_protocols=tuple((p.name, p.metadata) for p in cmd.protocols)),
    )
    is_new = member_id not in group.members
    bump, reason = False, ""
    if is_new or not updated.subscription_equals(member):
        apply(env, group, rh.consumer_group_member_subscription_record(group.group_id, updated))
        if is_new or updated.subscribed_topic_names != member.subscribed_topic_names:
            bump, reason = True, ("member joined" if is_new else "subscription changed")
    if bump or group.metadata_version != env.image.version:
        if refresh_metadata(env, group) and not bump:
            bump, reason = True, "subscribed topic metadata changed"
        if bump:
            apply(env, group, rh.consumer_group_epoch_record(group.group_id, group.group_epoch + 1))
            group.epoch_reason = reason
    if group.group_epoch > group.assignment_epoch:
        compute_target(env, group, group.epoch_reason or "group epoch ahead", member_id)
    owned = to_ids(subscription.owned, env.image)
    after = maybe_reconcile(env, group, group.members[member_id], owned)
    touch_classic_session(env, group, after)
    _set_deadline(env, group, member_id, "sync", after.rebalance_timeout_ms)
    return JoinGroupOutcome(
        generation_id=after.member_epoch, protocol_type=PROTOCOL_TYPE,
        protocol_name=cmd.protocols[0].name, leader="", member_id=member_id)


def classic_sync(env: ConsumerEnv, group: ConsumerGroup, cmd: c.SyncGroup) -> SyncGroupOutcome:
    member = _current_member(group, cmd.member_id, cmd.group_instance_id)
    if cmd.generation_id != member.member_epoch:
        raise HeartbeatError(ErrorCode.illegal_generation)
    if member.classic is None:  # pragma: no cover - checked by _current_member
        raise AssertionError(member.member_id)
    names = {name for name, _ in member.classic.supported_protocols}
    if ((cmd.protocol_type is not None and cmd.protocol_type != PROTOCOL_TYPE)
            or (cmd.protocol_name is not None and cmd.protocol_name not in names)):
        raise HeartbeatError(ErrorCode.inconsistent_group_protocol)
    _raise_if_must_rejoin(env, group, member)
    _clear_deadline(env, group, member.member_id)
    touch_classic_session(env, group, member)
    protocol_name = cmd.protocol_name or member.classic.supported_protocols[0][0]
    return SyncGroupOutcome(protocol_type=PROTOCOL_TYPE, protocol_name=protocol_name,
                            assignment=assignment_bytes(group, member, env.image,
                                                        member.assigned))


def _raise_if_must_rejoin(env: ConsumerEnv, group: ConsumerGroup,
                          member: ConsumerGroupMember) -> None:
    """Kafka's `throwIfRebalanceInProgress`: a new group epoch since the member joined (unless
    it is still revoking: it must finish that first)."""
    if (group.group_epoch > member.member_epoch
            and member.state is not MemberState.UNREVOKED_PARTITIONS):
        _expect_rejoin(env, group, member)
        raise HeartbeatError(ErrorCode.rebalance_in_progress)


def _expect_rejoin(env: ConsumerEnv, group: ConsumerGroup, member: ConsumerGroupMember) -> None:
    if member.member_id not in group.classic_deadlines:
        _set_deadline(env, group, member.member_id, "join", member.rebalance_timeout_ms)


def waiting_on_unreleased_partition(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Kafka's `ConsumerGroup.waitingOnUnreleasedPartition`: some target partition the member
    does not have yet is still owned by another member."""
    if member.state is not MemberState.UNRELEASED_PARTITIONS:
        return False
    for topic_id, partitions in group.target.get(member.member_id, {}).items():
        have = member.assigned.get(topic_id, frozenset())
        for p in partitions - have:
            if group.owner_epoch(topic_id, p) != -1:
                return True
    return False


def classic_heartbeat(env: ConsumerEnv, group: ConsumerGroup, cmd: c.Heartbeat
                      ) -> HeartbeatOutcome:
    member = _current_member(group, cmd.member_id, cmd.group_instance_id)
    if cmd.generation_id != member.member_epoch:
        raise HeartbeatError(ErrorCode.illegal_generation)
    touch_classic_session(env, group, member)
    if (member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (member.state is MemberState.UNRELEASED_PARTITIONS
                and not waiting_on_unreleased_partition(group, member))):
        _expect_rejoin(env, group, member)
        return HeartbeatOutcome(error=ErrorCode.rebalance_in_progress)
    return HeartbeatOutcome()


def classic_leave(env: ConsumerEnv, group: ConsumerGroup, cmd: c.LeaveGroup
                  ) -> LeaveGroupOutcome:
    answers = []
    for identity in cmd.members:
        member_id = identity.member_id
        try:
            if identity.group_instance_id is None:
                member = _current_member(group, member_id, None)
            else:
                found = group.static_member(identity.group_instance_id)
                if found is None:
                    raise HeartbeatError(ErrorCode.unknown_member_id)
                if member_id != c.UNKNOWN_MEMBER_ID and found.member_id != member_id:
                    raise HeartbeatError(ErrorCode.fenced_instance_id)
                member = _current_member(group, found.member_id, None)
                member_id = member.member_id
        except HeartbeatError as exc:
            answers.append(LeaveMemberOutcome(member_id=member_id,
                                              group_instance_id=identity.group_instance_id,
                                              error=exc.error))
            continue
        group.classic_deadlines.pop(member_id, None)
        env.result.cancel(classic_key(group.group_id, member_id))
        fence_member(env, group, member, ev.RemovalCause.LEAVE,
                     identity.reason or "the member left the group (LeaveGroup)")
        answers.append(LeaveMemberOutcome(member_id=member_id,
                                          group_instance_id=identity.group_instance_id,
                                          error=ErrorCode.none))
    return LeaveGroupOutcome(members=tuple(answers))


def on_classic_deadline(env: ConsumerEnv, group: ConsumerGroup, member_id: str) -> None:
    """The rejoin or sync deadline of a classic member passed (or an early wake-up)."""
    pending = group.classic_deadlines.get(member_id)
    member = group.members.get(member_id)
    if pending is None or member is None:
        return
    kind, deadline = pending
    if deadline > env.now_ms:
        env.result.schedule(classic_key(group.group_id, member_id), deadline)
        return
    del group.classic_deadlines[member_id]
    what = "rejoin" if kind == "join" else "send its SyncGroup"
    fence_member(env, group, member, ev.RemovalCause.REBALANCE_TIMEOUT,
                 f"the classic member did not {what} within its rebalance timeout of "
                 f"{member.rebalance_timeout_ms}ms")
