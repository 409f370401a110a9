"""Disk failures injected through `FaultyFileSystem`: an append that fails leaves no trace, and
a failed fsync (or a rollback that cannot be verified) takes the log offline for good."""

from __future__ import annotations

import errno
import json
import threading
from pathlib import Path

import pytest

from storage.fs import FAULT_PLAN_ENV, AppendHandle, FaultyFileSystem, filesystem_from_env
from storage.log import RECOVERY_POINT, LogConfig, LogOfflineError, PartitionLog
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


def test_a_torn_write_whose_rollback_fails_takes_the_log_offline(tmp_path: Path) -> None:
    """The tail of the file is unknown: nothing more is appended, read or fsynced, and the
    restart cuts the torn bytes (nothing valid follows them)."""
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    log.append(make_batch([b"a"]), NOW)
    log.flush()
    size = active_file(tmp_path).stat().st_size
    fs.fail_next_write(partial=20)
    fs.fail_next_truncate()
    with pytest.raises(LogOfflineError) as failed:
        log.append(make_batch([b"b" * 100]), NOW)
    assert failed.value.path == active_file(tmp_path)
    assert active_file(tmp_path).stat().st_size == size + 20  # garbage on disk ...
    for action in (lambda: log.append(make_batch([b"c"]), NOW), lambda: log.read(0, 10_000),
                   log.flush):
        with pytest.raises(LogOfflineError):
            action()
    fsyncs = fs.ops.get("fsync", 0)
    log.close()  # ... and no fsync is tried again
    assert fs.ops.get("fsync", 0) == fsyncs
    reopened = open_log(tmp_path, FaultyFileSystem())
    assert decode(reopened.read(0, 10_000)) == [(0, b"a")]


def test_a_rollback_that_leaves_the_wrong_size_takes_the_log_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = open_log(tmp_path, fs := FaultyFileSystem())
    log.append(make_batch([b"a"]), NOW)
    fs.fail_next_write(partial=20)
    real = AppendHandle.truncate
    monkeypatch.setattr(AppendHandle, "truncate",
                        lambda handle, size: real(handle, size + 1))  # a lying truncate
    with pytest.raises(LogOfflineError, match="left"):
        log.append(make_batch([b"b" * 100]), NOW)
    assert log.offline is not None


def test_a_failed_fsync_on_append_cuts_the_append_and_takes_the_log_offline(
    tmp_path: Path,
) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs, fsync_each_append=True)
    log.append(make_batch([b"a"]), NOW)
    size = active_file(tmp_path).stat().st_size
    fs.fail_next_fsync()
    with pytest.raises(LogOfflineError, match="fsync failed"):
        log.append(make_batch([b"b"]), NOW)
    assert log.log_end_offset == 1
    assert active_file(tmp_path).stat().st_size == size
    with pytest.raises(LogOfflineError):
        log.append(make_batch([b"c"]), NOW)


def test_no_fsync_per_append_unless_configured(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    before = fs.ops.get("fsync", 0)
    for _ in range(10):
        log.append(make_batch([b"a"]), NOW)
    assert fs.ops.get("fsync", 0) == before


def test_a_failed_flush_is_never_retried(tmp_path: Path) -> None:
    """After a failed fsync the kernel may have dropped the pages, and the next fsync would
    report success: the log goes offline instead (Kafka: log directory offline)."""
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    log.append(make_batch([b"a"]), NOW)
    fs.fail_next_fsync()
    with pytest.raises(LogOfflineError) as failed:
        log.flush()
    assert failed.value.errno == errno.EIO and failed.value.path == active_file(tmp_path)
    fsyncs = fs.ops["fsync"]
    with pytest.raises(LogOfflineError):
        log.flush()
    with pytest.raises(LogOfflineError):
        log.append(make_batch([b"b"]), NOW)
    assert fs.ops["fsync"] == fsyncs


def test_a_seal_that_cannot_fsync_takes_the_log_offline(tmp_path: Path) -> None:
    """The roll switches to the new segment at once; the old one's seal (fsync, index files)
    runs on a worker thread. Its failed fsync is not retried: the next flush reports it."""
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs, segment_bytes=200)
    log.append(make_batch([b"a" * 100]), NOW)
    fs.fail_next_fsync()
    assert log.append(make_batch([b"b" * 100]), NOW).base_offset == 1
    assert log.segment_base_offsets() == [0, 1]
    with pytest.raises(LogOfflineError, match="seal"):
        log.flush()
    assert fs.pending() == 0
    assert not (tmp_path / "t-0" / f"{0:020d}.index").exists()
    log.close()
    reopened = open_log(tmp_path, FaultyFileSystem(), segment_bytes=200)
    assert reopened.log_end_offset == 2


