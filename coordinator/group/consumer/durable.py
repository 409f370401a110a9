"""The consumer groups' records as last made durable: what a failed write goes back to.

A consumer group changes in memory as its heartbeats are answered, before its records are
written. When they cannot be written, the group is rebuilt from this view (the latest durable
record of every key, in the order they were last written, as a compacted log holds them), so the
members whose changes were lost get FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID and rejoin. Kafka's
coordinator runtime reverts to its last committed snapshot for the same reason.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from coordinator.grouplog.records import ConsumerGroupMetadataKey, ConsumerGroupRecord

__all__ = ["DurableRecords"]


class DurableRecords:
    def __init__(self) -> None:
        self._by_group: dict[str, dict[Hashable, ConsumerGroupRecord]] = {}

    def note(self, record: ConsumerGroupRecord) -> None:
        """`record` is durable (written, or read back from the log)."""
        group_id = record.key.group
        if record.value is None and type(record.key) is ConsumerGroupMetadataKey:
            self._by_group.pop(group_id, None)  # the group epoch's tombstone: group deleted
            return
        records = self._by_group.setdefault(group_id, {})
        records.pop(record.key, None)  # a rewritten key moves to the end, as in the log
        if record.value is not None:
            records[record.key] = record
        elif not records:
            del self._by_group[group_id]

    def records_of(self, group_id: str) -> Iterable[ConsumerGroupRecord]:
        return list(self._by_group.get(group_id, {}).values())
