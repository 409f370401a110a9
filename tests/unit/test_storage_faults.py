"""Disk failures injected through `FaultyFileSystem`: an append that fails leaves no trace."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from storage.fs import FaultyFileSystem
from storage.log import LogConfig, PartitionLog
from tests.unit._batches import decode, make_batch

NOW = 1_700_000_000_000


def open_log(path: Path, fs: FaultyFileSystem, **overrides: object) -> PartitionLog:
    config = LogConfig(**{"index_interval_bytes": 128, **overrides})  # type: ignore[arg-type]
    return PartitionLog.open(path / "t-0", config, fs)


def active_file(path: Path) -> Path:
    return sorted((path / "t-0").glob("*.log"))[-1]


def test_a_failed_write_raises_and_changes_nothing(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    log.append(make_batch([b"a"]), NOW)
    size = active_file(tmp_path).stat().st_size
    fs.fail_next_write()
    with pytest.raises(OSError) as info:
        log.append(make_batch([b"b"]), NOW)
    assert info.value.errno == errno.ENOSPC
    assert log.log_end_offset == 1
    assert active_file(tmp_path).stat().st_size == size
    assert log.append(make_batch([b"c"]), NOW).base_offset == 1
    assert decode(log.read(0, 10_000)) == [(0, b"a"), (1, b"c")]


def test_a_torn_write_is_cut_back_and_never_served(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    log.append(make_batch([b"a"]), NOW)
    size = active_file(tmp_path).stat().st_size
    fs.fail_next_write(partial=20)
    with pytest.raises(OSError):
        log.append(make_batch([b"b" * 100]), NOW)
    assert active_file(tmp_path).stat().st_size == size
    assert decode(log.read(0, 10_000)) == [(0, b"a")]
    log.close()
    reopened = open_log(tmp_path, FaultyFileSystem())
    assert reopened.log_end_offset == 1


def test_a_torn_write_whose_rollback_fails_is_cleaned_before_the_next_append(
    tmp_path: Path,
) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    log.append(make_batch([b"a"]), NOW)
    size = active_file(tmp_path).stat().st_size
    fs.fail_next_write(partial=20)
    fs.fail_next_truncate()
    with pytest.raises(OSError):
        log.append(make_batch([b"b" * 100]), NOW)
    assert active_file(tmp_path).stat().st_size == size + 20  # garbage on disk ...
    assert decode(log.read(0, 10_000)) == [(0, b"a")]  # ... but not served
    assert log.append(make_batch([b"c"]), NOW).base_offset == 1
    assert decode(log.read(0, 10_000)) == [(0, b"a"), (1, b"c")]
    log.close()
    reopened = open_log(tmp_path, FaultyFileSystem())
    assert decode(reopened.read(0, 10_000)) == [(0, b"a"), (1, b"c")]


def test_a_failed_fsync_on_append_rolls_the_append_back(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs, fsync_each_append=True)
    log.append(make_batch([b"a"]), NOW)
    size = active_file(tmp_path).stat().st_size
    fs.fail_next_fsync()
    with pytest.raises(OSError):
        log.append(make_batch([b"b"]), NOW)
    assert log.log_end_offset == 1
    assert active_file(tmp_path).stat().st_size == size
    assert fs.ops["fsync"] >= 2


def test_no_fsync_per_append_unless_configured(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    before = fs.ops.get("fsync", 0)
    for _ in range(10):
        log.append(make_batch([b"a"]), NOW)
    assert fs.ops.get("fsync", 0) == before


def test_a_failed_flush_raises_and_a_later_flush_works(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    log.append(make_batch([b"a"]), NOW)
    fs.fail_next_fsync()
    with pytest.raises(OSError):
        log.flush()
    log.flush()
    assert log.log_end_offset == 1


def test_a_seal_that_cannot_fsync_is_retried_and_reported_by_the_next_flush(
    tmp_path: Path,
) -> None:
    """The roll switches to the new segment at once; the old one's seal (fsync, index files)
    runs on a worker thread, and a flush does not succeed before that seal has."""
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs, segment_bytes=200)
    log.append(make_batch([b"a" * 100]), NOW)
    fs.fail_next_fsync()
    assert log.append(make_batch([b"b" * 100]), NOW).base_offset == 1
    assert log.segment_base_offsets() == [0, 1]
    flushed = False
    for _ in range(3):  # the failed seal shows either in the worker or in this flush
        try:
            log.flush()
            flushed = True
            break
        except OSError:
            continue
    assert flushed and fs.pending() == 0
    assert (tmp_path / "t-0" / f"{0:020d}.index").exists()
    assert [v for _, v in decode(log.read(0, 1 << 20))] == [b"a" * 100]
    assert [v for _, v in decode(log.read(1, 1 << 20))] == [b"b" * 100]


def test_a_roll_that_cannot_create_the_segment_keeps_appending_to_the_old_one(
    tmp_path: Path,
) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs, segment_bytes=200)
    log.append(make_batch([b"a" * 100]), NOW)
    fs.fail_next_open(suffix=".log")  # the new segment; the old one's indexes are written
    with pytest.raises(OSError):
        log.append(make_batch([b"b" * 100]), NOW)
    assert fs.pending() == 0
    assert log.segment_base_offsets() == [0]
    log.append(make_batch([b"c" * 100]), NOW)
    assert log.segment_base_offsets() == [0, 1]
    log.close()
    reopened = open_log(tmp_path, FaultyFileSystem(), segment_bytes=200)
    assert [v for _, v in decode(reopened.read(0, 1 << 20))] == [b"a" * 100]
    assert [v for _, v in decode(reopened.read(1, 1 << 20))] == [b"c" * 100]


def test_a_failed_fsync_on_close_still_closes(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    log.append(make_batch([b"a"]), NOW)
    fs.fail_next_fsync()
    with pytest.raises(OSError):
        log.close()
    assert log.closed
    assert open_log(tmp_path, FaultyFileSystem()).log_end_offset == 1


def test_flush_on_a_worker_thread_while_appends_roll(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs, segment_bytes=300)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flusher() -> None:
        while not stop.is_set():
            try:
                log.flush()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    worker = threading.Thread(target=flusher)
    worker.start()
    try:
        for i in range(300):
            log.append(make_batch([bytes([i % 256]) * 50]), NOW)
    finally:
        stop.set()
        worker.join()
    assert errors == []
    assert log.log_end_offset == 300
    assert len(log.segment_base_offsets()) > 50