def test_discard_after_cuts_an_offline_log_back(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    log.append(make_batch([b"a"]), NOW)
    log.flush()
    log.append(make_batch([b"b"]), NOW)
    fs.fail_next_fsync()
    with pytest.raises(LogOfflineError):
        log.flush()
    assert log.discard_after(1)
    log.close()
    assert decode(open_log(tmp_path, FaultyFileSystem()).read(0, 10_000)) == [(0, b"a")]


@pytest.mark.parametrize("failing", ["truncate", "fsync", "every fsync and truncate"])
def test_a_tail_that_cannot_be_cut_is_cut_by_the_restart(tmp_path: Path, failing: str) -> None:
    """The disk keeps failing: the offset to cut at goes to a recovery point file, which the
    next open applies (and removes)."""
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    for value in (b"a", b"b"):
        log.append(make_batch([value]), NOW)
    log.flush()
    log.append(make_batch([b"c"]), NOW)
    log.append(make_batch([b"d"]), NOW)
    fs.fail_always("fsync", path="" if failing.startswith("every") else ".log")
    if failing != "fsync":
        fs.fail_always("truncate")
    with pytest.raises(LogOfflineError):
        log.flush()
    assert log.discard_after(2)
    log.close()
    assert (tmp_path / "t-0" / RECOVERY_POINT).exists()
    reopened = open_log(tmp_path, FaultyFileSystem())
    assert decode(reopened.read(0, 10_000)) == [(0, b"a"), (1, b"b")]
    assert not (tmp_path / "t-0" / RECOVERY_POINT).exists()
    reopened.append(make_batch([b"e"]), NOW)
    reopened.close()
    again = open_log(tmp_path, FaultyFileSystem())
    assert [v for _, v in decode(again.read(0, 10_000))] == [b"a", b"b", b"e"]


def test_an_active_segment_deleted_while_open_is_noticed_by_the_next_flush(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path, FaultyFileSystem())
    log.append(make_batch([b"a"]), NOW)
    active_file(tmp_path).unlink()
    with pytest.raises(LogOfflineError, match="missing"):
        log.flush()


def test_a_sealed_segment_deleted_while_open_is_reported_at_the_next_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    log = open_log(tmp_path, FaultyFileSystem(), segment_bytes=200)
    for value in (b"a" * 100, b"b" * 100, b"c" * 100):
        log.append(make_batch([value]), NOW)
    log.flush()
    log.close()
    log = open_log(tmp_path, FaultyFileSystem(), segment_bytes=200)  # sealed files not open
    (tmp_path / "t-0" / f"{1:020d}.log").unlink()
    with pytest.raises(FileNotFoundError):
        log.read(1, 10_000)
    assert "log segment missing" in capsys.readouterr().out
    assert [v for _, v in decode(log.read(2, 10_000))] == [b"c" * 100]


def test_a_fault_plan_from_the_environment() -> None:
    assert filesystem_from_env({}) is None
    fs = filesystem_from_env({FAULT_PLAN_ENV: json.dumps([
        {"op": "fsync", "path": "__consumer_offsets", "times": 1, "after": 1},
        {"op": "truncate", "errno": "ENOSPC"}])})
    assert fs is not None
    fsync, truncate = fs.rules
    assert (fsync.op, fsync.times, fsync.after, fsync.path) == ("fsync", 1, 1,
                                                               "__consumer_offsets")
    assert truncate.exc.errno == errno.ENOSPC and truncate.times == -1
    with pytest.raises(ValueError):
        filesystem_from_env({FAULT_PLAN_ENV: json.dumps([{"op": "chmod"}])})


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


def test_a_roll_whose_directory_fsync_fails_takes_the_log_offline(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs, segment_bytes=200)
    log.append(make_batch([b"a" * 100]), NOW)
    fs.fail_always("fsync_dir", times=1)
    with pytest.raises(LogOfflineError, match="directory fsync"):
        log.append(make_batch([b"b" * 100]), NOW)
    with pytest.raises(LogOfflineError):
        log.append(make_batch([b"c"]), NOW)


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
