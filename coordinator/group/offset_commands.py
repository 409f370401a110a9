"""Commands and outcomes of the offset APIs: OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups.

Version-free: `coordinator/api/<api>.py` builds a command from any request version and turns an
outcome into the response of the request's version. The group coordinator core consumes the
commands (group-level checks) and uses `coordinator.group.offsets.OffsetStore` for the
partition-level work. Kept apart from `coordinator/group/commands.py` (the group membership APIs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.group.offsets import (
    DEFAULT_RETENTION_TIME_MS,
    CommitPartition,
    FetchedOffset,
    PartitionErrors,
)
from coordinator.group.result import APPEND_FAILED, RequestRef

# OffsetCommit and OffsetFetch v0 keep offsets in ZooKeeper, which this broker (like Kafka 3.x
# without ZooKeeper) does not have: they are answered UNSUPPORTED_VERSION on every partition.
ZOOKEEPER_OFFSETS_VERSION = 0

# ----------------------------------------------------------------------------- OffsetCommit


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommit:
    ref: RequestRef
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    # v2-v4 only; -1 = use `offsets.retention.minutes`. Else the offsets get an explicit expire
    # timestamp (see `coordinator.group.offsets.expire_timestamp_ms`).
    retention_time_ms: int = DEFAULT_RETENTION_TIME_MS
    # (topic, ((partition, offset, leader_epoch, metadata), ...)), in request order
    topics: tuple[tuple[str, tuple[CommitPartition, ...]], ...] = ()
    # v1 only: (topic, partition) -> the commit timestamp the client chose (absent: now)
    commit_timestamps: Mapping[tuple[str, int], int] | None = None


_new = object.__new__
(_set_ref, _set_group_id, _set_generation_id, _set_member_id, _set_group_instance_id,
 _set_retention_time_ms, _set_topics, _set_commit_timestamps) = (
    vars(OffsetCommit)[name].__set__ for name in (
        "ref", "group_id", "generation_id", "member_id", "group_instance_id",
        "retention_time_ms", "topics", "commit_timestamps"))


def new_offset_commit(ref: RequestRef, group_id: str, generation_id: int, member_id: str,
                      group_instance_id: str | None, retention_time_ms: int,
                      topics: tuple[tuple[str, tuple[CommitPartition, ...]], ...],
                      commit_timestamps: Mapping[tuple[str, int], int] | None) -> OffsetCommit:
    """`OffsetCommit(ref=..., ...)` with every field given, built without the keyword
    `__init__` of a frozen dataclass (which sets each field through `object.__setattr__`:
    about 3 µs, built once per commit). The same object: type, fields, equality, hash."""
    command = _new(OffsetCommit)
    _set_ref(command, ref)
    _set_group_id(command, group_id)
    _set_generation_id(command, generation_id)
    _set_member_id(command, member_id)
    _set_group_instance_id(command, group_instance_id)
    _set_retention_time_ms(command, retention_time_ms)
    _set_topics(command, topics)
    _set_commit_timestamps(command, commit_timestamps)
    return command


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitOutcome:
    # (topic, ((partition, error), ...)): every requested partition, in request order
    topics: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...]

    @classmethod
    def from_errors(cls, errors: PartitionErrors) -> OffsetCommitOutcome:
        return cls(topics=tuple((topic, tuple(parts)) for topic, parts in errors))

    @classmethod
    def failed(cls, cmd: OffsetCommit, error: ErrorCode) -> OffsetCommitOutcome:
        """A group-level error: Kafka answers it on every partition."""
        return cls(
            topics=tuple(
                (topic, tuple((p[0], error) for p in partitions))
                for topic, partitions in cmd.topics
            )
        )


# ----------------------------------------------------------------------------- OffsetFetch


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchGroup:
    group_id: str
    # (topic, (partition, ...)); None = all committed partitions of the group
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    member_id: str | None = None  # v9+ (KIP-848 groups); classic groups ignore it
    member_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetch:
    ref: RequestRef
    groups: tuple[OffsetFetchGroup, ...]  # exactly one before v8
    require_stable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchGroupResult:
    group_id: str
    error: ErrorCode = ErrorCode.none
    partitions: tuple[FetchedOffset, ...] = ()

    @classmethod
    def failed(cls, group: OffsetFetchGroup, error: ErrorCode) -> OffsetFetchGroupResult:
        """A group-level error. The requested partitions carry it too: OffsetFetch v1 has no
        top-level error field, so it is answered per partition there."""
        partitions = tuple(
            FetchedOffset(topic, p, -1, -1, "", error)
            for topic, ps in (group.topics or ())
            for p in ps
        )
        return cls(group_id=group.group_id, error=error, partitions=partitions)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchOutcome:
    groups: tuple[OffsetFetchGroupResult, ...]


# ----------------------------------------------------------------------------- OffsetDelete


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDelete:
    ref: RequestRef
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDeleteOutcome:
    error: ErrorCode = ErrorCode.none  # group level: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...
    topics: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...] = ()

    @classmethod
    def from_errors(cls, errors: PartitionErrors) -> OffsetDeleteOutcome:
        return cls(topics=tuple((topic, tuple(parts)) for topic, parts in errors))

    @classmethod
    def append_failed(cls) -> OffsetDeleteOutcome:
        """The tombstones were not made durable: nothing was deleted."""
        return cls(error=APPEND_FAILED)


# ----------------------------------------------------------------------------- DeleteGroups


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroups:
    ref: RequestRef
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsOutcome:
    # (group_id, error) in request order: NONE, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...
    results: tuple[tuple[str, ErrorCode], ...]

    def append_failed(self, failure: ErrorCode = APPEND_FAILED) -> DeleteGroupsOutcome:
        """The answer when the deletions' tombstones were not made durable: the groups this
        would have deleted are not deleted; the others keep their own errors."""
        return DeleteGroupsOutcome(results=tuple(
            (group_id, failure if error is ErrorCode.none else error)
            for group_id, error in self.results))
