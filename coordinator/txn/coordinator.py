"""The transaction coordinator's state machine (KIP-98), pure: requests in, a `TxnResult` out.

Each method takes `now_ms` and returns what the runtime must do: the `__transaction_state`
records to append (the answer may go out only once they are durable), the control markers to
write to the transaction's partitions, and the answer. When the markers are written the runtime
calls `markers_written`, which completes the transaction with one more record. While a
transaction is between its prepare record and its completion every request for that
transactional id is answered CONCURRENT_TRANSACTIONS, as Kafka does; the client retries.

Fencing follows Kafka: a request whose producer id is not the current one is refused with
INVALID_PRODUCER_ID_MAPPING, an older epoch with PRODUCER_FENCED (the adapter answers
INVALID_PRODUCER_EPOCH to clients too old for PRODUCER_FENCED). Re-initialising a producer
whose transaction is open bumps the epoch and aborts that transaction; so does the transaction
outliving its timeout (`expire`), so the timed-out producer is fenced as well.

A transaction's offsets commit (AddOffsetsToTxn) is kept as the group's `__consumer_offsets`
partition among the transaction's partitions, as Kafka does, so that the commit marker reaches
the group coordinator; the caller passes that partition.

Operators see transactions through `describe` and `list_transactions` (DescribeTransactions,
ListTransactions) and through the journal events a result carries: `transaction_begun` when a
transaction starts, `transaction_committed` or `transaction_aborted` (with the reason) once its
markers are written (docs/events.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from coordinator.txn.records import (
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

OFFSETS_TOPIC = "__consumer_offsets"
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka bumps to a new producer id before the epoch reaches Short.MAX_VALUE, keeping one epoch
# in reserve for fencing.
MAX_PRODUCER_EPOCH = 32766

# Kafka's names of the states, as DescribeTransactions and ListTransactions print them.
STATE_NAMES: dict[TxnState, str] = {
    TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_STATES_BY_NAME = {name: state for state, name in STATE_NAMES.items()}

# Why a transaction ended (the journal's `reason`): its producer's EndTxn, its timeout, a new
# producer instance taking over the transactional id (InitProducerId without the producer id),
# the same producer re-initialising itself (InitProducerId with its id and epoch, KIP-360), or
# a completion the coordinator finished after a restart (the reason it was decided for is not
# in the transaction log).
END_CLIENT = "client"
END_TIMEOUT = "timeout"
END_FENCED = "fenced"
END_REINITIALISED = "reinitialised"
END_COORDINATOR_RESTART = "coordinator_restart"

_COMPLETING = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
_IDLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


@dataclass(frozen=True, slots=True)
class TxnConfig:
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    last_update_ms: int = 0
    start_ms: int = -1
    # Not in the transaction log, for the journal only: the groups AddOffsetsToTxn added to
    # this transaction, and why it is ending.
    groups: set[str] = field(default_factory=set)
    end_reason: str = END_COORDINATOR_RESTART

    def to_value(self) -> TxnLogValue:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                           tuple((t, tuple(p)) for t, p in by_topic.items()),
                           self.last_update_ms, self.start_ms)


@dataclass(frozen=True, slots=True)
class MarkerWrite:
    """One control batch to write: the transaction's end on one partition."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    committed: bool


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One transactional id as DescribeTransactions answers it."""

    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transactional id as ListTransactions answers it."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(slots=True)
class TxnResult:
    error: ErrorCode = ErrorCode.none
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    markers: list[MarkerWrite] = field(default_factory=list)
    # The transactional id whose markers these are: the runtime calls `markers_written` with it.
    completing: str | None = None
    # Why the transaction ended: "commit", or the END_* reason of an abort.
    ended: str | None = None
    # Journal events (docs/events.md), as payloads with an "event" key.
    events: list[dict[str, object]] = field(default_factory=list)


def _refused(code: ErrorCode) -> TxnResult:
    return TxnResult(error=code)


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, new_producer_id: Callable[[], int]) -> None:
        self.config = config
        self._new_producer_id = new_producer_id
        self.transactions: dict[str, TransactionMetadata] = {}

    # -- requests ------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int,
                         producer_epoch: int, now_ms: int) -> TxnResult:
        if timeout_ms <= 0 or timeout_ms > self.config.transaction_max_timeout_ms:
            return _refused(ErrorCode.invalid_transaction_timeout)
        txn = self.transactions.get(transactional_id)
        if txn is None:
            txn = TransactionMetadata(transactional_id, self._new_producer_id(), 0, timeout_ms,
                                      TxnState.EMPTY, last_update_ms=now_ms)
            self.transactions[transactional_id] = txn
            return self._answer(txn)
        if txn.state in _COMPLETING:
            return _refused(ErrorCode.concurrent_transactions)
        if producer_id != NO_PRODUCER_ID:
            # KIP-360: a producer that knows its id may only re-initialise its current epoch.
            if producer_id != txn.producer_id:
                return _refused(ErrorCode.invalid_producer_id_mapping)
            if producer_epoch != txn.producer_epoch:
                return _refused(ErrorCode.producer_fenced)
        if txn.state == TxnState.ONGOING:
            # The old producer's transaction is aborted under a new epoch, which fences it;
            # the new producer retries once the abort has completed.
            reason = END_FENCED if producer_id == NO_PRODUCER_ID else END_REINITIALISED
            result = self._abort_with_bump(txn, now_ms, reason)
            result.error = ErrorCode.concurrent_transactions
            return result
        self._bump_epoch(txn)
        txn.timeout_ms = timeout_ms
        txn.state = TxnState.EMPTY
        txn.partitions.clear()
        txn.start_ms = -1
        txn.last_update_ms = now_ms
        return self._answer(txn)

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], now_ms: int) -> TxnResult:
        txn, refusal = self._current(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return refusal
        wanted = set(partitions)
        if txn.state == TxnState.ONGOING and wanted <= txn.partitions:
            return TxnResult(producer_id=txn.producer_id, producer_epoch=txn.producer_epoch)
        if txn.state not in _IDLE and txn.state != TxnState.ONGOING:
            return _refused(ErrorCode.invalid_txn_state)
        begun = txn.state != TxnState.ONGOING
        if begun:
            txn.partitions.clear()
            txn.groups.clear()
            txn.start_ms = now_ms
            txn.state = TxnState.ONGOING
        txn.partitions |= wanted
        txn.last_update_ms = now_ms
        result = self._answer(txn)
        if begun:
            result.events.append({
                "event": "transaction_begun", "transactional_id": transactional_id,
                "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
                "transaction_timeout_ms": txn.timeout_ms})
        return result

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    offsets_partition: int, now_ms: int, group_id: str | None = None
                    ) -> TxnResult:
        result = self.add_partitions(transactional_id, producer_id, producer_epoch,
                                     [(OFFSETS_TOPIC, offsets_partition)], now_ms)
        if group_id is not None and result.error == ErrorCode.none:
            self.transactions[transactional_id].groups.add(group_id)
        return result

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                committed: bool, now_ms: int) -> TxnResult:
        txn, refusal = self._current(transactional_id, producer_id, producer_epoch,
                                     completing_ok=True)
        if txn is None:
            return refusal
        state = txn.state
        if state == TxnState.ONGOING:
            return self._prepare(txn, committed, now_ms, END_CLIENT)
        if state in _COMPLETING:
            same = (state == TxnState.PREPARE_COMMIT) == committed
            return _refused(ErrorCode.concurrent_transactions if same
                            else ErrorCode.invalid_txn_state)
        if (state == TxnState.COMPLETE_COMMIT and committed) or \
                (state == TxnState.COMPLETE_ABORT and not committed):
            # A retried EndTxn whose first answer was lost.
            return TxnResult(producer_id=txn.producer_id, producer_epoch=txn.producer_epoch)
        return _refused(ErrorCode.invalid_txn_state)

    # -- the runtime's calls -------------------------------------------------------------

    def markers_written(self, transactional_id: str, now_ms: int) -> TxnResult:
        """Every marker of the completing transaction is durable: record its completion."""
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state not in _COMPLETING:
            return TxnResult()
        committed = txn.state == TxnState.PREPARE_COMMIT
        partition_count = len(txn.partitions)
        txn.state = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        txn.partitions.clear()
        txn.last_update_ms = now_ms
        result = self._answer(txn)
        result.events.append({
            "event": "transaction_committed" if committed else "transaction_aborted",
            "transactional_id": transactional_id, "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch, "reason": txn.end_reason,
            "duration_ms": now_ms - txn.start_ms if txn.start_ms >= 0 else None,
            "partition_count": partition_count, "group_ids": sorted(txn.groups)})
        txn.groups.clear()
        txn.end_reason = END_COORDINATOR_RESTART
        return result

    # -- operators -----------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionDescription | None:
        """DescribeTransactions of one id; None answers TRANSACTIONAL_ID_NOT_FOUND (also for a
        Dead one, being expired, as Kafka)."""
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.state == TxnState.DEAD:
            return None
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return TransactionDescription(
            transactional_id, STATE_NAMES[txn.state], txn.timeout_ms, txn.start_ms,
            txn.producer_id, txn.producer_epoch,
            tuple((topic, tuple(ids)) for topic, ids in by_topic.items()))

    def list_transactions(self, state_filters: Iterable[str], producer_id_filters: Iterable[int],
                          duration_filter_ms: int, now_ms: int
                          ) -> tuple[list[TransactionListing], list[str]]:
        """ListTransactions: the transactions matching every filter given, and the state names
        that are not Kafka's. As Kafka's TransactionStateManager: Dead ids are left out; an
        empty filter matches all; unknown state names are reported and otherwise ignored;
        the duration filter keeps transactions whose start is more than that long ago (an
        id with no transaction started, start -1, always is)."""
        states: set[TxnState] = set()
        unknown: list[str] = []
        for name in state_filters:
            state = _STATES_BY_NAME.get(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        producer_ids = set(producer_id_filters)
        listed = [
            TransactionListing(txn.transactional_id, txn.producer_id, STATE_NAMES[txn.state])
            for txn in self.transactions.values()
            if txn.state != TxnState.DEAD
            and (not producer_ids or txn.producer_id in producer_ids)
            and (not states or txn.state in states)
            and (duration_filter_ms < 0 or now_ms - txn.start_ms > duration_filter_ms)]
        return listed, unknown

    def open_count(self) -> int:
        """Transactions begun and not yet completed (Ongoing or being completed)."""
        return sum(1 for txn in self.transactions.values()
                   if txn.state == TxnState.ONGOING or txn.state in _COMPLETING)

    def expire(self, now_ms: int) -> list[TxnResult]:
        """Abort the transactions that outlived their timeout; forget long-idle ids."""
        results: list[TxnResult] = []
        for tid, txn in list(self.transactions.items()):
            if txn.state == TxnState.ONGOING and txn.start_ms + txn.timeout_ms <= now_ms:
                results.append(self._abort_with_bump(txn, now_ms, "timeout"))
            elif txn.state in _IDLE and (txn.last_update_ms
                                         + self.config.transactional_id_expiration_ms
                                         <= now_ms):
                del self.transactions[tid]
                results.append(TxnResult(records=[(encode_key(tid), None)]))
        return results

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Load one `__transaction_state` record (start-up); later records win."""
        tid = decode_key(key)
        if value is None:
            self.transactions.pop(tid, None)
            return
        v = decode_value(value)
        self.transactions[tid] = TransactionMetadata(
            tid, v.producer_id, v.producer_epoch, v.timeout_ms, v.state,
            {(topic, p) for topic, ids in v.partitions for p in ids},
            v.last_update_ms, v.start_ms)

    def resume_after_load(self) -> list[TxnResult]:
        """The transactions a crash left between prepare and complete: write their markers
        again (markers are idempotent for a reader: a second marker of an ended transaction
        ends nothing)."""
        return [TxnResult(markers=self._markers(txn, txn.state == TxnState.PREPARE_COMMIT),
                          completing=txn.transactional_id)
                for txn in self.transactions.values() if txn.state in _COMPLETING]

    # -- helpers -------------------------------------------------------------------------

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 *, completing_ok: bool = False) -> tuple[TransactionMetadata | None, TxnResult]:
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return None, _refused(ErrorCode.invalid_producer_id_mapping)
        if producer_epoch != txn.producer_epoch:
            return None, _refused(ErrorCode.producer_fenced)
        if txn.state in _COMPLETING and not completing_ok:
            return None, _refused(ErrorCode.concurrent_transactions)
        return txn, TxnResult()

    def _bump_epoch(self, txn: TransactionMetadata) -> None:
        if txn.producer_epoch >= MAX_PRODUCER_EPOCH:
            txn.producer_id = self._new_producer_id()
            txn.producer_epoch = 0
        else:
            txn.producer_epoch += 1

    def _abort_with_bump(self, txn: TransactionMetadata, now_ms: int, reason: str) -> TxnResult:
        # The markers carry the bumped epoch, so the old producer's late writes are refused.
        self._bump_epoch(txn)
        return self._prepare(txn, False, now_ms, reason)

    def _prepare(self, txn: TransactionMetadata, committed: bool, now_ms: int,
                 reason: str) -> TxnResult:
        txn.state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
        txn.last_update_ms = now_ms
        txn.end_reason = reason
        result = self._answer(txn)
        result.markers = self._markers(txn, committed)
        result.completing = txn.transactional_id
        result.ended = "commit" if committed else reason
        return result

    @staticmethod
    def _markers(txn: TransactionMetadata, committed: bool) -> list[MarkerWrite]:
        return [MarkerWrite(topic, partition, txn.producer_id, txn.producer_epoch, committed)
                for topic, partition in sorted(txn.partitions)]

    @staticmethod
    def _answer(txn: TransactionMetadata) -> TxnResult:
        return TxnResult(producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                         records=[(encode_key(txn.transactional_id),
                                   encode_value(txn.to_value()))])
