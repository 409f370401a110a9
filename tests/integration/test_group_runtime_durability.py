"""The OffsetCommit path of the running broker with disk faults injected into the group log.

A commit is acknowledged only once its records are fsynced; a failed write or fsync answers
COORDINATOR_NOT_AVAILABLE and leaves the committed view unchanged; commits arriving together
share one fsync (group commit, SPEC §11).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from coordinator.runtime.broker import Broker
from coordinator.settings import defaults
from protocol.build import build
from storage.fs import FaultyFileSystem
from storage.log import LogOfflineError
from tests.fakes import FakeConnection, FakeContext, FakeHeader
from tests.integration.in_process import until

TOPIC = "t"


_connections = iter(range(1000, 10**9))


def commit(broker: Broker, group: str, offsets: dict[int, int], version: int = 8
           ) -> FakeContext:
    """Send a standalone OffsetCommit (generation -1); the answer arrives in `ctx.responses`."""
    request = build(load_request_schema(8, version), {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
            for p, o in offsets.items()]}],
    })
    ctx = FakeContext(FakeHeader(8, version), FakeConnection(next(_connections)))
    broker.groups.offset_commit(ctx, request)  # type: ignore[arg-type]
    return ctx


def errors(ctx: FakeContext) -> list[ErrorCode]:
    (response,) = ctx.responses
    return [p.error_code for t in response.topics for p in t.partitions]


async def answered(*contexts: FakeContext) -> None:
    for _ in range(500):
        if all(ctx.responses for ctx in contexts):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("commit not answered")


def committed(broker: Broker, group: str, partition: int) -> int:
    (fetched,) = broker.groups.offsets.fetch(group, [(TOPIC, [partition])])
    return fetched.offset


async def test_a_commit_is_answered_after_its_fsync(
    faulty_disk_broker: tuple[Broker, FaultyFileSystem],
) -> None:
    b, fs = faulty_disk_broker
    before = fs.ops.get("fsync", 0)
    ctx = commit(b, "g", {0: 10})
    assert ctx.responses == []  # nothing before the fsync
    await answered(ctx)
    assert errors(ctx) == [ErrorCode.none]
    assert fs.ops["fsync"] == before + 1
    assert committed(b, "g", 0) == 10


async def test_a_failed_write_answers_coordinator_not_available_and_carries_on(
    faulty_disk_broker: tuple[Broker, FaultyFileSystem],
) -> None:
    """A write that fails before anything of it is durable (disk full), rolled back and the
    rollback verified: the commit is refused, the broker keeps serving."""
    b, fs = faulty_disk_broker
    ok = commit(b, "g", {0: 10, 1: 11})
    await answered(ok)
    assert errors(ok) == [ErrorCode.none, ErrorCode.none]

    fs.fail_next_write()
    failed = commit(b, "g", {0: 20, 1: 21})
    await answered(failed)
    assert fs.pending() == 0
    assert errors(failed) == [ErrorCode.coordinator_not_available] * 2
    assert (committed(b, "g", 0), committed(b, "g", 1)) == (10, 11)
    assert not b.groups.offsets.has_pending("g")

    retried = commit(b, "g", {0: 30, 1: 31})
    await answered(retried)
    assert errors(retried) == [ErrorCode.none, ErrorCode.none]
    assert (committed(b, "g", 0), committed(b, "g", 1)) == (30, 31)
    assert not b.stop_requested.is_set()


async def test_a_failed_fsync_stops_the_broker(
    faulty_disk_broker: tuple[Broker, FaultyFileSystem],
) -> None:
    """Never retried nor carried on from: the commit is refused, every later one too, and
    the broker stops with the error (the process exits non-zero)."""
    b, fs = faulty_disk_broker
    ok = commit(b, "g", {0: 10, 1: 11})
    await answered(ok)
    fs.fail_next_fsync()
    failed = commit(b, "g", {0: 20, 1: 21})
    await answered(failed)
    assert errors(failed) == [ErrorCode.coordinator_not_available] * 2
    assert b.stop_requested.is_set() and isinstance(b.failure, LogOfflineError)
    fsyncs = fs.ops["fsync"]
    later = commit(b, "g", {0: 30, 1: 31})
    await answered(later)
    assert errors(later) == [ErrorCode.coordinator_not_available] * 2
    assert (committed(b, "g", 0), committed(b, "g", 1)) == (10, 11)
    assert fs.ops["fsync"] == fsyncs


async def test_commits_arriving_together_share_one_fsync(
    faulty_disk_broker: tuple[Broker, FaultyFileSystem],
) -> None:
    b, fs = faulty_disk_broker
    log = b.groups.group_log
    same_partition = [g for g in (f"g{i}" for i in range(5000))
                      if log.partition_of(g) == log.partition_of("g0")][:20]
    fsyncs, rounds = fs.ops.get("fsync", 0), log.fsyncs
    contexts = [commit(b, group, {0: i}) for i, group in enumerate(same_partition)]
    await answered(*contexts)
    assert all(errors(ctx) == [ErrorCode.none] for ctx in contexts)
    assert (fs.ops["fsync"] - fsyncs, log.fsyncs - rounds) == (1, 1)

    # groups on different partitions: one flush round, one fsync per partition touched
    spread = [f"h{i}" for i in range(20)]
    partitions = {log.partition_of(g) for g in spread}
    fsyncs, rounds = fs.ops["fsync"], log.fsyncs
    contexts = [commit(b, group, {1: i}) for i, group in enumerate(spread)]
    await answered(*contexts)
    assert (fs.ops["fsync"] - fsyncs, log.fsyncs - rounds) == (len(partitions), 1)


async def test_commits_arriving_during_an_fsync_share_the_next_one(
    faulty_disk_broker: tuple[Broker, FaultyFileSystem],
) -> None:
    b, fs = faulty_disk_broker
    fsyncs = fs.ops.get("fsync", 0)
    first = commit(b, "g", {0: 1})
    await asyncio.sleep(0)  # the flush of `first` is on its way to the worker thread
    later = [commit(b, "g", {0: i}) for i in range(2, 40)]
    await answered(first, *later)
    assert all(errors(ctx) == [ErrorCode.none] for ctx in [first, *later])
    assert fs.ops["fsync"] - fsyncs <= 2
    assert committed(b, "g", 0) == 39


async def test_a_failed_fsync_fails_every_commit_waiting_on_it(
    faulty_disk_broker: tuple[Broker, FaultyFileSystem],
) -> None:
    b, fs = faulty_disk_broker
    log = b.groups.group_log
    groups = [g for g in (f"g{i}" for i in range(5000))
              if log.partition_of(g) == log.partition_of("g0")][:5]
    fs.fail_next_fsync()
    contexts = [commit(b, group, {0: 7}) for group in groups]
    await answered(*contexts)
    assert all(errors(ctx) == [ErrorCode.coordinator_not_available] for ctx in contexts)
    assert all(committed(b, group, 0) == -1 for group in groups)


def sealed_bytes(data_dir: Path) -> int:
    """Bytes in the group log's sealed segments (all but the last of each partition)."""
    return sum(p.stat().st_size for d in data_dir.glob("__consumer_offsets-*")
               for p in sorted(d.glob("*.log"))[:-1])


