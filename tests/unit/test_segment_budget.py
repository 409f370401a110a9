"""Topic segment files under a `DescriptorBudget`: opened on first use, the least recently used
closed (sealed ones first, then idle active ones once fsynced), data intact, and the open
descriptors of the process never more than the budget (counted in /proc/self/fd)."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from storage.descriptors import DescriptorBudget
from storage.fs import FaultyFileSystem, FileSystem
from storage.log import LogConfig, LogOfflineError, PartitionLog
from storage.topics import TopicStore
from tests.unit._batches import decode, make_batch

NOW = 1_700_000_000_000

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def open_store(path: Path, budget: DescriptorBudget, fs: FileSystem | None = None,
               **overrides: object) -> TopicStore:
    config = LogConfig(**{"index_interval_bytes": 128, **overrides})  # type: ignore[arg-type]
    return TopicStore.open(path, config, fs or FaultyFileSystem(), budget=budget)


def settle(store: TopicStore) -> None:
    """Finish pending seals (they run on the seal thread and write index files)."""
    for topic in store.topics():
        for log in topic.partitions:
            log.complete_seals()


def values_of(log: PartitionLog) -> list[bytes | None]:
    out: list[bytes | None] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        records = decode(log.read(offset, 1 << 20))
        assert records, f"no progress at {offset}"
        out.extend(value for _, value in records)
        offset = records[-1][0] + 1
    return out


def test_a_store_opens_no_segment_file_until_used(tmp_path: Path) -> None:
    budget = DescriptorBudget(8)
    store = open_store(tmp_path, budget)
    store.create("t", 20)
    store.close()
    baseline = open_fds()
    budget = DescriptorBudget(8)
    store = open_store(tmp_path, budget)
    # Recovery scans each active segment, and keeps at most the budget of them open.
    assert budget.open_count <= 8
    assert open_fds() - baseline <= 8
    store.close()
    assert open_fds() == baseline


def test_many_partitions_interleaved_stay_within_the_budget_and_intact(tmp_path: Path) -> None:
    limit = 6
    budget = DescriptorBudget(limit)
    store = open_store(tmp_path, budget, segment_bytes=600)
    topic = store.create("t", 40)
    settle(store)
    baseline = open_fds() - budget.open_count
    rng = random.Random(7)
    expected: list[list[bytes]] = [[] for _ in range(40)]
    for step in range(1500):
        p = rng.randrange(40)
        log = topic.partitions[p]
        if rng.random() < 0.6:
            value = f"{p}-{step}".encode() * rng.randint(1, 8)
            log.append(make_batch([value]), NOW)
            expected[p].append(value)
        elif expected[p]:
            i = rng.randrange(len(expected[p]))
            assert decode(log.read(log.log_start_offset + i, 1))[0][1] == expected[p][i]
        if step % 50 == 0:
            settle(store)
            budget.enforce()
            assert budget.open_count <= limit
            assert open_fds() - baseline == budget.open_count
        if step % 200 == 0:
            store.flush_all()
    settle(store)
    budget.enforce()
    assert open_fds() - baseline <= limit
    assert budget.closed_total > 100
    for p, log in enumerate(topic.partitions):
        assert values_of(log) == expected[p]
    store.close()
    reopened = open_store(tmp_path, DescriptorBudget(limit))
    for p, log in enumerate(reopened.get("t").partitions):  # type: ignore[union-attr]
        assert values_of(log) == expected[p]
    reopened.close()


def test_sealed_segments_are_closed_before_active_ones(tmp_path: Path) -> None:
    budget = DescriptorBudget(4)
    store = open_store(tmp_path, budget, segment_bytes=200)
    topic = store.create("t", 2)
    a, b = topic.partitions
    for i in range(6):
        a.append(make_batch([b"x" * 100 + bytes([i])]), NOW)  # rolls: several sealed segments
    settle(store)
    b.append(make_batch([b"b"]), NOW)
    for offset in range(a.log_end_offset):
        a.read(offset, 1)  # opens sealed segments one after another
    # Both active segments stayed open; the sealed ones took turns in the two slots left.
    assert set(budget.active) == {a._segments[-1], b._segments[-1]}
    assert len(budget.sealed) == 2
    store.close()


def test_a_dirty_active_segment_is_fsynced_before_it_is_closed(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    budget = DescriptorBudget(4)
    store = open_store(tmp_path, budget, fs)
    topic = store.create("t", 6)
    for log in topic.partitions:
        log.append(make_batch([b"v"]), NOW)
    # Six dirty active segments, four slots: the two least recently used were fsynced, closed.
    assert budget.open_count == 4
    assert fs.ops.get("fsync", 0) >= 2
    closed = [log for log in topic.partitions if not log._segments[-1].is_open]
    assert len(closed) == 2
    assert all(not log._segments[-1].dirty for log in closed)
    for log in closed:  # reopened by path on the next append, appends carry on
        assert log.append(make_batch([b"w"]), NOW).base_offset == 1
        assert [v for _, v in decode(log.read(0, 1000))] == [b"v", b"w"]
    store.close()


def test_an_fsync_failing_on_close_takes_the_partition_offline_and_loses_nothing(
        tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    budget = DescriptorBudget(4)
    store = open_store(tmp_path, budget, fs)
    topic = store.create("t", 5)
    first = topic.partitions[0]
    acknowledged = [b"a", b"b", b"c"]
    for value in acknowledged:
        first.append(make_batch([value]), NOW)
    fs.fail_always("fsync", path="t-0")
    for log in topic.partitions[1:]:
        log.append(make_batch([b"other"]), NOW)  # the fifth open closes t-0, the LRU
    assert isinstance(first.offline, LogOfflineError)
    assert not first._segments[-1].is_open
    with pytest.raises(LogOfflineError):
        first.append(make_batch([b"d"]), NOW)
    with pytest.raises(LogOfflineError):
        first.read(0, 1000)
    store.flush_all()  # the others flush; the offline one is never fsynced again
    store.close()
    # A restart (the page cache outlives the process) recovers every acknowledged record.
    reopened = open_store(tmp_path, DescriptorBudget(4))
    log = reopened.get("t").partitions[0]  # type: ignore[union-attr]
    assert values_of(log) == acknowledged
    reopened.close()


def test_an_active_segment_held_by_a_flush_is_not_closed(tmp_path: Path) -> None:
    budget = DescriptorBudget(4)
    store = open_store(tmp_path, budget)
    topic = store.create("t", 4)
    for log in topic.partitions:
        log.append(make_batch([b"v"]), NOW)
    held = topic.partitions[0]
    # A flush on a worker thread holds the log's lock while it fsyncs.
    with held._lock:
        extra = store.create("u", 1).partitions[0]
        extra.append(make_batch([b"w"]), NOW)
        assert held._segments[-1].is_open  # skipped, the next least recently used went
        assert budget.open_count == 4
    store.close()


def test_a_rolled_segment_waiting_for_its_seal_is_not_closed(tmp_path: Path) -> None:
    budget = DescriptorBudget(4)
    store = open_store(tmp_path, budget, segment_bytes=200)
    topic = store.create("t", 4)
    log = topic.partitions[0]
    log.append(make_batch([b"x" * 150]), NOW)
    with log._seal_lock:  # the seal thread is busy: the rolled segment stays unsealed
        log.append(make_batch([b"y" * 150]), NOW)
        rolled = log._segments[-2]
        assert rolled.is_active and rolled.is_open
        for other in topic.partitions[1:]:
            other.append(make_batch([b"o"]), NOW)
        assert rolled.is_open
    log.complete_seals()
    budget.enforce()
    assert budget.open_count <= 4
    store.close()


def test_an_active_file_replaced_while_closed_takes_the_log_offline(tmp_path: Path) -> None:
    budget = DescriptorBudget(4)
    store = open_store(tmp_path, budget)
    topic = store.create("t", 5)
    for log in topic.partitions:
        log.append(make_batch([b"v"]), NOW)
    victim = next(log for log in topic.partitions if not log._segments[-1].is_open)
    path = victim._segments[-1].path
    path.unlink()
    with pytest.raises(LogOfflineError):
        victim.append(make_batch([b"w"]), NOW)
    assert victim.offline is not None
    assert not path.exists()  # not recreated: nothing appended where no restart looks
    store.close()


def test_partitions_built_on_another_thread_leave_no_descriptor_open(tmp_path: Path) -> None:
    budget = DescriptorBudget(4)
    store = open_store(tmp_path, budget)
    baseline = open_fds()
    built: list[object] = []
    worker = threading.Thread(target=lambda: built.append(store.create("t", 30)))
    worker.start()
    worker.join()
    assert built and open_fds() == baseline and budget.open_count == 0
    topic = store.get("t")
    assert topic is not None
    for log in topic.partitions:
        log.append(make_batch([b"v"]), NOW)
    assert budget.open_count == 4
    store.close()


def test_the_group_log_without_a_budget_keeps_its_files_open(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "__consumer_offsets-0", LogConfig(), FaultyFileSystem())
    log.append(make_batch([b"v"]), NOW)
    assert log._segments[-1].is_open
    log.flush()
    assert log._segments[-1].is_open
    log.close()


def test_segments_sealed_elsewhere_are_not_queued_for_ever_under_a_roomy_budget(
        tmp_path: Path) -> None:
    budget = DescriptorBudget(1000)
    store = open_store(tmp_path, budget, segment_bytes=200)
    log = store.create("t", 1).partitions[0]
    for i in range(200):
        log.append(make_batch([b"x" * 150 + bytes([i % 256])]), NOW)  # a roll each
    log.complete_seals()
    log.append(make_batch([b"y" * 150]), NOW)  # the next open (a roll's) takes the queue
    assert len(budget._sealed_elsewhere) <= 1
    assert len(budget.sealed) >= 190 and len(budget.active) <= 2
    store.close()
    assert budget.open_count == 0
