"""What operators see of the transaction coordinator: DescribeTransactions and ListTransactions
answers, the journal events a state change carries, and the abort reasons."""

from __future__ import annotations

import itertools

from kio.schema.errors import ErrorCode

from coordinator.txn.coordinator import (
    OFFSETS_TOPIC,
    STATE_NAMES,
    TransactionCoordinator,
    TxnConfig,
    TxnResult,
)
from coordinator.txn.records import TxnState

TID = "app-1"


def new_coordinator() -> TransactionCoordinator:
    ids = itertools.count(1000)
    return TransactionCoordinator(TxnConfig(), lambda: next(ids))


def init(txc: TransactionCoordinator, tid: str = TID, now: int = 0, pid: int = -1,
         epoch: int = -1) -> TxnResult:
    return txc.init_producer_id(tid, 60_000, pid, epoch, now)


def events(result: TxnResult) -> list[dict[str, object]]:
    return result.events


def test_state_names_are_kafkas() -> None:
    assert [STATE_NAMES[s] for s in TxnState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
        "CompleteAbort", "Dead", "PrepareEpochFence"]


def test_describe_follows_the_transaction() -> None:
    txc = new_coordinator()
    assert txc.describe("unknown") is None
    p = init(txc, now=5)
    empty = txc.describe(TID)
    assert empty is not None
    assert (empty.state, empty.start_ms, empty.partitions, empty.timeout_ms) == (
        "Empty", -1, (), 60_000)
    txc.add_partitions(TID, p.producer_id, 0, [("b", 1), ("a", 2), ("a", 0)], 10)
    txc.add_offsets(TID, p.producer_id, 0, 7, 11, group_id="g")
    ongoing = txc.describe(TID)
    assert ongoing is not None
    assert (ongoing.state, ongoing.start_ms, ongoing.producer_id, ongoing.producer_epoch) == (
        "Ongoing", 10, p.producer_id, 0)
    assert ongoing.partitions == ((OFFSETS_TOPIC, (7,)), ("a", (0, 2)), ("b", (1,)))
    txc.end_txn(TID, p.producer_id, 0, True, 20)
    prepared = txc.describe(TID)
    assert prepared is not None and prepared.state == "PrepareCommit"
    assert prepared.partitions  # markers not yet written
    txc.markers_written(TID, 25)
    done = txc.describe(TID)
    assert done is not None
    assert (done.state, done.partitions, done.start_ms) == ("CompleteCommit", (), 10)
    txc.transactions[TID].state = TxnState.DEAD
    assert txc.describe(TID) is None  # being expired: not found, as Kafka


def test_list_filters_by_state_producer_and_duration() -> None:
    txc = new_coordinator()
    a = init(txc, "a", now=0)
    b = init(txc, "b", now=0)
    init(txc, "c", now=0)
    txc.add_partitions("a", a.producer_id, 0, [("t", 0)], 100)
    txc.add_partitions("b", b.producer_id, 0, [("t", 1)], 900)

    def ids(states: list[str] = [], pids: list[int] = [],  # noqa: B006
            duration: int = -1, now: int = 1000) -> list[str]:
        listed, _ = txc.list_transactions(states, pids, duration, now)
        return sorted(t.transactional_id for t in listed)

    assert ids() == ["a", "b", "c"]
    assert ids(["Ongoing"]) == ["a", "b"]
    assert ids(["Empty", "CompleteCommit"]) == ["c"]
    assert ids(pids=[b.producer_id]) == ["b"]
    assert ids(["Ongoing"], [b.producer_id, 12345]) == ["b"]
    # running longer than 500 ms at 1000: "a" (900 ms); "b" (100 ms) not; "c" never started
    assert ids(duration=500) == ["a", "c"]
    assert ids(["Ongoing"], duration=500) == ["a"]
    assert ids(duration=900) == ["c"]  # strictly longer
    listed, unknown = txc.list_transactions(["Ongoing", "Bogus"], [], -1, 1000)
    assert unknown == ["Bogus"] and {t.state for t in listed} == {"Ongoing"}
    # Only unknown names: no state filter is left, so every transaction is listed (Kafka).
    listed, unknown = txc.list_transactions(["Bogus"], [], -1, 1000)
    assert unknown == ["Bogus"] and len(listed) == 3
    txc.transactions["c"].state = TxnState.DEAD
    assert ids() == ["a", "b"]


