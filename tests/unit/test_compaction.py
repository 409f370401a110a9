"""Group-log compaction: latest value per key, tombstone grace period, crash-safe swap."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from coordinator.grouplog.codec import encode_record
from coordinator.grouplog.log import TOPIC, GroupLog
from coordinator.grouplog.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from storage.batch import scan_batches
from storage.compaction import CLEANED_SUFFIX, iter_segment_batches
from storage.fs import REAL_FS, FaultyFileSystem, FileSystem
from storage.log import CorruptLogError, LogConfig
from storage.record_batch import iter_records

NOW = 1_700_000_000_000
DAY = 86_400_000
CONFIG = LogConfig(segment_bytes=2048, retention_ms=-1, retention_bytes=-1,
                   index_interval_bytes=256)


def commit(group: str, partition: int, offset: int) -> OffsetCommitRecord:
    return OffsetCommitRecord(key=OffsetCommitKey(group=group, topic="t", partition=partition),
                              value=OffsetCommitValue(offset=offset, commit_timestamp=NOW))


def tombstone(group: str, partition: int) -> OffsetCommitRecord:
    return OffsetCommitRecord(key=OffsetCommitKey(group=group, topic="t", partition=partition),
                              value=None)


def group_record(group: str, generation: int | None) -> GroupMetadataRecord:
    value = None if generation is None else GroupMetadataValue(
        protocol_type="consumer", generation=generation, protocol="range",
        current_state_timestamp=NOW)
    return GroupMetadataRecord(key=GroupMetadataKey(group=group), value=value)


def open_log(path: Path, fs: FileSystem = REAL_FS, **kw: bool) -> GroupLog:
    return GroupLog.open(path, 1, CONFIG, "always", fs, **kw)


async def write(log: GroupLog, records: Sequence[CoordinatorRecord], now_ms: int = NOW) -> None:
    for record in records:
        await log.append([record], now_ms)


def raw(log: GroupLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every (offset, key, value) in the partition, read through the segment log."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    partition_log = log.logs[0]
    offset = partition_log.log_start_offset
    while offset < partition_log.log_end_offset:
        chunk = partition_log.read(offset, 1 << 20)
        out.extend(iter_records(chunk))
        _, _, base, delta, *_ = scan_batches(chunk)[0][-1]
        offset = base + delta + 1
    return out


def last_per_key(records: list[tuple[int, bytes | None, bytes | None]]
                 ) -> dict[bytes | None, tuple[int, bytes | None]]:
    return {key: (offset, value) for offset, key, value in records}


def segment_files(path: Path) -> list[Path]:
    return sorted((path / f"{TOPIC}-0").glob("*.log"))


def history() -> list[CoordinatorRecord]:
    records: list[CoordinatorRecord] = [group_record("g", 1)]
    for round_ in range(60):
        records.extend(commit("g", p, round_ * 10 + p) for p in range(4))
        if round_ % 20 == 0:
            records.append(group_record("g", round_ + 2))
    return records


async def test_compaction_keeps_the_latest_record_per_key(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    await write(log, history())
    before = raw(log)
    sealed_end = log.logs[0].segment_base_offsets()[-1]
    assert len(segment_files(tmp_path)) > 3
    size_before = sum(p.stat().st_size for p in segment_files(tmp_path))

    stats = log.compact(NOW, DAY)

    after = raw(log)
    assert stats.segments_rewritten == len(segment_files(tmp_path)) - 1
    assert sum(p.stat().st_size for p in segment_files(tmp_path)) < size_before / 3
    # offsets are preserved and every survivor is an original record
    original = {offset: (key, value) for offset, key, value in before}
    assert all(original[offset] == (key, value) for offset, key, value in after)
    # in the sealed segments, only the last record of each key (as of the sealed part) is left
    sealed = [r for r in before if r[0] < sealed_end]
    assert [r for r in after if r[0] < sealed_end] == sorted(
        (offset, key, value) for key, (offset, value) in last_per_key(sealed).items())
    # the active segment is untouched
    assert [r for r in after if r[0] >= sealed_end] == [r for r in before if r[0] >= sealed_end]
    assert last_per_key(after) == last_per_key(before)
    assert log.logs[0].log_end_offset == len(before)
    log.close()


async def test_tombstones_survive_the_grace_period_then_go(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    await write(log, [commit("g", 0, 5), commit("g", 1, 6), tombstone("g", 0)], NOW)
    await write(log, [commit("g", 2, i) for i in range(40)], NOW + 10)  # roll past them
    key = encode_record(tombstone("g", 0))[0]

    log.compact(NOW + DAY - 1, DAY)
    kept = [(offset, value) for offset, k, value in raw(log) if k == key]
    assert kept == [(2, None)]  # the old value is gone, the tombstone is still there

    stats = log.compact(NOW + DAY + 1, DAY)
    assert stats.tombstones_dropped == 1
    assert [r for r in raw(log) if r[1] == key] == []
    log.close()
    reopened = open_log(tmp_path)
    replayed = list(reopened.replay_partition(0))
    assert all(not (isinstance(r, OffsetCommitRecord) and r.key.partition == 0) for r in replayed)
    assert commit("g", 1, 6) in replayed
    reopened.close()


async def test_an_unchanged_log_is_not_rewritten_again(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    await write(log, history())
    assert log.compact(NOW, DAY).segments_rewritten > 0
    files = {p: p.stat().st_mtime_ns for p in segment_files(tmp_path)}
    assert log.compact(NOW + 1, DAY).segments_rewritten == 0
    assert {p: p.stat().st_mtime_ns for p in segment_files(tmp_path)} == files
    log.close()


async def test_replay_reads_across_sparse_and_empty_cleaned_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    # the first segments hold only keys that are overwritten later: they end up empty
    await write(log, [commit("g", 0, i) for i in range(50)])
    await write(log, [commit("g", 1, 1), commit("g", 2, 2)] + [commit("g", 0, 99)] * 20)
    log.compact(NOW, DAY)
    first = segment_files(tmp_path)[0]
    assert first.stat().st_size == 61  # one empty batch keeps the offset range
    log.close()
    reopened = open_log(tmp_path)
    assert sorted((r.key.partition, r.value.offset) for r in reopened.replay_partition(0)
                  if isinstance(r, OffsetCommitRecord) and r.value) == [(0, 99), (1, 1), (2, 2)]
    reopened.close()


async def test_a_crash_between_temp_write_and_rename_loses_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    await write(log, history())
    before = raw(log)
    replay_before = list(log.replay_partition(0))
    partition_log = log.logs[0]
    base, end = partition_log.segment_base_offsets()[:2]
    latest = {key: offset for offset, key, _ in before if key is not None}
    tmp, _ = log.cleaner.write_cleaned(partition_log, base, end, latest, NOW - DAY)
    assert tmp.exists() and tmp.name.endswith(CLEANED_SUFFIX)
    log.close()  # "crash": the rename never happened

    reopened = open_log(tmp_path)
    assert not tmp.exists()
    assert raw(reopened) == before
    assert list(reopened.replay_partition(0)) == replay_before
    reopened.close()


async def test_a_crash_after_the_rename_finds_the_cleaned_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    await write(log, history())
    replay_before = list(log.replay_partition(0))
    partition_log = log.logs[0]
    base, end = partition_log.segment_base_offsets()[:2]
    latest = last_per_key(raw(log))
    tmp, _ = log.cleaner.write_cleaned(
        partition_log, base, end, {k: o for k, (o, _) in latest.items() if k}, NOW - DAY)
    first = segment_files(tmp_path)[0]
    for suffix in (".index", ".timeindex"):
        first.with_suffix(suffix).unlink(missing_ok=True)
    tmp.rename(first)  # "crash" before the indexes are rewritten and the log reloads
    log.close()

    reopened = open_log(tmp_path)
    assert list(reopened.replay_partition(0)) == replay_before
    assert first.stat().st_size < 2048
    reopened.close()


async def test_a_failed_rename_leaves_the_segment_and_the_next_pass_succeeds(
    tmp_path: Path,
) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    await write(log, history())
    before = raw(log)
    fs.fail_next_rename()
    stats = log.compact(NOW, DAY)
    assert stats.segments_rewritten == 0 and fs.pending() == 0
    assert raw(log) == before
    assert not list((tmp_path / f"{TOPIC}-0").glob("*.tmp"))
    assert log.compact(NOW, DAY).segments_rewritten > 0
    assert last_per_key(raw(log)) == last_per_key(before)
    log.close()


async def test_a_failed_fsync_of_the_cleaned_file_changes_nothing(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    await write(log, history())
    before = raw(log)
    fs.fail_next_fsync()
    assert log.compact(NOW, DAY).segments_rewritten == 0
    assert raw(log) == before
    assert not list((tmp_path / f"{TOPIC}-0").glob("*.tmp"))
    log.close()


async def test_appends_during_compaction_are_kept(tmp_path: Path) -> None:
    import asyncio

    log = open_log(tmp_path)
    await write(log, history())
    loop = asyncio.get_running_loop()
    pass_ = loop.run_in_executor(None, log.compact, NOW, DAY)
    more = [commit("h", p, 1000 + p) for p in range(50)]
    await write(log, list(more))
    await pass_
    log.close()
    reopened = open_log(tmp_path)
    replayed = list(reopened.replay_partition(0))
    assert all(record in replayed for record in more)
    reopened.close()


async def test_a_flipped_bit_in_a_sealed_segment_stops_the_open(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    await write(log, history())
    log.close()
    first = segment_files(tmp_path)[0]
    batches = list(iter_segment_batches(REAL_FS, first, 0, int(segment_files(tmp_path)[1].stem)))
    middle = batches[len(batches) // 2]
    data = bytearray(first.read_bytes())
    data[middle.position + 70] ^= 0x01
    first.write_bytes(bytes(data))

    with pytest.raises(CorruptLogError) as info:
        open_log(tmp_path)
    assert info.value.path == first and info.value.position == middle.position
    assert f"corrupt log at byte {middle.position}" in str(info.value)

    end = int(segment_files(tmp_path)[-1].stem)
    repaired = open_log(tmp_path, repair=True)  # only the damaged batch is lost
    assert repaired.logs[0].log_end_offset >= end
    after = repaired.logs[0].read(middle.base_offset, 1)
    assert scan_batches(after)[0][0][2] == middle.last_offset + 1
    repaired.close()
