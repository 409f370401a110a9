"""Offset scenarios: OffsetCommit throughput from a group's members, and group-log recovery."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench.brokers import Broker, Rebalanced
from tests.bench.coordinator_bench import _form_groups, _members
from tests.bench.dataplane import ensure_topic
from tests.bench.members import (
    COMMIT_V,
    FETCH_V,
    close_all,
    encode_offset_commit_v7,
    gather_bounded,
    open_connections,
)
from tests.bench.stats import percentile
from tests.bench.wire import Connection, WireError, decode

COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16


@dataclass(frozen=True, slots=True)
class OffsetParams:
    commit_members: int = 10
    commit_partitions: int = 10
    commit_seconds: float = 5.0
    recovery_records: int = 1_000_000
    recovery_groups: int = 100
    recovery_partitions: int = 100
    recovery_commit_max_s: float = 150.0
    compaction_wait_s: float = 10.0
    warmup_s: float = 1.0
    recovery_segment_bytes: int = 1 << 18  # small, so segments roll and the cleaner has work


def _commit_errors(frame: bytes) -> int:
    reply = decode(8, COMMIT_V, frame)
    return sum(1 for t in reply.topics for p in t.partitions if p.error_code.value != 0)


def _first_commit_error(frame: bytes) -> int:
    reply = decode(8, COMMIT_V, frame)
    for t in reply.topics:
        for p in t.partitions:
            if p.error_code.value != 0:
                return int(p.error_code.value)
    return 0


async def commit_throughput(broker: Broker, p: OffsetParams) -> dict[str, Any]:
    """Members of one group each commit all `commit_partitions` partitions, closed loop."""
    topic = "bench-commits"
    await asyncio.to_thread(ensure_topic, broker, topic, p.commit_partitions)
    conns, members = await _members(broker, p.commit_members, "committers", session_ms=10_000,
                                    rebalance_ms=30_000, topic=topic)
    try:
        await _form_groups(members, timeout=60)
        stats = broker.stats()
        latencies: list[float] = []
        errors = 0
        error_codes: dict[int, int] = {}
        parts = range(p.commit_partitions)

        async def loop(index: int, until: float) -> None:
            nonlocal errors
            m = members[index]
            offset = 0
            perf = time.perf_counter
            while time.monotonic() < until:
                offset += 1
                frame = encode_offset_commit_v7(m.group, m.generation, m.member_id, topic,
                                                [(q, offset * 10 + index) for q in parts])
                t = perf()
                reply = await asyncio.wait_for(m.conn.send_raw(frame), 30)
                latencies.append(perf() - t)
                bad = _commit_errors(reply)
                if bad:
                    errors += bad
                    code = _first_commit_error(reply)
                    error_codes[code] = error_codes.get(code, 0) + 1

        await gather_bounded([loop(i, time.monotonic() + p.warmup_s)
                              for i in range(len(members))], 30)
        latencies.clear()
        errors = 0
        error_codes.clear()
        cpu0 = stats.cpu_seconds()
        started = time.monotonic()
        until = started + p.commit_seconds
        results = await gather_bounded([loop(i, until) for i in range(len(members))],
                                       p.commit_seconds + 30)
        elapsed = time.monotonic() - started
        cpu = stats.cpu_seconds() - cpu0
        failures = [r for r in results if isinstance(r, BaseException)]
        if not latencies:
            raise RuntimeError(f"no commit answered: {failures[:1]!r}")
        count = len(latencies)
        return {
            "members": len(members),
            "partitions_per_commit": p.commit_partitions,
            "commits": count,
            "commits_per_s": count / elapsed,
            "offsets_per_s": count * p.commit_partitions / elapsed,
            "p50_ms": percentile(latencies, 50) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000,
            "broker_cpu_us_per_commit": cpu / count * 1e6,
            "broker_cpu_pct": cpu / elapsed * 100,
            "partition_errors": errors,
            "error_codes": error_codes,
            "member_failures": len(failures),
        }
    finally:
        await close_all(conns)


def group_log_bytes(data_dir: Path) -> int | None:
    """Bytes on disk under the group log's partitions (`__consumer_offsets-N/`)."""
    dirs = list(data_dir.glob("__consumer_offsets-*"))
    if not dirs:
        return None
    return sum(f.stat().st_size for d in dirs for f in d.rglob("*") if f.is_file())


async def _commit_bulk(broker: Broker, p: OffsetParams, topic: str,
                       records: int) -> tuple[int, int, float]:
    """Simple-consumer commits (generation -1) of `records` offsets; (committed, errors, s)."""
    per_request = p.recovery_partitions
    rounds = max(1, records // (p.recovery_groups * per_request))
    conns = await open_connections(broker.host, broker.port, 8)
    committed = 0
    errors = 0
    window = asyncio.Semaphore(64)
    started = time.monotonic()
    deadline = started + p.recovery_commit_max_s
    parts = range(per_request)

    async def send(conn: Connection, group: str, rnd: int) -> None:
        nonlocal committed, errors
        try:
            frame = encode_offset_commit_v7(group, -1, "", topic,
                                            [(q, rnd * 1000 + q) for q in parts])
            reply = await asyncio.wait_for(conn.send_raw(frame), 60)
            bad = _commit_errors(reply)
            errors += bad
            committed += per_request - bad
        finally:
            window.release()

    try:
        pending: set[asyncio.Task[None]] = set()
        for rnd in range(rounds):
            if time.monotonic() > deadline:
                break
            for g in range(p.recovery_groups):
                await window.acquire()
                task = asyncio.ensure_future(send(conns[g % len(conns)], f"recover-{g}", rnd))
                pending.add(task)
                task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending)
    finally:
        await close_all(conns)
    return committed, errors, time.monotonic() - started


