"""Every consumer group of this node: dispatch, timers, replay, describe and the offset checks.

A little over 400 lines: the entry points of one group type, each short; the rules are in the
modules it calls.

The service (`coordinator/group/service.py`) routes the consumer group APIs to it; the two group
types share one id space (a group id names either a classic or a consumer group; a group changing
type is `coordinator/group/migrator.py`'s).

The broker's topics reach the core as a `TopicImage` value set by the runtime
(`set_topic_image`) whenever topics are created, deleted or grow; a group notices a new image
on its next heartbeat (Kafka's metadata refresh), recomputes the subscribed topics' metadata
and bumps its epoch when it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group import events as ev
from coordinator.group import record_helpers as rh
from coordinator.group.consumer import classic_members as cm
from coordinator.group.consumer import disconnect
from coordinator.group.consumer.commands import (
    ConsumerGroupDescribe,
    ConsumerGroupDescribeOutcome,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatOutcome,
    DescribedConsumerGroup,
    DescribedConsumerMember,
)
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.durable import DurableRecords
from coordinator.group.consumer.group import ConsumerGroup, ConsumerGroupState, TopicImage
from coordinator.group.consumer.heartbeat import (
    ConsumerEnv,
    HeartbeatError,
    disconnect_key,
    fence_member,
    heartbeat,
    rebalance_key,
    session_key,
)
from coordinator.group.consumer.member import Assignment
from coordinator.group.consumer.steady import steady_heartbeat
from coordinator.group.outcomes import (
    HeartbeatOutcome,
    JoinGroupOutcome,
    LeaveGroupOutcome,
    SyncGroupOutcome,
)
from coordinator.group.result import Reply, Result, TimerKey
from coordinator.grouplog.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupRecord,
)

__all__ = ["ConsumerGroupCoordinator"]

TIMER_KINDS = frozenset({"consumer-session", "consumer-rebalance", "consumer-disconnect",
                         cm.CLASSIC_TIMER_KIND})

# READ, DELETE, DESCRIBE as a bit field (no authorizer: everything allowed), as the classic side.
_GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)


class ConsumerGroupCoordinator:
    def __init__(self, config: ConsumerGroupConfig, new_member_id: Callable[[str], str]) -> None:
        self.config = config
        self.image = TopicImage()
        self._new_member_id = new_member_id
        self._groups: dict[str, ConsumerGroup] = {}
        # connection id -> (group id, member id) of dynamic members whose requests came on it;
        # an entry is stale once the member moved to another connection (checked on close).
        self._members_by_connection: dict[int, set[tuple[str, str]]] = {}
        self._durable = DurableRecords()  # what a failed write goes back to

    # -- reading ---------------------------------------------------------------------------

    @property
    def groups(self) -> Mapping[str, ConsumerGroup]:
        return MappingProxyType(self._groups)

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self._groups.get(group_id)

    def __iter__(self) -> Iterator[ConsumerGroup]:
        return iter(self._groups.values())

    def set_topic_image(self, image: TopicImage) -> None:
        self.image = image

    def _env(self, now_ms: int) -> ConsumerEnv:
        return ConsumerEnv(config=self.config, image=self.image, now_ms=now_ms,
                           new_member_id=self._new_member_id, result=Result())

    # -- commands --------------------------------------------------------------------------

    def heartbeat(self, cmd: ConsumerGroupHeartbeat, now_ms: int) -> Result:
        steady = steady_heartbeat(self.config, self.image, self._groups, cmd, now_ms)
        if steady is not None:
            return Result(replies=[Reply(cmd.ref, steady)])
        env = self._env(now_ms)
        try:
            outcome = heartbeat(env, self._groups, cmd)
        except HeartbeatError as exc:
            outcome = ConsumerGroupHeartbeatOutcome(error=exc.error, error_message=exc.message,
                                                    member_id=cmd.member_id or None,
                                                    member_epoch=cmd.member_epoch)
        else:
            if outcome.member_id and outcome.member_epoch >= 0:
                self._bind_connection(env, cmd.group_id, outcome.member_id,
                                      cmd.ref.connection_id)
        env.result.replies.append(Reply(cmd.ref, outcome))
        return env.result

    def classic_request(self, cmd: c.JoinGroup | c.SyncGroup | c.Heartbeat | c.LeaveGroup,
                        now_ms: int, kept_connection: bool = False) -> Result:
        """A classic-protocol request to an existing consumer group (`classic_members.py`).
        `kept_connection`: the connection carried a JoinGroup or SyncGroup before, so an
        accepted one makes it the member's own (`disconnect.py`)."""
        env = self._env(now_ms)
        group = self._groups[cmd.group_id]
        outcome: object
        try:
            match cmd:
                case c.JoinGroup():
                    outcome = cm.classic_join(env, group, cmd)
                case c.SyncGroup():
                    outcome = cm.classic_sync(env, group, cmd)
                case c.Heartbeat():
                    outcome = cm.classic_heartbeat(env, group, cmd)
                case c.LeaveGroup():
                    outcome = cm.classic_leave(env, group, cmd)
        except HeartbeatError as exc:
            match cmd:
                case c.JoinGroup():
                    outcome = JoinGroupOutcome(error=exc.error, member_id=cmd.member_id)
                case c.SyncGroup():
                    outcome = SyncGroupOutcome(error=exc.error)
                case c.Heartbeat():
                    outcome = HeartbeatOutcome(error=exc.error)
                case c.LeaveGroup():  # pragma: no cover - answered per member
                    outcome = LeaveGroupOutcome(error=exc.error)
        else:
            error = getattr(outcome, "error", ErrorCode.none)
            accepted = error in (ErrorCode.none, ErrorCode.rebalance_in_progress)
            target = self._groups.get(cmd.group_id)
            match cmd:
                case c.Heartbeat() if accepted:
                    self._bind_connection(env, cmd.group_id, cmd.member_id,
                                          cmd.ref.connection_id)
                case c.JoinGroup() | c.SyncGroup() if accepted and target is not None:
                    # A connection's first JoinGroup/SyncGroup may be its only one (kafka-go):
                    # it ends a grace but is not the member's (`disconnect.py`).
                    member_id = getattr(outcome, "member_id", None) or cmd.member_id
                    if member_id and kept_connection:
                        self._bind_connection(env, cmd.group_id, member_id,
                                              cmd.ref.connection_id)
                    elif member_id:
                        disconnect.note_alive(env, target, member_id)
        env.result.replies.append(Reply(cmd.ref, outcome))
        return env.result

    # -- connections (`disconnect.py`) -------------------------------------------------------

    def _bind_connection(self, env: ConsumerEnv, group_id: str, member_id: str,
                         connection_id: int) -> None:
        group = self._groups.get(group_id)
        if group is not None and disconnect.bind_connection(env, group, member_id,
                                                            connection_id):
            self._members_by_connection.setdefault(connection_id, set()).add(
                (group_id, member_id))

    def note_request(self, group_id: str, member_id: str, connection_id: int,
                     now_ms: int) -> Result:
        """An accepted request other than a heartbeat (an OffsetCommit) spoke for the member."""
        env = self._env(now_ms)
        self._bind_connection(env, group_id, member_id, connection_id)
        return env.result

    def connection_closed(self, connection_id: int, now_ms: int) -> Result:
        """Dynamic members left with no open connection of their own are fenced after the
        disconnect grace unless they are heard from again (`disconnect.py`)."""
        members = self._members_by_connection.pop(connection_id, None)
        env = self._env(now_ms)
        for group_id, member_id in sorted(members or ()):
            group = self._groups.get(group_id)
            if group is not None:
                disconnect.connection_lost(env, group, member_id, connection_id)
        return env.result

    def adopt(self, group: ConsumerGroup) -> None:
        """Take over a group built elsewhere (an upgraded classic group, `migration.py`)."""
        self._groups[group.group_id] = group
        for member_id, connection_id in group.connections.items():
            self._members_by_connection.setdefault(connection_id, set()).add(
                (group.group_id, member_id))
        for member_id, others in group.other_connections.items():
            for connection_id in others:
                self._members_by_connection.setdefault(connection_id, set()).add(
                    (group.group_id, member_id))

    def describe(self, cmd: ConsumerGroupDescribe) -> Result:
        return Result.reply(cmd.ref, ConsumerGroupDescribeOutcome(
            groups=tuple(self._describe(group_id, cmd) for group_id in cmd.group_ids)))

    def _describe(self, group_id: str, cmd: ConsumerGroupDescribe) -> DescribedConsumerGroup:
        group = self._groups.get(group_id)
        if group_id == "":
            return DescribedConsumerGroup(group_id=group_id, error=ErrorCode.invalid_group_id)
        if group is None:
            return DescribedConsumerGroup(group_id=group_id,
                                          error=ErrorCode.group_id_not_found,
                                          error_message=f"Group {group_id} not found.")

        def named(assignment: Assignment) -> tuple[tuple, ...]:
            names = {m.topic_id: m.topic_name for m in group.subscription_metadata.values()}
            return tuple(sorted(
                (t, names.get(t) or self.image.name_of(t), tuple(sorted(p)))
                for t, p in assignment.items() if p))

        return DescribedConsumerGroup(
            group_id=group_id,
            state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_assignor(self.config.assignors[0]),
            members=tuple(
                DescribedConsumerMember(
                    member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                    member_epoch=m.member_epoch, client_id=m.client_id,
                    client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
                    subscribed_topic_regex=m.subscribed_topic_regex,
                    assignment=named(m.assigned),
                    target_assignment=named(group.target.get(m.member_id, {})))
                for m in group.members.values()),
            authorized_operations=(_GROUP_AUTHORIZED_OPERATIONS
                                   if cmd.include_authorized_operations else -(2**31)),
        )

    # -- timers ----------------------------------------------------------------------------

    def expire(self, key: TimerKey, now_ms: int) -> Result:
        env = self._env(now_ms)
        kind, group_id, member_id = str(key[0]), str(key[1]), str(key[2])
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return env.result
        if kind == cm.CLASSIC_TIMER_KIND:
            cm.on_classic_deadline(env, group, member_id)
        elif kind == "consumer-disconnect":
            disconnect.on_disconnect_deadline(env, group, member_id)
        elif kind == "consumer-session":
            deadline = group.session_deadlines.get(member_id)
            if deadline is None:
                return env.result
            if deadline > now_ms:
                env.result.schedule(session_key(group_id, member_id), deadline)
                return env.result
            fence_member(env, group, member, ev.RemovalCause.SESSION_EXPIRY,
                         "the member session expired")
        elif kind == "consumer-rebalance":
            pending = group.rebalance_deadlines.get(member_id)
            if pending is None:
                return env.result
            epoch, deadline = pending
            if deadline > now_ms:
                env.result.schedule(rebalance_key(group_id, member_id), deadline)
                return env.result
            if member.member_epoch == epoch:
                fence_member(env, group, member, ev.RemovalCause.REBALANCE_TIMEOUT,
                             f"the member failed to revoke its partitions of epoch {epoch} "
                             f"within {member.rebalance_timeout_ms}ms")
            else:
                group.rebalance_deadlines.pop(member_id, None)
        return env.result

    # -- offsets ---------------------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int,
                               api_version: int) -> ErrorCode | None:
        """Kafka's `ConsumerGroup.validateOffsetCommit` (the group exists)."""
        group = self._groups[group_id]
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member.classic is not None:  # its generation is its member epoch
            return None if member_epoch == member.member_epoch else ErrorCode.illegal_generation
        if api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int
                              ) -> ErrorCode | None:
        """Kafka's `ConsumerGroup.validateOffsetFetch`."""
        group = self._groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return (ErrorCode.illegal_generation if member.classic is not None
                    else ErrorCode.stale_member_epoch)
        return None

    def delete_group(self, group_id: str, now_ms: int, reason: str = "group deleted"
                     ) -> tuple[ErrorCode | None, Result]:
        """DeleteGroups / expiry of an Empty consumer group, or a classic group taking its
        place (`reason`): every record's tombstone."""
        env = self._env(now_ms)
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, env.result
        if group.members:
            return ErrorCode.non_empty_group, env.result
        env.result.records.extend([
            rh.consumer_group_target_assignment_epoch_tombstone(group_id),
            rh.consumer_group_subscription_metadata_tombstone(group_id),
            rh.consumer_group_epoch_tombstone(group_id),
        ])
        del self._groups[group_id]
        env.result.events.append(ev.GroupDead(ts_ms=now_ms, group_id=group_id,
                                              generation_id=group.group_epoch,
                                              reason=reason))
        return None, env.result

    # -- recovery --------------------------------------------------------------------------

    def replay(self, record: ConsumerGroupRecord, now_ms: int) -> Result:
        """Apply one record read back from the log (latest value per key).

        Members come back with their epochs and assignments and a fresh session; a member
        still revoking gets a fresh rebalance timeout. A group epoch tombstone deletes the group.
        """
        self._durable.note(record)
        env = self._env(now_ms)
        group_id = record.key.group
        group = self._groups.get(group_id)
        if record.value is None and type(record.key) is ConsumerGroupMetadataKey:
            if group is not None:
                for member_id in list(group.members):
                    env.result.cancel(session_key(group_id, member_id))
                del self._groups[group_id]
            return env.result
        if group is None:
            group = self._groups[group_id] = ConsumerGroup(group_id=group_id)
        had = set(group.members)
        group.apply(record)
        for member_id in set(group.members) - had:
            classic = group.members[member_id].classic
            deadline = now_ms + (classic.session_timeout_ms if classic is not None
                                 else self.config.session_timeout_ms)
            group.session_deadlines[member_id] = deadline
            env.result.schedule(session_key(group_id, member_id), deadline)
        return env.result

    def finish_replay(self, now_ms: int) -> Result:
        """After a partition's replay: drop member-less leftovers of deleted groups and arm
        the rebalance timeouts of members that were revoking."""
        env = self._env(now_ms)
        for group_id, group in list(self._groups.items()):
            if not group.exists and not group.members:
                del self._groups[group_id]
                continue
            for member in group.members.values():
                if (member.state.name == "UNREVOKED_PARTITIONS"
                        and member.member_id not in group.rebalance_deadlines):
                    deadline = now_ms + max(member.rebalance_timeout_ms, 0)
                    group.rebalance_deadlines[member.member_id] = (member.member_epoch, deadline)
                    env.result.schedule(rebalance_key(group_id, member.member_id), deadline)
        return env.result

    # -- writes ----------------------------------------------------------------------------

    def records_durable(self, records: list[ConsumerGroupRecord]) -> None:
        for record in records:
            self._durable.note(record)

    def records_failed(self, group_ids: set[str], now_ms: int) -> Result:
        """The records of `group_ids` could not be made durable: their in-memory state ran
        ahead of the log, so each is rebuilt from its durable records (`durable.py`)."""
        result = Result()
        for group_id in sorted(group_ids):
            result.merge(self.forget(group_id))
            for record in self._durable.records_of(group_id):
                result.merge(self.replay(record, now_ms))
        return result.merge(self.finish_replay(now_ms))

    def forget(self, group_id: str) -> Result:
        """Drop a group from memory (its timers too), before it is replayed again from the log:
        what a failed append leaves behind is state the log does not have."""
        result = Result()
        group = self._groups.pop(group_id, None)
        if group is not None:
            for member_id in group.members:
                result.cancel(session_key(group_id, member_id))
                result.cancel(rebalance_key(group_id, member_id))
                result.cancel(cm.classic_key(group_id, member_id))
                result.cancel(disconnect_key(group_id, member_id))
        return result

    def is_empty(self, group_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is not None and group.state is ConsumerGroupState.EMPTY
