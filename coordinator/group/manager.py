"""The classic group coordinator: every group of this node, driven by commands and timers.

`GroupCoordinator` is the pure core's entry point. It owns the `ClassicGroup`s, dispatches a
command to the per-API module (`classic/join.py`, ...), and returns a `Result`. It does no I/O
and reads no clock: `now_ms` is passed in (`Clock.now_ms()`, epoch-aligned and monotonic; it is
both the timer time base and the persisted state timestamp).

What it leaves to others:

* the runtime applies `Result.timers` to the wheel, appends `Result.records`, waits until they
  are durable and only then delivers `Result.replies`; it calls `expire(key)` when the wheel
  fires one of our keys and `connection_closed` when a client goes away (which starts the
  disconnect grace of the dynamic members last heard from on it, `classic/rebalance.py`);
* whether this node owns a group's partition and whether that partition is still loading is
  the runtime's check, before `handle` (`outcomes.error_outcome` shapes the answer);
* the committed offsets live in `coordinator/group/offsets.py`; it asks `validate_offset_commit` for
  the group-side checks of SPEC §10 and `delete_group` when an Empty group loses its last
  offset.

State follows the log: every Result with records goes back to the core once the append has
completed. `records_durable` finishes the changes that waited for the write (the leader's
assignment makes the group Stable and answers the SyncGroups) and moves `durable_view`;
`records_failed` undoes them (`classic/writes.py`) and sends any other Stable or
CompletingRebalance group of the failed records through a new rebalance. The runtime must not
deliver a failed Result's replies (it answers them with `outcomes.error_outcome` instead).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group import events as ev
from coordinator.group import migration
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.heartbeat import heartbeat, steady_commit, steady_heartbeat
from coordinator.group.classic.join import join_group
from coordinator.group.classic.leave import leave_group
from coordinator.group.classic.member import ClassicGroupMember
from coordinator.group.classic.state import GroupState
from coordinator.group.classic.sync import sync_group
from coordinator.group.classic.writes import GroupDeletionWrite, finish, undo
from coordinator.group.commands import Protocol
from coordinator.group.config import GroupConfig
from coordinator.group.consumer.commands import (
    ConsumerGroupDescribe,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatOutcome,
)
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.coordinator import TIMER_KINDS as CONSUMER_TIMER_KINDS
from coordinator.group.consumer.coordinator import ConsumerGroupCoordinator
from coordinator.group.consumer.heartbeat import GROUP_TYPE as CONSUMER_GROUP_TYPE
from coordinator.group.consumer.heartbeat import HeartbeatError, validate
from coordinator.group.outcomes import (
    DescribedGroup,
    DescribedMember,
    DescribeGroupsOutcome,
    HeartbeatOutcome,
    JoinGroupOutcome,
    LeaveGroupOutcome,
    LeaveMemberOutcome,
    ListedGroup,
    ListGroupsOutcome,
    SyncGroupOutcome,
)
from coordinator.group.result import APPEND_FAILED, Reply, RequestRef, Result, TimerKey
from coordinator.grouplog.records import (
    MAX_STORED_STRING_BYTES,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
)

__all__ = ["GroupCoordinator"]

# Kafka: DescribeGroups with includeAuthorizedOperations and no authorizer reports every
# operation a group supports: READ (3), DELETE (6), DESCRIBE (8), as a bit field.
_GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)


class GroupCoordinator:
    """All classic groups of this node. Methods raise nothing but AssertionError (a bug)."""

    def __init__(self, config: GroupConfig, new_member_id: Callable[[str], str],
                 consumer_config: ConsumerGroupConfig | None = None) -> None:
        self.config = config
        self._new_member_id = new_member_id
        # The consumer (KIP-848) groups; a group id names a group of one type only.
        # One disconnect grace for both group types: this coordinator's setting.
        self.consumer = ConsumerGroupCoordinator(
            dataclasses.replace(consumer_config or ConsumerGroupConfig(),
                                disconnect_grace_ms=config.group_member_disconnect_grace_ms),
            new_member_id)
        self._groups: dict[str, ClassicGroup] = {}
        self._durable: dict[str, GroupMetadataValue] = {}
        # connection id -> groups where a request of that connection may be parked: the group
        # id itself while there is one (nearly always: a consumer's coordinator connection
        # serves one group), a set beyond that. Entries live until the connection closes.
        self._parked_by_connection: dict[int, str | set[str]] = {}
        # connection id -> (group id, member id) of dynamic members whose requests came on it;
        # an entry is stale once the member moved to another connection (checked on close).
        self._members_by_connection: dict[int, set[tuple[str, str]]] = {}
        # Connections that have carried a JoinGroup or SyncGroup: a later one on the same
        # connection makes it the member's own (a client that keeps it); the first does not
        # (kafka-go opens a connection per JoinGroup and SyncGroup and closes it once answered).
        self._group_request_connections: set[int] = set()

    # -- read access for the offsets/admin layer -------------------------------------------

    @property
    def groups(self) -> Mapping[str, ClassicGroup]:
        """Live groups by id (read-only view; mutate only through this class)."""
        return MappingProxyType(self._groups)

    def group(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    def durable_view(self) -> dict[str, GroupMetadataValue]:
        """Every group's GroupMetadataValue as last made durable (or replayed)."""
        return dict(self._durable)

    # -- commands --------------------------------------------------------------------------

    def handle(self, cmd: c.Command | ConsumerGroupHeartbeat | ConsumerGroupDescribe,
               now_ms: int) -> Result:
        if isinstance(cmd, ConsumerGroupHeartbeat):
            return self._consumer_group_heartbeat(cmd, now_ms)
        if isinstance(cmd, ConsumerGroupDescribe):
            return self.consumer.describe(cmd)
        env = self._env(now_ms)
        if self._other_type_answered(env, cmd):
            return env.result
        match cmd:
            case c.JoinGroup():
                self._join_group(env, cmd)
            case c.SyncGroup():
                self._sync_group(env, cmd)
            case c.Heartbeat():
                self._heartbeat(env, cmd)
            case c.LeaveGroup():
                self._leave_group(env, cmd)
            case c.DescribeGroups():
                env.result.replies.append(Reply(cmd.ref, self._describe_groups(cmd)))
            case c.ListGroups():
                env.result.replies.append(Reply(cmd.ref, self._list_groups(cmd)))
        return self._finish(env, cmd)

    def steady_heartbeat(self, group_id: str, member_id: str, generation_id: int,
                         group_instance_id: str | None, connection_id: int, now_ms: int) -> bool:
        """A classic group's steady-state Heartbeat done in place (`classic.heartbeat.
        steady_heartbeat`): True when it was one and its answer is NONE; False, with nothing
        changed, when `handle` must take the command. The hottest request a coordinator
        serves, so it skips building the command and its Result."""
        group = self._classic_only(group_id)
        if group is None:
            return False
        return steady_heartbeat(group, member_id, generation_id, group_instance_id,
                                connection_id, now_ms,
                                self.config.group_member_disconnect_grace_ms >= 0)

    # -- the two group types side by side ---------------------------------------------------

    def _other_type_answered(self, env: rb.Env, cmd: c.Command) -> bool:
        """A classic API naming a consumer group. A JoinGroup to an empty consumer group
        replaces it with a classic group (Kafka's `maybeDeleteEmptyConsumerGroup`); otherwise
        the consumer group answers JoinGroup/SyncGroup/Heartbeat/LeaveGroup of its classic
        members (`consumer/classic_members.py`). True when answered here."""
        group_id = getattr(cmd, "group_id", None)
        if not group_id or self.consumer.group(group_id) is None:
            return False
        match cmd:
            case c.JoinGroup() if self.consumer.is_empty(group_id):
                # Kafka's `maybeDeleteEmptyConsumerGroup`: an empty consumer group gives way
                # to the classic group this JoinGroup creates (tombstones first).
                _, removed = self.consumer.delete_group(group_id, env.now_ms)
                for event in removed.events:
                    if isinstance(event, ev.GroupDead):
                        removed.events[removed.events.index(event)] = dataclasses.replace(
                            event, reason="converted to a classic group")
                env.result.merge(removed)
                return False
            case c.JoinGroup():
                error = self._invalid_join(cmd)
                if error is not None:
                    env.result.replies.append(Reply(cmd.ref, JoinGroupOutcome(
                        error=error, member_id=cmd.member_id)))
                    return True
            case c.SyncGroup() if cmd.requires_protocol and (
                    cmd.protocol_type is None or cmd.protocol_name is None):
                env.result.replies.append(Reply(cmd.ref, SyncGroupOutcome(
                    error=ErrorCode.inconsistent_group_protocol)))
                return True
            case c.SyncGroup() | c.Heartbeat() | c.LeaveGroup():
                pass
            case _:
                return False
        kept = cmd.ref.connection_id in self._group_request_connections
        if isinstance(cmd, c.JoinGroup | c.SyncGroup):
            self._group_request_connections.add(cmd.ref.connection_id)
        env.result.merge(self.consumer.classic_request(  # type: ignore[arg-type]
            cmd, env.now_ms, kept_connection=kept))
        # A classic member leaving never downgrades (only a consumer-protocol member does).
        return True

    def _invalid_join(self, cmd: c.JoinGroup) -> ErrorCode | None:
        """The JoinGroup checks made before the group is looked at (Kafka's order)."""
        if not (self.config.group_min_session_timeout_ms <= cmd.session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            return ErrorCode.invalid_session_timeout
        if cmd.protocol_type == "" or not cmd.protocols:
            return ErrorCode.inconsistent_group_protocol
        if unstorable_join_field(cmd) is not None:
            return ErrorCode.invalid_request
        return None

    def _consumer_group_heartbeat(self, cmd: ConsumerGroupHeartbeat, now_ms: int) -> Result:
        """A classic group of that id: GROUP_ID_NOT_FOUND, unless the member joins (epoch 0)
        and `group.consumer.migration.policy` allows upgrades. An Empty classic group is
        deleted (its tombstone written first) and a consumer group takes its place (Kafka's
        `maybeDeleteEmptyClassicGroup`; committed offsets stay); one with members is
        converted with them (`migration.classic_to_consumer`).

        A consumer-protocol member leaving may leave only classic members behind: the group
        then goes back to the classic type (`migration.consumer_to_classic`)."""
        classic = self._groups.get(cmd.group_id)
        if classic is None or classic.is_state(GroupState.DEAD):
            if cmd.member_epoch >= 0:  # the steady state: nobody leaves
                return self.consumer.heartbeat(cmd, now_ms)
            watch = self._downgrade_watch(cmd.group_id, cmd.member_id)
            result = self.consumer.heartbeat(cmd, now_ms)
            return self._maybe_downgrade(cmd.group_id, watch, result, now_ms, cmd.member_id)
        refused = ConsumerGroupHeartbeatOutcome(
            error=ErrorCode.group_id_not_found, member_id=cmd.member_id or None,
            member_epoch=cmd.member_epoch,
            error_message=f"Group {cmd.group_id} is not a consumer group.")
        if cmd.member_epoch != 0 or not self.consumer.config.upgrade_allowed:
            return Result.reply(cmd.ref, refused)
        if not classic.is_state(GroupState.EMPTY):
            return self._upgrade(classic, cmd, now_ms, refused)
        error, converted = self.delete_group(cmd.group_id, now_ms)
        if error is not None:  # pragma: no cover - Empty was checked above
            raise AssertionError(error)
        converted.events.append(ev.GroupDead(ts_ms=now_ms, group_id=cmd.group_id,
                                             generation_id=classic.generation_id,
                                             reason="converted to a consumer group"))
        converted.events[:] = [e for e in converted.events
                               if not (isinstance(e, ev.GroupDead) and e.reason == "group deleted")]
        self._groups.pop(cmd.group_id, None)
        return converted.merge(self.consumer.heartbeat(cmd, now_ms))

    # -- online migration with members (`coordinator/group/migration.py`) ------------------------

    def _upgrade(self, classic: ClassicGroup, cmd: ConsumerGroupHeartbeat, now_ms: int,
                 refused: ConsumerGroupHeartbeatOutcome) -> Result:
        """A consumer-protocol member joins a classic group with members: convert it, then
        let the member join the consumer group."""
        try:
            validate(self.consumer.config, cmd)
        except HeartbeatError:
            return self.consumer.heartbeat(cmd, now_ms)  # answered as if no group was there
        # What would refuse the join in the converted group refuses it now, before anything
        # is converted (Kafka discards the conversion with the failed join).
        error: tuple[ErrorCode, str] | None = None
        if len(classic.members) >= self.consumer.config.max_size:
            error = (ErrorCode.group_max_size_reached,
                     "The consumer group has reached its maximum capacity of "
                     f"{self.consumer.config.max_size} members.")
        elif cmd.instance_id is not None and cmd.instance_id in classic.static_members:
            error = (ErrorCode.unreleased_instance_id,
                     f"Static member {cmd.member_id} with instance id {cmd.instance_id} "
                     "cannot join the group because the instance id is owned by another member.")
        elif cmd.member_id in classic.members:
            error = (ErrorCode.fenced_member_epoch,
                     f"Member {cmd.member_id} is a classic member of the group.")
        if error is not None:
            return Result.reply(cmd.ref, dataclasses.replace(
                refused, error=error[0], error_message=error[1]))
        env = self._env(now_ms)
        try:
            group = migration.classic_to_consumer(env, classic, self.consumer.image,
                                                  self.consumer.config.max_size,
                                                  cmd.member_id or None)
        except migration.UpgradeRefused as exc:
            return Result.reply(cmd.ref, dataclasses.replace(refused, error_message=str(exc)))
        del self._groups[classic.group_id]
        self.consumer.adopt(group)
        env.result.writes.append(migration.ConversionWrite(
            group_id=classic.group_id, direction="upgrade", replaced=classic))
        return env.result.merge(self.consumer.heartbeat(cmd, now_ms))

    def _downgrade_watch(self, group_id: str, member_id: str) -> tuple[bool, int]:
        """(is `member_id` a consumer-protocol member of the group, the group epoch), before a
        change that may remove that member."""
        group = self.consumer.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return False, 0
        return member.classic is None, group.group_epoch

    def _maybe_downgrade(self, group_id: str, watch: tuple[bool, int], result: Result,
                         now_ms: int, member_id: str) -> Result:
        was_consumer_member, epoch_before = watch
        group = self.consumer.group(group_id)
        if (group is None or not was_consumer_member or member_id in group.members
                or not self.consumer.config.downgrade_allowed
                or not migration.can_downgrade(group, self.config.group_max_size)):
            return result
        env = self._env(now_ms)
        # The classic members' generation is the epoch they last joined at: the one before
        # the departure bumped it, so their heartbeats get REBALANCE_IN_PROGRESS and rejoin.
        classic = migration.consumer_to_classic(env, group, self.consumer.image, epoch_before,
                                                member_id)
        result.merge(self.consumer.forget(group_id))
        self._groups[group_id] = classic
        for member in classic.members.values():
            for own in (member.connection_id, *(member.other_connections or ())):
                if own is not None:
                    self._members_by_connection.setdefault(own, set()).add(
                        (group_id, member.member_id))
        env.result.writes.append(migration.ConversionWrite(
            group_id=group_id, direction="downgrade", replaced=None))
        return result.merge(env.result)

    def _join_group(self, env: rb.Env, cmd: c.JoinGroup) -> None:
        def fail(error: ErrorCode) -> None:
            env.result.replies.append(
                Reply(cmd.ref, JoinGroupOutcome(error=error, member_id=cmd.member_id))
            )

        if cmd.group_id == "":
            return fail(ErrorCode.invalid_group_id)
        if not (
            self.config.group_min_session_timeout_ms
            <= cmd.session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            return fail(ErrorCode.invalid_session_timeout)
        if cmd.protocol_type == "" or not cmd.protocols:
            return fail(ErrorCode.inconsistent_group_protocol)
        if unstorable_join_field(cmd) is not None:
            return fail(ErrorCode.invalid_request)
        group = self._groups.get(cmd.group_id)
        if group is None:
            if cmd.member_id != c.UNKNOWN_MEMBER_ID:
                return fail(ErrorCode.unknown_member_id)
            group = self._create_group(cmd.group_id, env.now_ms)
        join_group(env, group, cmd)
        member_id = self._joined_member_id(env, group, cmd)
        if member_id is not None and _accepted(env, cmd.ref):
            self._join_or_sync_spoke(env, group, member_id, cmd.ref.connection_id)
        self._group_request_connections.add(cmd.ref.connection_id)
        return None

    def _joined_member_id(self, env: rb.Env, group: ClassicGroup, cmd: c.JoinGroup
                          ) -> str | None:
        """The dynamic member a JoinGroup spoke for, if it is one now."""
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

    def _join_or_sync_spoke(self, env: rb.Env, group: ClassicGroup, member_id: str,
                            connection_id: int) -> None:
        """An accepted JoinGroup or SyncGroup spoke for a member: any disconnect grace ends.
        Its connection becomes the member's own only if it carried a JoinGroup or SyncGroup
        before: the client keeps it (`rebalance.py`, disconnect-fast failover)."""
        if connection_id in self._group_request_connections:
            self._bind_connection(env, group, member_id, connection_id)
            return
        member = group.members.get(member_id)
        if member is not None and member.disconnect_deadline_ms is not None:
            rb.note_alive(env, group, member)

    def _bind_connection(self, env: rb.Env, group: ClassicGroup, member_id: str,
                         connection_id: int) -> None:
        """An accepted Heartbeat or OffsetCommit for a member arrived: its connection counts
        as the member's for disconnect-fast failover."""
        member = group.members.get(member_id)
        if member is None or (member.connection_id == connection_id
                              and member.disconnect_deadline_ms is None):
            return  # nearly every heartbeat: same connection, no grace running
        if self.config.group_member_disconnect_grace_ms < 0 or member.is_static:
            return
        if rb.bind_connection(env, group, member, connection_id):
            self._members_by_connection.setdefault(connection_id, set()).add(
                (group.group_id, member_id))

    def _sync_group(self, env: rb.Env, cmd: c.SyncGroup) -> None:
        def fail(error: ErrorCode) -> None:
            env.result.replies.append(Reply(cmd.ref, SyncGroupOutcome(error=error)))

        if cmd.requires_protocol and (cmd.protocol_type is None or cmd.protocol_name is None):
            return fail(ErrorCode.inconsistent_group_protocol)
        if cmd.group_id == "":
            return fail(ErrorCode.invalid_group_id)
        group = self._groups.get(cmd.group_id)
        if group is None:
            return fail(ErrorCode.unknown_member_id)
        sync_group(env, group, cmd)
        if _accepted(env, cmd.ref):
            self._join_or_sync_spoke(env, group, cmd.member_id, cmd.ref.connection_id)
        self._group_request_connections.add(cmd.ref.connection_id)
        return None

    def _heartbeat(self, env: rb.Env, cmd: c.Heartbeat) -> None:
        group = self._groups.get(cmd.group_id)
        if cmd.group_id == "" or group is None:
            error = ErrorCode.unknown_member_id if cmd.group_id else ErrorCode.invalid_group_id
            env.result.replies.append(Reply(cmd.ref, HeartbeatOutcome(error=error)))
            return
        heartbeat(env, group, cmd)
        if _accepted(env, cmd.ref):
            self._bind_connection(env, group, cmd.member_id, cmd.ref.connection_id)

    def _leave_group(self, env: rb.Env, cmd: c.LeaveGroup) -> None:
        group = self._groups.get(cmd.group_id)
        if cmd.group_id == "":
            outcome = LeaveGroupOutcome(error=ErrorCode.invalid_group_id)
        elif group is None:
            outcome = LeaveGroupOutcome(
                members=tuple(
                    LeaveMemberOutcome(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        error=ErrorCode.unknown_member_id,
                    )
                    for m in cmd.members
                )
            )
        else:
            leave_group(env, group, cmd)
            return
        env.result.replies.append(Reply(cmd.ref, outcome))

    def _describe_groups(self, cmd: c.DescribeGroups) -> DescribeGroupsOutcome:
        return DescribeGroupsOutcome(
            groups=tuple(self._describe_group(gid, cmd) for gid in cmd.group_ids)
        )

    def _describe_group(self, group_id: str, cmd: c.DescribeGroups) -> DescribedGroup:
        group = self._groups.get(group_id)
        if group is None:
            if cmd.api_version >= 6:
                # KIP-1043: v6 reports a missing group as such instead of a Dead one.
                return DescribedGroup(
                    group_id=group_id,
                    error=ErrorCode.group_id_not_found,
                    error_message=(f"Group {group_id} is not a classic group."
                                   if self.consumer.group(group_id) is not None
                                   else f"Group {group_id} not found."),
                    state=GroupState.DEAD.value,
                )
            return DescribedGroup(group_id=group_id, state=GroupState.DEAD.value)
        stable = group.is_state(GroupState.STABLE) and group.protocol_name is not None
        protocol = group.protocol_name if stable else None
        return DescribedGroup(
            group_id=group_id,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=protocol or "",
            members=tuple(
                DescribedMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    metadata=m.metadata(protocol) if protocol is not None else b"",
                    assignment=m.assignment if protocol is not None else b"",
                )
                for m in group.members.values()
            ),
            authorized_operations=(
                _GROUP_AUTHORIZED_OPERATIONS if cmd.include_authorized_operations else -(2**31)
            ),
        )

    def _list_groups(self, cmd: c.ListGroups) -> ListGroupsOutcome:
        states = {s.lower() for s in cmd.states_filter}
        types = {t.lower() for t in cmd.types_filter}
        classic: tuple[ListedGroup, ...] = ()
        if not types or "classic" in types:
            classic = tuple(
                ListedGroup(
                    group_id=g.group_id,
                    protocol_type=g.protocol_type or "",
                    state=g.state.value,
                )
                for g in self._groups.values()
                if not states or g.state.value.lower() in states
            )
        consumer: tuple[ListedGroup, ...] = ()
        if not types or CONSUMER_GROUP_TYPE in types:
            consumer = tuple(
                ListedGroup(group_id=g.group_id, protocol_type=CONSUMER_GROUP_TYPE,
                            state=g.state.value, group_type=CONSUMER_GROUP_TYPE)
                for g in self.consumer
                if not states or g.state.value.lower() in states
            )
        return ListGroupsOutcome(groups=classic + consumer)

    # -- timers and connections ------------------------------------------------------------

    def expire(self, key: TimerKey, now_ms: int) -> Result:
        """The wheel fired `key`; stale or early wake-ups are ignored or re-armed."""
        if key[0] in CONSUMER_TIMER_KINDS:
            consumer_group_id = str(key[1])
            watch = self._downgrade_watch(consumer_group_id, str(key[2]))
            return self._maybe_downgrade(consumer_group_id, watch,
                                         self.consumer.expire(key, now_ms), now_ms, str(key[2]))
        env = self._env(now_ms)
        kind, group_id = key[0], key[1]
        group = self._groups.get(str(group_id))
        if group is not None:
            match kind:
                case "heartbeat":
                    rb.on_heartbeat_deadline(env, group, str(key[2]))
                case "join":
                    rb.on_join_deadline(env, group)
                case "sync":
                    rb.on_sync_deadline(env, group)
                case "disconnect":
                    rb.on_disconnect_deadline(env, group, str(key[2]))
                case _:
                    raise AssertionError(f"not a group coordinator timer key: {key!r}")
        return self._finish(env, None)

    def forget_if_never_written(self, group_id: str) -> bool:
        """Drop a group that holds nothing and that the log never held: Empty, without members
        or pending members, no record of it written. A JoinGroup that only got
        MEMBER_ID_REQUIRED leaves such a group when its pending member expires; without offsets
        (the caller checks) it is Dead at once, and since nothing of it was written there is
        no tombstone to write. Kafka keeps it until the next `cleanupGroupMetadata` pass,
        which is what made a burst of them cost one long pass later. True if dropped."""
        group = self._groups.get(group_id)
        if (group is None or group.members or group.pending_members
                or not group.is_state(GroupState.EMPTY) or group_id in self._durable):
            return False
        del self._groups[group_id]
        return True

    def connection_closed(self, connection_id: int, now_ms: int) -> Result:
        """Forget requests parked by a closed connection: they will never be answered.

        The members stay (their JoinGroup still counts as a rejoin, as in Kafka). A dynamic
        member left with no open connection of its own, or whose JoinGroup or SyncGroup was
        parked on this one, is removed after the disconnect grace unless it is heard from
        again (`rebalance.connection_lost`); static members, and every member with the grace
        off, stay until their session expires or the rebalance moves on without them.
        """
        self._group_request_connections.discard(connection_id)
        parked = self._parked_by_connection.pop(connection_id, ())
        parked_members: dict[tuple[str, str], tuple[ClassicGroup, ClassicGroupMember]] = {}
        for group_id in (parked,) if isinstance(parked, str) else parked:
            group = self._groups.get(group_id)
            if group is not None:
                for waiting in group.forget_connection(connection_id):
                    parked_members[(group_id, waiting.member_id)] = (group, waiting)
        consumer = self.consumer.connection_closed(connection_id, now_ms)
        members = self._members_by_connection.pop(connection_id, None)
        if not members and not parked_members:
            return consumer
        env = self._env(now_ms)
        env.result.merge(consumer)
        for group_id, member_id in sorted(members or ()):
            group = self._groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if group is not None and member is not None:
                parked_here = parked_members.pop((group_id, member_id), None) is not None
                rb.connection_lost(env, group, member, connection_id, parked_here)
        for key in sorted(parked_members):
            parked_group, parked_member = parked_members[key]
            rb.connection_lost(env, parked_group, parked_member, connection_id, True)
        return self._finish(env, None)

    # -- the offsets/admin layer -----------------------------------------------------------

    def validate_offset_commit(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        now_ms: int,
        connection_id: int | None = None,
        api_version: int = 9,
    ) -> tuple[ErrorCode | None, Result]:
        """The group-side checks of an OffsetCommit (SPEC §10, Kafka `validateOffsetCommit`).

        For a consumer group `generation_id` is the member epoch (see
        `ConsumerGroupCoordinator.validate_offset_commit`).

        Returns None when the offsets may be stored. A commit by a current member resets its
        session deadline, also during PreparingRebalance (KIP-429 members commit while they
        revoke). A commit with generation -1 to an unknown group creates it Empty (a
        standalone consumer using Kafka only for offsets).
        """
        if self.consumer.group(group_id) is not None:
            error = self.consumer.validate_offset_commit(
                group_id, member_id, generation_id, api_version)
            if error is None and connection_id is not None and member_id:
                return None, self.consumer.note_request(group_id, member_id, connection_id,
                                                        now_ms)
            return error, Result()
        if connection_id is not None and self.steady_commit(
                group_id, member_id, generation_id, group_instance_id, connection_id, now_ms):
            return None, Result()
        return self._validate_offset_commit_in_full(group_id, member_id, generation_id,
                                                    group_instance_id, now_ms, connection_id)

    def _classic_only(self, group_id: str) -> ClassicGroup | None:
        """The classic group of that id, when no consumer group has the id too (the steady
        paths leave such a group to the full checks)."""
        group = self._groups.get(group_id)
        if group is None or self.consumer.group(group_id) is not None:
            return None
        return group

    def steady_commit(self, group_id: str, member_id: str, generation_id: int,
                      group_instance_id: str | None, connection_id: int, now_ms: int) -> bool:
        """The group side of nearly every OffsetCommit, done in place
        (`classic.heartbeat.steady_commit`): a current member of a classic group, on its
        connection, whose session moves with no timer change, record or event to return.
        True when it was one; False, with nothing changed, when the full checks must run."""
        group = self._classic_only(group_id)
        if group is None:
            return False
        return steady_commit(group, member_id, generation_id, group_instance_id,
                             connection_id, now_ms,
                             self.config.group_member_disconnect_grace_ms >= 0)

    def _validate_offset_commit_in_full(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        now_ms: int,
        connection_id: int | None,
    ) -> tuple[ErrorCode | None, Result]:
        env = self._env(now_ms)
        error = self._validate_offset_commit(
            env, group_id, member_id, generation_id, group_instance_id
        )
        if error is None and connection_id is not None and member_id != c.UNKNOWN_MEMBER_ID:
            group = self._groups.get(group_id)
            if group is not None:
                self._bind_connection(env, group, member_id, connection_id)
        return error, self._finish(env, None)

    def _validate_offset_commit(
        self,
        env: rb.Env,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
    ) -> ErrorCode | None:
        group = self._groups.get(group_id)
        if group is None:
            if generation_id < 0:
                self._create_group(group_id, env.now_ms)
                return None
            return ErrorCode.illegal_generation
        if group.is_state(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            return None
        if generation_id >= 0 or member_id != c.UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = rb.validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif not group.is_state(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        match group.state:
            case GroupState.EMPTY:
                return None
            case GroupState.STABLE | GroupState.PREPARING_REBALANCE:
                rb.schedule_heartbeat(env, group, group.members[member_id])
                return None
            case GroupState.COMPLETING_REBALANCE:
                return ErrorCode.rebalance_in_progress
            case GroupState.DEAD:
                raise AssertionError("checked above")

    def delete_group(self, group_id: str, now_ms: int) -> tuple[ErrorCode | None, Result]:
        """Delete an Empty group: Dead, forgotten, and a tombstone (DeleteGroups, expiry).

        Errors: GROUP_ID_NOT_FOUND when absent, NON_EMPTY_GROUP while it has members. The
        caller deletes the group's offsets (with their own tombstones).
        """
        if self.consumer.group(group_id) is not None:
            return self.consumer.delete_group(group_id, now_ms)
        env = self._env(now_ms)
        group = self._groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.group_id_not_found, Result()
        if not group.is_state(GroupState.EMPTY):
            return ErrorCode.non_empty_group, Result()
        env.result.writes.append(
            GroupDeletionWrite(
                group=group,
                state_timestamp_ms=group.state_timestamp_ms,
                pending_members=dict(group.pending_members),
            )
        )
        for member_id in list(group.pending_members):
            env.result.cancel(rb.heartbeat_key(group_id, member_id))
        group.pending_members.clear()
        if group.join_deadline_ms is not None:
            env.result.cancel(rb.join_key(group_id))
        group.transition_to(GroupState.DEAD, now_ms)
        del self._groups[group_id]
        env.result.records.append(
            GroupMetadataRecord(key=GroupMetadataKey(group=group_id), value=None)
        )
        env.result.events.append(
            ev.GroupDead(
                ts_ms=now_ms,
                group_id=group_id,
                generation_id=group.generation_id,
                reason="group deleted",
            )
        )
        return None, self._finish(env, None)

    def records_durable(self, written: Result, now_ms: int) -> Result:
        """`written.records` are durable: finish what waited for them (module doc)."""
        env = self._env(now_ms)
        for record in written.records:
            if isinstance(record, GroupMetadataRecord):
                if record.value is None:
                    self._durable.pop(record.key.group, None)
                else:
                    self._durable[record.key.group] = record.value
        for write in written.writes:
            finish(env, self._groups, write)
        return self._finish(env, None)

    def records_failed(self, written: Result, now_ms: int,
                       error: ErrorCode = APPEND_FAILED) -> Result:
        """`written.records` could not be made durable: undo, answer with `error`, rebalance
        (module doc)."""
        env = self._env(now_ms)
        undone: set[str] = set()
        for write in written.writes:
            if isinstance(write, migration.ConversionWrite):
                self._undo_conversion(env, write)
                undone.add(write.group_id)
                continue
            undo(env, self._groups, write, error)
            undone.add(write.group.group_id if isinstance(write, GroupDeletionWrite)
                       else write.group_id)
        groups = {r.key.group for r in written.records if isinstance(r, GroupMetadataRecord)}
        for group_id in sorted(groups - undone):
            group = self._groups.get(group_id)
            if group is not None and group.state in (
                GroupState.STABLE, GroupState.COMPLETING_REBALANCE
            ):
                rb.prepare_rebalance(env, group, "failed to persist the group metadata")
        return self._finish(env, None)

    def _undo_conversion(self, env: rb.Env, write: migration.ConversionWrite) -> None:
        """Back to what the log has (the runtime has already rebuilt the consumer side)."""
        group_id = write.group_id
        if write.direction == "downgrade":
            classic = self._groups.pop(group_id, None)
            if classic is not None:
                for member in classic.members.values():
                    rb.cancel_heartbeat(env, classic, member)
                env.result.cancel(rb.join_key(group_id))
            return
        env.result.merge(self.consumer.forget(group_id))
        durable = self._durable.get(group_id)
        if durable is not None:
            env.result.merge(self.replay(GroupMetadataRecord(
                key=GroupMetadataKey(group=group_id), value=durable), env.now_ms))

    # -- recovery --------------------------------------------------------------------------

    def replay(self, record: GroupMetadataRecord, now_ms: int) -> Result:
        """Apply one group record read back from the log (latest value per key wins).

        Groups with members come back Stable at their generation, every member with a fresh
        session deadline, as Kafka loads them; groups without members come back Empty. The
        returned Result only carries timer changes.
        """
        env = self._env(now_ms)
        group_id = record.key.group
        old = self._groups.pop(group_id, None)
        if old is not None:
            for member in old.members.values():
                rb.cancel_heartbeat(env, old, member)
        value = record.value
        if value is None:
            self._durable.pop(group_id, None)
            return env.result
        self._durable[group_id] = value
        state = GroupState.STABLE if value.members else GroupState.EMPTY
        group = ClassicGroup(
            group_id=group_id,
            state=state,
            previous_state=state,
            state_timestamp_ms=value.current_state_timestamp,
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            leader_id=value.leader,
        )
        for m in value.members:
            member = ClassicGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=(Protocol(name=value.protocol or "", metadata=m.subscription),),
                assignment=m.assignment,
            )
            group.restore_member(member)
            rb.schedule_heartbeat(env, group, member)
        self._groups[group_id] = group
        return env.result

    # -- plumbing --------------------------------------------------------------------------

    def _env(self, now_ms: int) -> rb.Env:
        return rb.Env(
            config=self.config, now_ms=now_ms, new_member_id=self._new_member_id, result=Result()
        )

    def _create_group(self, group_id: str, now_ms: int) -> ClassicGroup:
        group = ClassicGroup(group_id=group_id, state_timestamp_ms=now_ms)
        self._groups[group_id] = group
        return group

    def _finish(self, env: rb.Env, cmd: c.Command | None) -> Result:
        result = env.result
        if isinstance(cmd, (c.JoinGroup, c.SyncGroup)) and not any(
            r.ref == cmd.ref for r in result.replies
        ):
            self._index_parked(cmd.ref.connection_id, cmd.group_id)
        return result

    def _index_parked(self, connection_id: int, group_id: str) -> None:
        index = self._parked_by_connection
        groups = index.get(connection_id)
        if groups is None:
            index[connection_id] = group_id
        elif isinstance(groups, str):
            if groups != group_id:
                index[connection_id] = {groups, group_id}
        else:
            groups.add(group_id)

    def __iter__(self) -> Iterator[ClassicGroup]:
        return iter(self._groups.values())


# The group log stores these strings with int16 lengths (MAX_STORED_STRING_BYTES): a member
# whose ids or protocol names do not fit could never be written, and its group's persistence
# would fail on every rebalance. A client or instance id also becomes the prefix of a member id,
# to which "-" and a UUID are appended.
_MEMBER_ID_SUFFIX_BYTES = 37


def _too_long(value: str | None, reserve: int = 0) -> bool:
    if value is None or len(value) * 4 + reserve <= MAX_STORED_STRING_BYTES:
        return False  # no string of this many characters can be too long (the usual case)
    return len(value.encode()) + reserve > MAX_STORED_STRING_BYTES


def unstorable_join_field(cmd: c.JoinGroup) -> str | None:
    """The first JoinGroup field the group log could not store, if any."""
    if _too_long(cmd.group_id):
        return "group_id"
    if _too_long(cmd.member_id):
        return "member_id"
    if _too_long(cmd.client_id, _MEMBER_ID_SUFFIX_BYTES):
        return "client_id"
    if _too_long(cmd.group_instance_id, _MEMBER_ID_SUFFIX_BYTES):
        return "group_instance_id"
    if _too_long(cmd.protocol_type):
        return "protocol_type"
    for protocol in cmd.protocols:
        if _too_long(protocol.name):
            return "protocol name"
    return None


def _accepted(env: rb.Env, ref: RequestRef) -> bool:
    """The request `ref` was parked, or answered without an error that rejects the member
    (REBALANCE_IN_PROGRESS still speaks for a member the group knows)."""
    for reply in env.result.replies:
        if reply.ref == ref:
            error = getattr(reply.outcome, "error", ErrorCode.none)
            return error in (ErrorCode.none, ErrorCode.rebalance_in_progress)
    return True