async def _first_offset_fetch(broker: Broker, topic: str, partitions: int, expect: int,
                              timeout: float) -> float:
    """Monotonic time when OffsetFetch for `recover-0` first returns the committed offsets."""
    deadline = time.monotonic() + timeout
    last_error = "no attempt"
    body = {"group_id": "recover-0",
            "topics": [{"name": topic, "partition_indexes": list(range(partitions))}],
            "require_stable": False}
    while time.monotonic() < deadline:
        try:
            conn = await Connection.open(broker.host, broker.port, timeout=5)
        except WireError as exc:
            last_error = str(exc)
            await asyncio.sleep(0.01)
            continue
        try:
            while time.monotonic() < deadline:
                reply = await conn.call(9, FETCH_V, body, timeout=max(deadline - time.monotonic(),
                                                                     1))
                top = reply.error_code.value
                offsets = {pp.partition_index: pp.committed_offset
                           for t in reply.topics for pp in t.partitions
                           if pp.error_code.value == 0}
                if top == 0 and offsets.get(0) == expect:
                    return time.monotonic()
                last_error = f"error {top}, partition 0 offset {offsets.get(0)} (want {expect})"
                if top not in (0, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                               NOT_COORDINATOR):
                    raise RuntimeError(f"OffsetFetch failed: {last_error}")
                await asyncio.sleep(0.01)
        except WireError as exc:
            last_error = str(exc)
        finally:
            await conn.close()
    raise TimeoutError(f"OffsetFetch did not succeed in {timeout:.0f}s: {last_error}")


async def recovery(workdir: Path, p: OffsetParams, fsync: str = "100") -> dict[str, Any]:
    """Commit `recovery_records` offsets, stop, restart: time to accepting and to OffsetFetch."""
    topic = "bench-recovery"
    settings = {"offsets.commit.fsync": fsync, "log.cleaner.backoff.ms": "3600000",
                "offsets.topic.segment.bytes": str(p.recovery_segment_bytes)}
    broker = Rebalanced(workdir, settings)
    try:
        broker.start()
        await asyncio.to_thread(ensure_topic, broker, topic, p.recovery_partitions)
        committed, errors, commit_s = await _commit_bulk(broker, p, topic, p.recovery_records)
        if committed == 0:
            raise RuntimeError(f"no offset committed ({errors} partition errors)")
        rounds_done = committed // (p.recovery_groups * p.recovery_partitions)
        expect = (rounds_done - 1) * 1000 if rounds_done else 0
        rss_loaded = broker.stats().rss_bytes()
        before = group_log_bytes(broker.data_dir)
        stop_s = await asyncio.to_thread(broker.stop, 120.0)
        after_stop = group_log_bytes(broker.data_dir)
        # Restart on the same data: the log is replayed before offsets can be served.
        broker.settings["log.cleaner.backoff.ms"] = "1000"
        spawned = time.monotonic()
        await asyncio.to_thread(broker.start, 600.0)
        ready_s = broker.start_to_ready_s
        fetched_at = await _first_offset_fetch(broker, topic, p.recovery_partitions, expect, 600)
        recovery_s = fetched_at - spawned
        rss_recovered = broker.stats().rss_bytes()
        compacted = after_stop
        wait_until = time.monotonic() + p.compaction_wait_s
        while time.monotonic() < wait_until:
            await asyncio.sleep(0.5)
            size = group_log_bytes(broker.data_dir)
            if size is not None and (compacted is None or size < compacted):
                compacted = size
        return {
            "records_committed": committed,
            "partition_errors": errors,
            "commit_seconds": commit_s,
            "records_per_s": committed / commit_s,
            "fsync": fsync,
            "group_log_segment_bytes": p.recovery_segment_bytes,
            "stop_seconds": stop_s,
            "start_to_accepting_s": ready_s,
            "start_to_first_offset_fetch_s": recovery_s,
            "rss_before_restart_mb": rss_loaded / 1e6,
            "rss_after_recovery_mb": rss_recovered / 1e6,
            "group_log_mb_before": None if before is None else before / 1e6,
            "group_log_mb_after_stop": None if after_stop is None else after_stop / 1e6,
            "group_log_mb_after_compaction": None if compacted is None else compacted / 1e6,
            "compaction_observed": (compacted is not None and after_stop is not None
                                    and compacted < after_stop),
        }
    finally:
        broker.cleanup()
