"""Offsets inside transactions (KIP-447): TxnOffsetCommit and the group log's markers.

A TxnOffsetCommit's offsets are written to the group's log partition as one transactional batch
of the producer (its producer id and epoch, the transactional attribute), as Kafka writes them
to `__consumer_offsets`; once durable they are staged in the offset store, pending for the
(group, producer id), invisible to OffsetFetch (which answers UNSTABLE_OFFSET_COMMIT to a
`require_stable` fetch of such a partition). EndTxn (or the coordinator's abort of a timed-out
or fenced transaction) writes a commit or abort marker to the partition and the pending offsets
become the committed ones, or are dropped, at once: the outcome is durable in the transaction
log's prepare record already, and the marker is made durable before the transaction log writes
anything after it (`GroupLog.flush_transactional`), so a replay never judges the offsets by a later
transaction of the producer.

Replaying the log gives the same: a transactional record counts from its commit marker on, an
aborted one never, one without a marker is staged again. A marker lost to a crash (the
transaction log says the transaction completed, the group log holds no marker) is written at
load from the transaction's recorded outcome; a transaction still open or being completed keeps
its offsets pending until its marker comes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from coordinator.group.offset_decisions import (
    GroupOffsets,
    names_a_known_partition,
    partition_errors,
)
from coordinator.group.offsets import CommitPartition, OffsetStore
from coordinator.group.result import APPEND_FAILED
from coordinator.grouplog.log import GroupLog
from coordinator.grouplog.records import CoordinatorRecord
from coordinator.runtime.clock import Clock
from coordinator.txn.records import TxnState
from protocol.build import build
from protocol.codec import response_type

TXN_OFFSET_COMMIT = 28
VERSIONS = ApiVersionRange(TXN_OFFSET_COMMIT, 0, 3)
log = structlog.get_logger("rebalanced.transactions")


class ProducerCheck(Protocol):
    """What the transaction coordinator tells of a producer (`TransactionService`)."""

    def refuse_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       offsets_partition: int) -> ErrorCode | None: ...

    def transaction_of_producer(self, producer_id: int
                                ) -> tuple[TxnState, frozenset[int]] | None: ...

    def note_transaction_groups(self, producer_id: int, group_ids: Iterable[str]) -> None: ...


class TransactionalOffsets:
    def __init__(self, offsets: OffsetStore, decisions: GroupOffsets, clock: Clock,
                 is_loading: Callable[[str], bool], unavailable: Callable[[str], ErrorCode],
                 topic_exists: Callable[[str, int], bool]) -> None:
        self.offsets = offsets
        self.decisions = decisions
        self.clock = clock
        self.is_loading = is_loading
        self.unavailable = unavailable
        self.topic_exists = topic_exists
        self.group_log: GroupLog  # set when the group log is opened
        self.producers: ProducerCheck | None = None  # the transaction coordinator, when wired
        self.loading_partitions: Callable[[], set[int]] = set

    # -- TxnOffsetCommit -----------------------------------------------------------------

    def txn_offset_commit(self, ctx: ClientRequest, request: Any) -> None:
        group_id: str = request.group_id
        topics: list[tuple[str, list[CommitPartition]]] = [
            (topic.name, [(p.partition_index, p.committed_offset,
                           getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
                          for p in topic.partitions])
            for topic in request.topics]

        def answer(errors: Sequence[tuple[str, Sequence[tuple[int, ErrorCode]]]]) -> None:
            if ctx.version < 2:
                # Producers of clients before 2.0 fail on COORDINATOR_LOAD_IN_PROGRESS here;
                # Kafka answers them COORDINATOR_NOT_AVAILABLE, which they retry.
                errors = [(name, [(p, ErrorCode.coordinator_not_available
                                   if code == ErrorCode.coordinator_load_in_progress else code)
                                  for p, code in partitions]) for name, partitions in errors]
            ctx.respond(build(
                response_type(TXN_OFFSET_COMMIT, ctx.version), throttle_time=0,
                topics=[{"name": name, "partitions": [
                    {"partition_index": p, "error_code": code} for p, code in partitions]}
                    for name, partitions in errors]))

        def answer_all(code: ErrorCode | None) -> None:
            # Kafka answers unknown topics and partitions before the coordinator sees the
            # request (`KafkaApis.handleTxnOffsetCommitRequest`): they keep that answer.
            answer(partition_errors(topics, self.topic_exists, code))

        if not names_a_known_partition(topics, self.topic_exists):
            answer_all(None)  # nothing left for the coordinator: no group is made
            return
        if self.is_loading(group_id):
            answer_all(self.unavailable(group_id))
            return
        producer_id: int = request.producer_id
        producer_epoch: int = request.producer_epoch
        error: ErrorCode | None = ErrorCode.coordinator_not_available
        if self.producers is not None:
            error = self.producers.refuse_offsets(
                request.transactional_id, producer_id, producer_epoch,
                self.group_log.partition_of(group_id))
        if error is None:
            error = self.decisions.validate_txn_offset_commit(
                group_id, getattr(request, "member_id", ""),
                getattr(request, "generation_id", -1),
                getattr(request, "group_instance_id", None))
        if error is not None:
            answer_all(error)
            return
        now = self.clock.now_ms()
        self.decisions.create_txn_commit_group(group_id, now)
        errors, records = self.offsets.commit(group_id, topics, now,
                                              topic_exists=self.topic_exists, pending=False)
        if not records:
            answer(errors)
            return
        try:
            self.group_log.append_transactional(group_id, records, producer_id, producer_epoch,
                                                now)
        except OSError:
            answer_all(APPEND_FAILED)
            return
        self.offsets.stage_transactional(producer_id, records)
        answer(errors)

    # -- markers -------------------------------------------------------------------------

    def transaction_ended(self, partition: int, producer_id: int, producer_epoch: int,
                          committed: bool) -> None:
        """The transaction coordinator ends a transaction holding this group log partition:
        write its marker, then settle the groups' pending offsets. A partition still loading
        is settled by `loaded` from the transaction's recorded outcome."""
        if partition in self.loading_partitions():
            return
        self._write_marker(partition, producer_id, producer_epoch, committed)

    def _write_marker(self, partition: int, producer_id: int, producer_epoch: int,
                      committed: bool) -> None:
        try:
            self.group_log.append_marker(partition, producer_id, producer_epoch, committed,
                                         self.clock.now_ms())
        except OSError as exc:
            # Rolled back (or the broker stops): the offsets stay pending, and the restart
            # settles them from the transaction's recorded outcome.
            log.error("transaction marker not written to the group log",
                      partition=partition, producer_id=producer_id, error=str(exc))
            return
        # Settled at once: the outcome is already durable in the transaction log, and the
        # marker is durable before that log records anything after it (`flush_transactional`).
        for group_id in self.offsets.transactional_groups(producer_id):
            if self.group_log.partition_of(group_id) == partition:
                self.offsets.end_transaction(group_id, producer_id, committed)

    def loaded(self, partition: int, open_transactions: dict[int, list[CoordinatorRecord]]
               ) -> None:
        """A replayed partition's transactional offsets without a marker: staged again, and
        ended now when the transaction coordinator already completed their transaction."""
        producers = self.producers
        for producer_id, records in open_transactions.items():
            self.offsets.stage_transactional(producer_id, records)
            found = None if producers is None else producers.transaction_of_producer(producer_id)
            if producers is not None and found is not None:
                state, partitions = found
                if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) or (
                        state == TxnState.ONGOING and partition in partitions):
                    # Its marker comes when the transaction completes; the transaction log
                    # does not name groups, so its end event learns them from their offsets.
                    producers.note_transaction_groups(producer_id,
                                                      {r.key.group for r in records})
                    continue
            committed = found is not None and found[0] == TxnState.COMPLETE_COMMIT
            log.info("transaction marker written again to the group log", partition=partition,
                     producer_id=producer_id, committed=committed)
            self._write_marker(partition, producer_id, -1, committed)
