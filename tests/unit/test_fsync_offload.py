"""The group log's fsync on the C thread (`storage._fsync_worker` through
`storage.fsync_offload`): a job is reported only after its fsync, with the fsync's errno and
whether the segment's path still names the file; the descriptor it was given is closed; and
through the group log, the real file system's commits share one fsync per partition on those
threads (a partition they cannot take is fsynced beside them), none completed before it, and a
segment file deleted behind the log's back stops the log. The threads carry a name and block
every signal, so that a stop reaches the interpreter."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from coordinator.grouplog.log import GroupLog
from storage import fsync_offload
from storage.fs import REAL_FS, FaultyFileSystem
from storage.fsync_offload import FsyncOffload, OffloadedFsync
from storage.log import LogConfig, LogOfflineError, PartitionLog
from tests.unit.test_group_log_flush import (
    PARTITIONS,
    commit_records,
    groups_on_distinct_partitions,
    one_group,
)

pytestmark = pytest.mark.skipif(not fsync_offload.AVAILABLE,
                                reason="storage._fsync_worker was not built (no C compiler)")


def job_for(path: Path, fd: int) -> OffloadedFsync:
    opened = os.fstat(fd)
    return OffloadedFsync(os.dup(fd), os.fsencode(path), opened.st_dev, opened.st_ino)


async def run_jobs(jobs: list[OffloadedFsync]) -> list[tuple[int, bool]]:
    loop = asyncio.get_running_loop()
    offload = FsyncOffload(loop)
    outcomes: list[tuple[int, bool]] = []
    done = asyncio.Event()

    def record(error: int, named: bool) -> None:
        outcomes.append((error, named))
        if len(outcomes) == len(jobs):
            done.set()

    try:
        for job in jobs:
            offload.submit(job, record)
        await asyncio.wait_for(done.wait(), 10)
    finally:
        offload.close()
    return outcomes


async def test_each_job_is_reported_in_order_with_its_errno_and_path_check(
        tmp_path: Path) -> None:
    segment = tmp_path / "00000000000000000000.log"
    fd = os.open(segment, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    read_end, write_end = os.pipe()
    try:
        os.write(fd, b"records")
        kept = job_for(segment, fd)
        bad = OffloadedFsync(os.dup(read_end), b"", 0, 0)  # a pipe cannot be fsynced
        replaced = job_for(segment, fd)
        outcomes = await run_jobs([kept])
        segment.rename(tmp_path / "moved.log")
        segment.write_bytes(b"another file under the segment's name")
        outcomes += await run_jobs([bad, replaced])
        assert outcomes == [(0, True), (errno.EINVAL, True), (0, False)]
        for job in (kept, bad, replaced):  # each descriptor was the worker's to close
            with pytest.raises(OSError) as closed:
                os.fstat(job.fd)
            assert closed.value.errno == errno.EBADF
    finally:
        for opened in (fd, read_end, write_end):
            os.close(opened)


async def test_a_path_that_names_nothing_is_reported_as_not_named(tmp_path: Path) -> None:
    segment = tmp_path / "00000000000000000000.log"
    fd = os.open(segment, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        job = job_for(segment, fd)
        segment.unlink()
        assert await run_jobs([job]) == [(0, False)]
    finally:
        os.close(fd)


def test_a_failed_offloaded_fsync_takes_the_partition_log_offline(tmp_path: Path) -> None:
    partition_log = PartitionLog.open(tmp_path / "p-0", LogConfig(), REAL_FS)
    partition_log.append_records([(b"k", b"v")], 1)
    job = partition_log.offloaded_flush()
    assert job is not None
    os.close(job.fd)
    with pytest.raises(LogOfflineError) as failed:
        partition_log.offloaded_flush_done(job, errno.EIO, True)
    assert failed.value.what == "fsync failed"
    assert partition_log.offline is failed.value
    assert partition_log.offloaded_flush() is None  # an offline log is flushed by `flush`
    with pytest.raises(LogOfflineError):
        partition_log.flush()
    partition_log.close()


async def test_the_real_file_systems_commits_share_one_fsync_on_the_c_thread(
        tmp_path: Path) -> None:
    log = GroupLog.open(tmp_path, PARTITIONS, LogConfig(), "always", REAL_FS)
    group, _ = one_group(log)
    futures = [log.append(commit_records(group), 1, group_id=group) for _ in range(4)]
    assert not any(f.done() for f in futures)  # nothing answered before the fsync
    await asyncio.gather(*futures)
    assert log._offload is not None  # the C thread ran it
    assert log.fsyncs == 1 and log.failure is None
    await log.append(commit_records(group), 2, group_id=group)
    assert log.fsyncs == 2
    log.close()


async def test_a_segment_file_deleted_behind_the_log_stops_it(tmp_path: Path) -> None:
    log = GroupLog.open(tmp_path, PARTITIONS, LogConfig(), "always", REAL_FS)
    stopped: list[BaseException] = []
    log.on_failure = stopped.append
    group, partition = one_group(log)
    await log.append(commit_records(group), 1, group_id=group)
    for segment in (tmp_path / f"__consumer_offsets-{partition}").glob("*.log"):
        segment.unlink()
    futures = [log.append(commit_records(group), 2, group_id=group) for _ in range(3)]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results), results
    assert len(stopped) == 1 and isinstance(log.failure, LogOfflineError)
    assert log.failure.what == "segment file missing"
    log.close()


async def test_several_partitions_are_fsynced_at_once_on_the_c_threads(tmp_path: Path) -> None:
    log = GroupLog.open(tmp_path, PARTITIONS, LogConfig(), "always", REAL_FS)
    groups = groups_on_distinct_partitions(log, 3)
    futures = [log.append(commit_records(g), 1, group_id=g) for g in groups for _ in range(4)]
    assert not any(f.done() for f in futures)
    await asyncio.gather(*futures)
    assert log._offload is not None
    assert log.fsyncs == 1 and log.failure is None
    log.close()


async def test_a_partition_the_c_threads_cannot_take_is_fsynced_beside_them(
        tmp_path: Path) -> None:
    """A partition log on another file system (here a test's faulty one, whose fsyncs the C
    threads never run) is fsynced on the executor in the same group commit; its failure
    fails every commit of the batch and stops the log."""
    log = GroupLog.open(tmp_path, PARTITIONS, LogConfig(), "always", REAL_FS)
    stopped: list[BaseException] = []
    log.on_failure = stopped.append
    real, faulty = groups_on_distinct_partitions(log, 2)
    faulty_partition = log.partition_of(faulty)
    log.logs[faulty_partition].close()
    fs = FaultyFileSystem()
    log.logs[faulty_partition] = PartitionLog.open(
        tmp_path / f"__consumer_offsets-{faulty_partition}", LogConfig(), fs)
    both = [log.append(commit_records(g), 1, group_id=g) for g in (real, faulty)]
    await asyncio.gather(*both)
    assert log.fsyncs == 1 and log.failure is None
    fs.fail_next_fsync()
    failing = [log.append(commit_records(g), 2, group_id=g) for g in (real, faulty, real)]
    results = await asyncio.gather(*failing, return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results), results
    assert len(stopped) == 1 and log.failure is not None
    log.close()


async def test_the_c_threads_are_named_and_leave_every_signal_to_the_interpreter() -> None:
    offload = FsyncOffload(asyncio.get_running_loop(), 2)
    try:
        blocked = []
        for task in Path("/proc/self/task").iterdir():
            status = (task / "status").read_text()
            if "Name:\tgroup-log-fsync" in status:
                line = next(line for line in status.splitlines() if line.startswith("SigBlk:"))
                blocked.append(int(line.split()[1], 16))
        assert len(blocked) == 2
        for mask in blocked:  # SIGINT and SIGTERM among them, so a stop reaches the loop
            assert mask & (1 << (2 - 1)) and mask & (1 << (15 - 1))
    finally:
        offload.close()
