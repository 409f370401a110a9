"""Transactions on the wire: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn, over the pure `TransactionCoordinator`.

Every state change is written to the transaction log (fsynced) before the answer goes out.
EndTxn answers once the prepare record is durable; the markers (control batches) are then
appended to every data partition of the transaction, and the completion record written, in the
same turn of the loop: until then the transactional id answers CONCURRENT_TRANSACTIONS.
Each partition's `PartitionTransactions` (last stable offset, aborted transactions) is kept from
the transactional batches Produce appends and the markers written here; a read_committed Fetch
reads it. At start-up, when the transaction log holds anything, the topics' logs are replayed to
rebuild those indexes; a broker whose transaction log is empty does no such work.

A transaction's `__consumer_offsets` partitions (added by AddOffsetsToTxn) get their marker
from the group runtime (`group_transaction_ended`), which writes it to the group log and makes
the transaction's offsets (TxnOffsetCommit) committed or drops them.

DescribeTransactions and ListTransactions answer from the coordinator's memory, which the
transaction log is loaded into before the broker listens, so no load is ever in progress. The
journal events of a state change (`transaction_begun`, `..._committed`, `..._aborted`) go to the
host once its record is durable.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from coordinator.dataplane.internal_topic import TopicDirectory
from coordinator.dataplane.producers import ProducerTable
from coordinator.dataplane.transaction_log import TransactionLog
from coordinator.grouplog.placement import partition_for
from coordinator.txn.coordinator import (
    OFFSETS_TOPIC,
    TransactionCoordinator,
    TransactionMetadata,
    TxnConfig,
    TxnResult,
)
from coordinator.txn.records import TxnState
from protocol.build import build
from protocol.codec import response_type
from storage.log import LogConfig
from storage.transactions import PartitionTransactions, encode_control_batch

ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
ADD_PARTITIONS_VERSIONS = ApiVersionRange(ADD_PARTITIONS_TO_TXN, 0, 3)
ADD_OFFSETS_VERSIONS = ApiVersionRange(ADD_OFFSETS_TO_TXN, 0, 3)
END_TXN_VERSIONS = ApiVersionRange(END_TXN, 0, 3)
DESCRIBE_TRANSACTIONS_VERSIONS = ApiVersionRange(DESCRIBE_TRANSACTIONS, 0, 0)
# v2's transactional id pattern (KIP-1152) is not served.
LIST_TRANSACTIONS_VERSIONS = ApiVersionRange(LIST_TRANSACTIONS, 0, 1)
EXPIRY_CHECK_MS = 1000
_READ_BYTES = 1 << 20
log = structlog.get_logger("rebalanced.transactions")


def _milliseconds(value: Any) -> int:
    # kio decodes Kafka's timedelta_i32 fields as a timedelta.
    if isinstance(value, int):
        return value
    return int(value.total_seconds() * 1000)


# A millisecond instant as kio's datetime fields take them (-1, "none", is 1 ms before
# the epoch); the epoch itself is Kafka's default of an error entry.
_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)


def _instant(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


class TransactionHost(TopicDirectory, Protocol):
    def wall_ms(self) -> int: ...

    def partition_appended(self, topic: str, partition: int) -> None: ...

    def schedule(self, key: tuple[Any, ...], deadline_ms: int) -> None: ...

    def fail(self, error: BaseException) -> None:
        """Stop the broker: its restart recovers exactly the durable prefix."""
        ...

    def group_transaction_ended(self, partition: int, producer_id: int, producer_epoch: int,
                                committed: bool) -> None:
        """Write the marker of the producer's transaction to the group log partition."""
        ...

    def transaction_event(self, payload: dict[str, object]) -> None:
        """A journal event of the transaction coordinator (docs/events.md)."""
        ...

    def group_markers_durable(self) -> None:
        """fsync the group log's transaction markers not yet durable (before this log records
        anything after their transaction: a replay must never find this log past a
        transaction whose marker it lost). Raises `OSError` (the broker stops)."""
        ...


