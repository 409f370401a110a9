"""Opening a log after a crash or disk damage: torn tails are cut, other damage stops the broker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.log import CorruptLogError, LogConfig, PartitionLog
from tests.unit._batches import base_offsets, decode, make_batch, make_batches

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=200)


def build(path: Path, batches: int = 30) -> tuple[Path, list[bytes]]:
    """A closed log of `batches` two-record batches; returns its directory and every batch
    as stored (offsets assigned)."""
    directory = path / "t-0"
    log = PartitionLog.open(directory, CONFIG)
    for batch in make_batches(batches, per_batch=2, size=40):
        log.append(batch, NOW)
    stored = []
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 1)
        stored.append(data)
        offset += 2
    log.close()
    return directory, stored


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def batch_positions(path: Path) -> list[int]:
    data = path.read_bytes()
    positions = []
    pos = 0
    while pos < len(data):
        positions.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
    return positions


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def read_all(log: PartitionLog) -> bytes:
    out = b""
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        out += data
        *_, last = decode(data)
        offset = last[0] + 1
    return out


# ------------------------------------------------------------------------- torn tails


def test_a_partial_batch_at_the_end_is_cut_off(tmp_path: Path) -> None:
    directory, stored = build(tmp_path)
    last = segment_files(directory)[-1]
    size = last.stat().st_size
    with last.open("ab") as f:
        f.write(make_batch([b"torn" * 20])[:50])
    log = PartitionLog.open(directory, CONFIG)
    assert log.log_end_offset == 60
    assert last.stat().st_size == size
    assert read_all(log) == b"".join(stored)
    assert log.append(make_batch([b"after"]), NOW).base_offset == 60


def test_a_few_header_bytes_at_the_end_are_cut_off(tmp_path: Path) -> None:
    directory, _ = build(tmp_path)
    last = segment_files(directory)[-1]
    size = last.stat().st_size
    with last.open("ab") as f:
        f.write(b"\x00\x00\x00")
    log = PartitionLog.open(directory, CONFIG)
    assert last.stat().st_size == size
    assert log.log_end_offset == 60


def test_zeros_at_the_end_are_cut_off(tmp_path: Path) -> None:
    directory, _ = build(tmp_path)
    last = segment_files(directory)[-1]
    size = last.stat().st_size
    with last.open("ab") as f:
        f.write(bytes(4096))
    log = PartitionLog.open(directory, CONFIG)
    assert last.stat().st_size == size
    assert log.log_end_offset == 60


def test_a_bad_crc_in_the_last_batch_is_a_torn_tail(tmp_path: Path) -> None:
    directory, stored = build(tmp_path)
    last = segment_files(directory)[-1]
    final = batch_positions(last)[-1]
    flip_byte(last, last.stat().st_size - 1)
    log = PartitionLog.open(directory, CONFIG)
    assert last.stat().st_size == final
    assert log.log_end_offset == 58
    assert read_all(log) == b"".join(stored[:-1])


def test_a_torn_tail_is_never_served_before_it_is_cut(tmp_path: Path) -> None:
    directory, _ = build(tmp_path, batches=3)
    last = segment_files(directory)[-1]
    good = last.stat().st_size
    with last.open("ab") as f:
        f.write(make_batch([b"half"])[:-1])
    log = PartitionLog.open(directory, CONFIG)
    assert log.log_end_offset == 6
    assert last.stat().st_size == good


# ------------------------------------------------------------------------- real damage


def test_damage_followed_by_valid_batches_stops_the_open(tmp_path: Path) -> None:
    directory, _ = build(tmp_path)
    last = segment_files(directory)[-1]
    positions = batch_positions(last)
    assert len(positions) >= 3
    damaged = positions[1]
    flip_byte(last, damaged + 40)
    with pytest.raises(CorruptLogError) as info:
        PartitionLog.open(directory, CONFIG)
    assert info.value.path == last
    assert info.value.position == damaged
    assert str(last) in str(info.value) and f"byte {damaged}" in str(info.value)


def test_a_smashed_length_field_with_valid_batches_after_it_stops_the_open(tmp_path: Path) -> None:
    directory, _ = build(tmp_path)
    last = segment_files(directory)[-1]
    damaged = batch_positions(last)[1]
    data = bytearray(last.read_bytes())
    data[damaged + 8 : damaged + 12] = b"\x7f\xff\xff\xff"
    last.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError) as info:
        PartitionLog.open(directory, CONFIG)
    assert info.value.position == damaged


def test_repair_cuts_out_only_the_damaged_batch(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    directory, stored = build(tmp_path)
    last = segment_files(directory)[-1]
    positions = batch_positions(last)
    flip_byte(last, positions[1] + 40)
    with pytest.raises(CorruptLogError):
        PartitionLog.open(directory, CONFIG)
    log = PartitionLog.open(directory, CONFIG, repair=True)
    lost = int(last.stem) // 2 + 1  # the damaged batch's index in `stored`
    assert last.stat().st_size == positions[1]
    end = log.log_end_offset
    assert end == 2 * len(stored)
    assert read_all(log) == b"".join(stored[:lost] + stored[lost + 1:])
    report = capsys.readouterr().out
    assert "repair dropped damaged bytes" in report
    assert f"[{positions[1]}, {positions[2]})" in report  # exactly the damaged batch
    assert f"[{2 * lost}, {2 * lost + 2})" in report  # and its offsets
    assert log.append(make_batch([b"after repair"]), NOW).base_offset == end
    log.close()
    reopened = PartitionLog.open(directory, CONFIG)  # the gap needs no repair
    assert reopened.log_end_offset == end + 1
    assert decode(reopened.read(2 * lost, 1))[0][0] == 2 * lost + 2  # a read skips the gap


def test_damage_in_a_sealed_segment_stops_the_open(tmp_path: Path) -> None:
    directory, _ = build(tmp_path)
    first = segment_files(directory)[0]
    final = batch_positions(first)[-1]  # after the last index entry: always verified
    flip_byte(first, final + 30)
    with pytest.raises(CorruptLogError) as info:
        PartitionLog.open(directory, CONFIG)
    assert info.value.path == first
    assert info.value.position == final


def test_a_truncated_sealed_segment_stops_the_open(tmp_path: Path) -> None:
    directory, _ = build(tmp_path)
    first = segment_files(directory)[0]
    with first.open("r+b") as f:
        f.truncate(first.stat().st_size - 10)
    with pytest.raises(CorruptLogError) as info:
        PartitionLog.open(directory, CONFIG)
    assert info.value.path == first


def test_damage_inside_a_sealed_segment_without_indexes_is_found(tmp_path: Path) -> None:
    directory, _ = build(tmp_path)
    first = segment_files(directory)[0]
    first.with_suffix(".index").unlink()
    damaged = batch_positions(first)[2]
    flip_byte(first, damaged + 30)
    with pytest.raises(CorruptLogError) as info:
        PartitionLog.open(directory, CONFIG)
    assert (info.value.path, info.value.position) == (first, damaged)


def test_repair_checks_every_sealed_segment_and_keeps_what_follows(tmp_path: Path) -> None:
    directory, stored = build(tmp_path)
    files = segment_files(directory)
    assert len(files) >= 3
    second = files[1]
    damaged = batch_positions(second)[1]
    flip_byte(second, damaged + 30)
    # The index of a sealed segment is trusted on a normal open, so only repair sees this.
    PartitionLog.open(directory, CONFIG).close()
    log = PartitionLog.open(directory, CONFIG, repair=True)
    lost = int(second.stem) // 2 + 1
    salvaged = f"{2 * lost + 2:020d}.log"
    assert [p.name for p in segment_files(directory)] == sorted(
        [*(p.name for p in files), salvaged])
    assert log.log_end_offset == 2 * len(stored)
    assert read_all(log) == b"".join(stored[:lost] + stored[lost + 1:])
    assert log.append(make_batch([b"x"]), NOW).base_offset == 2 * len(stored)
    log.close()
    assert PartitionLog.open(directory, CONFIG).log_end_offset == 2 * len(stored) + 1


def test_a_missing_segment_is_a_gap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka tolerates offset gaps: the segments after a lost one are kept, with no repair."""
    directory, stored = build(tmp_path)
    files = segment_files(directory)
    files[1].unlink()
    log = PartitionLog.open(directory, CONFIG)
    first, gone = int(files[1].stem), int(files[2].stem)
    assert f"[{first}, {gone})" in capsys.readouterr().out
    assert log.segment_base_offsets() == [0, *(int(p.stem) for p in files[2:])]
    assert log.log_end_offset == 2 * len(stored)
    assert read_all(log) == b"".join(stored[: first // 2] + stored[gone // 2:])
    assert files[2].exists()
    log.truncate_to(first + 1)  # inside the gap: the segment before it becomes the active one
    assert log.log_end_offset == first
    assert log.append(make_batch([b"x"]), NOW).base_offset == first


def test_an_overlapping_segment_stops_the_open_and_repair_deletes_it(tmp_path: Path) -> None:
    directory, stored = build(tmp_path)
    files = segment_files(directory)
    stray = directory / f"{int(files[1].stem) + 2:020d}.log"  # inside the second segment
    stray.write_bytes(files[1].read_bytes())
    with pytest.raises(CorruptLogError, match="inside the previous segment"):
        PartitionLog.open(directory, CONFIG)
    log = PartitionLog.open(directory, CONFIG, repair=True)
    assert not stray.exists()
    assert read_all(log) == b"".join(stored)


# ------------------------------------------------------------------------- indexes


def test_missing_index_files_are_rebuilt(tmp_path: Path) -> None:
    directory, stored = build(tmp_path)
    for path in [*directory.glob("*.index"), *directory.glob("*.timeindex")]:
        path.unlink()
    log = PartitionLog.open(directory, CONFIG)
    assert read_all(log) == b"".join(stored)
    assert log.offset_for_timestamp(1000 + 33) == (33, 1033)
    sealed = segment_files(directory)[:-1]
    for path in sealed:
        assert path.with_suffix(".index").exists()
        assert path.with_suffix(".timeindex").exists()


@pytest.mark.parametrize("garbage", [b"\x01\x02\x03", bytes(16), b"\xff" * 8 * 5])
def test_garbage_index_files_are_rebuilt(tmp_path: Path, garbage: bytes) -> None:
    directory, stored = build(tmp_path)
    first = segment_files(directory)[0]
    expected_index = first.with_suffix(".index").read_bytes()
    first.with_suffix(".index").write_bytes(garbage)
    log = PartitionLog.open(directory, CONFIG)
    assert read_all(log) == b"".join(stored)
    assert first.with_suffix(".index").read_bytes() == expected_index


def test_a_time_index_pointing_past_the_segment_is_rebuilt(tmp_path: Path) -> None:
    directory, _ = build(tmp_path)
    first = segment_files(directory)[0]
    time_index = first.with_suffix(".timeindex")
    good = time_index.read_bytes()
    time_index.write_bytes(good + (10**15).to_bytes(8, "big") + (10**6).to_bytes(4, "big"))
    log = PartitionLog.open(directory, CONFIG)
    assert time_index.read_bytes() == good
    assert log.offset_for_timestamp(1001) == (1, 1001)


def test_leftover_temporary_and_orphan_files_are_removed(tmp_path: Path) -> None:
    directory, _ = build(tmp_path, batches=3)
    (directory / "00000000000000000000.index.tmp").write_bytes(b"x")
    (directory / "00000000000000000999.index").write_bytes(b"")
    (directory / "00000000000000000999.timeindex").write_bytes(b"")
    PartitionLog.open(directory, CONFIG).close()
    assert sorted(os.listdir(directory)) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]


def test_an_empty_directory_starts_at_offset_zero(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    log = PartitionLog.open(directory, CONFIG)
    assert log.log_end_offset == 0


def test_a_last_segment_holding_only_a_torn_batch_becomes_empty(tmp_path: Path) -> None:
    directory, _ = build(tmp_path)
    log = PartitionLog.open(directory, CONFIG)
    end = log.log_end_offset
    log.close()
    # A roll happened and the first write into the new segment was torn.
    path = directory / f"{end:020d}.log"
    path.write_bytes(make_batch([b"lost"], base_offset=end)[:30])
    log = PartitionLog.open(directory, CONFIG)
    assert log.log_end_offset == end
    assert path.stat().st_size == 0
    assert base_offsets(log.read(end - 2, 1)) == [end - 2]


def test_a_rolled_segment_whose_seal_was_interrupted_is_cut_at_its_tear(tmp_path: Path) -> None:
    """A roll seals the old segment on a worker thread (fsync, then index files); a crash
    before that finished leaves it without index files and maybe torn. Nothing after it was
    flushed (a flush completes pending seals first), so it is cut like a torn active segment."""
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(segment_bytes=300))
    for value in (b"a" * 200, b"b" * 200, b"c" * 200):
        log.append(make_batch([value]), 0)
    log.close()
    assert sorted(p.name for p in directory.glob("*.log")) == [
        f"{0:020d}.log", f"{1:020d}.log", f"{2:020d}.log"]
    for suffix in (".index", ".timeindex"):
        (directory / f"{1:020d}{suffix}").unlink()
    with (directory / f"{1:020d}.log").open("ab") as torn:
        torn.write(make_batch([b"lost"])[:30])
    reopened = PartitionLog.open(directory, LogConfig(segment_bytes=300))
    try:
        assert reopened.segment_base_offsets() == [0, 1]
        assert reopened.log_end_offset == 2
        assert [v for _, v in decode(reopened.read(1, 1 << 20))] == [b"b" * 200]
    finally:
        reopened.close()


def test_damage_in_a_sealed_segment_with_index_files_still_refuses_to_open(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(segment_bytes=300))
    for value in (b"a" * 200, b"b" * 200, b"c" * 200):
        log.append(make_batch([value]), 0)
    log.close()
    with (directory / f"{1:020d}.log").open("ab") as torn:
        torn.write(make_batch([b"lost"])[:30])
    with pytest.raises(CorruptLogError):
        PartitionLog.open(directory, LogConfig(segment_bytes=300))
