"""Every group-log record the core writes, built here: one helper per record type, its tombstone
beside it (Kafka's `GroupCoordinatorRecordHelpers`).

The record types and their codec are `coordinator/grouplog/`'s; which records a change writes,
and in which order, is decided by the module making the change. Offset commit records come from
`grouplog.records.offset_commit_record`, a builder made for the hottest path.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.group.consumer.member import Assignment, ConsumerGroupMember, assignment_to_record
from coordinator.grouplog.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitRecord,
    SubscribedTopicMetadata,
    offset_commit_record,
)

# -- classic groups ----------------------------------------------------------------------------


def group_metadata_record(group_id: str, value: GroupMetadataValue) -> GroupMetadataRecord:
    """A classic group's snapshot (`ClassicGroup.snapshot`)."""
    return GroupMetadataRecord(key=GroupMetadataKey(group=group_id), value=value)


def group_metadata_tombstone(group_id: str) -> GroupMetadataRecord:
    return GroupMetadataRecord(key=GroupMetadataKey(group=group_id), value=None)


# -- offsets -----------------------------------------------------------------------------------


def offset_commit_tombstone(group_id: str, topic: str, partition: int) -> OffsetCommitRecord:
    return offset_commit_record(group_id, topic, partition, None)


# -- consumer groups (KIP-848) -----------------------------------------------------------------


def consumer_group_epoch_record(group_id: str, epoch: int) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(key=ConsumerGroupMetadataKey(group=group_id),
                               value=ConsumerGroupMetadataValue(epoch=epoch))


def consumer_group_epoch_tombstone(group_id: str) -> ConsumerGroupRecord:
    """The group's last record: replaying it deletes the group."""
    return ConsumerGroupRecord(key=ConsumerGroupMetadataKey(group=group_id), value=None)


def consumer_group_subscription_metadata_record(
        group_id: str, topics: Iterable[SubscribedTopicMetadata]) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(key=ConsumerGroupPartitionMetadataKey(group=group_id),
                               value=ConsumerGroupPartitionMetadataValue(topics=tuple(topics)))


def consumer_group_subscription_metadata_tombstone(group_id: str) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(key=ConsumerGroupPartitionMetadataKey(group=group_id), value=None)


def consumer_group_member_subscription_record(group_id: str, m: ConsumerGroupMember
                                              ) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        key=ConsumerGroupMemberMetadataKey(group=group_id, member_id=m.member_id),
        value=ConsumerGroupMemberMetadataValue(
            instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=m.subscribed_topic_names,
            subscribed_topic_regex=m.subscribed_topic_regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
            classic_member_metadata=m.classic))


def consumer_group_member_subscription_tombstone(group_id: str, member_id: str
                                                 ) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        key=ConsumerGroupMemberMetadataKey(group=group_id, member_id=member_id), value=None)


def consumer_group_target_assignment_record(group_id: str, member_id: str,
                                            target: Assignment | None) -> ConsumerGroupRecord:
    """A member's target assignment; its tombstone when `target` is None."""
    return ConsumerGroupRecord(
        key=ConsumerGroupTargetAssignmentMemberKey(group=group_id, member_id=member_id),
        value=None if target is None else ConsumerGroupTargetAssignmentMemberValue(
            topic_partitions=assignment_to_record(target)))


def consumer_group_target_assignment_epoch_record(group_id: str, epoch: int
                                                  ) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        key=ConsumerGroupTargetAssignmentMetadataKey(group=group_id),
        value=ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch))


def consumer_group_target_assignment_epoch_tombstone(group_id: str) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(key=ConsumerGroupTargetAssignmentMetadataKey(group=group_id),
                               value=None)


def consumer_group_current_assignment_record(group_id: str, m: ConsumerGroupMember
                                             ) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        key=ConsumerGroupCurrentMemberAssignmentKey(group=group_id, member_id=m.member_id),
        value=ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch,
            state=int(m.state), assigned_partitions=assignment_to_record(m.assigned),
            partitions_pending_revocation=assignment_to_record(m.pending_revocation)))


def consumer_group_current_assignment_tombstone(group_id: str, member_id: str
                                                ) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        key=ConsumerGroupCurrentMemberAssignmentKey(group=group_id, member_id=member_id),
        value=None)


def consumer_group_member_tombstones(group_id: str, member_id: str) -> list[ConsumerGroupRecord]:
    """Kafka's `removeMember`: current assignment, target assignment, then subscription."""
    return [
        consumer_group_current_assignment_tombstone(group_id, member_id),
        consumer_group_target_assignment_record(group_id, member_id, None),
        consumer_group_member_subscription_tombstone(group_id, member_id),
    ]
