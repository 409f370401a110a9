"""Typed `__consumer_offsets` records, as Kafka's group-coordinator schemas declare them.

The coordinator core emits these; `storage/records.py` turns them into the exact key/value bytes
Kafka writes (OffsetCommitKey v1, OffsetCommitValue v3, GroupMetadataKey v2, GroupMetadataValue v3,
and the consumer group records of KIP-848, key versions 3-8 with value version 0) and back.
A record whose `value` is None is a tombstone: it deletes the key on replay.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

# The group log stores strings with an int16 length, as Kafka's record versions do.
MAX_STORED_STRING_BYTES = 0x7FFF


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    # Only OffsetCommitValue v1 carries an explicit expiry; -1 means "use the broker retention".
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMemberRecord:
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout: int = -1
    session_timeout: int = 0
    subscription: bytes = b""
    assignment: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    protocol_type: str = ""
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int = -1
    members: tuple[GroupMemberRecord, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRecord:
    key: OffsetCommitKey
    value: OffsetCommitValue | None  # None: tombstone


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataRecord:
    key: GroupMetadataKey
    value: GroupMetadataValue | None  # None: tombstone


# ----------------------------------------------------------------------------- KIP-848
#
# The consumer group (KIP-848) records, one key type per record kind as in Kafka's schemas
# (ConsumerGroup*Key/Value). Every key carries `group`, so the log places it like the others.
# Assignments are tuples of (topic id, sorted partitions), sorted by topic id.

TopicAssignment = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscribedTopicMetadata:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupPartitionMetadataKey:
    group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupPartitionMetadataValue:
    topics: tuple[SubscribedTopicMetadata, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassicMemberMetadata:
    """A member speaking the classic protocol (JoinGroup/SyncGroup) inside a consumer group:
    its session timeout and its JoinGroup protocols (name, ConsumerProtocolSubscription)."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged field 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: TopicAssignment = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions
    assigned_partitions: TopicAssignment = ()
    partitions_pending_revocation: TopicAssignment = ()


ConsumerGroupKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
)
ConsumerGroupValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupRecord:
    """One KIP-848 record; the key's type says which (its value must be the matching type)."""

    key: ConsumerGroupKey
    value: ConsumerGroupValue | None  # None: tombstone


CoordinatorRecord = OffsetCommitRecord | GroupMetadataRecord | ConsumerGroupRecord


# ----------------------------------------------------------------------------- builders
#
# A commit builds a value, a key and a record per partition. A frozen dataclass's `__init__`
# parses keywords and sets every field through `object.__setattr__`: about 2 µs for the three,
# the largest share of storing a 10-partition commit. These builders fill the same slots
# directly (`object.__new__` plus each slot's descriptor), giving equal objects (same type,
# fields, equality and hash) for about a third of the cost. Use them on hot paths; anywhere
# else the constructors read better.

_new = object.__new__


def _slot_setters(cls: type, *names: str) -> tuple[Any, ...]:
    return tuple(vars(cls)[name].__set__ for name in names)


_set_group, _set_topic, _set_partition = _slot_setters(
    OffsetCommitKey, "group", "topic", "partition")
_set_offset, _set_leader_epoch, _set_metadata, _set_commit_ts, _set_expire_ts = _slot_setters(
    OffsetCommitValue, "offset", "leader_epoch", "metadata", "commit_timestamp",
    "expire_timestamp")
_set_key, _set_value = _slot_setters(OffsetCommitRecord, "key", "value")


def offset_commit_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int,
                        expire_timestamp: int) -> OffsetCommitValue:
    """`OffsetCommitValue(offset=..., ...)`, built without the keyword `__init__`."""
    value = _new(OffsetCommitValue)
    _set_offset(value, offset)
    _set_leader_epoch(value, leader_epoch)
    _set_metadata(value, metadata)
    _set_commit_ts(value, commit_timestamp)
    _set_expire_ts(value, expire_timestamp)
    return value


def offset_commit_record(group: str, topic: str, partition: int,
                         value: OffsetCommitValue | None) -> OffsetCommitRecord:
    """Kafka's `newOffsetCommitRecord` (a tombstone when `value` is None):
    `OffsetCommitRecord(key=OffsetCommitKey(...), value=value)` without the keyword `__init__`."""
    key = _new(OffsetCommitKey)
    _set_group(key, group)
    _set_topic(key, topic)
    _set_partition(key, partition)
    record = _new(OffsetCommitRecord)
    _set_key(record, key)
    _set_value(record, value)
    return record
