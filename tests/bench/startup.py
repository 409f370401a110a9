"""Broker start-up: process start to accepting connections, and group-log recovery.

    python -m tests.bench.startup --empty [--runs 10]
    python -m tests.bench.startup --records 1000000 [--runs 3]
    ... [--tree base=<another checkout> --tree new=.]   (side by side, alternating)

`--empty`: fresh `python -m coordinator` processes on an empty data directory, timed from the
spawn until the Kafka port answers ApiVersions, with the default settings (50 group-log
partitions) and with the test kit's (one partition, `coordinator.testkit`), alternating. The
broker's own CPU time at that moment is read from /proc.

`--records N`: a data directory holding N group-log records is written first, through the
group log's own writer (`GroupLog.append`, Kafka's `__consumer_offsets` key/value schemas):
every group rebalances and commits each round, so a round writes one GroupMetadata record
(generation, three members with subscription and assignment) and one OffsetCommit record per
partition for each group. Then the broker is started on a copy of it and timed from the spawn
to accepting, and to the moment the last group-log partition is served (an OffsetFetch of a
group placed in the partition replayed last returns its last commit). After each run every
group's committed offsets are fetched and compared with the last commit written.

Bytecode caches: the child runs with them written and used (as after `pip install`, which
compiles them); the first run of a configuration writes them and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench.brokers import REPO, Rebalanced

OFFSET_FETCH_V = 8  # several groups per request, `topics: null` for all of a group's offsets
COORDINATOR_LOAD_IN_PROGRESS = 14

# The test kit's broker settings that change start-up work (coordinator/testkit/process.py).
KIT_SETTINGS = {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}


@dataclass(frozen=True)
class Start:
    accepting_s: float
    cpu_s: float


def _start_once(workdir: Path, settings: dict[str, str], repo: Path = REPO,
                timeout: float = 120.0) -> tuple[Rebalanced, Start]:
    broker = Rebalanced(workdir, settings, repo=repo)
    broker.start(timeout)
    assert broker.start_to_ready_s is not None
    return broker, Start(broker.start_to_ready_s, broker.stats().cpu_seconds())


def _summary(name: str, starts: list[Start]) -> str:
    wall = [s.accepting_s * 1000 for s in starts]
    cpu = [s.cpu_s * 1000 for s in starts]
    return (f"{name:<28} runs={len(starts):2d}  spawn->accepting median "
            f"{statistics.median(wall):6.0f} ms (min {min(wall):4.0f}, max {max(wall):4.0f})"
            "  broker CPU median "
            f"{statistics.median(cpu):5.0f} ms (min {min(cpu):4.0f})")


def bench_empty(workdir: Path, runs: int, trees: dict[str, Path]) -> None:
    configurations = {f"{tree}, {name}": (repo, settings) for tree, repo in trees.items()
                      for name, settings in (("default settings", {}),
                                             ("test kit settings", KIT_SETTINGS))}
    results: dict[str, list[Start]] = {name: [] for name in configurations}
    for repo, settings in configurations.values():  # writes the bytecode caches; not counted
        broker, _ = _start_once(workdir, settings, repo)
        broker.cleanup()
    for _ in range(runs):  # alternating, so the machine's other load falls on all alike
        for name, (repo, settings) in configurations.items():
            broker, start = _start_once(workdir, settings, repo)
            broker.cleanup()
            results[name].append(start)
    for name, starts in results.items():
        print(_summary(name, starts))


# ------------------------------------------------------------------------ recovery


@dataclass(frozen=True)
class Layout:
    records: int
    groups: int
    partitions: int  # committed partitions per group (over two topics)
    num_partitions: int  # group-log partitions

    @property
    def per_round(self) -> int:
        return self.groups * (self.partitions + 1)

    def group(self, g: int) -> str:
        return f"app-{g % 97}-consumers-{g}"

    def topic_partition(self, p: int) -> tuple[str, int]:
        half = (self.partitions + 1) // 2
        return ("orders", p) if p < half else ("payments", p - half)


def _metadata_record(layout: Layout, group: str, generation: int, now_ms: int) -> Any:
    from coordinator.grouplog.records import (
        GroupMemberRecord,
        GroupMetadataKey,
        GroupMetadataRecord,
        GroupMetadataValue,
    )

    members = tuple(
        GroupMemberRecord(member_id=f"consumer-{i}-{generation:08x}-4b1f-9e2a", client_id=f"c{i}",
                          client_host=f"/10.0.0.{i + 1}", rebalance_timeout=300_000,
                          session_timeout=45_000,
                          subscription=b"\x00\x03\x00\x00\x00\x02\x00\x06orders\x00\x08payments"
                          + bytes(12),
                          assignment=b"\x00\x03\x00\x00\x00\x01\x00\x06orders" + bytes(24))
        for i in range(3))
    return GroupMetadataRecord(
        key=GroupMetadataKey(group=group),
        value=GroupMetadataValue(protocol_type="consumer", generation=generation,
                                 protocol="cooperative-sticky", leader=members[0].member_id,
                                 current_state_timestamp=now_ms, members=members))


def _expected_offset(round_: int, g: int, p: int) -> int:
    return round_ * 1000 + g * 7 + p


async def _write_group_log(data_dir: Path, layout: Layout) -> dict[str, dict[tuple[str, int], int]]:
    """Write `layout.records` records through the group log; the last offset of every key."""
    from coordinator.grouplog.log import GroupLog
    from coordinator.grouplog.records import (
        OffsetCommitKey,
        OffsetCommitRecord,
        OffsetCommitValue,
    )
    from storage.log import LogConfig

    config = LogConfig(segment_bytes=100 * 1024 * 1024, retention_ms=-1, retention_bytes=-1,
                       max_message_bytes=2**31 - 1)
    group_log = GroupLog.open(data_dir, layout.num_partitions, config, "60000")
    expected: dict[str, dict[tuple[str, int], int]] = {}
    written = 0
    round_ = 0
    now_ms = int(time.time() * 1000) - 3_600_000
    try:
        while written < layout.records:
            for g in range(layout.groups):
                if written >= layout.records:
                    break
                group = layout.group(g)
                records: list[Any] = [_metadata_record(layout, group, round_ + 1, now_ms)]
                committed = expected.setdefault(group, {})
                for p in range(min(layout.partitions, layout.records - written - 1)):
                    topic, partition = layout.topic_partition(p)
                    offset = _expected_offset(round_, g, p)
                    records.append(OffsetCommitRecord(
                        key=OffsetCommitKey(group=group, topic=topic, partition=partition),
                        value=OffsetCommitValue(offset=offset, leader_epoch=round_,
                                                metadata="", commit_timestamp=now_ms)))
                    committed[(topic, partition)] = offset
                await group_log.append(records, now_ms, group_id=group)
                written += len(records)
                now_ms += 1
            round_ += 1
        group_log.flush()
    finally:
        group_log.close()
    print(f"wrote {written:,} group-log records: {layout.groups:,} groups, {round_} rounds of "
          f"one GroupMetadata record and {layout.partitions} offset commits each")
    return expected


async def _fetch(conn: Any, groups: list[str]) -> dict[str, Any]:
    body = {"groups": [{"group_id": g, "topics": None} for g in groups], "require_stable": False}
    reply = await conn.call(9, OFFSET_FETCH_V, body, timeout=30)
    return {group.group_id: group for group in reply.groups}


async def _wait_loaded(port: int, probe: str, expect: dict[tuple[str, int], int],
                       timeout: float) -> float:
    """The monotonic time when `probe`'s offsets are served."""
    from tests.bench.wire import Connection

    deadline = time.monotonic() + timeout
    conn = await Connection.open("127.0.0.1", port, timeout=5)
    try:
        while time.monotonic() < deadline:
            answer = (await _fetch(conn, [probe]))[probe]
            if answer.error_code.value == 0:
                got = {(t.name, p.partition_index): p.committed_offset
                       for t in answer.topics for p in t.partitions}
                if got == expect:
                    return time.monotonic()
                raise RuntimeError(f"{probe}: {len(got)} offsets served, {len(expect)} written")
            if answer.error_code.value != COORDINATOR_LOAD_IN_PROGRESS:
                raise RuntimeError(f"{probe}: error {answer.error_code.value}")
            await asyncio.sleep(0.002)
    finally:
        await conn.close()
    raise TimeoutError(f"{probe} not served after {timeout:.0f}s")


