"""Disk faults on the group log, then a restart: every acknowledged change is there, nothing
answered with an error came back, and no `--repair` is needed.

* In process (`FaultyFileSystem` under the group log): an fsync that fails once or keeps
  failing, with ftruncate failing too or not, and a torn write whose rollback fails. The
  broker stops itself (fail-stop); a commit and a DeleteGroups answered with an error stay
  undone after the restart. A full disk (ENOSPC) keeps answering errors while full and
  recovers when space is freed, without stopping.
* The real broker (`python -m coordinator` with `REBALANCED_FAULT_PLAN`, see
  `tests/bench/disk_faults.py`): it exits non-zero with one line naming the file and the
  error, and its restart holds every acknowledged commit.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from coordinator.runtime.broker import Broker
from coordinator.settings import defaults
from storage.fs import FaultRule, FaultyFileSystem
from tests.bench.disk_faults import PLANS, run_plan
from tests.integration.in_process import TOPIC, send, until

NOT_AVAILABLE = ErrorCode.coordinator_not_available
GROUPS = [f"g{i}" for i in range(8)]


def commit(broker: Broker, group: str, offset: int) -> asyncio.Future[ErrorCode]:
    ctx = send(broker, 8, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}]}]})
    return _answer(ctx, lambda r: r.topics[0].partitions[0].error_code)


def delete(broker: Broker, group: str) -> asyncio.Future[ErrorCode]:
    ctx = send(broker, 42, 2, {"groups_names": [group]})
    return _answer(ctx, lambda r: r.results[0].error_code)


def _answer(ctx, code) -> asyncio.Future[ErrorCode]:  # type: ignore[no-untyped-def]
    async def wait() -> ErrorCode:
        await until(lambda: ctx.responses, "an answer")
        return ErrorCode(code(ctx.answer))
    return asyncio.ensure_future(wait())


async def start(data: Path, fs: FaultyFileSystem | None = None,
                overrides: dict[str, str] | None = None) -> Broker:
    broker = Broker(defaults().with_overrides({"log.dirs": str(data), **(overrides or {})}))
    if fs is not None:
        broker.groups.fs = fs
    await broker.start()
    if broker.topics.get(TOPIC) is None:
        broker.create_topic(TOPIC, 1, {}, reason="test")
    await until(lambda: not broker.groups.loading, "the group log to load")
    return broker


def committed(broker: Broker, group: str) -> int:
    (fetched,) = broker.groups.offsets.fetch(group, [(TOPIC, [0])])
    return fetched.offset


def arm(fs: FaultyFileSystem, plan: str) -> None:
    log = "__consumer_offsets"
    if plan.startswith("fsync-once"):
        fs.fail_always("fsync", path=log, times=1)
    if plan.startswith("fsync-always"):
        fs.fail_always("fsync", path=".log")
    if plan.startswith("every-fsync"):  # nothing can be made durable or cut any more
        fs.fail_always("fsync")
        fs.fail_always("fsync_dir")
    if plan.endswith("ftruncate-always"):
        fs.fail_always("truncate", path="" if plan.startswith("every") else log)
    if plan == "torn-write+ftruncate-once":
        fs.fail_next_write(partial=20)
        fs.fail_always("truncate", path=log, times=1)


@pytest.mark.parametrize("plan", ["fsync-once", "fsync-always", "fsync-once+ftruncate-always",
                                  "fsync-always+ftruncate-always",
                                  "every-fsync+ftruncate-always",
                                  "torn-write+ftruncate-once"])
async def test_a_disk_fault_stops_the_broker_and_the_restart_keeps_the_durable_prefix(
    tmp_path: Path, plan: str,
) -> None:
    fs = FaultyFileSystem()
    broker = await start(tmp_path / "data", fs)
    acked = {}
    for offset in (1, 2):
        codes = await asyncio.gather(*(commit(broker, g, offset) for g in GROUPS))
        assert codes == [ErrorCode.none] * len(GROUPS)
        acked = dict.fromkeys(GROUPS, offset)
    arm(fs, plan)
    refused_delete = delete(broker, "g0")
    answers = await asyncio.gather(*(commit(broker, g, 3) for g in GROUPS[1:]))
    assert await refused_delete == NOT_AVAILABLE
    assert answers == [NOT_AVAILABLE] * (len(GROUPS) - 1)
    assert broker.stop_requested.is_set() and broker.failure is not None
    later = await asyncio.gather(*(commit(broker, g, 4) for g in GROUPS))
    assert later == [NOT_AVAILABLE] * len(GROUPS)  # nothing is carried on from
    await broker.stop()

    restarted = await start(tmp_path / "data")  # no --repair
    try:
        assert {g: committed(restarted, g) for g in GROUPS} == acked
        assert restarted.groups.service.group("g0") is not None
    finally:
        await restarted.stop()


async def test_a_full_disk_refuses_while_full_and_recovers_without_stopping(
    tmp_path: Path,
) -> None:
    fs = FaultyFileSystem()
    broker = await start(tmp_path / "data", fs)
    assert await commit(broker, "g", 1) == ErrorCode.none
    full = fs.fail_always("write", path="__consumer_offsets", times=4)
    for offset in (2, 3, 4):
        assert await commit(broker, "g", offset) == NOT_AVAILABLE
    assert await delete(broker, "g") == NOT_AVAILABLE
    assert full.fired == 4
    assert await commit(broker, "g", 5) == ErrorCode.none  # space freed
    assert not broker.stop_requested.is_set()
    await broker.stop()
    restarted = await start(tmp_path / "data")
    try:
        assert committed(restarted, "g") == 5
    finally:
        await restarted.stop()


@pytest.mark.parametrize("plan", ["fsync-once", "every-fsync+ftruncate-always"])
def test_the_real_broker_exits_on_a_failed_fsync_and_restarts_with_every_acknowledged_commit(
    tmp_path: Path, plan: str,
) -> None:
    assert PLANS[plan][1]  # a fail-stop plan
    outcome = run_plan(plan, tmp_path)
    assert outcome.exit_code not in (None, 0), outcome
    assert outcome.offline_lines >= 1
    assert outcome.acknowledged > 0 and outcome.error_answered > 0, outcome
    assert (outcome.lost, outcome.resurrected, outcome.repair_needed) == (0, 0, False), outcome


async def test_a_group_log_segment_deleted_while_running_loses_only_what_it_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Noticed at the next roll (and reported), not at the next start; the restart needs no
    repair and keeps every other segment, the ones after the gap too."""
    settings = {"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "2048"}
    data = tmp_path / "data"
    broker = await start(data, overrides=settings)
    first = [f"g{i}" for i in range(60)]
    for group in first:  # one record each, at offsets 0..59 of the one partition
        assert await commit(broker, group, 7) == ErrorCode.none
    directory = data / "__consumer_offsets-0"
    segments = sorted(directory.glob("*.log"))
    assert len(segments) >= 4
    doomed = segments[1]
    lost = set(first[int(doomed.stem):int(segments[2].stem)])
    doomed.unlink()
    second = [f"h{i}" for i in range(60)]
    for group in second:
        assert await commit(broker, group, 8) == ErrorCode.none
    assert "log segment missing" in capsys.readouterr().out  # at the rolls
    await broker.stop()

    restarted = await start(data, overrides=settings)  # no --repair
    try:
        assert {g for g in first if committed(restarted, g) == -1} == lost
        assert all(committed(restarted, g) == 7 for g in first if g not in lost)
        assert all(committed(restarted, g) == 8 for g in second)
    finally:
        await restarted.stop()
    assert "log has a gap" in capsys.readouterr().out


async def test_a_group_log_active_segment_deleted_while_running_stops_the_broker(
    tmp_path: Path,
) -> None:
    """Commits would go to a file no restart can see: the next fsync notices and stops."""
    broker = await start(tmp_path / "data", overrides={"offsets.topic.num.partitions": "1"})
    assert await commit(broker, "g", 1) == ErrorCode.none
    (tmp_path / "data" / "__consumer_offsets-0" / f"{0:020d}.log").unlink()
    assert await commit(broker, "g", 2) == NOT_AVAILABLE
    assert broker.stop_requested.is_set()
    assert "segment file missing" in str(broker.failure)
    await broker.stop()


@pytest.mark.parametrize("truncate_fails", [False, True])
async def test_a_delete_across_partitions_is_all_or_nothing(
    tmp_path: Path, truncate_fails: bool,
) -> None:
    """Two groups on two partitions, the second partition's write fails: the first one's
    write is taken back (verified), the deletion answered with an error and undone. When the
    take-back fails too, the broker stops and the restart still finds both groups."""
    fs = FaultyFileSystem()
    broker = await start(tmp_path / "data", fs)
    log = broker.groups.group_log
    a = "a0"
    b = next(g for g in (f"b{i}" for i in range(100))
             if log.partition_of(g) != log.partition_of(a))
    for group in (a, b):
        assert await commit(broker, group, 3) == ErrorCode.none
    fs.rules.append(FaultRule("write", OSError(errno.ENOSPC, "full"), path="__consumer_offsets",
                              times=1, after=1))
    if truncate_fails:
        fs.fail_always("truncate", path="__consumer_offsets", times=1)
    ctx = send(broker, 42, 2, {"groups_names": [a, b]})
    await until(lambda: ctx.responses, "an answer")
    assert [r.error_code for r in ctx.answer.results] == [NOT_AVAILABLE, NOT_AVAILABLE]
    assert broker.stop_requested.is_set() is truncate_fails
    await broker.stop()
    restarted = await start(tmp_path / "data")
    try:
        assert (committed(restarted, a), committed(restarted, b)) == (3, 3)
    finally:
        await restarted.stop()


async def test_with_an_interval_fsync_policy_a_failed_fsync_stops_the_broker_and_keeps_the_tail(
    tmp_path: Path,
) -> None:
    """`offsets.commit.fsync=N` acknowledges on write: the tail is acknowledged already, so the
    fail-stop leaves it for the restart instead of cutting it."""
    fs = FaultyFileSystem()
    broker = await start(tmp_path / "data", fs, overrides={"offsets.commit.fsync": "50"})
    fs.fail_always("fsync", path="__consumer_offsets", times=1)
    assert await commit(broker, "g", 1) == ErrorCode.none
    await until(lambda: broker.stop_requested.is_set(), "the interval fsync to fail")
    assert await commit(broker, "g", 2) == NOT_AVAILABLE
    await broker.stop()
    restarted = await start(tmp_path / "data")
    try:
        assert committed(restarted, "g") == 1
    finally:
        await restarted.stop()
