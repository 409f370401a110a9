"""The committed-offset store of one coordinator: pure, no I/O, time passed in as `now_ms`.

Longer than ~400 lines: the per-partition rules of six APIs and expiry share one view of the
offsets and its pending commits, and read best beside it.

Owns committed offsets per group/topic/partition and the per-partition rules of OffsetCommit,
OffsetFetch, OffsetDelete, DeleteGroups, DeleteTopics and offset expiry (SPEC §10). Group-level
decisions (does the group exist, generation and member checks, Dead/CompletingRebalance answers,
whether a group may be deleted) are made by the group coordinator core before it calls in here;
this module never sees a member.

Theory of operation
-------------------
The in-memory view changes **only** through `apply(record)`. Every mutating operation
(`commit`, `delete`, `expire`, `delete_group`, `delete_topics`) merely *returns*
`OffsetCommitRecord`s. The runtime appends them to the group log, waits until they are
durable, then feeds each one to `apply` and only then replies. Recovery replays the log
through the same `apply`. Hence "acknowledged ⇔ durable" and "replay of the emitted records
== the live view" hold by construction (tests/property/test_offsets_replay.py checks the latter).

Pending commits (KIP-447 `require_stable`): `commit` also remembers each value it returns as
*pending* for its partition until `apply` sees that record (durable) or `abort` drops it (the
append or fsync failed). OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for a
partition with a pending commit, as Kafka does for its own pending (transactional) offsets. The
runtime must call `abort(records)` when an append fails, otherwise the partition stays unstable
until the next successful commit of the same value; that is the one piece of bookkeeping the
runtime owes this module. Pending partitions are also never expired, and a group with pending
commits is never reported as "no offsets left".

Transactional offsets (TxnOffsetCommit): once their transactional batch is durable the runtime
stages them (`stage_transactional`) per group and producer id, apart from the pending commits
above, so the plain commit path never looks at them. They are invisible to OffsetFetch (a
`require_stable` fetch answers UNSTABLE_OFFSET_COMMIT for their partitions) and never expire;
`end_transaction` makes them the committed offsets when the commit marker is durable, or drops
them on abort.

Expiry follows Kafka's `ClassicGroup.offsetExpirationCondition` / `OffsetExpirationConditionImpl`:

* an explicit expire timestamp (OffsetCommit v2-v4 `retention_time`, stored as value v1) wins:
  expired when `now_ms >= expire_timestamp`;
* otherwise expired when `now_ms - base >= offsets.retention.minutes`, where `base` is
  - the commit timestamp for a group without protocol type (standalone/simple consumers),
  - the time the group became Empty for an Empty group (commit timestamp if unknown),
  - the commit timestamp for a Stable `consumer` group whose subscriptions are known, but only
    for topics it no longer subscribes to;
  - in any other state nothing expires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from coordinator.group.record_helpers import offset_commit_tombstone
from coordinator.grouplog.records import (
    MAX_STORED_STRING_BYTES,
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
    offset_commit_record,
    offset_commit_value,
)

CONSUMER_PROTOCOL_TYPE = "consumer"
_NONE = ErrorCode.none
NO_EXPIRE_TIMESTAMP = -1
DEFAULT_RETENTION_TIME_MS = -1  # OffsetCommit v2-v4 `retention_time` meaning "broker default"

# (partition, committed offset, committed leader epoch, committed metadata)
CommitPartition = tuple[int, int, int, str | None]
CommitTopics = Sequence[tuple[str, Sequence[CommitPartition]]]
# per topic, per partition error, in request order
PartitionErrors = list[tuple[str, list[tuple[int, ErrorCode]]]]
TopicPartitions = Sequence[tuple[str, Sequence[int]]]


class OffsetConfig(Protocol):
    """The two broker settings this store reads, named after Kafka's config keys."""

    @property
    def offset_metadata_max_bytes(self) -> int: ...  # offset.metadata.max.bytes

    @property
    def offsets_retention_minutes(self) -> int: ...  # offsets.retention.minutes


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetStoreConfig:
    offset_metadata_max_bytes: int = 4096
    offsets_retention_minutes: int = 10080


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupExpiryView:
    """What expiry needs to know about one group, supplied by the group coordinator core.

    `subscribed_topics` None means "unknown" (not parsed, or not the consumer protocol); Kafka
    then treats a `consumer` group as subscribed to everything. For an Empty group it is ignored:
    a group without members subscribes to nothing. `protocol_type` "" means none (a standalone
    consumer that only commits). `state_is_stable` refines "live": a live group expires offsets
    of unsubscribed topics only while Stable, as in Kafka.
    """

    state_is_empty: bool
    current_state_timestamp: int | None
    subscribed_topics: AbstractSet[str] | None
    protocol_type: str
    state_is_stable: bool = True


