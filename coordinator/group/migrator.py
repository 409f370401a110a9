"""A group changing type: the peer between the classic and the consumer groups.

A group id names a group of one type at a time. This module decides when that changes and
carries it out between `ClassicGroups` and `ConsumerGroupCoordinator`; the conversions
themselves (the records, the new group) are `migration.py`'s. Kafka's `GroupMetadataManager`
does this inside its consumer-group heartbeat (`maybeDeleteEmptyClassicGroup`,
`convertToConsumerGroup`) and its JoinGroup (`maybeDeleteEmptyConsumerGroup`); here neither group
type knows of the other.

* A JoinGroup to an empty consumer group replaces it with a classic group (tombstones first).
* A ConsumerGroupHeartbeat joining (epoch 0) a classic group, when
  `group.consumer.migration.policy` allows upgrades: an Empty classic group is deleted and a
  consumer group takes its place (committed offsets stay); one with members is converted with
  them (`migration.classic_to_consumer`).
* A consumer-protocol member leaving (or fenced) may leave only classic members behind: the
  group goes back to the classic type (`migration.consumer_to_classic`).

A conversion waits for its records (`migration.ConversionWrite`); `undo` takes it back when
they fail.
"""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from coordinator.group import migration
from coordinator.group import record_helpers as rh
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.groups import ClassicGroups
from coordinator.group.classic.state import GroupState
from coordinator.group.config import GroupConfig
from coordinator.group.consumer.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatOutcome,
)
from coordinator.group.consumer.coordinator import ConsumerGroupCoordinator
from coordinator.group.consumer.heartbeat import HeartbeatError, validate
from coordinator.group.result import Result

__all__ = ["DowngradeWatch", "GroupMigrator"]

# (was the member a consumer-protocol member of the group, the group epoch), taken before a
# change that may remove that member.
DowngradeWatch = tuple[bool, int]


class GroupMigrator:
    def __init__(self, config: GroupConfig, classic: ClassicGroups,
                 consumer: ConsumerGroupCoordinator) -> None:
        self.config = config
        self.classic = classic
        self.consumer = consumer

    # -- classic -> consumer ---------------------------------------------------------------

    def replace_empty_consumer_group(self, group_id: str, now_ms: int) -> Result:
        """Kafka's `maybeDeleteEmptyConsumerGroup`: an empty consumer group gives way to the
        classic group a JoinGroup creates (tombstones first)."""
        _, removed = self.consumer.delete_group(group_id, now_ms,
                                                reason="converted to a classic group")
        return removed

    def heartbeat_to_classic_group(self, classic: ClassicGroup, cmd: ConsumerGroupHeartbeat,
                                   now_ms: int) -> Result:
        """A ConsumerGroupHeartbeat naming a live classic group: GROUP_ID_NOT_FOUND, unless
        the member joins and the policy allows upgrades (module doc)."""
        refused = ConsumerGroupHeartbeatOutcome(
            error=ErrorCode.group_id_not_found, member_id=cmd.member_id or None,
            member_epoch=cmd.member_epoch,
            error_message=f"Group {cmd.group_id} is not a consumer group.")
        if cmd.member_epoch != 0 or not self.consumer.config.upgrade_allowed:
            return Result.reply(cmd.ref, refused)
        if classic.is_state(GroupState.EMPTY):
            return self._replace_empty_classic_group(classic, cmd, now_ms)
        return self._upgrade(classic, cmd, now_ms, refused)

    def _replace_empty_classic_group(self, classic: ClassicGroup, cmd: ConsumerGroupHeartbeat,
                                     now_ms: int) -> Result:
        """Kafka's `maybeDeleteEmptyClassicGroup` (committed offsets stay)."""
        error, converted = self.classic.delete_group(cmd.group_id, now_ms,
                                                     reason="converted to a consumer group")
        if error is not None:  # pragma: no cover - Empty was checked by the caller
            raise AssertionError(error)
        self.classic.remove(cmd.group_id)
        return converted.merge(self.consumer.heartbeat(cmd, now_ms))

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
        env = self.classic.env(now_ms)
        try:
            group = migration.classic_to_consumer(env, classic, self.consumer.image,
                                                  self.consumer.config.max_size,
                                                  cmd.member_id or None)
        except migration.UpgradeRefused as exc:
            return Result.reply(cmd.ref, dataclasses.replace(refused, error_message=str(exc)))
        self.classic.remove(classic.group_id)
        self.consumer.adopt(group)
        env.result.writes.append(migration.ConversionWrite(
            group_id=classic.group_id, direction="upgrade", replaced=classic))
        return env.result.merge(self.consumer.heartbeat(cmd, now_ms))

    # -- consumer -> classic ---------------------------------------------------------------

    def downgrade_watch(self, group_id: str, member_id: str) -> DowngradeWatch:
        """What `maybe_downgrade` needs to know from before a change that may remove
        `member_id` from the consumer group."""
        group = self.consumer.group(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return False, 0
        return member.classic is None, group.group_epoch

    def maybe_downgrade(self, group_id: str, watch: DowngradeWatch, result: Result,
                        now_ms: int, member_id: str) -> Result:
        """After `result` removed `member_id`: convert the group to a classic group when only
        classic members are left and the policy allows downgrades."""
        was_consumer_member, epoch_before = watch
        group = self.consumer.group(group_id)
        if (group is None or not was_consumer_member or member_id in group.members
                or not self.consumer.config.downgrade_allowed
                or not migration.can_downgrade(group, self.config.group_max_size)):
            return result
        env = self.classic.env(now_ms)
        # The classic members' generation is the epoch they last joined at: the one before
        # the departure bumped it, so their heartbeats get REBALANCE_IN_PROGRESS and rejoin.
        classic = migration.consumer_to_classic(env, group, self.consumer.image, epoch_before,
                                                member_id)
        result.merge(self.consumer.forget(group_id))
        self.classic.adopt(classic)
        env.result.writes.append(migration.ConversionWrite(
            group_id=group_id, direction="downgrade", replaced=None))
        return result.merge(env.result)

    # -- a failed write --------------------------------------------------------------------

    def undo(self, env: rb.Env, write: migration.ConversionWrite) -> None:
        """Back to what the log has (the consumer side has already been put back to it)."""
        group_id = write.group_id
        if write.direction == "downgrade":
            self.classic.drop_converted(env, group_id)
            return
        env.result.merge(self.consumer.forget(group_id))
        durable = self.classic.durable(group_id)
        if durable is not None:
            env.result.merge(self.classic.replay(
                rh.group_metadata_record(group_id, durable), env.now_ms))
