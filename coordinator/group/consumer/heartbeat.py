"""ConsumerGroupHeartbeat: join, stay, move towards the target, leave (Kafka's
`GroupMetadataManager.consumerGroupHeartbeat`).

Longer than ~400 lines: one heartbeat carries a member through join, subscription change,
target assignment and reconciliation, each step writing its records; split further, a reader
would follow one request across files.

One heartbeat, in order:

1. Validate the request (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION).
2. Find or create the member: epoch 0 joins (a static member whose instance id was released
   with epoch -2 is replaced by the newcomer, which inherits its assignment: no rebalance); any
   other epoch must match the member's (or be its previous one, with owned partitions that are
   a subset of its assignment, when the last response was lost), else FENCED_MEMBER_EPOCH.
3. A changed subscription, or changed topic metadata of the subscribed topics, bumps the group
   epoch.
4. A group epoch ahead of the target assignment epoch computes a new target assignment.
5. The member takes one reconciliation step (`reconcile.py`).

Every change is a record, applied to the group at once (`group.apply`) and returned in the
Result; the reply is delivered once they are durable. The reply carries the assignment when
the member sent a full request (joining, or every optional field set) or when it changed.

Timers (deadlines live in the group, the wheel holds wake-ups):

    ("consumer-session", group_id, member_id)    session timeout, moved by every heartbeat
    ("consumer-rebalance", group_id, member_id)  revocation deadline of the current epoch
    ("consumer-disconnect", group_id, member_id) disconnect grace (`disconnect.py`)
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from coordinator.group import events as ev
from coordinator.group import record_helpers as rh
from coordinator.group.assignors import ASSIGNORS, MemberSpec
from coordinator.group.consumer.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatOutcome,
)
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.group import ConsumerGroup, TopicImage
from coordinator.group.consumer.member import (
    LEAVE_GROUP_EPOCH,
    LEAVE_GROUP_STATIC_EPOCH,
    Assignment,
    ConsumerGroupMember,
    MemberState,
    assignment_to_record,
    partition_count,
)
from coordinator.group.consumer.reconcile import reconcile
from coordinator.group.consumer.reconciling_interval import heartbeat_interval_for
from coordinator.group.result import Result, TimerKey
from coordinator.grouplog.records import (
    MAX_STORED_STRING_BYTES,
    ConsumerGroupRecord,
    SubscribedTopicMetadata,
)

__all__ = ["ConsumerEnv", "HeartbeatError", "fence_member", "heartbeat"]

GROUP_TYPE = "consumer"


def session_key(group_id: str, member_id: str) -> TimerKey:
    return ("consumer-session", group_id, member_id)


def rebalance_key(group_id: str, member_id: str) -> TimerKey:
    return ("consumer-rebalance", group_id, member_id)


def disconnect_key(group_id: str, member_id: str) -> TimerKey:
    return ("consumer-disconnect", group_id, member_id)


@dataclass(slots=True)
class ConsumerEnv:
    config: ConsumerGroupConfig
    image: TopicImage
    now_ms: int
    new_member_id: Callable[[str], str]
    result: Result


class HeartbeatError(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


# -- validation ----------------------------------------------------------------------------


def validate(config: ConsumerGroupConfig, cmd: ConsumerGroupHeartbeat) -> None:
    """Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.invalid_request, message)

    if cmd.group_id == "":
        raise invalid("GroupId can't be empty.")
    if _too_long_to_store(cmd):
        raise invalid("A string of the request is too long to be stored in the group log.")
    if cmd.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if cmd.rack_id == "":
        raise invalid("RackId can't be empty.")
    if cmd.member_epoch > 0 or cmd.member_epoch == LEAVE_GROUP_EPOCH:
        if cmd.member_id == "":
            raise invalid("MemberId can't be empty.")
    elif cmd.member_epoch == 0:
        if cmd.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if cmd.owned is None or any(cmd.owned.values()):
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not cmd.subscribed_topic_names and cmd.subscribed_topic_regex is None:
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first "
                          "request.")
    elif cmd.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
        if cmd.member_id == "":
            raise invalid("MemberId can't be empty.")
        if cmd.instance_id is None:
            raise invalid("InstanceId can't be null.")
    else:
        raise invalid("MemberEpoch is invalid.")
    if cmd.server_assignor is not None and cmd.server_assignor not in config.assignors:
        raise HeartbeatError(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {cmd.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(config.assignors)}.")
    if cmd.subscribed_topic_regex:
        try:
            compile_regex(cmd.subscribed_topic_regex)
        except re.error as exc:
            raise HeartbeatError(
                ErrorCode.invalid_regular_expression,
                f"SubscribedTopicRegex `{cmd.subscribed_topic_regex}` is not a valid regular "
                f"expression: {exc}.") from None


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _too_long_to_store(cmd: ConsumerGroupHeartbeat) -> bool:
    """A string the group log could not store. At most 4 bytes a character: only strings of
    more than a quarter of the limit in characters need encoding to be checked (none, in the
    steady state)."""
    limit = MAX_STORED_STRING_BYTES // 4
    texts = [cmd.group_id, cmd.member_id, cmd.client_id, cmd.client_host]
    for optional in (cmd.instance_id, cmd.rack_id, cmd.subscribed_topic_regex,
                     cmd.server_assignor):
        if optional is not None:
            texts.append(optional)
    if cmd.subscribed_topic_names:
        texts.extend(cmd.subscribed_topic_names)
    # A plain loop over lengths first: cheaper than a generator on every heartbeat.
    if max(map(len, texts)) <= limit:
        return False
    return any(len(text.encode()) > MAX_STORED_STRING_BYTES for text in texts)


def compile_regex(pattern: str) -> re.Pattern[str]:
    compiled = _REGEX_CACHE.get(pattern)
    if compiled is None:
        compiled = re.compile(pattern)
        if len(_REGEX_CACHE) < 1024:
            _REGEX_CACHE[pattern] = compiled
    return compiled


def _fenced(message: str) -> HeartbeatError:
    return HeartbeatError(ErrorCode.fenced_member_epoch, message)


def check_epoch(member: ConsumerGroupMember, received: int, owned: Assignment | None) -> None:
    """Kafka's `throwIfConsumerGroupMemberEpochIsInvalid`."""
    if received > member.member_epoch:
        raise _fenced(f"The consumer group member has a greater member epoch ({received}) than "
                      f"the one known by the group coordinator ({member.member_epoch}). The "
                      "member must abandon all its partitions and rejoin.")
    if received < member.member_epoch and (
            received != member.previous_member_epoch or not _subset(owned, member.assigned)):
        raise _fenced(f"The consumer group member has a smaller member epoch ({received}) than "
                      f"the one known by the group coordinator ({member.member_epoch}). The "
                      "member must abandon all its partitions and rejoin.")


def _subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(p <= assigned.get(t, frozenset()) for t, p in owned.items())


# -- records -------------------------------------------------------------------------------


def apply(env: ConsumerEnv, group: ConsumerGroup, record: ConsumerGroupRecord) -> None:
    group.apply(record)
    env.result.records.append(record)


# -- subscriptions -------------------------------------------------------------------------


def subscribed_topics(member: ConsumerGroupMember, image: TopicImage) -> set[str]:
    topics = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex:
        pattern = compile_regex(member.subscribed_topic_regex)
        # As Kafka, a regex never matches internal topics and must match the whole name.
        topics.update(name for name in image.by_name
                      if not name.startswith("__") and pattern.fullmatch(name))
    return topics


def subscription_metadata(group: ConsumerGroup, image: TopicImage
                          ) -> dict[str, SubscribedTopicMetadata]:
    names: set[str] = set()
    for member in group.members.values():
        names |= subscribed_topics(member, image)
    out = {}
    for name in sorted(names):
        info = image.by_name.get(name)
        if info is not None and info.partitions > 0:
            out[name] = SubscribedTopicMetadata(topic_id=info.topic_id, topic_name=name,
                                                num_partitions=info.partitions)
    return out


def refresh_metadata(env: ConsumerEnv, group: ConsumerGroup) -> bool:
    """Write new subscription metadata if it changed; True when it did (bump the epoch)."""
    group.metadata_version = env.image.version
    metadata = subscription_metadata(group, env.image)
    if metadata == group.subscription_metadata:
        return False
    apply(env, group, rh.consumer_group_subscription_metadata_record(
        group.group_id, metadata.values()))
    return True


# -- target assignment ---------------------------------------------------------------------


def compute_target(env: ConsumerEnv, group: ConsumerGroup, reason: str,
                   culprit: str | None) -> None:
    """A new target assignment at the group epoch: changed member targets, then the epoch."""
    assignor_name = group.preferred_assignor(env.config.assignors[0])
    assignor = ASSIGNORS[assignor_name]
    topics = {m.topic_id: m.num_partitions for m in group.subscription_metadata.values()}
    members = []
    for member_id in sorted(group.members):
        member = group.members[member_id]
        subscribed = frozenset(
            group.subscription_metadata[name].topic_id
            for name in subscribed_topics(member, env.image)
            if name in group.subscription_metadata)
        members.append(MemberSpec(member_id=member_id, instance_id=member.instance_id,
                                  subscribed=subscribed,
                                  current=group.target.get(member_id, {})))
    new_targets = assignor(members, topics)
    moved = 0
    for member_id in sorted(set(group.target) | set(new_targets)):
        new = new_targets.get(member_id)
        old = group.target.get(member_id)
        if new is None:
            if member_id not in group.members and old is not None:
                apply(env, group, rh.consumer_group_target_assignment_record(
                    group.group_id, member_id, None))
            continue
        if old is None or assignment_to_record(old) != assignment_to_record(new):
            moved += sum(len(p - (old or {}).get(t, frozenset())) for t, p in new.items())
            apply(env, group, rh.consumer_group_target_assignment_record(
                group.group_id, member_id, new))
    apply(env, group, rh.consumer_group_target_assignment_epoch_record(
        group.group_id, group.group_epoch))
    env.result.events.append(ev.TargetAssignmentComputed(
        ts_ms=env.now_ms, group_id=group.group_id, group_type=GROUP_TYPE,
        generation_id=group.group_epoch, assignor=assignor_name,
        member_count=len(group.members), partition_count=sum(topics.values()),
        moved_partitions=moved, reason=reason, member_id=culprit))


# -- reconciliation ------------------------------------------------------------------------


def maybe_reconcile(env: ConsumerEnv, group: ConsumerGroup, member: ConsumerGroupMember,
                    owned: Assignment | None) -> ConsumerGroupMember:
    if member.is_reconciled_to(group.assignment_epoch):
        return member
    target = group.target.get(member.member_id, {})
    updated = reconcile(member, group.assignment_epoch, target, group.owner_epoch, owned)
    if updated.assignment_equals(member):
        return member
    apply(env, group, rh.consumer_group_current_assignment_record(group.group_id, updated))
    updated = group.members[member.member_id]
    if updated.state is MemberState.UNREVOKED_PARTITIONS:
        deadline = env.now_ms + max(updated.rebalance_timeout_ms, 0)
        group.rebalance_deadlines[updated.member_id] = (updated.member_epoch, deadline)
        env.result.schedule(rebalance_key(group.group_id, updated.member_id), deadline)
    elif group.rebalance_deadlines.pop(updated.member_id, None) is not None:
        env.result.cancel(rebalance_key(group.group_id, updated.member_id))
    revoked = sum(len(p - updated.assigned.get(t, frozenset()) -
                      updated.pending_revocation.get(t, frozenset()))
                  for t, p in {**member.assigned, **member.pending_revocation}.items())
    env.result.events.append(ev.MemberReconciled(
        ts_ms=env.now_ms, group_id=group.group_id, group_type=GROUP_TYPE,
        generation_id=updated.member_epoch, previous_generation_id=member.member_epoch,
        member_id=updated.member_id, member_state=updated.state.name.lower(),
        assigned_partitions=partition_count(updated.assigned),
        partitions_assigned=sum(len(p - member.assigned.get(t, frozenset()))
                                for t, p in updated.assigned.items()),
        partitions_revoked=revoked,
        partitions_pending_revocation=partition_count(updated.pending_revocation)))
    return updated


# -- session -------------------------------------------------------------------------------


def touch_session(env: ConsumerEnv, group: ConsumerGroup, member_id: str) -> None:
    """Move the session deadline; the wheel is only told when no wake-up is pending."""
    deadline = env.now_ms + env.config.session_timeout_ms
    had = member_id in group.session_deadlines
    group.session_deadlines[member_id] = deadline
    if not had:
        env.result.schedule(session_key(group.group_id, member_id), deadline)


# -- the heartbeat -------------------------------------------------------------------------


def heartbeat(env: ConsumerEnv, groups: dict[str, ConsumerGroup],
              cmd: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatOutcome:
    """Raises HeartbeatError for an error answer (nothing changed)."""
    validate(env.config, cmd)
    if cmd.member_epoch in (LEAVE_GROUP_EPOCH, LEAVE_GROUP_STATIC_EPOCH):
        return leave(env, groups, cmd)
    group = groups.get(cmd.group_id)
    if group is None:
        if cmd.member_epoch != 0:
            raise HeartbeatError(ErrorCode.group_id_not_found,
                                 f"Consumer group {cmd.group_id} not found.")
        group = ConsumerGroup(group_id=cmd.group_id)
    member_id = cmd.member_id or env.new_member_id(cmd.client_id or "consumer")
    known = member_id in group.members or (
        cmd.instance_id is not None and cmd.instance_id in group.static_members)
    if not known and len(group.members) >= env.config.max_size:
        raise HeartbeatError(
            ErrorCode.group_max_size_reached,
            f"The consumer group has reached its maximum capacity of {env.config.max_size} "
            "members.")
    member, replaced = _find_member(group, member_id, cmd)
    groups[cmd.group_id] = group
    if replaced is not None:
        _replace_static_member(env, group, replaced, member)
    elif member_id not in group.members:
        env.result.events.append(ev.MemberAdded(
            ts_ms=env.now_ms, group_id=group.group_id, generation_id=group.group_epoch,
            member_id=member_id, group_instance_id=cmd.instance_id, client_id=cmd.client_id,
            client_host=cmd.client_host))

    updated = member if _unchanged(member, cmd) else replace(
        member,
        instance_id=cmd.instance_id if cmd.instance_id is not None else member.instance_id,
        rack_id=cmd.rack_id if cmd.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(cmd.rebalance_timeout_ms if cmd.rebalance_timeout_ms != -1
                              else member.rebalance_timeout_ms),
        server_assignor=(cmd.server_assignor if cmd.server_assignor is not None
                         else member.server_assignor),
        subscribed_topic_names=(tuple(sorted(set(cmd.subscribed_topic_names)))
                                if cmd.subscribed_topic_names is not None
                                else member.subscribed_topic_names),
        subscribed_topic_regex=(cmd.subscribed_topic_regex or None
                                if cmd.subscribed_topic_regex is not None
                                else member.subscribed_topic_regex),
        client_id=cmd.client_id,
        client_host=cmd.client_host,
    )
    bump = False
    reason = ""
    is_new = member_id not in group.members
    if is_new or (updated is not member and not updated.subscription_equals(member)):
        apply(env, group, rh.consumer_group_member_subscription_record(group.group_id, updated))
        if (is_new or updated.subscribed_topic_names != member.subscribed_topic_names
                or updated.subscribed_topic_regex != member.subscribed_topic_regex):
            bump = True
            reason = "member joined" if is_new else "subscription changed"
    if bump or group.metadata_version != env.image.version:
        if refresh_metadata(env, group) and not bump:
            bump, reason = True, "subscribed topic metadata changed"
        if bump:
            apply(env, group, rh.consumer_group_epoch_record(group.group_id, group.group_epoch + 1))
            group.epoch_reason = reason
    if group.group_epoch > group.assignment_epoch:
        compute_target(env, group, group.epoch_reason or "group epoch ahead", member_id)
    before = group.members[member_id]
    after = maybe_reconcile(env, group, before, cmd.owned)
    touch_session(env, group, member_id)

    full = cmd.member_epoch == 0 or (cmd.rebalance_timeout_ms != -1
                                     and cmd.subscribed_topic_names is not None
                                     and cmd.owned is not None)
    changed = after is not member and _nonempty(member.assigned) != _nonempty(after.assigned)
    return ConsumerGroupHeartbeatOutcome(
        member_id=member_id, member_epoch=after.member_epoch,
        heartbeat_interval_ms=heartbeat_interval_for(env.config, after),
        assignment=after.assigned if (full or changed or replaced is not None) else None)


def _nonempty(assignment: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return {t: p for t, p in assignment.items() if p}


def _unchanged(member: ConsumerGroupMember, cmd: ConsumerGroupHeartbeat) -> bool:
    """The steady-state heartbeat: nothing in it changes the member (no copy needed)."""
    return (
        (cmd.instance_id is None or cmd.instance_id == member.instance_id)
        and (cmd.rack_id is None or cmd.rack_id == member.rack_id)
        and (cmd.rebalance_timeout_ms == -1
             or cmd.rebalance_timeout_ms == member.rebalance_timeout_ms)
        and (cmd.server_assignor is None or cmd.server_assignor == member.server_assignor)
        and (cmd.subscribed_topic_names is None
             or tuple(sorted(set(cmd.subscribed_topic_names)))
             == member.subscribed_topic_names)
        and (cmd.subscribed_topic_regex is None
             or (cmd.subscribed_topic_regex or None) == member.subscribed_topic_regex)
        and cmd.client_id == member.client_id
        and cmd.client_host == member.client_host
    )


def _find_member(group: ConsumerGroup, member_id: str, cmd: ConsumerGroupHeartbeat
                 ) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
    """(the member, the static member it replaces or None)."""
    if cmd.instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            if cmd.member_epoch != 0:
                raise HeartbeatError(ErrorCode.unknown_member_id,
                                     f"Member {member_id} is not a member of group "
                                     f"{group.group_id}.")
            return ConsumerGroupMember(member_id=member_id), None
        check_epoch(member, cmd.member_epoch, cmd.owned)
        return member, None
    existing = group.static_member(cmd.instance_id)
    if cmd.member_epoch == 0:
        if existing is None:
            member = group.members.get(member_id)
            if member is not None:
                check_epoch(member, 0, cmd.owned)
                return member, None
            return ConsumerGroupMember(member_id=member_id), None
        # Even under its own member id: a static member rejoins only after releasing its
        # instance id with epoch -2 (Kafka's `throwIfInstanceIdIsUnreleased`).
        if existing.member_epoch != LEAVE_GROUP_STATIC_EPOCH:
            raise HeartbeatError(
                ErrorCode.unreleased_instance_id,
                f"Static member {member_id} with instance id {cmd.instance_id} cannot join the "
                f"group because the instance id is owned by {existing.member_id} member.")
        return replace(existing, member_id=member_id, member_epoch=0,
                       previous_member_epoch=0, classic=None), existing
    if existing is None:
        raise HeartbeatError(ErrorCode.unknown_member_id,
                             f"Instance id {cmd.instance_id} is unknown.")
    if existing.member_id != member_id:
        raise HeartbeatError(ErrorCode.fenced_instance_id,
                             f"Static member {member_id} with instance id {cmd.instance_id} "
                             f"was fenced by member {existing.member_id}.")
    check_epoch(existing, cmd.member_epoch, cmd.owned)
    return existing, None


def _replace_static_member(env: ConsumerEnv, group: ConsumerGroup, old: ConsumerGroupMember,
                           new: ConsumerGroupMember) -> None:
    """Kafka's `replaceMember`: the newcomer inherits the old member's target and assignment,
    so the group epoch does not move and nobody else notices."""
    target = group.target.get(old.member_id, {})
    for record in rh.consumer_group_member_tombstones(group.group_id, old.member_id):
        apply(env, group, record)
    _drop_timers(env, group, old.member_id)
    apply(env, group, rh.consumer_group_member_subscription_record(group.group_id, new))
    apply(env, group, rh.consumer_group_target_assignment_record(
        group.group_id, new.member_id, target))
    apply(env, group, rh.consumer_group_current_assignment_record(group.group_id, new))
    env.result.events.append(ev.StaticMemberReplaced(
        ts_ms=env.now_ms, group_id=group.group_id, generation_id=group.group_epoch,
        group_instance_id=new.instance_id or "", old_member_id=old.member_id,
        member_id=new.member_id, client_id=new.client_id, client_host=new.client_host,
        rebalance=False))


# -- leaving and fencing -------------------------------------------------------------------


def leave(env: ConsumerEnv, groups: dict[str, ConsumerGroup], cmd: ConsumerGroupHeartbeat
          ) -> ConsumerGroupHeartbeatOutcome:
    group = groups.get(cmd.group_id)
    if group is None:
        raise HeartbeatError(ErrorCode.group_id_not_found,
                             f"Consumer group {cmd.group_id} not found.")
    if cmd.instance_id is None:
        member = group.members.get(cmd.member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id,
                                 f"Member {cmd.member_id} is not a member of group "
                                 f"{group.group_id}.")
    else:
        member = group.static_member(cmd.instance_id)
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id,
                                 f"Instance id {cmd.instance_id} is unknown.")
        if member.member_id != cmd.member_id:
            raise HeartbeatError(ErrorCode.fenced_instance_id,
                                 f"Static member {cmd.member_id} with instance id "
                                 f"{cmd.instance_id} was fenced by member {member.member_id}.")
        if cmd.member_epoch == LEAVE_GROUP_STATIC_EPOCH:
            # It will be back: keep its partitions (nobody else gets them) until its session
            # expires or it rejoins under a new member id.
            leaving = replace(member, member_epoch=LEAVE_GROUP_STATIC_EPOCH,
                              pending_revocation={})
            apply(env, group, rh.consumer_group_current_assignment_record(group.group_id, leaving))
            return ConsumerGroupHeartbeatOutcome(member_id=member.member_id,
                                                 member_epoch=LEAVE_GROUP_STATIC_EPOCH)
    fence_member(env, group, member, ev.RemovalCause.LEAVE, "the member left the group")
    return ConsumerGroupHeartbeatOutcome(member_id=cmd.member_id, member_epoch=cmd.member_epoch)


def fence_member(env: ConsumerEnv, group: ConsumerGroup, member: ConsumerGroupMember,
                 cause: ev.RemovalCause, reason: str) -> None:
    """Kafka's `consumerGroupFenceMember`: remove it, refresh metadata, bump the epoch."""
    for record in rh.consumer_group_member_tombstones(group.group_id, member.member_id):
        apply(env, group, record)
    _drop_timers(env, group, member.member_id)
    refresh_metadata(env, group)
    apply(env, group, rh.consumer_group_epoch_record(group.group_id, group.group_epoch + 1))
    group.epoch_reason = f"member removed ({cause.value})"
    env.result.events.append(ev.MemberRemoved(
        ts_ms=env.now_ms, group_id=group.group_id, generation_id=group.group_epoch,
        member_id=member.member_id, group_instance_id=member.instance_id,
        client_id=member.client_id, client_host=member.client_host, cause=cause,
        reason=reason))
    if not group.members:
        env.result.events.append(ev.GroupEmpty(ts_ms=env.now_ms, group_id=group.group_id,
                                               generation_id=group.group_epoch))


def _drop_timers(env: ConsumerEnv, group: ConsumerGroup, member_id: str) -> None:
    group.session_deadlines.pop(member_id, None)
    group.rebalance_deadlines.pop(member_id, None)
    group.connections.pop(member_id, None)
    group.other_connections.pop(member_id, None)
    env.result.cancel(session_key(group.group_id, member_id))
    env.result.cancel(rebalance_key(group.group_id, member_id))
    group.disconnect_deadlines.pop(member_id, None)
    env.result.cancel(disconnect_key(group.group_id, member_id))


def owned_from_wire(topics: object) -> Assignment | None:
    """Helper for the API layer: kio TopicPartitions entries -> Assignment (None stays None)."""
    if topics is None:
        return None
    out: dict[uuid.UUID, frozenset[int]] = {}
    for entry in topics:  # type: ignore[attr-defined]
        if entry.topic_id is None:
            continue
        out[entry.topic_id] = out.get(entry.topic_id, frozenset()) | frozenset(entry.partitions)
    return out
