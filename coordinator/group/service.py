"""The group coordinator service: every command of this node's groups goes in here.

A thin router in the spirit of Kafka's `GroupCoordinatorService` over its shard: it takes a
command and `now_ms`, sends it to the part that owns it and returns that part's `Result`. The
parts are pure and know nothing of each other:

* `classic` - `ClassicGroups` (`classic/groups.py`): JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup of classic groups;
* `consumer` - `ConsumerGroupCoordinator` (`consumer/coordinator.py`): the KIP-848 groups, and
  the classic-protocol requests of their classic members;
* `migration` - `GroupMigrator` (`migrator.py`): a group changing type, the peer between the
  two;
* `offsets` - `GroupOffsets` (`offset_decisions.py`) over the `OffsetStore`: OffsetCommit,
  OffsetFetch, OffsetDelete, DeleteGroups, expiry;
* DescribeGroups and ListGroups read both group types (`describe.py`).

It does no I/O and reads no clock (`Clock.now_ms()` comes in: epoch-aligned and monotonic, both
the timer time base and the persisted state timestamp).

What it leaves to the runtime: applying `Result.timers` to the wheel, appending
`Result.records`, waiting until they are durable and only then delivering `Result.replies`;
calling `expire(key)` when the wheel fires and `connection_closed` when a client goes away;
whether this node serves a group's log partition now (`outcomes.error_outcome` shapes the answer
when it does not).

State follows the log: every Result with records comes back once the append has completed.
`records_durable` finishes the changes that waited for the write (the leader's assignment makes
the group Stable and answers the SyncGroups) and moves the durable views; `records_failed` undoes
them (`classic/writes.py`, `migrator.py`, a consumer group back to its durable records:
`consumer/durable.py`) and sends any other Stable or CompletingRebalance group
of the failed records through a new rebalance. The runtime must not deliver a failed Result's
replies (it answers them with `outcomes.error_outcome` instead).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group import migration
from coordinator.group import offset_commands as oc
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.groups import ClassicGroups
from coordinator.group.classic.heartbeat import steady_commit, steady_heartbeat
from coordinator.group.classic.state import GroupState
from coordinator.group.config import GroupConfig
from coordinator.group.consumer.commands import ConsumerGroupDescribe, ConsumerGroupHeartbeat
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.coordinator import TIMER_KINDS as CONSUMER_TIMER_KINDS
from coordinator.group.consumer.coordinator import ConsumerGroupCoordinator
from coordinator.group.describe import describe_groups, list_groups
from coordinator.group.migrator import GroupMigrator
from coordinator.group.offset_decisions import ExpiryDecision, GroupOffsets
from coordinator.group.offsets import OffsetStore
from coordinator.group.outcomes import JoinGroupOutcome, SyncGroupOutcome
from coordinator.group.result import APPEND_FAILED, Refusal, Reply, Result, TimerKey
from coordinator.grouplog.records import (
    ConsumerGroupRecord,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitRecord,
)

__all__ = ["GroupCoordinatorService"]

# What `records_durable` returns when nothing waited for the write: shared, never changed.
_NO_FOLLOW_UP = Result()


class GroupCoordinatorService:
    """All groups and offsets of this node. Methods raise nothing but AssertionError (a bug)."""

    def __init__(self, config: GroupConfig, new_member_id: Callable[[str], str],
                 consumer_config: ConsumerGroupConfig | None = None,
                 offset_store: OffsetStore | None = None) -> None:
        self.config = config
        self.classic = ClassicGroups(config, new_member_id)
        # One disconnect grace for both group types: this coordinator's setting.
        self.consumer = ConsumerGroupCoordinator(
            dataclasses.replace(consumer_config or ConsumerGroupConfig(),
                                disconnect_grace_ms=config.group_member_disconnect_grace_ms),
            new_member_id)
        self.migration = GroupMigrator(config, self.classic, self.consumer)
        self.offset_store = offset_store if offset_store is not None else OffsetStore(config)
        self.offsets = GroupOffsets(self, self.offset_store)
        self._disconnect_grace_on = config.group_member_disconnect_grace_ms >= 0
        self._classic_by_id = self.classic.by_id

    # -- reading ---------------------------------------------------------------------------

    @property
    def groups(self) -> Mapping[str, ClassicGroup]:
        """Live classic groups by id (read-only view)."""
        return self.classic.groups

    def group(self, group_id: str) -> ClassicGroup | None:
        """The classic group of that id (`consumer.group` for the consumer groups)."""
        return self.classic.group(group_id)

    def durable_view(self) -> dict[str, GroupMetadataValue]:
        """Every classic group's GroupMetadataValue as last made durable (or replayed)."""
        return self.classic.durable_view()

    def __iter__(self) -> Iterator[ClassicGroup]:
        return iter(self.classic)

    # -- commands --------------------------------------------------------------------------

    def handle(self, cmd: c.Command | ConsumerGroupHeartbeat | ConsumerGroupDescribe,
               now_ms: int) -> Result:
        match cmd:
            case ConsumerGroupHeartbeat():
                return self._consumer_group_heartbeat(cmd, now_ms)
            case ConsumerGroupDescribe():
                return self.consumer.describe(cmd)
            case c.DescribeGroups():
                return Result.reply(cmd.ref, describe_groups(self.classic, self.consumer, cmd))
            case c.ListGroups():
                return Result.reply(cmd.ref, list_groups(self.classic, self.consumer, cmd))
        if cmd.group_id and self.consumer.group(cmd.group_id) is not None:
            return self._classic_request_to_consumer_group(cmd, now_ms)
        return self.classic.handle(cmd, now_ms)

    def _classic_request_to_consumer_group(
            self, cmd: c.JoinGroup | c.SyncGroup | c.Heartbeat | c.LeaveGroup, now_ms: int
    ) -> Result:
        """A classic API naming a consumer group. A JoinGroup to an empty consumer group
        replaces it with a classic group (`migrator.py`); otherwise the consumer group answers
        the requests of its classic members (`consumer/classic_members.py`)."""
        match cmd:
            case c.JoinGroup() if self.consumer.is_empty(cmd.group_id):
                removed = self.migration.replace_empty_consumer_group(cmd.group_id, now_ms)
                return removed.merge(self.classic.handle(cmd, now_ms))
            case c.JoinGroup():
                error = self.classic.invalid_join(cmd)
                if error is not None:
                    return Result.reply(cmd.ref, JoinGroupOutcome(error=error,
                                                                  member_id=cmd.member_id))
            case c.SyncGroup() if cmd.requires_protocol and (
                    cmd.protocol_type is None or cmd.protocol_name is None):
                return Result.reply(cmd.ref, SyncGroupOutcome(
                    error=ErrorCode.inconsistent_group_protocol))
        kept = self.classic.kept_connection(cmd)
        # A classic member leaving never downgrades (only a consumer-protocol member does).
        return self.consumer.classic_request(cmd, now_ms, kept_connection=kept)

    def _consumer_group_heartbeat(self, cmd: ConsumerGroupHeartbeat, now_ms: int) -> Result:
        classic = self.classic.group(cmd.group_id)
        if classic is not None and not classic.is_state(GroupState.DEAD):
            return self.migration.heartbeat_to_classic_group(classic, cmd, now_ms)
        if cmd.member_epoch >= 0:  # the steady state: nobody leaves
            return self.consumer.heartbeat(cmd, now_ms)
        watch = self.migration.downgrade_watch(cmd.group_id, cmd.member_id)
        result = self.consumer.heartbeat(cmd, now_ms)
        return self.migration.maybe_downgrade(cmd.group_id, watch, result, now_ms,
                                              cmd.member_id)

    def steady_heartbeat(self, group_id: str, member_id: str, generation_id: int,
                         group_instance_id: str | None, connection_id: int, now_ms: int) -> bool:
        """A classic group's steady-state Heartbeat done in place (`classic.heartbeat.
        steady_heartbeat`): True when it was one and its answer is NONE; False, with nothing
        changed, when `handle` must take the command. The hottest request a coordinator
        serves, so it skips building the command and its Result."""
        group = self._classic_by_id.get(group_id)
        if group is None or self.consumer.group(group_id) is not None:
            return False
        return steady_heartbeat(group, member_id, generation_id, group_instance_id,
                                connection_id, now_ms, self._disconnect_grace_on)

    # -- the offset APIs (`offset_decisions.py` decides; answered once the records are durable)

    def offset_commit(self, cmd: oc.OffsetCommit, api_version: int, now_ms: int,
                      topic_exists: Callable[[str, int], bool], pending: bool = True) -> Result:
        """OffsetCommit (`GroupOffsets.commit`; `pending` as there)."""
        decision = self.offsets.commit(cmd, api_version, now_ms, topic_exists, pending)
        result = decision.result
        if decision.error is not None:
            result.replies.append(Reply(cmd.ref, oc.OffsetCommitOutcome.from_errors(
                decision.errors) if decision.errors else oc.OffsetCommitOutcome.failed(
                cmd, decision.error)))
            return result
        result.replies.append(Reply(cmd.ref, oc.OffsetCommitOutcome.from_errors(
            decision.errors)))
        if result.records:
            result.records.extend(decision.records)
        else:  # nearly always: the commit's own list becomes the Result's
            result.records = decision.records  # type: ignore[assignment]
        return result

    def offset_delete(self, cmd: oc.OffsetDelete, refusal: Refusal,
                      topic_exists: Callable[[str, int], bool] | None = None) -> Result:
        """OffsetDelete (`GroupOffsets.delete_offsets`)."""
        outcome, result = self.offsets.delete_offsets(cmd, refusal, topic_exists)
        result.replies.append(Reply(cmd.ref, outcome))
        return result

    def delete_groups(self, cmd: oc.DeleteGroups, now_ms: int, refusal: Refusal) -> Result:
        """DeleteGroups (`GroupOffsets.delete_groups`): the groups are gone once the
        tombstones are durable, and only then are their `group_dead` events told."""
        outcome, result = self.offsets.delete_groups(cmd.group_ids, now_ms, refusal)
        result.durable_events.extend(result.events)
        result.events.clear()
        result.replies.append(Reply(cmd.ref, outcome))
        return result

    def expire_offsets(self, now_ms: int, group_ids: list[str]) -> ExpiryDecision:
        """One slice of an offset-expiry pass (`GroupOffsets.expire`); the deleted groups'
        events are told once the tombstones are durable."""
        expired = self.offsets.expire(now_ms, group_ids)
        result = expired.result
        result.durable_events.extend(result.events)
        result.events.clear()
        return expired

    # -- the offsets' group side -----------------------------------------------------------

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
        group = self._classic_by_id.get(group_id)
        if connection_id is not None and group is not None and steady_commit(
                group, member_id, generation_id, group_instance_id, connection_id, now_ms,
                self._disconnect_grace_on):
            return None, Result()  # `steady_commit` below, the consumer side checked above
        return self.classic.validate_offset_commit_in_full(
            group_id, member_id, generation_id, group_instance_id, now_ms, connection_id)

    def steady_commit(self, group_id: str, member_id: str, generation_id: int,
                      group_instance_id: str | None, connection_id: int, now_ms: int) -> bool:
        """The group side of nearly every OffsetCommit, done in place
        (`classic.heartbeat.steady_commit`): a current member of a classic group, on its
        connection, whose session moves with no timer change, record or event to return.
        True when it was one; False, with nothing changed, when the full checks must run."""
        group = self._classic_by_id.get(group_id)
        if group is None or self.consumer.group(group_id) is not None:
            return False
        return steady_commit(group, member_id, generation_id, group_instance_id,
                             connection_id, now_ms, self._disconnect_grace_on)

    def delete_group(self, group_id: str, now_ms: int) -> tuple[ErrorCode | None, Result]:
        """Delete an Empty group of either type: Dead, forgotten, and its tombstones
        (DeleteGroups, expiry).

        Errors: GROUP_ID_NOT_FOUND when absent, NON_EMPTY_GROUP while it has members. The
        caller deletes the group's offsets (with their own tombstones).
        """
        if self.consumer.group(group_id) is not None:
            return self.consumer.delete_group(group_id, now_ms)
        return self.classic.delete_group(group_id, now_ms)

    def forget_if_never_written(self, group_id: str) -> bool:
        return self.classic.forget_if_never_written(group_id)

    # -- writes ----------------------------------------------------------------------------

    def records_durable(self, written: Result, now_ms: int, *, only_offsets: bool = False
                        ) -> Result:
        """`written.records` are durable: apply the offsets, finish what waited for them
        (module doc). `only_offsets`: the caller has seen that every record is an offset
        commit."""
        records = written.records
        self.offset_store.apply_all(records)  # it passes over the other record types
        if only_offsets and not written.writes:
            return _NO_FOLLOW_UP  # nearly every OffsetCommit
        if not written.writes:
            for record in records:
                if type(record) is not OffsetCommitRecord:
                    break
            else:
                return _NO_FOLLOW_UP  # nearly every OffsetCommit
        classic_records: list[GroupMetadataRecord] = []
        consumer_records: list[ConsumerGroupRecord] = []
        for record in records:
            if type(record) is GroupMetadataRecord:
                classic_records.append(record)
            elif type(record) is ConsumerGroupRecord:
                consumer_records.append(record)
        if consumer_records:
            self.consumer.records_durable(consumer_records)
        env = self.classic.env(now_ms)
        writes = [w for w in written.writes if not isinstance(w, migration.ConversionWrite)]
        self.classic.records_durable(env, classic_records, writes)
        return env.result

    def records_failed(self, written: Result, now_ms: int,
                       error: ErrorCode = APPEND_FAILED) -> Result:
        """`written.records` could not be made durable: undo, answer with `error`, rebalance
        (module doc)."""
        env = self.classic.env(now_ms)
        self.offset_store.abort(r for r in written.records if isinstance(r, OffsetCommitRecord))
        consumer_groups = {r.key.group for r in written.records
                           if isinstance(r, ConsumerGroupRecord)}
        if consumer_groups:
            env.result.merge(self.consumer.records_failed(consumer_groups, now_ms))
        undone: set[str] = set()
        classic_writes = []
        for write in written.writes:
            if isinstance(write, migration.ConversionWrite):
                self.migration.undo(env, write)
                undone.add(write.group_id)
            else:
                classic_writes.append(write)
        classic_records = [r for r in written.records if isinstance(r, GroupMetadataRecord)]
        self.classic.records_failed(env, classic_records, classic_writes, error, undone)
        return env.result

    # -- timers and connections ------------------------------------------------------------

    def early_heartbeat_wakeup(self, key: TimerKey, now_ms: int) -> int | None:
        """A classic member's session check woken before its deadline: the time to re-arm
        `key` at, the member noted as armed there; None, nothing changed, when `expire` must
        take the key. What `expire` would do, without building a Result."""
        if key[0] != "heartbeat":
            return None
        return self.classic.early_heartbeat_wakeup(key, now_ms)

    def expire(self, key: TimerKey, now_ms: int) -> Result:
        """The wheel fired `key`; stale or early wake-ups are ignored or re-armed."""
        if key[0] in CONSUMER_TIMER_KINDS:
            group_id, member_id = str(key[1]), str(key[2])
            watch = self.migration.downgrade_watch(group_id, member_id)
            return self.migration.maybe_downgrade(
                group_id, watch, self.consumer.expire(key, now_ms), now_ms, member_id)
        return self.classic.expire(key, now_ms)

    def rebalance_now(self, group_id: str, reason: str, now_ms: int) -> Result | None:
        """Start a classic group's rebalance on request (`ClassicGroups.rebalance_now`)."""
        return self.classic.rebalance_now(group_id, reason, now_ms)

    def connection_closed(self, connection_id: int, now_ms: int) -> Result:
        """Forget what a closed connection parked; start the disconnect grace of the members
        it carried (`ClassicGroups.connection_closed`, `consumer/disconnect.py`)."""
        consumer = self.consumer.connection_closed(connection_id, now_ms)
        return self.classic.connection_closed(connection_id, now_ms, consumer)

    # -- recovery --------------------------------------------------------------------------

    def replay(self, record: GroupMetadataRecord, now_ms: int) -> Result:
        """Apply one classic group record read back from the log (`ClassicGroups.replay`)."""
        return self.classic.replay(record, now_ms)