async def _verify_all(port: int, expected: dict[str, dict[tuple[str, int], int]]) -> int:
    """Compare every group's served offsets with the last commit written; the offsets checked."""
    from tests.bench.wire import Connection

    conn = await Connection.open("127.0.0.1", port, timeout=5)
    checked = 0
    try:
        groups = list(expected)
        for i in range(0, len(groups), 50):
            answers = await _fetch(conn, groups[i:i + 50])
            for group in groups[i:i + 50]:
                answer = answers[group]
                got = {(t.name, p.partition_index): p.committed_offset
                       for t in answer.topics for p in t.partitions
                       if p.error_code.value == 0}
                if answer.error_code.value != 0 or got != expected[group]:
                    raise RuntimeError(f"{group}: served {len(got)} offsets (error "
                                       f"{answer.error_code.value}), not the "
                                       f"{len(expected[group])} written")
                checked += len(got)
    finally:
        await conn.close()
    return checked


def _probe_group(layout: Layout, expected: dict[str, Any]) -> str:
    """A group placed in the group-log partition replayed last."""
    from coordinator.grouplog.placement import partition_for

    last = layout.num_partitions - 1
    return next(g for g in expected if partition_for(g, layout.num_partitions) == last)


def bench_recovery(workdir: Path, layout: Layout, runs: int, trees: dict[str, Path]) -> None:
    source = workdir / "written"
    started = time.monotonic()
    expected = asyncio.run(_write_group_log(source, layout))
    size = sum(f.stat().st_size for f in source.rglob("*") if f.is_file())
    print(f"  in {time.monotonic() - started:.1f} s, {size / 1e6:.1f} MB on disk")
    probe = _probe_group(layout, expected)
    settings = {"offsets.topic.num.partitions": str(layout.num_partitions),
                "log.cleaner.backoff.ms": "3600000"}
    rows: dict[str, list[tuple[float, float, float, int]]] = {tree: [] for tree in trees}
    # Run 0 writes the bytecode caches and is not counted; the trees alternate.
    for run, tree in ((run, tree) for run in range(runs + 1) for tree in trees):
        data_dir = workdir / f"run-{run}-{tree}"
        shutil.copytree(source, data_dir)
        broker = Rebalanced(workdir, settings, data_dir=data_dir, repo=trees[tree])
        spawned = time.monotonic()
        broker.start(600)
        accepting = broker.start_to_ready_s
        assert accepting is not None
        try:
            loaded_at = asyncio.run(_wait_loaded(broker.port, probe, expected[probe], 600))
            cpu = broker.stats().cpu_seconds()
            rss = broker.stats().rss_bytes()
            checked = asyncio.run(_verify_all(broker.port, expected))
        finally:
            broker.cleanup()
        shutil.rmtree(data_dir, ignore_errors=True)
        if run:
            rows[tree].append((accepting, loaded_at - spawned, cpu, rss))
            print(f"  {tree} run {run}: spawn->accepting {accepting * 1000:.0f} ms, spawn->every "
                  f"partition served {(loaded_at - spawned) * 1000:.0f} ms, broker CPU "
                  f"{cpu * 1000:.0f} ms, RSS {rss / 1e6:.1f} MB; {checked:,} offsets checked")
    for tree, done in rows.items():
        print(f"{tree} median: spawn->accepting {statistics.median(r[0] for r in done) * 1000:.0f}"
              f" ms, spawn->recovered {statistics.median(r[1] for r in done) * 1000:.0f} ms, "
              f"broker CPU {statistics.median(r[2] for r in done) * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--empty", action="store_true", help="start on an empty data directory")
    mode.add_argument("--records", type=int, help="recover this many group-log records")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=50,
                        help="committed partitions per group")
    parser.add_argument("--group-log-partitions", type=int, default=50)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="a checkout whose broker to run, alternating with the others "
                        "(default: this one)")
    args = parser.parse_args()
    trees = {name: Path(path).resolve() for name, _, path in
             (tree.partition("=") for tree in args.tree)} or {"this tree": REPO}
    # Installed packages carry bytecode caches (pip compiles them); so does this measurement.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    with open("/proc/loadavg", encoding="ascii") as f:
        print("load average:", " ".join(f.read().split()[:3]))
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
        workdir = Path(tmp)
        if args.empty:
            bench_empty(workdir, args.runs or 10, trees)
        else:
            bench_recovery(workdir, Layout(args.records, args.groups, args.partitions,
                                           args.group_log_partitions), args.runs or 3, trees)
    with open("/proc/loadavg", encoding="ascii") as f:
        print("load average:", " ".join(f.read().split()[:3]))


if __name__ == "__main__":
    main()
