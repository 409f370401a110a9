"""The transaction coordinator's state machine (KIP-98) and its `__transaction_state` records."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from coordinator.txn.coordinator import (
    MAX_PRODUCER_EPOCH,
    OFFSETS_TOPIC,
    TransactionCoordinator,
    TxnConfig,
    TxnResult,
)
from coordinator.txn.records import (
    TxnLogValue,
    TxnRecordError,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

TID = "app-1"


Log = list[tuple[bytes, bytes | None]]


def new_coordinator(**config: int) -> tuple[TransactionCoordinator, Log]:
    ids = itertools.count(1000)
    return TransactionCoordinator(TxnConfig(**config), lambda: next(ids)), []


def logged(log: Log, result: TxnResult) -> TxnResult:
    log.extend(result.records)
    return result


def init(txc: TransactionCoordinator, now: int = 0, timeout: int = 60_000,
         pid: int = -1, epoch: int = -1) -> TxnResult:
    return txc.init_producer_id(TID, timeout, pid, epoch, now)


def test_key_and_value_round_trip_in_kafkas_layout() -> None:
    key = encode_key("tx")
    assert key == b"\x00\x00\x00\x02tx"
    assert decode_key(key) == "tx"
    value = TxnLogValue(7, 3, 60_000, TxnState.ONGOING, (("a", (0, 2)), ("b", (1,))), 50, 40)
    data = encode_value(value)
    assert data[:2] == b"\x00\x00"  # value version 0
    assert decode_value(data) == value
    empty = TxnLogValue(7, 3, 60_000, TxnState.EMPTY, (), 50, -1)
    assert encode_value(empty)[17:21] == b"\xff\xff\xff\xff"  # null partition array
    assert decode_value(encode_value(empty)) == empty


def test_flexible_value_version_one_is_read() -> None:
    # version 1: compact array and string (length + 1 as uvarint), tagged fields at each level
    data = (b"\x00\x01" + (9).to_bytes(8, "big") + (2).to_bytes(2, "big")
            + (1000).to_bytes(4, "big") + b"\x01"
            + b"\x02" + b"\x02t" + b"\x02" + (5).to_bytes(4, "big") + b"\x00"
            + (20).to_bytes(8, "big") + (10).to_bytes(8, "big") + b"\x00")
    assert decode_value(data) == TxnLogValue(9, 2, 1000, TxnState.ONGOING, (("t", (5,)),),
                                             20, 10)


@pytest.mark.parametrize("data", [b"", b"\x00\x05", b"\x00\x00\x00\x09ab", b"\x00\x00\x00"])
def test_a_bad_record_raises_a_record_error(data: bytes) -> None:
    with pytest.raises(TxnRecordError):
        decode_key(data)
    with pytest.raises(TxnRecordError):
        decode_value(data)


def test_first_init_gives_epoch_zero_and_reinit_bumps_the_epoch() -> None:
    txc, log = new_coordinator()
    first = logged(log, init(txc))
    assert (first.error, first.producer_epoch) == (ErrorCode.none, 0)
    assert len(first.records) == 1
    second = logged(log, init(txc, now=5))
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    # the old epoch is fenced
    old = txc.add_partitions(TID, first.producer_id, 0, [("t", 0)], 6)
    assert old.error == ErrorCode.producer_fenced
    assert old.records == []
    stranger = txc.add_partitions(TID, 42, 1, [("t", 0)], 6)
    assert stranger.error == ErrorCode.invalid_producer_id_mapping


def test_a_timeout_above_the_maximum_is_refused() -> None:
    txc, _ = new_coordinator(transaction_max_timeout_ms=1000)
    assert init(txc, timeout=1001).error == ErrorCode.invalid_transaction_timeout
    assert TID not in txc.transactions


def test_commit_prepares_writes_markers_then_completes() -> None:
    txc, _ = new_coordinator()
    p = init(txc)
    added = txc.add_partitions(TID, p.producer_id, 0, [("t", 0), ("t", 1)], 10)
    assert added.error == ErrorCode.none and txc.transactions[TID].state == TxnState.ONGOING
    # adding what is already in the transaction writes nothing
    assert txc.add_partitions(TID, p.producer_id, 0, [("t", 1)], 11).records == []
    offsets = txc.add_offsets(TID, p.producer_id, 0, 7, 12)
    assert decode_value(offsets.records[0][1] or b"").partitions == (
        (OFFSETS_TOPIC, (7,)), ("t", (0, 1)))
    end = txc.end_txn(TID, p.producer_id, 0, True, 20)
    assert end.error == ErrorCode.none and end.ended == "commit"
    assert decode_value(end.records[0][1] or b"").state == TxnState.PREPARE_COMMIT
    assert [(m.topic, m.partition, m.committed) for m in end.markers] == [
        (OFFSETS_TOPIC, 7, True), ("t", 0, True), ("t", 1, True)]
    # while the markers are written, the transactional id is busy
    assert txc.add_partitions(TID, p.producer_id, 0, [("t", 0)], 21).error == \
        ErrorCode.concurrent_transactions
    assert init(txc, now=21).error == ErrorCode.concurrent_transactions
    assert txc.end_txn(TID, p.producer_id, 0, True, 21).error == \
        ErrorCode.concurrent_transactions
    assert txc.end_txn(TID, p.producer_id, 0, False, 21).error == ErrorCode.invalid_txn_state
    done = txc.markers_written(TID, 30)
    assert decode_value(done.records[0][1] or b"") == TxnLogValue(
        p.producer_id, 0, 60_000, TxnState.COMPLETE_COMMIT, (), 30, 10)
    # a retried EndTxn is answered without a new transaction; the opposite one is refused
    assert txc.end_txn(TID, p.producer_id, 0, True, 31).error == ErrorCode.none
    assert txc.end_txn(TID, p.producer_id, 0, False, 31).error == ErrorCode.invalid_txn_state
    # the next transaction starts afresh
    txc.add_partitions(TID, p.producer_id, 0, [("u", 0)], 40)
    assert txc.transactions[TID].partitions == {("u", 0)}
    assert txc.transactions[TID].start_ms == 40


def test_end_txn_without_a_transaction_is_an_invalid_state() -> None:
    txc, _ = new_coordinator()
    p = init(txc)
    assert txc.end_txn(TID, p.producer_id, 0, True, 1).error == ErrorCode.invalid_txn_state


def test_reinit_with_an_open_transaction_aborts_it_under_a_new_epoch() -> None:
    txc, _ = new_coordinator()
    p = init(txc)
    txc.add_partitions(TID, p.producer_id, 0, [("t", 0)], 10)
    fenced = init(txc, now=20)
    assert fenced.error == ErrorCode.concurrent_transactions
    assert fenced.ended == "fenced"
    assert [(m.partition, m.producer_epoch, m.committed) for m in fenced.markers] == [
        (0, 1, False)]
    # the fenced producer can neither commit nor add
    assert txc.end_txn(TID, p.producer_id, 0, True, 21).error == ErrorCode.producer_fenced
    txc.markers_written(TID, 25)
    again = init(txc, now=30)
    assert (again.error, again.producer_epoch) == (ErrorCode.none, 2)
    assert txc.transactions[TID].state == TxnState.EMPTY


def test_reinit_with_a_known_producer_checks_its_epoch() -> None:
    txc, _ = new_coordinator()
    p = init(txc)
    assert init(txc, pid=p.producer_id, epoch=5).error == ErrorCode.producer_fenced
    assert init(txc, pid=99, epoch=0).error == ErrorCode.invalid_producer_id_mapping
    assert init(txc, pid=p.producer_id, epoch=0).producer_epoch == 1


def test_epoch_exhaustion_moves_to_a_new_producer_id() -> None:
    txc, _ = new_coordinator()
    p = init(txc)
    txc.transactions[TID].producer_epoch = MAX_PRODUCER_EPOCH
    bumped = init(txc, now=1)
    assert bumped.producer_id != p.producer_id and bumped.producer_epoch == 0


def test_an_expired_transaction_is_aborted_and_its_producer_fenced() -> None:
    txc, _ = new_coordinator()
    p = init(txc, timeout=1000)
    txc.add_partitions(TID, p.producer_id, 0, [("t", 0)], 100)
    assert txc.expire(1099) == []
    [aborted] = txc.expire(1100)
    assert aborted.ended == "timeout"
    assert [(m.committed, m.producer_epoch) for m in aborted.markers] == [(False, 1)]
    txc.markers_written(TID, 1200)
    assert txc.transactions[TID].state == TxnState.COMPLETE_ABORT
    assert txc.end_txn(TID, p.producer_id, 0, True, 1300).error == ErrorCode.producer_fenced


def test_an_idle_transactional_id_expires_with_a_tombstone() -> None:
    txc, _ = new_coordinator(transactional_id_expiration_ms=5000)
    init(txc, now=0)
    assert txc.expire(4999) == []
    [gone] = txc.expire(5000)
    assert gone.records == [(encode_key(TID), None)]
    assert TID not in txc.transactions


def test_replaying_the_log_restores_state_and_resumes_completion() -> None:
    txc, log = new_coordinator()
    p = logged(log, init(txc))
    logged(log, txc.add_partitions(TID, p.producer_id, 0, [("t", 0)], 10))
    logged(log, txc.end_txn(TID, p.producer_id, 0, False, 20))
    restarted, _ = new_coordinator()
    for key, value in log:
        restarted.replay(key, value)
    txn = restarted.transactions[TID]
    assert (txn.state, txn.partitions, txn.producer_epoch) == (
        TxnState.PREPARE_ABORT, {("t", 0)}, 0)
    [resumed] = restarted.resume_after_load()
    assert resumed.completing == TID
    assert [(m.partition, m.committed) for m in resumed.markers] == [(0, False)]
    restarted.markers_written(TID, 30)
    assert restarted.transactions[TID].state == TxnState.COMPLETE_ABORT
    restarted.replay(encode_key(TID), None)
    assert TID not in restarted.transactions
