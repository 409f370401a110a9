"""A slow disk never stalls the event loop: rolls and retention flushes wait on worker threads.

The topics' filesystem holds every fsync at a gate (`GatedFileSystem`), as a disk syncing a
1 GiB segment would for seconds. While fsyncs are held - the seal of a rolled segment, the
retention loop's flush of every partition - the loop keeps running and a member's heartbeats
keep being answered; no fsync runs on the loop's thread. Once the gate opens the seal
completes (index files written).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from coordinator.runtime.broker import Broker
from tests.fakes import GatedFileSystem
from tests.integration.in_process import completing_group, started_broker, sync, until
from tests.integration.test_group_runtime_writes import heartbeat
from tests.unit._batches import make_batch

TOPIC = "t"


@pytest.fixture
async def slow_disk(tmp_path: Path) -> AsyncIterator[tuple[Broker, GatedFileSystem]]:
    fs = GatedFileSystem()
    broker = await started_broker(tmp_path / "data", {
        "group.initial.rebalance.delay.ms": "0", "log.retention.check.interval.ms": "50"},
        topics_fs=fs, partitions=None)
    try:
        yield broker, fs
    finally:
        fs.open()
        await broker.stop()


async def stable_member(broker: Broker) -> tuple[str, int]:
    leader, follower, generation = await completing_group(broker)
    answered = sync(broker, "g", generation, leader, {leader: b"L", follower: b"F"})
    await until(lambda: answered.responses, "sync answer")
    return follower, generation


async def heartbeats_answered_promptly(broker: Broker, member: str, generation: int) -> float:
    """Send heartbeats for a while; the longest time one waited, with the loop's own lag."""
    worst = 0.0
    for _ in range(20):
        started = time.monotonic()
        await asyncio.sleep(0.005)  # the loop must come back to us
        beat = heartbeat(broker, "g", generation, member)
        await until(lambda b=beat: b.responses, "heartbeat answer")  # type: ignore[misc]
        assert beat.answer.error_code == ErrorCode.none
        worst = max(worst, time.monotonic() - started - 0.005)
    return worst


async def test_a_roll_seals_the_old_segment_off_the_loop(
    slow_disk: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = slow_disk
    member, generation = await stable_member(broker)
    broker.create_topic(TOPIC, 1, {"segment.bytes": str(1 << 20)}, reason="test")
    partition = broker.topics.get(TOPIC).partitions[0]  # type: ignore[union-attr]
    fs.close()
    now = broker.wall_ms()
    for _ in range(2):  # 1 MiB: the first segment rolls
        partition.append(make_batch([b"x" * (512 << 10)], timestamp_ms=now), now)
    assert len(partition.segment_base_offsets()) == 2  # the new segment took the appends
    await until(lambda: fs.held == 1, "the seal's fsync at the gate")
    worst = await heartbeats_answered_promptly(broker, member, generation)
    assert fs.held == 1  # the seal was held the whole time
    index = partition.directory / f"{0:020d}.index"
    assert not index.exists()
    fs.open()
    await until(index.exists, "the sealed segment's index file")
    assert fs.loop_fsyncs == 0
    # Generous for a loaded machine: a seal on the loop would have blocked until the gate opened.
    assert worst < 1.0, worst


async def test_the_retention_flush_of_many_partitions_runs_off_the_loop(
    slow_disk: tuple[Broker, GatedFileSystem],
) -> None:
    broker, fs = slow_disk
    member, generation = await stable_member(broker)
    broker.create_topic(TOPIC, 32, {}, reason="test")
    now = broker.wall_ms()
    for partition in broker.topics.get(TOPIC).partitions:  # type: ignore[union-attr]
        partition.append(make_batch([b"x" * 1024], timestamp_ms=now), now)
    fs.close()
    await until(lambda: fs.held == 1, "the retention flush at the gate")
    worst = await heartbeats_answered_promptly(broker, member, generation)
    fs.let_through(64)  # one fsync per partition, one partition at a time
    await until(lambda: fs.held == 0, "the flush to finish")
    assert fs.loop_fsyncs == 0
    assert worst < 1.0, worst
