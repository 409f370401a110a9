"""The partition log against a model: recovery keeps exactly the valid prefix, reads agree."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from storage.log import LogConfig, PartitionLog
from tests.unit._batches import decode, make_batch

NOW = 1_700_000_000_000

record_values = st.lists(st.binary(max_size=60), min_size=1, max_size=4)
timestamps = st.integers(0, 10_000)
batch_specs = st.tuples(record_values, st.lists(timestamps, min_size=4, max_size=4))


def build_batch(spec: tuple[list[bytes], list[int]]) -> tuple[bytes, list[tuple[bytes, int]]]:
    values, stamps = spec
    stamps = stamps[: len(values)]
    return make_batch(values, timestamps=stamps), list(zip(values, stamps, strict=True))


def read_everything(log: PartitionLog) -> bytes:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        out.append(data)
        offset = decode(data)[-1][0] + 1
    return b"".join(out)


def crash(log: PartitionLog) -> None:
    """Drop the log without flushing or writing indexes, as a kill -9 would (which also stops
    a seal still pending on the worker thread)."""
    with log._seal_lock, log._lock:
        log._closed = True
        for seg in log._segments:
            seg.close_files()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(batch_specs, min_size=1, max_size=25),
    st.binary(max_size=300),
    st.integers(100, 2000),
)
def test_reopen_after_garbage_yields_exactly_the_valid_prefix(
    specs: list[tuple[list[bytes], list[int]]], garbage: bytes, segment_bytes: int
) -> None:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=64)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        log = PartitionLog.open(directory, config)
        for spec in specs:
            log.append(build_batch(spec)[0], NOW)
        end = log.log_end_offset
        before = read_everything(log)
        crash(log)
        last = sorted(directory.glob("*.log"))[-1]
        with last.open("ab") as f:
            f.write(garbage)
        reopened = PartitionLog.open(directory, config)
        assert reopened.log_end_offset == end
        assert read_everything(reopened) == before
        assert reopened.append(make_batch([b"next"]), NOW).base_offset == end
        reopened.close()


class LogMachine(RuleBasedStateMachine):
    """Appends, reads, reopens, crashes, torn writes, retention and truncation vs a model."""

    def __init__(self) -> None:
        super().__init__()
        self._tmp = tempfile.TemporaryDirectory()
        self.directory = Path(self._tmp.name) / "t-0"
        self.config = LogConfig(
            segment_bytes=600, index_interval_bytes=100, retention_ms=-1, retention_bytes=1500
        )
        self.log = PartitionLog.open(self.directory, self.config)
        # offset -> (value, timestamp, base offset of its batch)
        self.records: dict[int, tuple[bytes, int, int]] = {}
        self.start = 0
        self.end = 0

    def teardown(self) -> None:
        if not self.log.closed:
            self.log.close()
        self._tmp.cleanup()

    @rule(spec=batch_specs)
    def append(self, spec: tuple[list[bytes], list[int]]) -> None:
        batch, records = build_batch(spec)
        info = self.log.append(batch, NOW)
        assert info.base_offset == self.end
        for i, (value, stamp) in enumerate(records):
            self.records[self.end + i] = (value, stamp, self.end)
        self.end += len(records)
        assert info.last_offset == self.end - 1

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data(), max_bytes=st.integers(0, 3000))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(self.start, self.end - 1))
        got = decode(self.log.read(offset, max_bytes))
        first_base = self.records[offset][2]
        assert got[0][0] == first_base
        for i, (o, value) in enumerate(got):
            assert o == first_base + i
            assert value == self.records[o][0]

    @rule(timestamp=st.integers(-1, 10_001))
    def offset_for_timestamp(self, timestamp: int) -> None:
        expected = next(
            ((o, r[1]) for o, r in sorted(self.records.items()) if r[1] >= timestamp), None
        )
        assert self.log.offset_for_timestamp(timestamp) == expected

    @rule()
    def max_timestamp(self) -> None:
        if not self.records:
            assert self.log.max_timestamp_offset() is None
            return
        top = max(r[1] for r in self.records.values())
        first = min(o for o, r in self.records.items() if r[1] == top)
        assert self.log.max_timestamp_offset() == (first, top)

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.directory, self.config)

    @rule(garbage=st.binary(max_size=80))
    def crash_with_a_torn_write(self, garbage: bytes) -> None:
        crash(self.log)
        with sorted(self.directory.glob("*.log"))[-1].open("ab") as f:
            f.write(garbage)
        self.log = PartitionLog.open(self.directory, self.config)

    @rule()
    def retention(self) -> None:
        self.log.apply_retention(NOW)
        self.start = self.log.log_start_offset
        for offset in [o for o in self.records if o < self.start]:
            del self.records[offset]

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end - 1))
        self.log.truncate_to(offset)
        self.end = self.records[offset][2]
        for o in [o for o in self.records if o >= self.end]:
            del self.records[o]

    @invariant()
    def offsets_match(self) -> None:
        assert self.log.log_start_offset == self.start
        assert self.log.log_end_offset == self.end


LogMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogMachine = LogMachine.TestCase
