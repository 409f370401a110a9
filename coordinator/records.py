"""Typed `__consumer_offsets` records, as Kafka's group-coordinator schemas declare them.

The coordinator core emits these; `storage/records.py` turns them into the exact key/value bytes
Kafka writes (OffsetCommitKey v1, OffsetCommitValue v3, GroupMetadataKey v2, GroupMetadataValue v3)
and back. A record whose `value` is None is a tombstone: it deletes the key on replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


CoordinatorRecord = OffsetCommitRecord | GroupMetadataRecord


def record_group(record: CoordinatorRecord) -> str:
    """The group a record belongs to; it decides the `__consumer_offsets` partition."""
    return record.key.group
