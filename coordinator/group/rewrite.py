"""The records that write the current state of groups and their offsets again.

When a sealed group-log segment disappears while the broker runs, what it held is gone from
disk but not from memory, and memory is authoritative for everything acknowledged: writing
these records again (latest value per key wins on replay) lets a restart keep it. Groups with a
write in flight are left out by the caller: that write is newer and already in the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from coordinator.group import record_helpers as rh
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.offsets import OffsetStore
from coordinator.grouplog.records import ConsumerGroupRecord, CoordinatorRecord, GroupMetadataValue


def consumer_group_records(group: ConsumerGroup) -> list[ConsumerGroupRecord]:
    """Records that replay to `group`'s durable state, in the order Kafka writes a group's
    records: members, epoch, subscription metadata, target assignment, current assignments."""
    group_id = group.group_id
    records = [rh.consumer_group_member_subscription_record(group_id, m)
               for m in group.members.values()]
    records.append(rh.consumer_group_epoch_record(group_id, group.group_epoch))
    records.append(rh.consumer_group_subscription_metadata_record(
        group_id, group.subscription_metadata.values()))
    records.extend(rh.consumer_group_target_assignment_record(group_id, member_id, target)
                   for member_id, target in group.target.items())
    records.append(rh.consumer_group_target_assignment_epoch_record(
        group_id, group.assignment_epoch))
    records.extend(rh.consumer_group_current_assignment_record(group_id, m)
                   for m in group.members.values())
    return records


def current_records(classic: Mapping[str, GroupMetadataValue],
                    consumer: Iterable[ConsumerGroup], offsets: OffsetStore,
                    wanted: Callable[[str], bool]) -> list[CoordinatorRecord]:
    """The records of every wanted group's durable state: classic groups (their durable
    GroupMetadataValue), consumer groups that have been written, and committed offsets."""
    records: list[CoordinatorRecord] = [
        rh.group_metadata_record(group_id, value)
        for group_id, value in classic.items() if wanted(group_id)]
    for group in consumer:
        if group.exists and wanted(group.group_id):
            records.extend(consumer_group_records(group))
    records.extend(offsets.durable_records(wanted))
    return records
