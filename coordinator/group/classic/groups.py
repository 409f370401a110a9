"""The classic groups of this node: the classic half of Kafka's `GroupMetadataManager`.

`ClassicGroups` owns every `ClassicGroup`, the durable view of their records, and the
connection indexes that parked requests and disconnect grace need. It answers JoinGroup,
SyncGroup, Heartbeat and LeaveGroup through the per-API modules (`join.py`, ...), validates the
group side of an OffsetCommit, deletes Empty groups, finishes or undoes what waited for a write
(`writes.py`), and replays the group's records at start-up. No I/O, no clock: `now_ms` comes in.

What it leaves to others: which group type answers a command, and a group changing type, are
decided by the service (`coordinator/group/service.py`) and the migration peer
(`coordinator/group/migrator.py`); describe and list across both types are
`coordinator/group/describe.py`'s.

A little over 400 lines: the per-API rules live in the modules named above; what stays here is
the dispatch with the connection bookkeeping each API does around them, read best in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group import events as ev
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.connections import ConnectionIndex
from coordinator.group.classic.group import ClassicGroup, group_from_record
from coordinator.group.classic.heartbeat import heartbeat
from coordinator.group.classic.join import join_group, joined_member_id
from coordinator.group.classic.leave import leave_group
from coordinator.group.classic.member import ClassicGroupMember
from coordinator.group.classic.offset_commit import validate_offset_commit
from coordinator.group.classic.state import GroupState
from coordinator.group.classic.storable import unstorable_join_field
from coordinator.group.classic.sync import sync_group
from coordinator.group.classic.writes import (
    GroupDeletionWrite,
    Write,
    delete_empty_group,
    finish,
    undo,
)
from coordinator.group.config import GroupConfig
from coordinator.group.outcomes import (
    HeartbeatOutcome,
    JoinGroupOutcome,
    LeaveGroupOutcome,
    LeaveMemberOutcome,
    SyncGroupOutcome,
)
from coordinator.group.result import Reply, RequestRef, Result, TimerKey
from coordinator.grouplog.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
)

__all__ = ["ClassicGroups"]


class ClassicGroups:
    """All classic groups of this node. Methods raise nothing but AssertionError (a bug)."""

    def __init__(self, config: GroupConfig, new_member_id: Callable[[str], str]) -> None:
        self.config = config
        self._new_member_id = new_member_id
        self._groups: dict[str, ClassicGroup] = {}
        # The same dict, for the steady Heartbeat and OffsetCommit paths of the service to look
        # a group up without a call: read it, never change it.
        self.by_id = self._groups
        self._durable: dict[str, GroupMetadataValue] = {}
        self.connections = ConnectionIndex()

    # -- reading ---------------------------------------------------------------------------

    @property
    def groups(self) -> Mapping[str, ClassicGroup]:
        """Live groups by id (read-only view; mutate only through this class)."""
        return MappingProxyType(self._groups)

    def group(self, group_id: str) -> ClassicGroup | None:
        return self._groups.get(group_id)

    def durable_view(self) -> dict[str, GroupMetadataValue]:
        """Every group's GroupMetadataValue as last made durable (or replayed)."""
        return dict(self._durable)

    def durable(self, group_id: str) -> GroupMetadataValue | None:
        return self._durable.get(group_id)

    def __iter__(self) -> Iterator[ClassicGroup]:
        return iter(self._groups.values())

    def env(self, now_ms: int) -> rb.Env:
        return rb.Env(
            config=self.config, now_ms=now_ms, new_member_id=self._new_member_id, result=Result()
        )

    # -- the member APIs -------------------------------------------------------------------

    def handle(self, cmd: c.JoinGroup | c.SyncGroup | c.Heartbeat | c.LeaveGroup,
               now_ms: int) -> Result:
        env = self.env(now_ms)
        match cmd:
            case c.JoinGroup():
                self._join_group(env, cmd)
            case c.SyncGroup():
                self._sync_group(env, cmd)
            case c.Heartbeat():
                self._heartbeat(env, cmd)
            case c.LeaveGroup():
                self._leave_group(env, cmd)
        if isinstance(cmd, (c.JoinGroup, c.SyncGroup)) and not any(
            r.ref == cmd.ref for r in env.result.replies
        ):
            self.connections.parked(cmd.ref.connection_id, cmd.group_id)
        return env.result

    def invalid_join(self, cmd: c.JoinGroup) -> ErrorCode | None:
        """The JoinGroup checks made before the group is looked at (Kafka's order)."""
        if not (self.config.group_min_session_timeout_ms <= cmd.session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            return ErrorCode.invalid_session_timeout
        if cmd.protocol_type == "" or not cmd.protocols:
            return ErrorCode.inconsistent_group_protocol
        if unstorable_join_field(cmd) is not None:
            return ErrorCode.invalid_request
        return None

    def kept_connection(self, cmd: c.Command) -> bool:
        """Whether the request's connection carried a JoinGroup or SyncGroup before (the client
        keeps it); a JoinGroup or SyncGroup marks its connection for the next request."""
        connection_id = cmd.ref.connection_id
        seen = self.connections.group_request_connections
        kept = connection_id in seen
        if isinstance(cmd, c.JoinGroup | c.SyncGroup):
            seen.add(connection_id)
        return kept

    def _join_group(self, env: rb.Env, cmd: c.JoinGroup) -> None:
        def fail(error: ErrorCode) -> None:
            env.result.replies.append(
                Reply(cmd.ref, JoinGroupOutcome(error=error, member_id=cmd.member_id))
            )

        if cmd.group_id == "":
            return fail(ErrorCode.invalid_group_id)
        error = self.invalid_join(cmd)
        if error is not None:
            return fail(error)
        group = self._groups.get(cmd.group_id)
        if group is None:
            if cmd.member_id != c.UNKNOWN_MEMBER_ID:
                return fail(ErrorCode.unknown_member_id)
            group = self.create_group(cmd.group_id, env.now_ms)
        join_group(env, group, cmd)
        member_id = joined_member_id(env, group, cmd)
        if member_id is not None and _accepted(env, cmd.ref):
            self._join_or_sync_spoke(env, group, member_id, cmd.ref.connection_id)
        self.connections.group_request_connections.add(cmd.ref.connection_id)
        return None

    def _join_or_sync_spoke(self, env: rb.Env, group: ClassicGroup, member_id: str,
                            connection_id: int) -> None:
        """An accepted JoinGroup or SyncGroup spoke for a member: any disconnect grace ends.
        Its connection becomes the member's own only if it carried a JoinGroup or SyncGroup
        before: the client keeps it (`rebalance.py`, disconnect-fast failover)."""
        if connection_id in self.connections.group_request_connections:
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
            self.connections.add_member(connection_id, group.group_id, member_id)

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
        self.connections.group_request_connections.add(cmd.ref.connection_id)
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

    # -- offsets ---------------------------------------------------------------------------

    def validate_offset_commit_in_full(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        now_ms: int,
        connection_id: int | None,
    ) -> tuple[ErrorCode | None, Result]:
        """The group-side checks of an OffsetCommit to a classic group (SPEC §10, Kafka
        `ClassicGroup.validateOffsetCommit`); see
        `GroupCoordinatorService.validate_offset_commit`."""
        env = self.env(now_ms)
        group = self._groups.get(group_id)
        if group is None:
            error = None if generation_id < 0 else ErrorCode.illegal_generation
            if error is None:
                group = self.create_group(group_id, env.now_ms)
        else:
            error = validate_offset_commit(env, group, member_id, generation_id,
                                           group_instance_id)
        if (error is None and connection_id is not None and member_id != c.UNKNOWN_MEMBER_ID
                and group is not None):
            self._bind_connection(env, group, member_id, connection_id)
        return error, env.result

    # -- deletion --------------------------------------------------------------------------

    def delete_group(self, group_id: str, now_ms: int,
                     reason: str = "group deleted") -> tuple[ErrorCode | None, Result]:
        """Delete an Empty group: Dead, forgotten, and a tombstone (DeleteGroups, expiry, a
        consumer group taking its place: `reason`)."""
        env = self.env(now_ms)
        group = self._groups.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.group_id_not_found, Result()
        if not group.is_state(GroupState.EMPTY):
            return ErrorCode.non_empty_group, Result()
        delete_empty_group(env, group, reason)
        del self._groups[group_id]
        return None, env.result

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

    # -- a group changing type (`coordinator/group/migrator.py`) ----------------------------

    def remove(self, group_id: str) -> ClassicGroup | None:
        """Forget a group that becomes a consumer group (its records say so)."""
        return self._groups.pop(group_id, None)

    def adopt(self, group: ClassicGroup) -> None:
        """Take a group converted from a consumer group, with its members' connections."""
        self._groups[group.group_id] = group
        for member in group.members.values():
            for own in (member.connection_id, *(member.other_connections or ())):
                if own is not None:
                    self.connections.add_member(own, group.group_id, member.member_id)

    def drop_converted(self, env: rb.Env, group_id: str) -> None:
        """Undo a downgrade whose records failed: the classic group was never written."""
        classic = self._groups.pop(group_id, None)
        if classic is not None:
            for member in classic.members.values():
                rb.cancel_heartbeat(env, classic, member)
            env.result.cancel(rb.join_key(group_id))

    # -- writes ----------------------------------------------------------------------------

    def records_durable(self, env: rb.Env, records: list[GroupMetadataRecord],
                        writes: list[Write]) -> None:
        """`records` are durable: move `durable_view` and finish the `writes` waiting."""
        for record in records:
            if record.value is None:
                self._durable.pop(record.key.group, None)
            else:
                self._durable[record.key.group] = record.value
        for write in writes:
            finish(env, self._groups, write)

    def records_failed(self, env: rb.Env, records: list[GroupMetadataRecord],
                       writes: list[Write], error: ErrorCode, undone: set[str]) -> None:
        """`records` could not be made durable: undo the `writes` waiting, answering them
        `error`, and send any other Stable or CompletingRebalance group of the records
        (not in `undone`) through a new rebalance."""
        for write in writes:
            undo(env, self._groups, write, error)
            undone.add(write.group.group_id if isinstance(write, GroupDeletionWrite)
                       else write.group_id)
        for group_id in sorted({r.key.group for r in records} - undone):
            group = self._groups.get(group_id)
            if group is not None and group.state in (
                GroupState.STABLE, GroupState.COMPLETING_REBALANCE
            ):
                rb.prepare_rebalance(env, group, "failed to persist the group metadata",
                                     ev.RebalanceCause.WRITE_FAILURE)

    # -- timers and connections ------------------------------------------------------------

    def rebalance_now(self, group_id: str, reason: str, now_ms: int) -> Result | None:
        """Start a rebalance of a group that has members and can rebalance (an operator's or a
        test's request); None when it cannot."""
        group = self._groups.get(group_id)
        if group is None or not group.can_rebalance() or not group.members:
            return None
        env = self.env(now_ms)
        rb.prepare_rebalance(env, group, reason, ev.RebalanceCause.OTHER)
        return env.result

    def early_heartbeat_wakeup(self, key: TimerKey, now_ms: int) -> int | None:
        """A "heartbeat" `key` fired before the member's session deadline: the deadline to
        re-arm it at (`rebalance.early_heartbeat_wakeup`); None when `expire` must take it."""
        group = self._groups.get(str(key[1]))
        if group is None:
            return None
        return rb.early_heartbeat_wakeup(group, str(key[2]), now_ms)

    def expire(self, key: TimerKey, now_ms: int) -> Result:
        """The wheel fired a classic `key`; stale or early wake-ups are ignored or re-armed."""
        env = self.env(now_ms)
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
        return env.result

    def connection_closed(self, connection_id: int, now_ms: int, before: Result) -> Result:
        """Forget requests parked by a closed connection: they will never be answered.
        `before` (the consumer side's answer to the same close) comes first in the Result.

        The members stay (their JoinGroup still counts as a rejoin, as in Kafka). A dynamic
        member left with no open connection of its own, or whose JoinGroup or SyncGroup was
        parked on this one, is removed after the disconnect grace unless it is heard from
        again (`rebalance.connection_lost`); static members, and every member with the grace
        off, stay until their session expires or the rebalance moves on without them.
        """
        parked, members = self.connections.closed(connection_id)
        parked_members: dict[tuple[str, str], tuple[ClassicGroup, ClassicGroupMember]] = {}
        for group_id in parked:
            group = self._groups.get(group_id)
            if group is not None:
                for waiting in group.forget_connection(connection_id):
                    parked_members[(group_id, waiting.member_id)] = (group, waiting)
        if not members and not parked_members:
            return before
        env = self.env(now_ms)
        env.result.merge(before)
        for group_id, member_id in sorted(members or ()):
            group = self._groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if group is not None and member is not None:
                parked_here = parked_members.pop((group_id, member_id), None) is not None
                rb.connection_lost(env, group, member, connection_id, parked_here)
        for key in sorted(parked_members):
            parked_group, parked_member = parked_members[key]
            rb.connection_lost(env, parked_group, parked_member, connection_id, True)
        return env.result

    # -- recovery --------------------------------------------------------------------------

    def replay(self, record: GroupMetadataRecord, now_ms: int) -> Result:
        """Apply one group record read back from the log (latest value per key wins).

        Groups with members come back Stable at their generation, every member with a fresh
        session deadline, as Kafka loads them; groups without members come back Empty. The
        returned Result only carries timer changes.
        """
        env = self.env(now_ms)
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
        group = group_from_record(group_id, value)
        for member in group.members.values():
            rb.schedule_heartbeat(env, group, member)
        self._groups[group_id] = group
        return env.result

    # -- plumbing --------------------------------------------------------------------------

    def create_group(self, group_id: str, now_ms: int) -> ClassicGroup:
        group = ClassicGroup(group_id=group_id, state_timestamp_ms=now_ms)
        self._groups[group_id] = group
        return group


def _accepted(env: rb.Env, ref: RequestRef) -> bool:
    """The request `ref` was parked, or answered without an error that rejects the member
    (REBALANCE_IN_PROGRESS still speaks for a member the group knows)."""
    for reply in env.result.replies:
        if reply.ref == ref:
            error = getattr(reply.outcome, "error", ErrorCode.none)
            return error in (ErrorCode.none, ErrorCode.rebalance_in_progress)
    return True
