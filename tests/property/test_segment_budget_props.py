"""Many partitions, a small descriptor budget, appends, reads, flushes and retention in any
order: every read answers what was appended, and the process never holds more segment files
open than the budget (counted in /proc/self/fd once pending seals are done)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.descriptors import DescriptorBudget
from storage.fs import FaultyFileSystem
from storage.log import LogConfig
from storage.topics import TopicStore
from tests.unit._batches import decode, make_batch

NOW = 1_700_000_000_000
PARTITIONS = 12

operations = st.lists(
    st.tuples(st.sampled_from(["append", "read", "flush", "reopen"]),
              st.integers(0, PARTITIONS - 1), st.integers(0, 10_000),
              st.binary(min_size=1, max_size=120)),
    min_size=1, max_size=120)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limit=st.integers(4, 9), ops=operations)
def test_reads_agree_and_descriptors_stay_within_the_budget(
        limit: int, ops: list[tuple[str, int, int, bytes]]) -> None:
    config = LogConfig(segment_bytes=400, index_interval_bytes=64)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        fs = FaultyFileSystem()
        budget = DescriptorBudget(limit)
        store = TopicStore.open(path, config, fs, budget=budget)
        topic = store.create("t", PARTITIONS)
        baseline = open_fds() - budget.open_count
        model: list[list[bytes]] = [[] for _ in range(PARTITIONS)]
        for op, p, pick, value in ops:
            if op == "append":
                topic.partitions[p].append(make_batch([value]), NOW)
                model[p].append(value)
            elif op == "read" and model[p]:
                i = pick % len(model[p])
                records = decode(topic.partitions[p].read(i, 1))
                assert records[0] == (i, model[p][i])
            elif op == "flush":
                store.flush_all()
            elif op == "reopen":
                store.close()
                budget = DescriptorBudget(limit)
                store = TopicStore.open(path, config, fs, budget=budget)
                found = store.get("t")
                assert found is not None
                topic = found
            for log in topic.partitions:
                log.complete_seals()
            budget.enforce()
            assert budget.open_count <= limit
            assert open_fds() - baseline == budget.open_count
        for p, log in enumerate(topic.partitions):
            got: list[bytes | None] = []
            offset = 0
            while offset < log.log_end_offset:
                records = decode(log.read(offset, 1 << 20))
                got.extend(v for _, v in records)
                offset = records[-1][0] + 1
            assert got == model[p]
        store.close()
