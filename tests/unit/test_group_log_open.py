"""Opening the group log: a new one's partitions are created side by side, and a partition that
cannot be opened (created, or recovered) stops the open with its own path named and every other
partition closed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator.grouplog.log import TOPIC, GroupLog
from coordinator.grouplog.records import OffsetCommitKey, OffsetCommitRecord, OffsetCommitValue
from storage.log import CorruptLogError, LogConfig, PartitionLog

PARTITIONS = 12
CONFIG = LogConfig(segment_bytes=4096, retention_ms=-1, retention_bytes=-1,
                   max_message_bytes=2**31 - 1)


def _commit(group: str, offset: int) -> OffsetCommitRecord:
    return OffsetCommitRecord(key=OffsetCommitKey(group=group, topic="t", partition=0),
                              value=OffsetCommitValue(offset=offset, commit_timestamp=1))


async def _write(data_dir: Path) -> dict[str, int]:
    log = GroupLog.open(data_dir, PARTITIONS, CONFIG, "60000")
    last = {}
    for round_ in range(30):
        for g in range(40):
            group = f"group-{g}"
            await log.append([_commit(group, round_ * 100 + g)], 1, group_id=group)
            last[group] = round_ * 100 + g
    log.close()
    return last


def _replayed(log: GroupLog) -> dict[str, int]:
    return {record.key.group: record.value.offset
            for p in range(PARTITIONS) for record in log.replay_partition(p)
            if isinstance(record, OffsetCommitRecord) and record.value is not None}


def test_partitions_opened_side_by_side_replay_every_group(tmp_path: Path) -> None:
    last = asyncio.run(_write(tmp_path))
    log = GroupLog.open(tmp_path, PARTITIONS, CONFIG, "60000")
    try:
        assert all((tmp_path / f"{TOPIC}-{p}").is_dir() for p in range(PARTITIONS))
        assert _replayed(log) == last
    finally:
        log.close()


def test_a_partition_that_cannot_be_created_stops_the_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / f"{TOPIC}-5"
    blocked.write_bytes(b"")  # a file where the partition's directory goes
    closed = _record_closes(monkeypatch)
    with pytest.raises(OSError) as info:
        GroupLog.open(tmp_path, PARTITIONS, CONFIG, "60000")
    assert not isinstance(info.value, CorruptLogError)
    assert str(blocked) in str(info.value)
    assert sorted(closed) == sorted(tmp_path / f"{TOPIC}-{p}" for p in range(PARTITIONS)
                                    if p != 5)


def _record_closes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    closed: list[Path] = []
    close = PartitionLog.close

    def recording_close(self: PartitionLog) -> None:
        closed.append(self.directory)
        close(self)

    monkeypatch.setattr(PartitionLog, "close", recording_close)
    return closed


def test_a_damaged_partition_stops_the_open_naming_its_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asyncio.run(_write(tmp_path))
    damaged_dir = tmp_path / f"{TOPIC}-5"
    segment = sorted(damaged_dir.glob("*.log"))[0]  # sealed: CRC-checked on open
    data = bytearray(segment.read_bytes())
    data[100] ^= 0xFF
    segment.write_bytes(bytes(data))
    closed = _record_closes(monkeypatch)
    with pytest.raises(CorruptLogError) as info:
        GroupLog.open(tmp_path, PARTITIONS, CONFIG, "60000")
    assert info.value.path.parent == damaged_dir
    # An existing log is opened partition by partition: those before the damaged one were
    # opened, and are closed again.
    assert len(closed) == len(set(closed))
    assert set(closed) - {damaged_dir} == {tmp_path / f"{TOPIC}-{p}" for p in range(5)}
