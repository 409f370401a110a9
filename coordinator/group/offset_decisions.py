"""The offset APIs' group decisions, pure: OffsetCommit, OffsetDelete, DeleteGroups, expiry,
and the offsets of deleted topics.

Kafka's `OffsetMetadataManager` and `GroupMetadataManager` answer each of these with a
`CoordinatorResult`; here each method returns the outcome to answer once the records are
durable and a `Result` (records to write, timer changes, events, changes waiting for the write)
for the runtime to apply. They combine the two halves of the core: `GroupCoordinatorService` (does
the group exist, may it be changed) and `OffsetStore` (per-partition rules). No I/O, no clock:
`now_ms` comes in (`Clock.now_ms`, the one clock of every persisted timestamp), as does
`topic_exists` (the runtime's topic metadata), and `refusal` (`Refusal`): whether this node
serves a group's log partition now is the runtime's state, what to answer when it does not is
decided here, beside every other answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from coordinator.group import offset_commands as oc
from coordinator.group.classic.state import GroupState
from coordinator.group.embedded_protocol import subscribed_topics
from coordinator.group.offsets import (
    CONSUMER_PROTOCOL_TYPE,
    CommitTopics,
    FetchedOffset,
    GroupExpiryView,
    OffsetStore,
    PartitionErrors,
    expire_timestamp_ms,
)
from coordinator.group.result import Refusal, Result
from coordinator.grouplog.records import MAX_STORED_STRING_BYTES, OffsetCommitRecord

if TYPE_CHECKING:
    from coordinator.group.service import GroupCoordinatorService

__all__ = ["CommitDecision", "ExpiryDecision", "GroupOffsets", "Refusal",
           "names_a_known_partition", "partition_errors"]



@dataclass(slots=True)
class CommitDecision:
    """An OffsetCommit: `error` for the whole request, else per-partition `errors` and the
    `records` to write (none: answer `errors` at once). `result` carries the group side's
    timer changes (a commit restarts the member's session), to apply in any case."""

    error: ErrorCode | None
    errors: PartitionErrors
    records: list[OffsetCommitRecord]
    result: Result


@dataclass(slots=True)
class ExpiryDecision:
    result: Result  # the offset and group tombstones, the deleted groups' events
    expired_offsets: int
    groups_deleted: int


def _unstorable(text: str) -> bool:
    """Longer than the group log can store; at most 4 bytes a character, so only very long
    strings are encoded to find out."""
    return len(text) * 4 > MAX_STORED_STRING_BYTES and len(
        text.encode()) > MAX_STORED_STRING_BYTES


def names_a_known_partition(topics: CommitTopics,
                             topic_exists: Callable[[str, int], bool]) -> bool:
    """Whether any partition of the commit exists; a commit's first partition nearly always
    does, so this is one lookup."""
    if topics:
        topic, partitions = topics[0]
        if partitions and topic_exists(topic, partitions[0][0]):
            return True
    return any(topic_exists(topic, entry[0]) for topic, partitions in topics
               for entry in partitions)


def partition_errors(topics: CommitTopics, topic_exists: Callable[[str, int], bool],
                     error: ErrorCode | None) -> PartitionErrors:
    """UNKNOWN_TOPIC_OR_PARTITION on the partitions that do not exist, `error` on the
    others."""
    unknown = ErrorCode.unknown_topic_or_partition
    return [(topic, [(entry[0], error if error is not None and topic_exists(topic, entry[0])
                      else unknown) for entry in partitions])
            for topic, partitions in topics]


class GroupOffsets:
    def __init__(self, groups: GroupCoordinatorService, offsets: OffsetStore) -> None:
        self.groups = groups
        self.offsets = offsets

    def commit(
        self,
        cmd: oc.OffsetCommit,
        api_version: int,
        now_ms: int,
        topic_exists: Callable[[str, int], bool],
        pending: bool = True,
    ) -> CommitDecision:
        """The group-side checks (SPEC §10, `GroupCoordinatorService.validate_offset_commit`), then
        the per-partition ones and the records (`OffsetStore.commit`, pending until applied
        unless `pending` is False: see there)."""
        if _unstorable(cmd.group_id):
            # The group log keys offsets by group id with an int16 length: a longer id could
            # never be written. Kafka answers a group id it cannot use INVALID_GROUP_ID.
            return CommitDecision(ErrorCode.invalid_group_id, [], [], Result())
        if not names_a_known_partition(cmd.topics, topic_exists):
            # Kafka answers unknown topics and partitions before the coordinator sees the
            # request (`KafkaApis.handleOffsetCommitRequest`); with nothing left, the group is
            # neither asked nor created.
            return CommitDecision(None, partition_errors(cmd.topics, topic_exists, None), [],
                                  Result())
        group_known = self.groups.group(cmd.group_id) is not None
        error, result = self.groups.validate_offset_commit(
            cmd.group_id, cmd.member_id, cmd.generation_id, cmd.group_instance_id, now_ms,
            cmd.ref.connection_id,
            api_version=api_version,
        )
        if error is ErrorCode.illegal_generation and not group_known and api_version >= 9:
            error = ErrorCode.group_id_not_found  # KIP-848 changed this answer from v9 on
        if error is not None:
            # The group's refusal on the partitions that exist; the others stay unknown.
            return CommitDecision(error, partition_errors(cmd.topics, topic_exists, error), [],
                                  result)
        expire = expire_timestamp_ms(cmd.retention_time_ms, now_ms)
        errors, records = self.offsets.commit(
            cmd.group_id, cmd.topics, now_ms, topic_exists=topic_exists, expire_timestamp=expire,
            commit_timestamps=cmd.commit_timestamps,  # OffsetCommit v1's explicit timestamps
            pending=pending,
        )
        return CommitDecision(None, errors, records, result)

    def validate_txn_offset_commit(self, group_id: str, member_id: str, generation_id: int,
                                   group_instance_id: str | None) -> ErrorCode | None:
        """The group-side checks of a TxnOffsetCommit (Kafka's transactional
        `validateOffsetCommit`): v0-v2 send no member (generation -1, member ""), which any
        group accepts; from v3 a named member must be in the group, a static member must be
        the instance's current one, and a generation other than -1 must be the group's."""
        if _unstorable(group_id):
            return ErrorCode.invalid_group_id
        consumer_group = self.groups.consumer.group(group_id)
        if consumer_group is not None:
            if not member_id:
                return None if generation_id < 0 else ErrorCode.illegal_generation
            member = consumer_group.members.get(member_id)
            if member is None:
                return ErrorCode.unknown_member_id
            if generation_id >= 0 and generation_id != member.member_epoch:
                return ErrorCode.illegal_generation
            return None
        group = self.groups.group(group_id)
        if group is None or group.state is GroupState.DEAD:
            # A group the coordinator does not know takes offsets only without a generation
            # (Kafka creates it Empty on the commit).
            if group is None and generation_id < 0 and not member_id:
                return None
            return (ErrorCode.coordinator_not_available if group is not None
                    else ErrorCode.illegal_generation)
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is not None and current != member_id:
                return ErrorCode.fenced_instance_id
        if member_id and member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id >= 0 and generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        return None

    def create_txn_commit_group(self, group_id: str, now_ms: int) -> None:
        """A TxnOffsetCommit `validate_txn_offset_commit` accepted for a group the coordinator
        does not know creates it, Empty and classic, at once (Kafka's
        `getOrMaybeCreateClassicGroup`): ListGroups and DescribeGroups show it while its
        offsets are pending, as they would after a restart replays them."""
        if self.groups.group(group_id) is None and self.groups.consumer.group(group_id) is None:
            self.groups.classic.create_group(group_id, now_ms)

    def fetch(self, cmd: oc.OffsetFetch, api_version: int, refusal: Refusal
              ) -> oc.OffsetFetchOutcome:
        """OffsetFetch, group by group: the runtime's refusal, then the consumer group's
        member check (Kafka `ConsumerGroup.validateOffsetFetch`), then the committed offsets
        (`OffsetStore.fetch`; with `require_stable`, UNSTABLE_OFFSET_COMMIT for pending ones)."""
        if api_version == oc.ZOOKEEPER_OFFSETS_VERSION:
            # Offsets kept in ZooKeeper: Kafka 3.x without ZooKeeper answers every requested
            # partition UNSUPPORTED_VERSION and reads nothing.
            return oc.OffsetFetchOutcome(groups=tuple(
                oc.OffsetFetchGroupResult(group_id=group.group_id, partitions=tuple(
                    FetchedOffset(topic, partition, -1, -1, "", ErrorCode.unsupported_version)
                    for topic, partitions in group.topics or ()
                    for partition in partitions))
                for group in cmd.groups))
        results = []
        for group in cmd.groups:
            error = refusal(group.group_id)
            if error is None:
                error = self.groups.consumer.validate_offset_fetch(
                    group.group_id, group.member_id, group.member_epoch)
            if error is not None:
                results.append(oc.OffsetFetchGroupResult.failed(group, error))
                continue
            fetched = self.offsets.fetch(group.group_id, group.topics,
                                         require_stable=cmd.require_stable)
            results.append(oc.OffsetFetchGroupResult(group_id=group.group_id,
                                                     partitions=tuple(fetched)))
        return oc.OffsetFetchOutcome(groups=tuple(results))

    def delete_offsets(self, cmd: oc.OffsetDelete, refusal: Refusal,
                       topic_exists: Callable[[str, int], bool] | None = None
                       ) -> tuple[oc.OffsetDeleteOutcome, Result]:
        """OffsetDelete: refused for a group the runtime does not serve now, an unknown or
        Dead group, and a live group whose subscriptions cannot be read; a topic the group
        subscribes to keeps its offsets, and a partition that does not exist (`topic_exists`)
        is answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka's request handler does."""
        if not cmd.group_id:
            # Kafka (`GroupCoordinatorService.deleteOffsets`) refuses the empty group id here,
            # though OffsetCommit takes it for backward compatibility.
            return oc.OffsetDeleteOutcome(error=ErrorCode.invalid_group_id), Result()
        refused = refusal(cmd.group_id)
        if refused is not None:
            return oc.OffsetDeleteOutcome(error=refused), Result()
        group = self.groups.group(cmd.group_id)
        if (group is None and self.groups.consumer.group(cmd.group_id) is None
                and not self.offsets.has_offsets(cmd.group_id)) or (
            group is not None and group.state is GroupState.DEAD
        ):
            return oc.OffsetDeleteOutcome(error=ErrorCode.group_id_not_found), Result()
        subscribed = self.subscriptions(cmd.group_id)
        live_classic = group is not None and bool(group.members)
        if group is not None and live_classic and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            # Kafka (`ClassicGroup.validateOffsetDelete`) refuses a live group that does not
            # use the consumer protocol: nothing says which topics it reads.
            return oc.OffsetDeleteOutcome(error=ErrorCode.non_empty_group), Result()
        # A live consumer-protocol group whose subscriptions are not known (its first
        # rebalance has chosen no protocol yet, or a member's metadata does not parse) reads
        # every topic as far as Kafka's `isSubscribedToTopic` can tell.
        errors, tombstones = self.offsets.delete(cmd.group_id, cmd.topics, subscribed or set(),
                                                 every_topic=live_classic and subscribed is None,
                                                 topic_exists=topic_exists)
        return oc.OffsetDeleteOutcome.from_errors(errors), Result(records=list(tombstones))

    def delete_groups(
        self,
        group_ids: Sequence[str],
        now_ms: int,
        unavailable: Refusal,
    ) -> tuple[oc.DeleteGroupsOutcome, Result]:
        """DeleteGroups: each Empty group (or one known only by its offsets, a standalone
        consumer's) is deleted with its offsets; `unavailable(group_id)` is the runtime's
        answer for a group it does not serve now. The groups leave memory at once; the
        Result's writes bring them back if its records are not made durable."""
        results: list[tuple[str, ErrorCode]] = []
        deleted = Result()
        for group_id in group_ids:
            refused = unavailable(group_id)
            if refused is not None:
                results.append((group_id, refused))
                continue
            had_offsets = self.offsets.has_offsets(group_id)
            error, result = self.groups.delete_group(group_id, now_ms)
            if error is ErrorCode.group_id_not_found and had_offsets:
                error = None  # offsets without a group record: a standalone consumer's
            if error is not None:
                results.append((group_id, error))
                continue
            deleted.merge(result)
            deleted.records.extend(self.offsets.delete_group(group_id))
            results.append((group_id, ErrorCode.none))
        return oc.DeleteGroupsOutcome(results=tuple(results)), deleted

    def delete_topics(self, topics: AbstractSet[str]) -> Result:
        """DeleteTopics: the tombstones of every group's offsets of `topics`, so that a topic
        created again under the same name starts from each group's reset policy. Nothing
        changes until they are durable (the runtime applies them then)."""
        return Result(records=list(self.offsets.delete_topics(topics)))

    def expiry_candidates(self) -> list[str]:
        """Every group an expiry pass looks at: classic, consumer, or only offsets."""
        return list(set(self.groups.groups) | set(self.groups.consumer.groups)
                    | self.offsets.groups_with_offsets())

    def expire(self, now_ms: int, group_ids: Sequence[str] | None = None) -> ExpiryDecision:
        """Offset expiry (Kafka `cleanupGroupMetadata`): tombstones for expired offsets, and
        Empty groups left without offsets deleted (brought back if the write fails). With
        `group_ids`, only those groups (one slice of a pass; see `expiry_candidates`)."""
        view: dict[str, GroupExpiryView] = {}
        classic_groups = self.groups.groups
        consumer_groups = self.groups.consumer.groups
        if group_ids is not None:
            classic_groups = {g: classic_groups[g] for g in group_ids if g in classic_groups}
            consumer_groups = {g: consumer_groups[g] for g in group_ids
                               if g in consumer_groups}
        for group_id, group in classic_groups.items():
            view[group_id] = GroupExpiryView(
                state_is_empty=group.state is GroupState.EMPTY,
                current_state_timestamp=group.state_timestamp_ms,
                subscribed_topics=self.subscriptions(group_id),
                protocol_type=group.protocol_type or "",
                state_is_stable=group.state is GroupState.STABLE,
            )
        for group_id, consumer_group in consumer_groups.items():
            view[group_id] = GroupExpiryView(
                state_is_empty=not consumer_group.members,
                current_state_timestamp=None,
                subscribed_topics=set(consumer_group.subscription_metadata),
                protocol_type="consumer",
                state_is_stable=consumer_group.state.value == "Stable",
            )
        expired = self.offsets.expire(now_ms, view, group_ids)
        removed = Result(records=list(expired.tombstones))
        for group_id in expired.groups_without_offsets:
            error, result = self.groups.delete_group(group_id, now_ms)
            if error is None:
                removed.merge(result)
        return ExpiryDecision(
            removed, len(expired.tombstones), len(expired.groups_without_offsets)
        )

    def forget_if_unused(self, group_id: str) -> bool:
        """Drop a memberless group the log never held, if it has no offsets either
        (`ClassicGroups.forget_if_never_written`); True if dropped."""
        if (self.offsets.has_offsets(group_id) or self.offsets.has_pending(group_id)
                or self.offsets.has_transactional(group_id)):
            return False
        return self.groups.forget_if_never_written(group_id)

    def subscriptions(self, group_id: str) -> set[str] | None:
        """The topics a live consumer group's members subscribe to; None when unknown (no
        members, not the consumer protocol, or a subscription that does not parse)."""
        consumer_group = self.groups.consumer.group(group_id)
        if consumer_group is not None:
            return set(consumer_group.subscription_metadata) if consumer_group.members else None
        group = self.groups.group(group_id)
        if group is None or group.protocol_type != CONSUMER_PROTOCOL_TYPE or not group.members:
            return None
        if group.protocol_name is None:
            # Members joining, no protocol chosen. Kafka keeps the topics of the last
            # generation: none once the group emptied (a generation ended empty), unknown
            # while it never had one (a group a standalone commit made).
            return set() if group.generation_id > 0 else None
        topics: set[str] = set()
        for member in group.members.values():
            for protocol in member.protocols:
                if protocol.name == group.protocol_name:
                    parsed = subscribed_topics(protocol.metadata)
                    if parsed is None:
                        return None
                    topics |= parsed
        return topics