def test_a_transaction_is_begun_once_and_committed_with_its_groups() -> None:
    txc = new_coordinator()
    p = init(txc)
    assert events(p) == []
    begun = txc.add_partitions(TID, p.producer_id, 0, [("t", 0)], 100)
    assert events(begun) == [{"event": "transaction_begun", "transactional_id": TID,
                              "producer_id": p.producer_id, "producer_epoch": 0,
                              "transaction_timeout_ms": 60_000}]
    assert events(txc.add_partitions(TID, p.producer_id, 0, [("t", 1)], 110)) == []
    assert events(txc.add_offsets(TID, p.producer_id, 0, 3, 120, group_id="g")) == []
    assert txc.open_count() == 1
    end = txc.end_txn(TID, p.producer_id, 0, True, 150)
    assert events(end) == []  # the outcome is an event once the markers are written
    assert txc.open_count() == 1
    done = txc.markers_written(TID, 160)
    assert events(done) == [{"event": "transaction_committed", "transactional_id": TID,
                             "producer_id": p.producer_id, "producer_epoch": 0,
                             "reason": "client", "duration_ms": 60, "partition_count": 3,
                             "group_ids": ["g"]}]
    assert txc.open_count() == 0
    # the next transaction starts with no groups
    txc.add_partitions(TID, p.producer_id, 0, [("t", 0)], 200)
    txc.end_txn(TID, p.producer_id, 0, False, 210)
    [aborted] = events(txc.markers_written(TID, 220))
    assert (aborted["event"], aborted["reason"], aborted["group_ids"]) == (
        "transaction_aborted", "client", [])


def abort_reason(result: TxnResult, txc: TransactionCoordinator, now: int) -> object:
    assert result.completing is not None
    [event] = txc.markers_written(result.completing, now).events
    assert event["event"] == "transaction_aborted"
    return event["reason"]


def test_abort_reasons() -> None:
    txc = new_coordinator()
    p = init(txc)
    txc.add_partitions(TID, p.producer_id, 0, [("t", 0)], 0)
    # a new producer instance (no producer id) takes over the transactional id
    assert abort_reason(init(txc, now=10), txc, 11) == "fenced"
    again = init(txc, now=12)
    txc.add_partitions(TID, again.producer_id, again.producer_epoch, [("t", 0)], 13)
    # the same producer re-initialises itself with its id and epoch (KIP-360)
    assert abort_reason(init(txc, now=14, pid=again.producer_id, epoch=again.producer_epoch),
                        txc, 15) == "reinitialised"
    again = init(txc, now=16)
    txc.add_partitions(TID, again.producer_id, again.producer_epoch, [("t", 0)], 17)
    [timed_out] = txc.expire(17 + 60_000)
    assert abort_reason(timed_out, txc, 60_020) == "timeout"


def test_a_completion_resumed_after_a_restart_says_so() -> None:
    txc = new_coordinator()
    log: list[tuple[bytes, bytes | None]] = []
    p = init(txc)
    log += p.records
    log += txc.add_partitions(TID, p.producer_id, 0, [("t", 0)], 100).records
    log += txc.end_txn(TID, p.producer_id, 0, False, 200).records
    restarted = new_coordinator()
    for key, value in log:
        restarted.replay(key, value)
    assert restarted.open_count() == 1
    [resumed] = restarted.resume_after_load()
    [event] = restarted.markers_written(resumed.completing or "", 300).events
    assert (event["event"], event["reason"], event["duration_ms"]) == (
        "transaction_aborted", "coordinator_restart", 200)


def test_a_refused_request_carries_no_event() -> None:
    txc = new_coordinator()
    p = init(txc)
    refused = txc.add_partitions(TID, p.producer_id, 5, [("t", 0)], 1)
    assert refused.error == ErrorCode.producer_fenced and refused.events == []
    assert txc.add_offsets(TID, p.producer_id, 5, 1, 2, group_id="g").events == []
    assert txc.transactions[TID].groups == set()