async def test_compaction_in_the_running_broker_keeps_the_committed_view(
    tmp_path: Path,
) -> None:
    settings = defaults().with_overrides({
        "log.dirs": str(tmp_path / "data"), "offsets.topic.num.partitions": "2",
        "offsets.topic.segment.bytes": "4096", "log.cleaner.backoff.ms": "50"})
    b = Broker(settings)
    await b.start()
    b.create_topic(TOPIC, 4, {}, reason="test")
    await until(lambda: not b.groups.loading, "the group log to load")
    for i in range(300):
        ctx = commit(b, f"g{i % 3}", {i % 4: i})
        await answered(ctx)
    view = b.groups.offsets.committed_view()
    written = b.groups.group_log.logs[0].log_end_offset + b.groups.group_log.logs[1].log_end_offset
    assert written == 300
    for _ in range(200):
        await asyncio.sleep(0.02)
        if sealed_bytes(tmp_path / "data") < 4096:  # 300 commits of 12 keys wrote ~30 KiB
            break
    else:
        raise AssertionError("the cleaner did not compact the group log")
    await b.stop()

    reopened = Broker(settings)
    await reopened.start()
    await until(lambda: not reopened.groups.loading, "the group log to load")
    assert reopened.groups.offsets.committed_view() == view
    await reopened.stop()


async def test_a_commit_refused_after_a_failed_fsync_does_not_come_back_after_restart(
    tmp_path: Path,
) -> None:
    settings = defaults().with_overrides({"log.dirs": str(tmp_path / "data")})
    first = Broker(settings)
    fs = FaultyFileSystem()
    first.groups.fs = fs
    await first.start()
    first.create_topic(TOPIC, 1, {}, reason="test")
    await until(lambda: not first.groups.loading, "the group log to load")
    ok = commit(first, "g", {0: 10})
    await answered(ok)
    fs.fail_next_fsync()
    refused = commit(first, "g", {0: 20})
    await answered(refused)
    assert errors(refused) == [ErrorCode.coordinator_not_available]
    await first.stop()

    second = Broker(settings)
    await second.start()
    await until(lambda: not second.groups.loading, "the group log to load")
    try:
        assert committed(second, "g", 0) == 10
    finally:
        await second.stop()
