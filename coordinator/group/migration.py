"""Online migration between the two group types, with their members
(`group.consumer.migration.policy`, Kafka's `convertToConsumerGroup` / `convertToClassicGroup`).

Upgrade: a consumer-protocol member joins a classic group that has members. The classic group
is deleted (its GroupMetadata tombstone first) and a consumer group at the same epoch takes its
place, written as Kafka writes it: every member's subscription, the group epoch, every member's
target assignment (= the partitions the classic assignment gave it), the target assignment
epoch, every member's current assignment (Stable at the classic generation). The classic members
keep their partitions and keep speaking the classic protocol (`consumer/classic_members.py`);
the newcomer's join then bumps the epoch and the partitions move revoke-before-assign. Requests
parked in a rebalance of the classic group are answered REBALANCE_IN_PROGRESS (they rejoin).

Downgrade: the last consumer-protocol member of a consumer group whose other members all speak
the classic protocol left or was fenced. Every record of the consumer group gets its tombstone,
a classic group at the group epoch is written with each member's assignment, and it
starts a rebalance so that the members rejoin with JoinGroup. (Kafka writes each member's
target assignment into the classic group; this writes what the member may still own, see
`consumer_to_classic`.)

Both are pure: records, timers and events go into the given Result; the caller swaps the
groups in its maps.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.group import events as ev
from coordinator.group import record_helpers as rh
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.member import ClassicGroupMember
from coordinator.group.classic.state import GroupState
from coordinator.group.commands import Protocol
from coordinator.group.consumer.classic_members import (
    PROTOCOL_TYPE,
    assignment_bytes,
    classic_key,
    to_ids,
)
from coordinator.group.consumer.group import ConsumerGroup, TopicImage
from coordinator.group.consumer.heartbeat import (
    disconnect_key,
    rebalance_key,
    session_key,
)
from coordinator.group.consumer.member import ConsumerGroupMember, MemberState
from coordinator.group.embedded_protocol import (
    EmbeddedProtocolError,
    parse_assignment,
    parse_subscription,
)
from coordinator.group.outcomes import JoinGroupOutcome, SyncGroupOutcome
from coordinator.grouplog.records import (
    ClassicMemberMetadata,
    ConsumerGroupRecord,
)

__all__ = ["ConversionWrite", "UpgradeRefused", "classic_to_consumer", "consumer_to_classic"]

CONSUMER_GROUP_TYPE = "consumer"
CLASSIC_GROUP_TYPE = "classic"


@dataclass(frozen=True, slots=True)
class ConversionWrite:
    """A conversion waiting for its records (`Result.writes`). If they fail, the group goes
    back to what the log has: the runtime rebuilds the consumer side from the log, and the
    migrator drops a downgrade's new classic group or restores an upgrade's `replaced` one
    from its last durable record."""

    group_id: str
    direction: str  # "upgrade" | "downgrade"
    replaced: ClassicGroup | None


class UpgradeRefused(Exception):
    """The classic group cannot become a consumer group (GROUP_ID_NOT_FOUND, as Kafka)."""


def classic_to_consumer(env: rb.Env, classic: ClassicGroup, image: TopicImage, max_size: int,
                        member_id: str | None) -> ConsumerGroup:
    """The consumer group replacing `classic` (records, timers, events into `env.result`).
    Raises UpgradeRefused (nothing changed) when it cannot be converted."""
    if classic.protocol_type != PROTOCOL_TYPE:
        raise UpgradeRefused(f"Group {classic.group_id} does not use the consumer embedded "
                             "protocol.")
    if len(classic.members) > max_size:
        raise UpgradeRefused(f"Group {classic.group_id} has more members than a consumer "
                             "group may have.")
    protocol = classic.protocol_name
    members = []
    try:
        for m in classic.members.values():
            metadata = _metadata(m, protocol)
            subscription = parse_subscription(metadata) if metadata else None
            assigned = to_ids(parse_assignment(m.assignment), image)
            members.append(ConsumerGroupMember(
                member_id=m.member_id, instance_id=m.group_instance_id,
                rack_id=subscription.rack_id if subscription else None,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics)))
                if subscription else (),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                member_epoch=classic.generation_id,
                previous_member_epoch=classic.generation_id,
                state=MemberState.STABLE, assigned=assigned,
                classic=ClassicMemberMetadata(
                    session_timeout_ms=m.session_timeout_ms,
                    supported_protocols=tuple((p.name, p.metadata) for p in m.protocols))))
    except EmbeddedProtocolError as exc:
        raise UpgradeRefused(f"Cannot upgrade the classic group {classic.group_id}: its "
                             f"embedded consumer protocol is malformed ({exc}).") from None

    # Whoever waits in a rebalance of the classic group must rejoin (now a consumer group).
    for m in list(classic.members.values()):
        rb.complete_join_of(env, classic, m, JoinGroupOutcome(
            error=ErrorCode.rebalance_in_progress, member_id=m.member_id))
        rb.complete_sync_of(env, classic, m, SyncGroupOutcome(
            error=ErrorCode.rebalance_in_progress))
        rb.cancel_heartbeat(env, classic, m)
        env.result.cancel(rb.disconnect_key(classic.group_id, m.member_id))
    for pending in list(classic.pending_members):
        env.result.cancel(rb.heartbeat_key(classic.group_id, pending))
    env.result.cancel(rb.join_key(classic.group_id))
    env.result.cancel(rb.sync_key(classic.group_id))
    classic.transition_to(GroupState.DEAD, env.now_ms)

    group_id = classic.group_id
    epoch = classic.generation_id
    records: list[ConsumerGroupRecord] = []
    records.extend(rh.consumer_group_member_subscription_record(group_id, m) for m in members)
    records.append(rh.consumer_group_epoch_record(group_id, epoch))
    records.extend(rh.consumer_group_target_assignment_record(group_id, m.member_id, m.assigned)
                   for m in members)
    records.append(rh.consumer_group_target_assignment_epoch_record(group_id, epoch))
    records.extend(rh.consumer_group_current_assignment_record(group_id, m) for m in members)

    env.result.records.append(rh.group_metadata_tombstone(group_id))
    group = ConsumerGroup(group_id=group_id)
    for record in records:
        group.apply(record)
        env.result.records.append(record)
    for converted in members:
        timeout = converted.classic.session_timeout_ms if converted.classic else 0
        group.session_deadlines[converted.member_id] = env.now_ms + timeout
        env.result.schedule(session_key(group_id, converted.member_id), env.now_ms + timeout)
    for m in classic.members.values():
        # Disconnect-fast failover carries over: the connection, and a grace already running.
        if m.connection_id is not None:
            group.connections[m.member_id] = m.connection_id
        if m.other_connections:
            group.other_connections[m.member_id] = set(m.other_connections)
        if m.disconnect_deadline_ms is not None:
            group.disconnect_deadlines[m.member_id] = m.disconnect_deadline_ms
            env.result.schedule(disconnect_key(group_id, m.member_id), m.disconnect_deadline_ms)
    env.result.events.append(ev.GroupConverted(
        ts_ms=env.now_ms, group_id=group_id, generation_id=epoch, direction="upgrade",
        from_type=CLASSIC_GROUP_TYPE, to_type=CONSUMER_GROUP_TYPE, member_count=len(members),
        reason="a consumer-protocol member joined the classic group", member_id=member_id))
    return group


def _metadata(member: ClassicGroupMember, protocol: str | None) -> bytes:
    for p in member.protocols:
        if protocol is None or p.name == protocol:
            return p.metadata
    return member.protocols[0].metadata if member.protocols else b""


def can_downgrade(group: ConsumerGroup, classic_max_size: int) -> bool:
    """Every member left speaks the classic protocol, and there is one at least."""
    return (0 < len(group.members) <= classic_max_size
            and all(m.classic is not None for m in group.members.values()))


def consumer_to_classic(env: rb.Env, group: ConsumerGroup, image: TopicImage,
                        generation_id: int, member_id: str | None) -> ClassicGroup:
    """The classic group replacing `group` (whose members all speak the classic protocol),
    at `generation_id`, already preparing a rebalance."""
    group_id = group.group_id
    result = env.result
    for mid in group.members:
        result.records.append(rh.consumer_group_current_assignment_tombstone(group_id, mid))
    for mid in group.members:
        result.records.append(rh.consumer_group_target_assignment_record(group_id, mid, None))
    result.records.append(rh.consumer_group_target_assignment_epoch_tombstone(group_id))
    for mid in group.members:
        result.records.append(rh.consumer_group_member_subscription_tombstone(group_id, mid))
    result.records.append(rh.consumer_group_subscription_metadata_tombstone(group_id))
    result.records.append(rh.consumer_group_epoch_tombstone(group_id))
    for mid in group.members:
        for key in (session_key(group_id, mid), rebalance_key(group_id, mid),
                    classic_key(group_id, mid), disconnect_key(group_id, mid)):
            result.cancel(key)

    classic = ClassicGroup(group_id=group_id, state=GroupState.STABLE,
                           previous_state=GroupState.STABLE, state_timestamp_ms=env.now_ms,
                           generation_id=generation_id, protocol_type=PROTOCOL_TYPE)
    for m in group.members.values():
        assert m.classic is not None
        classic.restore_member(ClassicGroupMember(
            member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
            session_timeout_ms=m.classic.session_timeout_ms, protocol_type=PROTOCOL_TYPE,
            protocols=tuple(Protocol(name=n, metadata=d)
                            for n, d in m.classic.supported_protocols)))
    classic.protocol_name = classic.select_protocol()
    classic.leader_id = next(iter(classic.members), None)
    for member in classic.members.values():
        # Kafka stores each member's target assignment here. This stores what the member may
        # still own (assigned or being revoked): until the rebalance ends, that is what it
        # holds, and a new upgrade during the rebalance must not hand it to someone else.
        cm = group.members[member.member_id]
        owned = {t: p | cm.pending_revocation.get(t, frozenset())
                 for t, p in cm.assigned.items()}
        for t, p in cm.pending_revocation.items():
            owned.setdefault(t, p)
        member.assignment = assignment_bytes(group, cm, image, owned)
        rb.schedule_heartbeat(env, classic, member)
        # Disconnect-fast failover carries over (the coordinator indexes the connections).
        member.connection_id = group.connections.get(member.member_id)
        member.other_connections = set(group.other_connections.get(member.member_id, ())) or None
        deadline = group.disconnect_deadlines.get(member.member_id)
        if deadline is not None:
            member.disconnect_deadline_ms = deadline
            env.result.schedule(rb.disconnect_key(group_id, member.member_id), deadline)
    rb.store_group(env, classic)
    env.result.events.append(ev.GroupConverted(
        ts_ms=env.now_ms, group_id=group_id, generation_id=generation_id,
        direction="downgrade", from_type=CONSUMER_GROUP_TYPE, to_type=CLASSIC_GROUP_TYPE,
        member_count=len(classic.members),
        reason="the last consumer-protocol member left the group", member_id=member_id))
    rb.prepare_rebalance(env, classic, f"downgrade group {group_id} from consumer to classic",
                         ev.RebalanceCause.OTHER)
    return classic
