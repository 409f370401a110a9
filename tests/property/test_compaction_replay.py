"""Replaying a compacted group log rebuilds the same offsets and group snapshots as the full
history, whatever was committed, deleted, compacted and reopened in between."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group.config import GroupConfig
from coordinator.group.offsets import OffsetStore
from coordinator.group.service import GroupCoordinatorService
from coordinator.grouplog.log import GroupLog
from coordinator.grouplog.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from storage.log import LogConfig

CONFIG = LogConfig(segment_bytes=600, retention_ms=-1, retention_bytes=-1,
                   index_interval_bytes=128)
RETENTION_MS = 1_000
GROUPS = st.sampled_from(["a", "b"])

offset_records = st.builds(
    lambda g, p, o: OffsetCommitRecord(
        key=OffsetCommitKey(group=g, topic="t", partition=p),
        value=None if o is None else OffsetCommitValue(offset=o, commit_timestamp=7)),
    GROUPS, st.integers(0, 2), st.none() | st.integers(0, 10_000))
group_records = st.builds(
    lambda g, gen: GroupMetadataRecord(
        key=GroupMetadataKey(group=g),
        value=None if gen is None else GroupMetadataValue(protocol_type="consumer",
                                                          generation=gen, protocol="range")),
    GROUPS, st.none() | st.integers(1, 50))
appends = st.tuples(st.just("append"), st.lists(offset_records | group_records, min_size=1,
                                               max_size=4))
steps = st.lists(st.one_of(
    appends, appends, appends, appends,
    st.tuples(st.just("sleep"), st.integers(0, 2 * RETENTION_MS)),
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("reopen"), st.none()),
), min_size=30, max_size=80)


def views(records: list[CoordinatorRecord]) -> tuple[object, object]:
    offsets = OffsetStore()
    service = GroupCoordinatorService(GroupConfig(), lambda prefix: prefix)
    for record in records:
        if isinstance(record, GroupMetadataRecord):
            service.replay(record, 0)
        else:
            offsets.apply(record)
    return offsets.committed_view(), service.durable_view()


async def run(path: Path, plan: list[tuple[str, object]]) -> None:
    log = GroupLog.open(path, 1, CONFIG, "always")
    history: list[CoordinatorRecord] = []
    now_ms = 1_000_000
    try:
        for action, arg in plan:
            if action == "append":
                assert isinstance(arg, list)
                await log.append(arg, now_ms)
                history.extend(arg)
            elif action == "sleep":
                assert isinstance(arg, int)
                now_ms += arg
            elif action == "compact":
                log.compact(now_ms, RETENTION_MS)
            else:
                log.close()
                log = GroupLog.open(path, 1, CONFIG, "always")
            assert views(list(log.replay_partition(0))) == views(history)
    finally:
        log.close()


@settings(max_examples=75, deadline=None)
@given(plan=steps)
def test_replay_after_compaction_equals_replay_of_the_history(
    plan: list[tuple[str, object]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run(Path(directory), plan))
