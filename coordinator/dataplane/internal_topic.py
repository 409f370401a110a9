"""`__consumer_offsets` as a read-only internal topic, as Kafka exposes it.

The group log already holds Kafka's record format, one partition log per
`offsets.topic.num.partitions`, so lag tools that read the topic itself (Burrow, a consumer in
`assign()` mode) can fetch it. Metadata lists it with `is_internal=true`; Fetch and ListOffsets
read it up to its high watermark, the offset the group log has made durable; Produce,
CreateTopics and DeleteTopics refuse it. A fetch parked at its end is answered at its
`max_wait`, not woken by coordinator writes.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from coordinator.grouplog.log import TOPIC as OFFSETS_TOPIC
from coordinator.grouplog.log import GroupLog
from storage.log import LogOfflineError, OffsetOutOfRange, PartitionLog
from storage.topics import TopicStore

__all__ = ["OFFSETS_TOPIC", "InternalTopic", "TopicDirectory", "topic_by_id", "topic_by_name"]


class TopicDirectory(Protocol):
    """Where the data plane finds topics: the user topics, and the group log to read."""

    @property
    def topics(self) -> TopicStore: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def group_log(self) -> GroupLog | None:
        """None until the group log is opened."""
        ...


class ReadOnlyPartition:
    """One group-log partition seen through the data plane: reads only, up to what is durable."""

    __slots__ = ("_group_log", "_index", "_log")

    def __init__(self, group_log: Any, index: int) -> None:
        self._group_log = group_log
        self._index = index
        self._log: PartitionLog = group_log.logs[index]

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def offline(self) -> LogOfflineError | None:
        return self._log.offline

    @property
    def log_end_offset(self) -> int:
        """The high watermark: records past the last durable point are not served."""
        return min(self._group_log._durable_end[self._index], self._log.log_end_offset)

    def read(self, offset: int, max_bytes: int) -> bytes:
        end = self.log_end_offset
        if offset == end:
            return b""
        if offset > end or offset < self.log_start_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, end)
        # The group-log cleaner swaps compacted segments from a worker thread under the log's
        # lock; reading under it never meets a half-swapped segment.
        with self._log._lock:
            data = self._log.read(offset, max_bytes)
        return _below(data, end)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        found = self._log.offset_for_timestamp(timestamp_ms)
        return found if found is not None and found[0] < self.log_end_offset else None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        found = self._log.max_timestamp_offset()
        return found if found is not None and found[0] < self.log_end_offset else None

    def segment_times(self) -> list[tuple[int, int, int]]:
        """The group log's segments as ListOffsets v0 sees them (`PartitionLog.segment_times`);
        the offsets past the high watermark are cut by the caller, as Kafka cuts them."""
        with self._log._lock:  # the cleaner swaps compacted segments under it
            return self._log.segment_times()


def _below(data: bytes, end: int) -> bytes:
    """The whole batches of `data` whose base offset is below `end`."""
    position = 0
    while position + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, position)
        if base_offset >= end:
            break
        position += 12 + length
    return data[:min(position, len(data))]


@dataclass(slots=True)
class InternalTopic:
    name: str
    topic_id: uuid.UUID
    partitions: list[ReadOnlyPartition] = field(default_factory=list)
    is_internal: bool = True


def offsets_topic(broker: TopicDirectory) -> InternalTopic | None:
    group_log = broker.group_log
    if group_log is None:
        return None  # not started yet
    return InternalTopic(
        OFFSETS_TOPIC, offsets_topic_id(broker),
        [ReadOnlyPartition(group_log, i) for i in range(len(group_log.logs))])


def offsets_topic_id(broker: TopicDirectory) -> uuid.UUID:
    """Stable for a data directory (derived from its cluster id)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"rebalanced:{broker.cluster_id}:{OFFSETS_TOPIC}")


def topic_by_name(broker: TopicDirectory, name: str) -> Any:
    if name == OFFSETS_TOPIC:
        return offsets_topic(broker)
    return broker.topics.get(name)


def topic_by_id(broker: TopicDirectory, topic_id: uuid.UUID) -> Any:
    found = broker.topics.by_id(topic_id)
    if found is None and topic_id == offsets_topic_id(broker):
        return offsets_topic(broker)
    return found