class TransactionService:
    def __init__(self, host: TransactionHost, producers: ProducerTable,
                 config: TxnConfig, offsets_partitions: int) -> None:
        self._host = host
        self._producers = producers
        self.coordinator = TransactionCoordinator(config, producers.new_producer_id)
        self._offsets_partitions = offsets_partitions
        self._log: TransactionLog | None = None
        self.partitions: dict[tuple[str, int], PartitionTransactions] = {}
        self._expiry_armed = False

    # -- life ----------------------------------------------------------------------------

    def open(self, data_dir: Path, config: LogConfig, *, repair: bool = False) -> None:
        self._log = TransactionLog.open(data_dir, config, repair=repair)
        if self._log.load(self.coordinator) == 0:
            return
        self._rebuild_indexes()
        now = self._host.wall_ms()
        for result in self.coordinator.resume_after_load():
            self._finish(result, now)
        self._arm_expiry()

    def close(self) -> None:
        if self._log is not None:
            self._log.close()

    def _rebuild_indexes(self) -> None:
        for topic in self._host.topics.topics():
            for index, partition_log in enumerate(topic.partitions):
                txns = PartitionTransactions()
                offset = partition_log.log_start_offset
                while offset < partition_log.log_end_offset:
                    after = txns.observe_batches(partition_log.read(offset, _READ_BYTES))
                    if after <= offset:
                        break
                    offset = after
                if txns.open or txns.aborted:
                    self.partitions[(topic.name, index)] = txns

    # -- the data path -------------------------------------------------------------------

    def appended(self, topic: str, partition: int, producer_id: int, first_offset: int) -> None:
        """Produce appended a transactional batch."""
        txns = self.partitions.get((topic, partition))
        if txns is None:
            txns = self.partitions[(topic, partition)] = PartitionTransactions()
        txns.appended(producer_id, first_offset)

    def partition(self, topic: str, partition: int) -> PartitionTransactions | None:
        return self.partitions.get((topic, partition))

    def refuse_append(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      topic: str, partition: int) -> ErrorCode | None:
        """Why a transactional batch may not be appended, or None: only the current epoch of
        the transactional id, in an ongoing transaction that holds the partition. A fenced or
        timed-out producer appending after its abort would otherwise hold the partition's
        last stable offset with a transaction no marker will ever end."""
        txn = self.coordinator.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if producer_epoch != txn.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if txn.state != TxnState.ONGOING or (topic, partition) not in txn.partitions:
            return ErrorCode.invalid_txn_state
        return None

    def refuse_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       offsets_partition: int) -> ErrorCode | None:
        """Why a TxnOffsetCommit may not stage offsets, or None: as `refuse_append`, the
        group's `__consumer_offsets` partition added by AddOffsetsToTxn to the ongoing
        transaction of the current epoch."""
        return self.refuse_append(transactional_id, producer_id, producer_epoch,
                                  OFFSETS_TOPIC, offsets_partition)

    def _transaction_of(self, producer_id: int) -> TransactionMetadata | None:
        """The transaction of the transactional id that has `producer_id`, if any (read at
        load only: a scan, not an index kept on every InitProducerId)."""
        return next((txn for txn in self.coordinator.transactions.values()
                     if txn.producer_id == producer_id), None)

    def transaction_of_producer(self, producer_id: int) -> tuple[TxnState, frozenset[int]] | None:
        """The state of `producer_id`'s transaction and the `__consumer_offsets` partitions it
        holds, or None when no transactional id has that producer id."""
        txn = self._transaction_of(producer_id)
        if txn is None:
            return None
        return txn.state, frozenset(p for t, p in txn.partitions if t == OFFSETS_TOPIC)

    def note_transaction_groups(self, producer_id: int, group_ids: Iterable[str]) -> None:
        """Groups a replayed transaction of `producer_id` committed offsets to, for its end
        event (the transaction log keeps partitions, not groups)."""
        txn = self._transaction_of(producer_id)
        if txn is not None:
            txn.groups.update(group_ids)

    def forget_topic(self, name: str) -> None:
        """A deleted topic: a topic created again under its name starts with no history."""
        for key in [k for k in self.partitions if k[0] == name]:
            del self.partitions[key]

    # -- requests ------------------------------------------------------------------------

    def init_producer_id(self, ctx: ClientRequest, request: Any) -> None:
        now = self._host.wall_ms()
        args = (request.transactional_id, _milliseconds(request.transaction_timeout),
                getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1))
        result = self.coordinator.init_producer_id(*args, now)
        code = self._durable(result, now)
        if result.completing is not None and result.records:
            # The old producer's open transaction was aborted under a new epoch; its markers
            # are written in this same turn, so the new producer need not come back to ask
            # again (Kafka answers CONCURRENT_TRANSACTIONS and lets it retry).
            self._finish(result, now)
            result = self.coordinator.init_producer_id(*args, now)
            code = self._durable(result, now)
        if code == ErrorCode.producer_fenced and ctx.version < 4:
            code = ErrorCode.invalid_producer_epoch
        ok = code == ErrorCode.none
        ctx.respond(build(response_type(22, ctx.version), throttle_time=0, error_code=code,
                          producer_id=result.producer_id if ok else -1,
                          producer_epoch=result.producer_epoch if ok else -1))

    def add_partitions(self, ctx: ClientRequest, request: Any) -> None:
        now = self._host.wall_ms()
        wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
        missing = {(name, p) for name, p in wanted if not self._exists(name, p)}
        if missing:
            code = ErrorCode.unknown_topic_or_partition
            by_partition = {tp: (code if tp in missing else ErrorCode.operation_not_attempted)
                            for tp in wanted}
        else:
            result = self.coordinator.add_partitions(
                request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch, wanted, now)
            code = self._fenced_code(self._durable(result, now), ctx.version, 3)
            by_partition = dict.fromkeys(wanted, code)
        topics: dict[str, list[dict[str, Any]]] = {}
        for (name, p), error in by_partition.items():
            topics.setdefault(name, []).append({"partition_index": p,
                                                "partition_error_code": error})
        ctx.respond(build(response_type(ADD_PARTITIONS_TO_TXN, ctx.version), throttle_time=0,
                          results_by_topic_v3_and_below=[
                              {"name": n, "results_by_partition": r}
                              for n, r in topics.items()]))

    def add_offsets(self, ctx: ClientRequest, request: Any) -> None:
        now = self._host.wall_ms()
        result = self.coordinator.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch,
            partition_for(request.group_id, self._offsets_partitions), now,
            group_id=request.group_id)
        code = self._fenced_code(self._durable(result, now), ctx.version, 2)
        ctx.respond(build(response_type(ADD_OFFSETS_TO_TXN, ctx.version), throttle_time=0,
                          error_code=code))

    def end_txn(self, ctx: ClientRequest, request: Any) -> None:
        now = self._host.wall_ms()
        result = self.coordinator.end_txn(request.transactional_id, request.producer_id,
                                          request.producer_epoch, request.committed, now)
        code = self._fenced_code(self._durable(result, now), ctx.version, 2)
        ctx.respond(build(response_type(END_TXN, ctx.version), throttle_time=0,
                          error_code=code))
        if code == ErrorCode.none:
            self._finish(result, now)

    def describe_transactions(self, ctx: ClientRequest, request: Any) -> None:
        states = []
        for transactional_id in request.transactional_ids:
            described = (self.coordinator.describe(transactional_id) if transactional_id
                         else None)
            if described is None:
                states.append({
                    "error_code": (ErrorCode.transactional_id_not_found if transactional_id
                                   else ErrorCode.invalid_request),
                    "transactional_id": transactional_id, "transaction_state": "",
                    "transaction_timeout": 0, "transaction_start_time": _EPOCH,
                    "producer_id": 0, "producer_epoch": 0, "topics": []})
                continue
            states.append({
                "error_code": ErrorCode.none, "transactional_id": transactional_id,
                "transaction_state": described.state,
                "transaction_timeout": described.timeout_ms,
                "transaction_start_time": _instant(described.start_ms),
                "producer_id": described.producer_id,
                "producer_epoch": described.producer_epoch,
                "topics": [{"topic": topic, "partitions": list(ids)}
                           for topic, ids in described.partitions]})
        ctx.respond(build(response_type(DESCRIBE_TRANSACTIONS, ctx.version), throttle_time=0,
                          transaction_states=states))

    def list_transactions(self, ctx: ClientRequest, request: Any) -> None:
        listed, unknown = self.coordinator.list_transactions(
            request.state_filters, request.producer_id_filters,
            getattr(request, "duration_filter", -1), self._host.wall_ms())
        ctx.respond(build(response_type(LIST_TRANSACTIONS, ctx.version), throttle_time=0,
                          error_code=ErrorCode.none, unknown_state_filters=unknown,
                          transaction_states=[
                              {"transactional_id": t.transactional_id,
                               "producer_id": t.producer_id,
                               "transaction_state": t.state} for t in listed]))

    def expire(self) -> None:
        """The timer: abort the transactions past their timeout, forget idle ids, and write
        again the markers of a transaction whose marker write failed (a second marker of an
        ended transaction ends nothing)."""
        self._expiry_armed = False
        now = self._host.wall_ms()
        for result in self.coordinator.resume_after_load():
            self._finish(result, now)
        for result in self.coordinator.expire(now):
            if self._durable(result, now) == ErrorCode.none:
                self._finish(result, now)
        self._arm_expiry()

    # -- helpers -------------------------------------------------------------------------

    def _exists(self, name: str, partition: int) -> bool:
        topic = self._host.topics.get(name)
        return topic is not None and 0 <= partition < len(topic.partitions)

    @staticmethod
    def _fenced_code(code: ErrorCode, version: int, fenced_from: int) -> ErrorCode:
        # PRODUCER_FENCED is understood from these versions on (KIP-588); older clients are
        # told INVALID_PRODUCER_EPOCH, which they treat the same way.
        if code == ErrorCode.producer_fenced and version < fenced_from:
            return ErrorCode.invalid_producer_epoch
        return code

    def _durable(self, result: TxnResult, now: int, *, sync: bool = True) -> ErrorCode:
        """Write the result's records before its answer. A disk error leaves the state in
        memory ahead of the log, which is never carried on from (as the group log): the
        request is answered with a retriable error and the broker stops; the restart loads
        the durable prefix and the client retries there."""
        if result.records and self._log is not None:
            try:
                if sync:
                    self._host.group_markers_durable()
                self._log.append(result.records, now, sync=sync)
            except OSError as exc:
                log.error("transaction log write failed", error=str(exc))
                self._host.fail(exc)
                return ErrorCode.coordinator_not_available
        if result.markers or (result.error == ErrorCode.none and result.records):
            self._arm_expiry()
        for event in result.events:
            self._host.transaction_event(event)
        return result.error

    def _finish(self, result: TxnResult, now: int) -> None:
        """Write the markers of a completing transaction, then record its completion."""
        if result.completing is None:
            return
        for marker in result.markers:
            if marker.topic == OFFSETS_TOPIC:
                self._host.group_transaction_ended(marker.partition, marker.producer_id,
                                                   marker.producer_epoch, marker.committed)
                continue
            topic = self._host.topics.get(marker.topic)
            if topic is None or not 0 <= marker.partition < len(topic.partitions):
                continue  # deleted since: nothing left to end there
            batch = encode_control_batch(marker.producer_id, marker.producer_epoch,
                                         marker.committed, now)
            try:
                info = topic.partitions[marker.partition].append(batch, now)
            except OSError as exc:
                log.error("transaction marker not written", topic=marker.topic,
                          partition=marker.partition, error=str(exc))
                return  # the transaction stays prepared; a restart writes its markers again
            txns = self.partitions.get((marker.topic, marker.partition))
            if txns is None:
                txns = self.partitions[(marker.topic, marker.partition)] = PartitionTransactions()
            txns.ended(marker.producer_id, info.base_offset, marker.committed)
            self._producers.fence(marker.topic, marker.partition, marker.producer_id,
                                  marker.producer_epoch)
            self._host.partition_appended(marker.topic, marker.partition)
        # The group log's markers are durable before the completion is written: a replay
        # that found this log past the transaction with its group-log marker lost would judge
        # the transaction's offsets by the producer's next transaction. Inline, as this log's
        # own fsyncs: no hand-off to the fsync thread, and nothing waits in between.
        try:
            self._host.group_markers_durable()
        except OSError as exc:
            log.error("transaction marker not made durable in the group log", error=str(exc))
            self._host.fail(exc)
            return  # the transaction stays prepared; the restart writes its markers again
        # No fsync of its own (as Kafka does not wait for it either): until a later write's
        # fsync covers it, a crash reloads the transaction as prepared and writes its markers
        # again, which is harmless.
        self._durable(self.coordinator.markers_written(result.completing, now), now, sync=False)

    def _arm_expiry(self) -> None:
        if not self._expiry_armed and self.coordinator.transactions:
            self._expiry_armed = True
            self._host.schedule(("txn",), self._host.wall_ms() + EXPIRY_CHECK_MS)
