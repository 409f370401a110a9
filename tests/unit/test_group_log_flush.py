"""Group commit in the group log: the appends of one loop turn share one fsync per partition,
none is completed before it, and a failed fsync fails every one of them and stops the log.
Both the one-partition path and the several-partitions path."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator.group.offsets import OffsetStore
from coordinator.grouplog.log import GroupLog
from coordinator.grouplog.records import OffsetCommitRecord
from storage.fs import FaultyFileSystem
from storage.log import LogConfig

PARTITIONS = 8


def commit_records(group_id: str) -> list[OffsetCommitRecord]:
    _, records = OffsetStore().commit(group_id, [("t", [(0, 7, -1, None), (1, 8, -1, None)])],
                                      1, topic_exists=lambda t, p: True, pending=False)
    return records


def groups_on_distinct_partitions(log: GroupLog, count: int) -> list[str]:
    chosen: dict[int, str] = {}
    i = 0
    while len(chosen) < count:
        chosen.setdefault(log.partition_of(f"g{i}"), f"g{i}")
        i += 1
    return list(chosen.values())


def one_group(log: GroupLog) -> tuple[str, int]:
    """A group and the partition it lives in."""
    [group] = groups_on_distinct_partitions(log, 1)
    return group, log.partition_of(group)


def open_log(tmp_path: Path, fs: FaultyFileSystem) -> GroupLog:
    return GroupLog.open(tmp_path, PARTITIONS, LogConfig(), "always", fs)


@pytest.mark.parametrize("partitions", [1, 3])
async def test_a_turns_appends_share_one_fsync_per_partition(tmp_path: Path,
                                                             partitions: int) -> None:
    log = open_log(tmp_path, FaultyFileSystem())
    groups = groups_on_distinct_partitions(log, partitions)
    futures = [log.append(commit_records(g), 1, group_id=g) for g in groups for _ in range(4)]
    assert not any(f.done() for f in futures)  # nothing answered before the fsync
    await asyncio.gather(*futures)
    assert log.fsyncs == 1
    assert log.failure is None
    log.close()


@pytest.mark.parametrize("partitions", [1, 3])
async def test_a_failed_fsync_fails_every_commit_of_the_batch(tmp_path: Path,
                                                              partitions: int) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    stopped: list[BaseException] = []
    log.on_failure = stopped.append
    groups = groups_on_distinct_partitions(log, partitions)
    futures = [log.append(commit_records(g), 1, group_id=g) for g in groups for _ in range(3)]
    fs.fail_next_fsync()
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results), results
    assert len(stopped) == 1 and log.failure is not None
    later = log.append(commit_records(groups[0]), 1, group_id=groups[0])
    with pytest.raises(OSError):
        await later
    log.close()


async def test_a_marker_is_not_waited_for_and_is_durable_before_the_transaction_log_moves_on(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, FaultyFileSystem())
    group, partition = one_group(log)
    await log.append(commit_records(group), 1, group_id=group)
    assert log.fsyncs == 1
    log.append_marker(partition, 7, 0, True, 2)
    # Nothing waits for the marker: a read behind the partition's writes is answered at once.
    assert log.acknowledged(partition) is None
    assert log.fsyncs == 1
    log.flush_transactional()  # what the transaction log calls before its own fsync
    assert log.fsyncs == 2
    log.flush_transactional()  # nothing left to make durable
    assert log.fsyncs == 2
    # A marker the next group commit covers needs no fsync of its own either.
    log.append_marker(partition, 7, 0, True, 3)
    await log.append(commit_records(group), 4, group_id=group)
    fsyncs = log.fsyncs
    log.flush_transactional()
    assert log.fsyncs == fsyncs
    log.close()


async def test_a_transactional_batch_is_durable_on_return_and_not_waited_for(
        tmp_path: Path) -> None:
    log = open_log(tmp_path, FaultyFileSystem())
    group, partition = one_group(log)
    log.append_transactional(group, commit_records(group), 7, 0, 1)
    assert log.fsyncs == 1
    assert log.acknowledged(partition) is None
    log.flush_transactional()
    assert log.fsyncs == 1
    log.close()


async def test_a_failed_marker_fsync_stops_the_log(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    stopped: list[BaseException] = []
    log.on_failure = stopped.append
    group, partition = one_group(log)
    await log.append(commit_records(group), 1, group_id=group)
    log.append_marker(partition, 7, 0, True, 2)
    fs.fail_next_fsync()
    with pytest.raises(OSError):
        log.flush_transactional()
    assert len(stopped) == 1 and log.failure is not None
    # The marker that was never durable is cut: the restart writes it again from the outcome.
    assert log.logs[partition].log_end_offset == len(commit_records(group))
    with pytest.raises(OSError):
        log.append_marker(partition, 7, 0, True, 3)
    log.close()