class FetchedOffset(NamedTuple):
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpiryResult:
    tombstones: list[OffsetCommitRecord]
    # Empty groups whose offsets are all gone once `tombstones` are applied: the caller turns
    # them Dead and writes their group tombstone (SPEC §10).
    groups_without_offsets: list[str]


def expire_timestamp_ms(retention_time_ms: int, now_ms: int) -> int:
    """OffsetCommit v2-v4: an explicit retention gives an absolute expire timestamp."""
    if retention_time_ms == DEFAULT_RETENTION_TIME_MS:
        return NO_EXPIRE_TIMESTAMP
    return now_ms + retention_time_ms


def _metadata_length(metadata: str) -> int:
    # Kafka compares Java's String.length(): UTF-16 code units.
    if metadata.isascii():
        return len(metadata)
    return len(metadata.encode("utf-16-le")) // 2


def _unstorable(metadata: str) -> bool:
    """The group log stores metadata with an int16 length in UTF-8 bytes, whatever
    `offset.metadata.max.bytes` allows; at most 4 bytes a character, so only long metadata is
    encoded to find out."""
    return len(metadata) * 4 > MAX_STORED_STRING_BYTES and len(
        metadata.encode()) > MAX_STORED_STRING_BYTES


class OffsetStore:
    """Committed offsets of every group this coordinator owns; see the module docstring."""

    def __init__(self, config: OffsetConfig | None = None) -> None:
        self._config: OffsetConfig = config if config is not None else OffsetStoreConfig()
        # group -> topic -> partition -> value
        self._offsets: dict[str, dict[str, dict[int, OffsetCommitValue]]] = {}
        # group -> (topic, partition) -> values returned by `commit`, not yet applied
        self._pending: dict[str, dict[tuple[str, int], list[OffsetCommitValue]]] = {}
        # Transactional offsets (TxnOffsetCommit, KIP-447), durable but not yet ended by a
        # marker: group -> producer id -> (topic, partition) -> value. Kept apart from
        # `_pending` so that the plain commit path never looks at them.
        self._txn_pending: dict[str, dict[int, dict[tuple[str, int], OffsetCommitValue]]] = {}

    @property
    def offsets_retention_ms(self) -> int:
        return self._config.offsets_retention_minutes * 60_000

    # ---------------------------------------------------------------- producing records

    def commit(
        self,
        group_id: str,
        topics: CommitTopics,
        now_ms: int,
        *,
        topic_exists: Callable[[str, int], bool],
        expire_timestamp: int = NO_EXPIRE_TIMESTAMP,
        commit_timestamps: Mapping[tuple[str, int], int] | None = None,
        pending: bool = True,
    ) -> tuple[PartitionErrors, list[OffsetCommitRecord]]:
        """Validate each partition of an OffsetCommit and build the records for the valid ones.

        Per partition: an unknown topic/partition → UNKNOWN_TOPIC_OR_PARTITION (checked first,
        as Kafka checks topics before the coordinator sees the request); metadata longer than
        `offset.metadata.max.bytes` (or than the group log can store) →
        OFFSET_METADATA_TOO_LARGE; else NONE and one record.
        `commit_timestamps` (OffsetCommit v1) overrides `now_ms` as the commit timestamp of
        the partitions it names, as Kafka keeps a v1 client's explicit timestamp.
        The records are registered as pending; the view changes when they are applied.
        `pending=False` skips that for a caller that applies (or aborts) them before anything
        else reads this store: a log that acknowledges an append once written makes the
        records durable, and the caller applies them, within the same call.
        """
        max_metadata = self._config.offset_metadata_max_bytes
        errors: PartitionErrors = []
        records: list[OffsetCommitRecord] = []
        group_pending: dict[tuple[str, int], list[OffsetCommitValue]] | None = None
        for topic, partitions in topics:
            topic_errors: list[tuple[int, ErrorCode]] = []
            errors.append((topic, topic_errors))
            for partition, offset, leader_epoch, metadata in partitions:
                if not topic_exists(topic, partition):
                    topic_errors.append((partition, ErrorCode.unknown_topic_or_partition))
                    continue
                text = "" if metadata is None else metadata
                if text and (_metadata_length(text) > max_metadata or _unstorable(text)):
                    topic_errors.append((partition, ErrorCode.offset_metadata_too_large))
                    continue
                topic_errors.append((partition, _NONE))
                committed_at = now_ms
                if commit_timestamps is not None:
                    committed_at = commit_timestamps.get((topic, partition), now_ms)
                value = offset_commit_value(offset, leader_epoch, text, committed_at,
                                            expire_timestamp)
                records.append(offset_commit_record(group_id, topic, partition, value))
                if not pending:
                    continue
                if group_pending is None:
                    group_pending = self._pending.setdefault(group_id, {})
                tp = (topic, partition)
                values = group_pending.get(tp)
                if values is None:
                    group_pending[tp] = [value]
                else:
                    values.append(value)
        return errors, records

    def delete(
        self,
        group_id: str,
        topic_partitions: TopicPartitions,
        subscribed_topics: AbstractSet[str],
        *,
        every_topic: bool = False,
        topic_exists: Callable[[str, int], bool] | None = None,
    ) -> tuple[PartitionErrors, list[OffsetCommitRecord]]:
        """OffsetDelete: GROUP_SUBSCRIBED_TO_TOPIC for topics the group still consumes, else NONE
        with a tombstone when an offset exists (deleting a missing offset is not an error).

        `subscribed_topics` are the topics the group consumes, as the core decides it (Kafka's
        `isSubscribedToTopic`; empty for an Empty group); `every_topic` counts every topic as
        consumed (a live consumer-protocol group whose subscriptions are not known). A
        partition `topic_exists` does not know is UNKNOWN_TOPIC_OR_PARTITION and keeps its
        offset, whatever the subscriptions.
        """
        committed = self._offsets.get(group_id, {})
        errors: PartitionErrors = []
        records: list[OffsetCommitRecord] = []
        seen: set[tuple[str, int]] = set()
        for topic, partitions in topic_partitions:
            subscribed = every_topic or topic in subscribed_topics
            topic_errors: list[tuple[int, ErrorCode]] = []
            errors.append((topic, topic_errors))
            for partition in partitions:
                if topic_exists is not None and not topic_exists(topic, partition):
                    topic_errors.append((partition, ErrorCode.unknown_topic_or_partition))
                    continue
                if subscribed:
                    topic_errors.append((partition, ErrorCode.group_subscribed_to_topic))
                    continue
                topic_errors.append((partition, ErrorCode.none))
                if partition in committed.get(topic, {}) and (topic, partition) not in seen:
                    seen.add((topic, partition))
                    records.append(offset_commit_tombstone(group_id, topic, partition))
        return errors, records

    def delete_group(self, group_id: str) -> list[OffsetCommitRecord]:
        """DeleteGroups: a tombstone for every committed offset of the group, and for every
        offset of its open transactions."""
        committed = [(topic, partition) for topic, partition, _ in self._iter_group(group_id)]
        staged = sorted(self._transactional_partitions(group_id) - set(committed))
        return [offset_commit_tombstone(group_id, topic, partition)
                for topic, partition in committed + staged]

    def delete_topics(self, topics: AbstractSet[str]) -> list[OffsetCommitRecord]:
        """DeleteTopics: a tombstone for every group's offset of `topics`, committed or
        pending (a pending commit's record is written before the tombstone, so the tombstone
        wins on replay as in memory), whatever the group subscribes to (Kafka
        `OffsetMetadataManager.onPartitionsDeleted`)."""
        doomed: set[tuple[str, str, int]] = set()
        for group_id, committed in self._offsets.items():
            for topic in topics & committed.keys():
                doomed.update((group_id, topic, partition) for partition in committed[topic])
        for group_id, pending in self._pending.items():
            doomed.update((group_id, topic, partition) for topic, partition in pending
                          if topic in topics)
        for group_id in self._txn_pending:
            doomed.update((group_id, topic, partition)
                          for topic, partition in self._transactional_partitions(group_id)
                          if topic in topics)
        return [offset_commit_tombstone(group_id, topic, partition)
                for group_id, topic, partition in sorted(doomed)]

    def expire(self, now_ms: int, groups_view: Mapping[str, GroupExpiryView],
               group_ids: Iterable[str] | None = None) -> ExpiryResult:
        """Tombstones for expired offsets, and the Empty groups left without offsets.

        Groups in `groups_view` without any offset count as "no offsets left" when Empty (Kafka
        deletes such groups in the same cleanup pass). A group that has offsets but no view is
        treated as a standalone consumer (no protocol type, Empty). `group_ids`, when given,
        limits the pass to those groups (a slice of a pass made in bounded steps).
        """
        retention_ms = self.offsets_retention_ms
        tombstones: list[OffsetCommitRecord] = []
        without_offsets: list[str] = []
        standalone = GroupExpiryView(
            state_is_empty=True, current_state_timestamp=None, subscribed_topics=None,
            protocol_type="",
        )
        if group_ids is None:
            group_ids = sorted(set(groups_view) | set(self._offsets))
        for group_id in group_ids:
            view = groups_view.get(group_id, standalone)
            pending: Mapping[tuple[str, int], object] = self._pending.get(group_id, {})
            if group_id in self._txn_pending:  # a pending transactional offset never expires
                pending = {**pending,
                           **dict.fromkeys(self._transactional_partitions(group_id))}
            base = _base_timestamp(view)
            all_expired = not pending
            for topic, partitions in sorted(self._offsets.get(group_id, {}).items()):
                if base is None or _is_subscribed(view, topic):
                    all_expired = False
                    continue
                for partition, value in sorted(partitions.items()):
                    if (topic, partition) not in pending and _is_expired(
                        value, base(value), now_ms, retention_ms
                    ):
                        tombstones.append(offset_commit_tombstone(group_id, topic, partition))
                    else:
                        all_expired = False
            if all_expired and view.state_is_empty:
                without_offsets.append(group_id)
        return ExpiryResult(tombstones=tombstones, groups_without_offsets=without_offsets)

    # ---------------------------------------------------------------- applying records

    def apply(self, record: CoordinatorRecord) -> None:
        """Make a durable record part of the view (after an append, or during replay).

        Records other than OffsetCommit are ignored, so the caller may pass every record.
        """
        if not isinstance(record, OffsetCommitRecord):
            return
        key = record.key
        value = record.value
        self._settle_pending(key, value)
        if value is None:
            if key.group in self._txn_pending:
                self._drop_transactional(key)
            topics = self._offsets.get(key.group)
            if topics is None:
                return
            partitions = topics.get(key.topic)
            if partitions is None:
                return
            partitions.pop(key.partition, None)
            if not partitions:
                del topics[key.topic]
                if not topics:
                    del self._offsets[key.group]
            return
        self._offsets.setdefault(key.group, {}).setdefault(key.topic, {})[key.partition] = value

    def apply_all(self, records: Iterable[CoordinatorRecord]) -> None:
        """`apply` each record in order; cheaper per record for the runs of one group and
        topic that a commit produces, as it looks their maps up once per run."""
        offsets = self._offsets
        pending = self._pending
        group: str | None = None
        topic: str | None = None
        partitions: dict[int, OffsetCommitValue] = {}
        group_pending: dict[tuple[str, int], list[OffsetCommitValue]] | None = None
        for record in records:
            if type(record) is not OffsetCommitRecord:
                self.apply(record)  # another record type or a tombstone: the general path
                group = None
                continue
            key = record.key
            value = record.value
            if value is None:
                self.apply(record)
                group = None
                continue
            if key.group != group or key.topic != topic:
                group, topic = key.group, key.topic
                partitions = offsets.setdefault(group, {}).setdefault(topic, {})
                group_pending = pending.get(group)
            partition = key.partition
            if group_pending is not None:  # `_settle_pending`, with the group looked up
                tp = (topic, partition)
                values = group_pending.get(tp)
                if values is not None and _remove_value(values, value) and not values:
                    del group_pending[tp]
                    if not group_pending:
                        del pending[group]
                        group_pending = None
            partitions[partition] = value

    # ---------------------------------------------------------------- transactions

    def stage_transactional(self, producer_id: int,
                            records: Iterable[CoordinatorRecord]) -> None:
        """Offsets a producer committed inside its transaction, now durable in the group log
        (or replayed without their marker): pending for their partition until the
        transaction ends. A later commit of the same partition by the same producer wins."""
        for record in records:
            if not isinstance(record, OffsetCommitRecord) or record.value is None:
                continue
            key = record.key
            by_producer = self._txn_pending.setdefault(key.group, {})
            by_producer.setdefault(producer_id, {})[(key.topic, key.partition)] = record.value

    def end_transaction(self, group_id: str, producer_id: int,
                        committed: bool) -> list[OffsetCommitRecord]:
        """The marker of `producer_id`'s transaction is durable in the group's log partition:
        on commit its pending offsets become the committed ones (ordered by the marker, so
        they replace whatever was committed before it), on abort they are dropped. Returns
        the offsets made visible."""
        by_producer = self._txn_pending.get(group_id)
        if by_producer is None:
            return []
        staged = by_producer.pop(producer_id, None)
        if not by_producer:
            del self._txn_pending[group_id]
        if not staged or not committed:
            return []
        records = [offset_commit_record(group_id, topic, partition, value)
                   for (topic, partition), value in staged.items()]
        for record in records:
            self.apply(record)
        return records

    def _drop_transactional(self, key: OffsetCommitKey) -> None:
        """A tombstone deletes the partition's offsets of open transactions too (Kafka's
        `OffsetMetadataManager.replay`): a deleted group or topic gets none back when they
        commit."""
        by_producer = self._txn_pending[key.group]
        for producer_id in list(by_producer):
            staged = by_producer[producer_id]
            staged.pop((key.topic, key.partition), None)
            if not staged:
                del by_producer[producer_id]
        if not by_producer:
            del self._txn_pending[key.group]

    def transactional_groups(self, producer_id: int) -> list[str]:
        """The groups holding offsets of `producer_id`'s open transaction."""
        return [group_id for group_id, by_producer in self._txn_pending.items()
                if producer_id in by_producer]

    def has_transactional(self, group_id: str) -> bool:
        return group_id in self._txn_pending

    def _transactional_partitions(self, group_id: str) -> set[tuple[str, int]]:
        partitions: set[tuple[str, int]] = set()
        for staged in self._txn_pending.get(group_id, {}).values():
            partitions.update(staged)
        return partitions

    def abort(self, records: Iterable[CoordinatorRecord]) -> None:
        """Forget pending commits whose append failed; they were never acknowledged."""
        for record in records:
            if isinstance(record, OffsetCommitRecord) and record.value is not None:
                self._settle_pending(record.key, record.value)

    def _settle_pending(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        if value is None:
            return
        group_pending = self._pending.get(key.group)
        if group_pending is None:
            return
        tp = (key.topic, key.partition)
        values = group_pending.get(tp)
        if values is None:
            return
        try:
            values.remove(value)
        except ValueError:
            return
        if not values:
            del group_pending[tp]
            if not group_pending:
                del self._pending[key.group]

    # ---------------------------------------------------------------- reading

    def fetch(
        self,
        group_id: str,
        partitions: TopicPartitions | None,
        *,
        require_stable: bool = False,
    ) -> list[FetchedOffset]:
        """OffsetFetch for one group. `partitions` None = every committed partition of the group.

        Unknown partitions: offset -1, leader epoch -1, metadata "", NONE. With `require_stable`
        a partition with a pending commit answers UNSTABLE_OFFSET_COMMIT (KIP-447).
        """
        committed = self._offsets.get(group_id, {})
        pending: Mapping[tuple[str, int], object] = (
            self._pending.get(group_id, {}) if require_stable else {})
        if require_stable and group_id in self._txn_pending:
            pending = {**pending, **dict.fromkeys(self._transactional_partitions(group_id))}
        if partitions is None:
            wanted: Iterable[tuple[str, int]] = [
                (topic, partition) for topic, partition, _ in self._iter_group(group_id)
            ]
        else:
            wanted = [(topic, p) for topic, ps in partitions for p in ps]
        out: list[FetchedOffset] = []
        for topic, partition in wanted:
            if (topic, partition) in pending:
                out.append(
                    FetchedOffset(topic, partition, -1, -1, "", ErrorCode.unstable_offset_commit)
                )
                continue
            value = committed.get(topic, {}).get(partition)
            if value is None:
                out.append(FetchedOffset(topic, partition, -1, -1, "", ErrorCode.none))
            else:
                out.append(
                    FetchedOffset(
                        topic, partition, value.offset, value.leader_epoch, value.metadata,
                        ErrorCode.none,
                    )
                )
        return out

    def has_offsets(self, group_id: str) -> bool:
        return group_id in self._offsets

    def has_pending(self, group_id: str) -> bool:
        return group_id in self._pending

    def groups_with_offsets(self) -> set[str]:
        return set(self._offsets)

    def committed_view(self) -> dict[str, dict[tuple[str, int], OffsetCommitValue]]:
        """A snapshot of the durable view: group -> (topic, partition) -> value."""
        return {
            group: {(t, p): v for t, p, v in self._iter_group(group)} for group in self._offsets
        }

    def commit_in_flight(self, key: OffsetCommitKey) -> bool:
        """Whether a commit of `key` is written but not yet durable (or failed)."""
        return (key.topic, key.partition) in self._pending.get(key.group, {})

    def durable_records(self, wanted: Callable[[str], bool]) -> list[OffsetCommitRecord]:
        """A record of every durable offset of the wanted groups, but those with a commit in
        flight (whose record, newer, is already written)."""
        records: list[OffsetCommitRecord] = []
        for group_id in self._offsets:
            if not wanted(group_id):
                continue
            pending = self._pending.get(group_id, {})
            records.extend(
                offset_commit_record(group_id, topic, partition, value)
                for topic, partition, value in self._iter_group(group_id)
                if (topic, partition) not in pending)
        return records

    def _iter_group(self, group_id: str) -> Iterator[tuple[str, int, OffsetCommitValue]]:
        for topic, partitions in sorted(self._offsets.get(group_id, {}).items()):
            for partition, value in sorted(partitions.items()):
                yield topic, partition, value


def _remove_value(values: list[OffsetCommitValue], value: OffsetCommitValue) -> bool:
    """Remove the first value equal to `value`; False when there is none."""
    try:
        values.remove(value)
    except ValueError:
        return False
    return True


def _base_timestamp(view: GroupExpiryView) -> Callable[[OffsetCommitValue], int] | None:
    """Kafka's expiration condition for the group, or None when nothing may expire."""
    if not view.protocol_type:
        return _commit_timestamp
    if view.state_is_empty:
        became_empty = view.current_state_timestamp
        if became_empty is None or became_empty < 0:
            return _commit_timestamp
        return lambda _value: became_empty
    if (
        view.protocol_type == CONSUMER_PROTOCOL_TYPE
        and view.subscribed_topics is not None
        and view.state_is_stable
    ):
        return _commit_timestamp
    return None


def _commit_timestamp(value: OffsetCommitValue) -> int:
    return value.commit_timestamp


def _is_subscribed(view: GroupExpiryView, topic: str) -> bool:
    if view.state_is_empty:
        return False
    if view.subscribed_topics is not None:
        return topic in view.subscribed_topics
    return view.protocol_type == CONSUMER_PROTOCOL_TYPE


def _is_expired(value: OffsetCommitValue, base_ms: int, now_ms: int, retention_ms: int) -> bool:
    if value.expire_timestamp != NO_EXPIRE_TIMESTAMP:
        return now_ms >= value.expire_timestamp
    return now_ms - base_ms >= retention_ms
