"""`storage/log.py`: append, read, roll, indexes, timestamps, retention, truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.batch import (
    ATTR_LOG_APPEND_TIME,
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    split_batches,
)
from storage.log import (
    AppendInfo,
    InvalidConfigError,
    LogClosedError,
    LogConfig,
    OffsetOutOfRange,
    PartitionLog,
)
from storage.record_batch import encode_batch
from tests.unit._batches import base_offsets, decode, make_batch, make_batches

NOW = 1_700_000_000_000


def open_log(path: Path, **overrides: object) -> PartitionLog:
    config = LogConfig(**{"index_interval_bytes": 256, **overrides})  # type: ignore[arg-type]
    return PartitionLog.open(path / "t-0", config)


def fill(log: PartitionLog, count: int, per_batch: int = 2, size: int = 60) -> list[bytes]:
    batches = make_batches(count, per_batch=per_batch, size=size)
    for batch in batches:
        log.append(batch, NOW)
    return batches


# ------------------------------------------------------------------------- empty log


def test_a_new_log_is_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.read(0, 1000) == b""
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None
    assert (tmp_path / "t-0" / "00000000000000000000.log").exists()


def test_reading_past_the_end_is_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(OffsetOutOfRange) as info:
        log.read(1, 1000)
    assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 0)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1000)


# ------------------------------------------------------------------------- append


def test_append_assigns_consecutive_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.append(make_batch([b"a", b"b", b"c"]), NOW) == AppendInfo(0, 2, -1)
    assert log.append(make_batch([b"d"]), NOW) == AppendInfo(3, 3, -1)
    assert log.log_end_offset == 4
    assert decode(log.read(0, 10_000)) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_one_append_of_several_batches_numbers_them_in_order(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    records = make_batch([b"a", b"b"]) + make_batch([b"c"]) + make_batch([b"d", b"e"])
    assert log.append(records, NOW) == AppendInfo(0, 4, -1)
    data = log.read(0, 10_000)
    assert base_offsets(data) == [0, 2, 3]
    assert [v for _, v in decode(data)] == [b"a", b"b", b"c", b"d", b"e"]


def test_append_keeps_the_produced_bytes_apart_from_offset_and_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"x"]), NOW)
    produced = make_batch([b"y"], partition_leader_epoch=-1)
    log.append(produced, NOW)
    stored = log.read(1, 10_000)
    assert stored[:8] == (1).to_bytes(8, "big")
    assert stored[12:16] == (0).to_bytes(4, "big")  # leader epoch stamped
    assert stored[16:] == produced[16:]


def test_append_rejects_a_bad_crc_and_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"ok"]), NOW)
    size = os.path.getsize(tmp_path / "t-0" / "00000000000000000000.log")
    bad = bytearray(make_batch([b"bad"]))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append(make_batch([b"fine"]) + bytes(bad), NOW)
    assert log.log_end_offset == 1
    assert os.path.getsize(tmp_path / "t-0" / "00000000000000000000.log") == size


def test_append_rejects_a_count_that_does_not_match_the_offset_delta(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(InvalidRecordError):
        log.append(make_batch([b"a", b"b"], last_offset_delta=5), NOW)
    with pytest.raises(InvalidRecordError):
        log.append(make_batch([], records_count=0, last_offset_delta=0), NOW)
    assert log.log_end_offset == 0


def test_append_rejects_a_batch_over_max_message_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=200)
    with pytest.raises(MessageTooLargeError):
        log.append(make_batch([b"x" * 300]), NOW)
    assert log.log_end_offset == 0


def test_append_of_no_batches_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.append(b"", NOW) == AppendInfo(-1, -1, -1)
    assert log.log_end_offset == 0


def test_log_append_time_stamps_the_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append(make_batch([b"a", b"b"], timestamp_ms=5), NOW)
    assert info == AppendInfo(0, 1, NOW)
    [(_, _, batch)] = split_batches(log.read(0, 10_000))  # CRC still valid
    assert batch.max_timestamp == NOW
    assert batch.attributes & ATTR_LOG_APPEND_TIME
    assert log.offset_for_timestamp(NOW) == (0, NOW)


def test_append_records_stores_what_append_stores_for_the_same_batch(tmp_path: Path) -> None:
    built = open_log(tmp_path / "built")
    produced = open_log(tmp_path / "produced")
    built.leader_epoch = produced.leader_epoch = 7
    runs: list[list[tuple[bytes, bytes | None]]] = [
        [(b"k1", b"v1"), (b"k2", None)], [(b"k3", b"v" * 300)], [(b"k%d" % i, b"x") for i in
                                                                  range(40)]]
    for timestamp, records in enumerate(runs, start=NOW):
        expected = produced.append(encode_batch(records, timestamp), timestamp)
        assert built.append_records(records, timestamp) == expected
    assert built.log_end_offset == produced.log_end_offset == 43
    assert built.read(0, 100_000) == produced.read(0, 100_000)
    assert built.offset_for_timestamp(NOW + 1) == produced.offset_for_timestamp(NOW + 1)
    assert decode(built.read(0, 100_000)) == decode(produced.read(0, 100_000))


def test_append_records_refuses_nothing_and_too_much(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=200)
    with pytest.raises(InvalidRecordError):
        log.append_records([], NOW)
    with pytest.raises(MessageTooLargeError):
        log.append_records([(b"k", b"x" * 300)], NOW)
    assert log.log_end_offset == 0
    log.close()
    with pytest.raises(LogClosedError):
        log.append_records([(b"k", b"v")], NOW)


def test_append_records_rolls_like_append(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300)
    for i in range(10):
        log.append_records([(b"key", b"v" * 100)], NOW + i)
    assert log.segment_base_offsets() == list(range(10))  # one batch fits a segment
    assert [decode(log.read(i, 10_000)) for i in range(10)] == [
        [(i, b"v" * 100)] for i in range(10)]


def test_append_records_with_log_append_time_stamps_the_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    assert log.append_records([(b"a", b"1")], NOW) == AppendInfo(0, 0, NOW)
    [(_, _, batch)] = split_batches(log.read(0, 10_000))
    assert batch.attributes & ATTR_LOG_APPEND_TIME


# ------------------------------------------------------------------------- read


def test_read_from_the_middle_of_a_batch_returns_the_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"a", b"b", b"c"]), NOW)
    log.append(make_batch([b"d"]), NOW)
    assert base_offsets(log.read(1, 1)) == [0]
    assert base_offsets(log.read(3, 1)) == [3]


def test_read_returns_whole_batches_within_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    batches = fill(log, 10)
    size = len(batches[0])
    assert base_offsets(log.read(0, 3 * size)) == [0, 2, 4]
    assert base_offsets(log.read(0, 3 * size + size - 1)) == [0, 2, 4]
    assert base_offsets(log.read(4, 2 * size)) == [4, 6]


def test_read_returns_the_first_batch_even_if_it_is_larger_than_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"x" * 5000]), NOW)
    log.append(make_batch([b"y"]), NOW)
    data = log.read(0, 10)
    assert decode(data) == [(0, b"x" * 5000)]
    assert log.read(0, 0) == data


def test_read_at_the_end_returns_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    assert log.read(6, 1000) == b""


def test_every_offset_is_found_through_the_sparse_index(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=4000, index_interval_bytes=300)
    fill(log, 120, per_batch=3, size=30)
    assert len(log.segment_base_offsets()) > 3
    for offset in range(log.log_end_offset):
        [base] = base_offsets(log.read(offset, 1))
        assert base <= offset < base + 3


def test_read_stops_at_the_end_of_a_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000)
    fill(log, 20)
    second = log.segment_base_offsets()[1]
    data = log.read(0, 1 << 20)
    assert decode(data)[-1][0] == second - 1


def test_read_of_a_large_range_cuts_at_a_batch_boundary(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=100)
    batches = fill(log, 200, per_batch=1, size=37)
    total = sum(len(b) for b in batches)
    for max_bytes in (1, 500, 4096, 10_000, total - 1, total, total + 1):
        data = log.read(0, max_bytes)
        expected = max(1, min(len(batches), max_bytes // len(batches[0])))
        assert len(base_offsets(data)) == expected, max_bytes
        assert len(data) <= max(max_bytes, len(batches[0]))


@pytest.mark.parametrize("interval", [0, 100, 4096, 100_000])
def test_large_reads_end_on_the_last_whole_batch(tmp_path: Path, interval: int) -> None:
    log = open_log(tmp_path, index_interval_bytes=interval)
    sizes = [17, 400, 3, 1200, 90]
    for i in range(900):
        log.append(make_batch([b"v" * sizes[i % len(sizes)]]), NOW)
    whole = b"".join(log.read(o, 1) for o in range(900))
    starts = [0]
    for o in range(900):
        starts.append(starts[-1] + len(log.read(o, 1)))
    for offset in (0, 1, 450, 700, 899):
        for max_bytes in (70_000, 100_000, 123_457, 1 << 20):
            data = log.read(offset, max_bytes)
            begin = starts[offset]
            fits = max(e for e in starts if e - begin <= max_bytes)
            assert data == whole[begin:fits], (offset, max_bytes)


# ------------------------------------------------------------------------- roll


def test_roll_starts_a_segment_named_by_the_end_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1000)
    fill(log, 20)
    bases = log.segment_base_offsets()
    assert bases[0] == 0 and len(bases) > 2
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names == [f"{b:020d}.log" for b in bases]
    for base in bases:
        assert decode(log.read(base, 1))[0][0] == base
    for path in (tmp_path / "t-0").glob("*.log"):
        assert path.stat().st_size <= 1000


def test_a_batch_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500)
    log.append(make_batch([b"a"]), NOW)
    log.append(make_batch([b"b" * 2000]), NOW)
    log.append(make_batch([b"c"]), NOW)
    assert log.segment_base_offsets() == [0, 1, 2]
    assert decode(log.read(1, 1)) == [(1, b"b" * 2000)]


def test_segment_ms_rolls_an_old_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    log.append(make_batch([b"a"]), NOW)
    log.append(make_batch([b"b"]), NOW + 999)
    assert log.segment_base_offsets() == [0]
    log.append(make_batch([b"c"]), NOW + 1000)
    assert log.segment_base_offsets() == [0, 2]


def test_reopen_keeps_offsets_and_data(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1500)
    fill(log, 30)
    before = [log.read(o, 1 << 20) for o in range(0, log.log_end_offset, 7)]
    bases = log.segment_base_offsets()
    log.close()
    log = open_log(tmp_path, segment_bytes=1500)
    assert log.segment_base_offsets() == bases
    assert log.log_end_offset == 60
    assert [log.read(o, 1 << 20) for o in range(0, 60, 7)] == before
    assert log.append(make_batch([b"next"]), NOW).base_offset == 60
    for base in bases:
        assert (tmp_path / "t-0" / f"{base:020d}.index").exists()
        assert (tmp_path / "t-0" / f"{base:020d}.timeindex").exists()


# ------------------------------------------------------------------------- timestamps


def test_offset_for_timestamp_with_rising_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=2000, index_interval_bytes=200)
    fill(log, 60, per_batch=2, size=40)  # record i has timestamp 1000 + i
    assert log.offset_for_timestamp(0) == (0, 1000)
    for offset in range(120):
        assert log.offset_for_timestamp(1000 + offset) == (offset, 1000 + offset)
    assert log.offset_for_timestamp(1000 + 120) is None


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=0)
    log.append(make_batch([b"a", b"b"], timestamps=[100, 500]), NOW)  # offsets 0, 1
    log.append(make_batch([b"c"], timestamps=[200]), NOW)  # 2
    log.append(make_batch([b"d", b"e"], timestamps=[900, 300]), NOW)  # 3, 4
    assert log.offset_for_timestamp(150) == (1, 500)
    assert log.offset_for_timestamp(500) == (1, 500)
    assert log.offset_for_timestamp(501) == (3, 900)
    assert log.offset_for_timestamp(901) is None


def test_offset_for_timestamp_survives_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1500, index_interval_bytes=150)
    fill(log, 40, per_batch=2, size=30)
    answers = [log.offset_for_timestamp(ts) for ts in range(990, 1085, 3)]
    log.close()
    log = open_log(tmp_path, segment_bytes=1500, index_interval_bytes=150)
    assert [log.offset_for_timestamp(ts) for ts in range(990, 1085, 3)] == answers


def test_max_timestamp_offset_names_the_record(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=150)
    log.append(make_batch([b"a", b"b"], timestamps=[100, 700]), NOW)
    log.append(make_batch([b"c", b"d", b"e"], timestamps=[200, 950, 950]), NOW)
    log.append(make_batch([b"f"], timestamps=[300]), NOW)
    assert len(log.segment_base_offsets()) >= 2
    assert log.max_timestamp_offset() == (3, 950)


# ------------------------------------------------------------------------- retention


def test_time_retention_deletes_old_sealed_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500, retention_ms=1000)
    for ts in (100, 200, 5000, 5100):
        log.append(make_batch([b"v" * 300], timestamp_ms=ts), NOW)
    assert log.segment_base_offsets() == [0, 1, 2, 3]
    log.flush()  # rolled segments are sealed on a worker thread; retention waits for it
    assert log.apply_retention(now_ms=5500) == 2
    assert log.segment_base_offsets() == [2, 3]
    assert log.log_start_offset == 2
    with pytest.raises(OffsetOutOfRange):
        log.read(1, 100)
    assert not (tmp_path / "t-0" / f"{0:020d}.log").exists()
    assert not (tmp_path / "t-0" / f"{0:020d}.index").exists()


def test_time_retention_stops_at_the_first_young_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500, retention_ms=1000)
    for ts in (100, 9000, 200, 9100):
        log.append(make_batch([b"v" * 300], timestamp_ms=ts), NOW)
    log.flush()  # rolled segments are sealed on a worker thread; retention waits for it
    assert log.apply_retention(now_ms=9500) == 1
    assert log.log_start_offset == 1


def test_time_retention_of_everything_rolls_and_empties_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500, retention_ms=1000)
    log.append(make_batch([b"v" * 300], timestamp_ms=100), NOW)
    log.append(make_batch([b"v" * 300], timestamp_ms=100), NOW)
    log.flush()  # rolled segments are sealed on a worker thread; retention waits for it
    assert log.apply_retention(now_ms=50_000) == 2
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.read(2, 100) == b""
    log.close()
    log = open_log(tmp_path, segment_bytes=500, retention_ms=1000)
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.append(make_batch([b"x"]), NOW).base_offset == 2


def test_retention_forever_keeps_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500, retention_ms=-1)
    for _ in range(5):
        log.append(make_batch([b"v" * 300], timestamp_ms=1), NOW)
    assert log.apply_retention(now_ms=NOW) == 0
    assert log.log_start_offset == 0


def test_size_retention_keeps_at_least_retention_bytes_like_kafka(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500, retention_ms=-1, retention_bytes=1000)
    for _ in range(6):
        log.append(make_batch([b"v" * 300]), NOW)
    segment_size = len(make_batch([b"v" * 300]))  # one batch per segment
    log.flush()  # rolled segments are sealed on a worker thread; retention waits for it
    assert log.apply_retention(now_ms=NOW) == 3
    assert 1000 <= log.size_bytes < 1000 + segment_size
    assert log.log_start_offset == 3
    assert log.log_end_offset == 6


def test_size_retention_never_deletes_the_active_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, retention_ms=-1, retention_bytes=0)
    log.append(make_batch([b"v" * 300]), NOW)
    assert log.apply_retention(now_ms=NOW) == 0
    assert log.log_start_offset == 0


# ------------------------------------------------------------------------- truncation, lifetime


def test_truncate_to_removes_the_batch_holding_the_offset_and_later(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=600)
    fill(log, 20)  # 2 records per batch
    log.truncate_to(13)
    assert log.log_end_offset == 12
    assert decode(log.read(10, 1000))[-1][0] == 11
    assert log.append(make_batch([b"again"]), NOW).base_offset == 12
    log.close()
    log = open_log(tmp_path, segment_bytes=600)
    assert log.log_end_offset == 13
    assert decode(log.read(12, 1000)) == [(12, b"again")]


def test_truncate_to_the_end_changes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.truncate_to(6)
    assert log.log_end_offset == 6


def test_closed_log_refuses_appends(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.close()
    log.close()
    with pytest.raises(LogClosedError):
        log.append(make_batch([b"a"]), NOW)


def test_delete_removes_the_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fill(log, 3)
    log.delete()
    assert not (tmp_path / "t-0").exists()
    assert log.closed


# ------------------------------------------------------------------------- config


def test_topic_configs_override_the_defaults() -> None:
    config = LogConfig().with_overrides(
        {
            "retention.ms": "-1",
            "segment.bytes": "1048576",
            "message.timestamp.type": "LogAppendTime",
            "flush.messages": "1",
            "cleanup.policy": "delete",
        }
    )
    assert config.retention_ms == -1
    assert config.segment_bytes == 1 << 20
    assert config.message_timestamp_type == "LogAppendTime"
    assert config.fsync_each_append is True


@pytest.mark.parametrize(
    ("key", "value"),
    [("retention.ms", "soon"), ("segment.bytes", "1"), ("message.timestamp.type", "Now")],
)
def test_bad_topic_config_values_are_refused(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError, match=key):
        LogConfig().with_overrides({key: value})
