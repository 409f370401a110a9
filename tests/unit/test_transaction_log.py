"""The transaction log on disk: what the coordinator wrote is what a restart loads."""

from __future__ import annotations

import itertools
from pathlib import Path

from coordinator.dataplane.transaction_log import TransactionLog
from coordinator.txn.coordinator import TransactionCoordinator, TxnConfig
from coordinator.txn.records import TxnState
from storage.fs import FaultyFileSystem
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


def test_a_completion_is_written_without_its_own_fsync_and_a_later_fsync_covers_it(
        tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = TransactionLog.open(tmp_path, LogConfig(), fs)
    txc = new_coordinator()
    a = txc.init_producer_id("a", 60_000, -1, -1, 0)
    log.append(a.records, 0)
    log.append(txc.add_partitions("a", a.producer_id, 0, [("t", 0)], 1).records, 1)
    log.append(txc.end_txn("a", a.producer_id, 0, True, 2).records, 2)
    fsyncs = fs.ops["fsync"]
    log.append(txc.markers_written("a", 3).records, 3, sync=False)
    assert fs.ops["fsync"] == fsyncs
    # Until a later fsync, a crash may lose it: the transaction then loads as prepared and
    # its markers are written again.
    prepared = new_coordinator()
    for key, value in _records_before_last(tmp_path):
        prepared.replay(key, value)
    assert prepared.transactions["a"].state == TxnState.PREPARE_COMMIT
    [resume] = prepared.resume_after_load()
    assert [(m.topic, m.partition, m.committed) for m in resume.markers] == [("t", 0, True)]
    log.append(txc.add_partitions("a", a.producer_id, 0, [("t", 0)], 4).records, 4)
    assert fs.ops["fsync"] == fsyncs + 1
    log.close()
    restarted = new_coordinator()
    TransactionLog.open(tmp_path, LogConfig()).load(restarted)
    assert restarted.transactions["a"].state == TxnState.ONGOING


def _records_before_last(data_dir: Path) -> list[tuple[bytes, bytes | None]]:
    """The log's records without its last batch: what a crash before its fsync may leave."""
    log = TransactionLog.open(data_dir, LogConfig())
    loaded: list[tuple[bytes, bytes | None]] = []

    class Collect:
        def replay(self, key: bytes, value: bytes | None) -> None:
            loaded.append((key, value))

    log.load(Collect())
    log.close()
    return loaded[:-1]
