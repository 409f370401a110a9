"""The transaction log on disk: what the coordinator wrote is what a restart loads."""

from __future__ import annotations

import itertools
from pathlib import Path

from coordinator.dataplane.transaction_log import TransactionLog
from coordinator.txn.coordinator import TransactionCoordinator, TxnConfig
from coordinator.txn.records import TxnState
from storage.log import LogConfig


def new_coordinator() -> TransactionCoordinator:
    ids = itertools.count(500)
    return TransactionCoordinator(TxnConfig(transactional_id_expiration_ms=10_000),
                                  lambda: next(ids))


def test_a_restart_loads_every_transaction_as_it_was_last_written(tmp_path: Path) -> None:
    log = TransactionLog.open(tmp_path, LogConfig())
    txc = new_coordinator()
    a = txc.init_producer_id("a", 60_000, -1, -1, 0)
    log.append(a.records, 0)
    log.append(txc.add_partitions("a", a.producer_id, 0, [("t", 0), ("t", 3)], 5).records, 5)
    b = txc.init_producer_id("b", 60_000, -1, -1, 6)
    log.append(b.records, 6)
    log.append(txc.add_partitions("b", b.producer_id, 0, [("u", 1)], 7).records, 7)
    log.append(txc.end_txn("b", b.producer_id, 0, True, 8).records, 8)
    gone = txc.init_producer_id("gone", 60_000, -1, -1, 9)
    log.append(gone.records, 9)
    [tombstone] = [r for r in txc.expire(10_009) if not r.markers]
    log.append(tombstone.records, 10_009)
    log.close()

    reopened = TransactionLog.open(tmp_path, LogConfig())
    restarted = new_coordinator()
    assert reopened.load(restarted) == 7
    assert set(restarted.transactions) == {"a", "b"}
    assert restarted.transactions["a"].state == TxnState.ONGOING
    assert restarted.transactions["a"].partitions == {("t", 0), ("t", 3)}
    assert restarted.transactions["b"].state == TxnState.PREPARE_COMMIT
    [resume] = restarted.resume_after_load()
    assert [(m.topic, m.partition, m.committed) for m in resume.markers] == [("u", 1, True)]
    reopened.close()


def test_an_empty_log_loads_nothing(tmp_path: Path) -> None:
    log = TransactionLog.open(tmp_path, LogConfig())
    assert log.load(new_coordinator()) == 0
    log.append([], 0)
    assert log.log_end_offset == 0
    log.close()
