"""Disk faults on the group log, then a restart: every acknowledged change is there, nothing
answered with an error came back, and no `--repair` is needed.

* In process (`FaultyFileSystem` under the group log): an fsync that fails once or keeps
  failing, with ftruncate failing too or not, and a torn write whose rollback fails. The
  broker stops itself (fail-stop); a commit and a DeleteGroups answered with an error stay
  undone after the restart. A full disk (ENOSPC) keeps answering errors while full and
  recovers when space is freed, without stopping.
* The real broker (`python -m coordinator`, see `tests/bench/disk_faults.py`; a failed group-log
  fsync armed by the test kit's `fail_group_log`, the others by `REBALANCED_FAULT_PLAN`): it
  exits non-zero with one line naming the file and the error, and its restart holds every
  acknowledged commit.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from coordinator.runtime.broker import Broker
from coordinator.settings import defaults
from storage.fs import FaultRule, FaultyFileSystem
from tests.bench.disk_faults import KIT_PLANS, PLANS, run_plan
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
    # A failed fsync of the group log alone is the test kit's `fail_group_log`: that plan runs
    # on the kit's broker; the others need the environment's plan (directory fsyncs, ftruncate).
    outcome = run_plan(plan, tmp_path, kit=plan in KIT_PLANS)
    assert outcome.exit_code not in (None, 0), outcome
    assert outcome.offline_lines >= 1
    assert outcome.acknowledged > 0 and outcome.error_answered > 0, outcome
    assert (outcome.lost, outcome.resurrected, outcome.repair_needed) == (0, 0, False), outcome


async def test_a_group_log_segment_deleted_while_running_is_written_again_from_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Noticed at the next roll (and reported), not at the next start: the groups of its
    partition are written again from memory, so the restart (no repair) keeps every
    acknowledged commit, and a group deleted by a tombstone the lost segment held stays
    deleted."""
    settings = {"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "2048"}
    data = tmp_path / "data"
    broker = await start(data, overrides=settings)
    first = [f"g{i}" for i in range(60)]
    for group in first:  # one record each, at offsets 0..59 of the one partition
        assert await commit(broker, group, 7) == ErrorCode.none
    directory = data / "__consumer_offsets-0"
    assert len(sorted(directory.glob("*.log"))) >= 4
    # g0's offset (in the first segment) is deleted; its tombstone goes to the active one,
    # which the next commits seal.
    assert await delete(broker, "g0") == ErrorCode.none
    second = [f"h{i}" for i in range(30)]
    for group in second:
        assert await commit(broker, group, 8) == ErrorCode.none
    segments = sorted(directory.glob("*.log"))
    doomed = next(s for s, after in itertools.pairwise(segments)
                  if int(s.stem) <= 60 < int(after.stem))  # the one that holds the tombstone
    doomed.unlink()
    third = [f"k{i}" for i in range(60)]
    for group in third:
        assert await commit(broker, group, 9) == ErrorCode.none
    await until(lambda: "its groups written again from memory" in capsys.readouterr().out,
                "the lost segment's groups written again")
    await broker.stop()

    restarted = await start(data, overrides=settings)  # no --repair
    try:
        assert committed(restarted, "g0") == -1
        assert {g: committed(restarted, g) for g in first[1:]} == {g: 7 for g in first[1:]}
        assert {g: committed(restarted, g) for g in second} == {g: 8 for g in second}
        assert {g: committed(restarted, g) for g in third} == {g: 9 for g in third}
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


async def test_the_real_broker_writes_a_lost_segments_groups_again_and_restarts_with_them(
    tmp_path: Path,
) -> None:
    """`python -m coordinator`: a classic group with a member and many groups' offsets; a
    sealed group-log segment is deleted, the next rolls notice it, and after a restart every
    group and offset is there."""
    from tests.bench import wire
    from tests.bench.hostile_load import join_group
    from tests.broker_process import BrokerProcess

    settings = {"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "2048"}
    broker = BrokerProcess(tmp_path / "data", settings=settings).start()
    port = broker.port

    async def commit_all(conn: wire.Connection, groups: list[str], offset: int) -> None:
        for group in groups:
            answer = await conn.call(8, 2, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "retention_time": -1, "topics": [{"name": "t", "partitions": [
                    {"partition_index": 0, "committed_offset": offset,
                     "committed_metadata": ""}]}]})
            assert answer.topics[0].partitions[0].error_code == ErrorCode.none

    async def fetched(conn: wire.Connection, group: str) -> int:
        answer = await conn.call(9, 2, {"group_id": group, "topics": [
            {"name": "t", "partition_indexes": [0]}]})
        return int(answer.topics[0].partitions[0].committed_offset)

    try:
        conn = await wire.Connection.open("127.0.0.1", port)
        await wire.group_log_loaded(conn)
        await conn.call(19, 5, {"topics": [
            {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": []}], "timeout": timedelta(seconds=30), "validate_only": False})
        member_id, _ = await join_group(conn, "classic")  # its record at the start of the log
        first = [f"g{i}" for i in range(40)]
        await commit_all(conn, first, 7)
        segments = sorted((tmp_path / "data" / "__consumer_offsets-0").glob("*.log"))
        assert len(segments) >= 3
        segments[0].unlink()  # the classic group's record and the first commits
        later = [f"k{i}" for i in range(40)]
        await commit_all(conn, later, 9)
        await until(lambda: "its groups written again from memory" in broker.log_text(),
                    "the lost segment's groups written again")
        await conn.close()
    finally:
        broker.stop()
    assert "log segment missing" in broker.log_text()

    restarted = BrokerProcess(tmp_path / "data", port=port, settings=settings).start()
    try:
        conn = await wire.Connection.open("127.0.0.1", port)
        await wire.group_log_loaded(conn)
        assert {g: await fetched(conn, g) for g in first} == {g: 7 for g in first}
        assert {g: await fetched(conn, g) for g in later} == {g: 9 for g in later}
        described = await conn.call(15, 5, {"groups": ["classic"],
                                            "include_authorized_operations": False})
        group = described.groups[0]
        assert group.error_code == ErrorCode.none
        assert [m.member_id for m in group.members] == [member_id]
        await conn.close()
    finally:
        restarted.stop()
    assert "Traceback" not in restarted.log_text()
