"""Coordinator scenarios: join storm, heartbeat throughput, LeaveGroup, session expiry, many groups.

All driven by `members.Member` over raw Kafka frames from this one asyncio process. Broker CPU is
the broker process's utime+stime delta over the measured window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tests.bench.brokers import Broker
from tests.bench.members import (
    Member,
    SyncBarrier,
    SyncTracker,
    close_all,
    gather_bounded,
    open_connections,
)
from tests.bench.stats import percentile
from tests.bench.wire import Connection


@dataclass(frozen=True, slots=True)
class CoordinatorParams:
    storm_sizes: tuple[int, ...] = (10, 100, 500, 5000)
    storm_timeout_s: float = 30.0
    heartbeat_groups: int = 10
    heartbeat_members: int = 10
    heartbeat_seconds: float = 5.0
    leave_members: int = 10
    leave_repeats: int = 5
    leave_budget_s: float = 10.0  # no further repeat starts after this (peers take seconds)
    expiry_session_ms: int = 6000
    many_groups: int = 10_000
    many_groups_session_ms: int = 30_000
    idle_seconds: float = 5.0
    connect_s: float = 30.0  # opening the many-groups connections must finish within this
    warmup_s: float = 1.0


def _host_port(broker: Broker) -> tuple[str, int]:
    return broker.host, broker.port


class LiveGroup:
    """Members running `Member.live` (join, sync, heartbeat, rejoin) with one tracker."""

    def __init__(self, members: Sequence[Member], heartbeat_s: float, deadline: float) -> None:
        self.members = list(members)
        self.heartbeat_s = heartbeat_s
        self.deadline = deadline
        self.tracker = SyncTracker(len(members))
        self.stops = {m.index: asyncio.Event() for m in members}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.failures: list[BaseException] = []
        self.failed = asyncio.Event()
        self.rebalance_seen: list[tuple[float, int, int]] = []  # (monotonic, member, code)

    def start(self) -> None:
        for m in self.members:
            task = asyncio.ensure_future(m.live(self.heartbeat_s, self.stops[m.index],
                                                self.tracker.synced, self._on_rebalance,
                                                self.deadline))
            task.add_done_callback(self._on_done)
            self.tasks[m.index] = task

    def _on_rebalance(self, member: Member, code: int) -> None:
        self.rebalance_seen.append((time.monotonic(), member.index, code))

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.failures.append(task.exception())  # type: ignore[arg-type]
            self.failed.set()

    async def wait_synced(self, timeout: float) -> float:
        """Monotonic time when the tracker completed; raises on timeout or a member failure."""
        done = asyncio.ensure_future(self.tracker.done.wait())
        failed = asyncio.ensure_future(self.failed.wait())
        try:
            await asyncio.wait({done, failed}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()
            failed.cancel()
        if self.tracker.done.is_set():
            assert self.tracker.done_at is not None
            return self.tracker.done_at
        if self.failures:
            raise RuntimeError(f"{len(self.failures)} member(s) failed: {self.failures[0]!r}")
        counts = {g: len(s) for g, s in self.tracker.by_generation.items()}
        raise TimeoutError(f"group not synced after {timeout:.0f}s (synced by generation: "
                           f"{counts}, expected {self.tracker.expected})")

    async def stop_member(self, index: int) -> None:
        self.stops[index].set()
        task = self.tasks.pop(index)
        try:
            await asyncio.wait_for(task, 10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
        except Exception:
            pass  # its failure is already recorded by _on_done

    async def stop(self) -> None:
        for event in self.stops.values():
            event.set()
        tasks = list(self.tasks.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.tasks.clear()


async def _members(broker: Broker, count: int, group: str | Sequence[str], session_ms: int,
                   rebalance_ms: int, topic: str = "bench",
                   deadline: float | None = None) -> tuple[list[Connection], list[Member]]:
    host, port = _host_port(broker)
    conns = await open_connections(host, port, count, deadline=deadline)
    groups = [group] * count if isinstance(group, str) else list(group)
    barriers = {name: SyncBarrier() for name in set(groups)}
    members = [Member(c, groups[i], session_ms=session_ms, rebalance_ms=rebalance_ms,
                      topic=topic, index=i, barrier=barriers[groups[i]])
               for i, c in enumerate(conns)]
    return conns, members


def kafka_initial_wait(added: Sequence[float], delay_s: float, rebalance_s: float) -> float:
    """When Kafka's InitialDelayedJoin completes, for members added at `added` (monotonic).

    The first member starts a `delay_s` wait; when it runs out and members were added during
    it, the wait is extended by min(delay, what is left of the rebalance timeout), and so on.
    """
    times = sorted(added)
    deadline = times[0] + delay_s
    remaining = max(rebalance_s - delay_s, 0.0)
    window_start = times[0]
    while True:
        added_in_window = any(window_start < t <= deadline for t in times[1:])
        if not added_in_window or remaining <= 0:
            return deadline
        extension = min(delay_s, remaining)
        remaining -= extension
        window_start = deadline
        deadline += extension


async def join_storm(broker: Broker, size: int, p: CoordinatorParams) -> dict[str, Any]:
    """`size` members join one new group at once; until all are synced at one generation.

    `beyond_delay_ms` is the time past the broker's initial delay (configured for rebalanced;
    built in for the peers). `overhead_ms` is the time past the broker's whole deliberate wait:
    rebalanced follows Kafka and extends the delay while members keep arriving.
    """
    session_ms, rebalance_ms = 6000, 60_000
    conns, members = await _members(broker, size, f"storm-{size}", session_ms=session_ms,
                                    rebalance_ms=rebalance_ms)
    stats = broker.stats()
    try:
        cpu0 = stats.cpu_seconds()
        started = time.monotonic()
        group = LiveGroup(members, heartbeat_s=1.0, deadline=started + p.storm_timeout_s)
        group.start()
        try:
            done_at = await group.wait_synced(p.storm_timeout_s)
        finally:
            cpu = stats.cpu_seconds() - cpu0
            await group.stop()
        total_ms = (done_at - started) * 1000
        delay_ms = broker.initial_delay_ms(session_ms)
        added = [m.first_added_at for m in members if m.first_added_at is not None]
        if broker.extends_initial_delay:
            wait_ms = (kafka_initial_wait(added, delay_ms / 1000, rebalance_ms / 1000)
                       - started) * 1000
        else:
            wait_ms = (min(added) - started) * 1000 + delay_ms
        return {
            "members": size,
            "total_ms": total_ms,
            "initial_delay_ms": delay_ms,
            "beyond_delay_ms": total_ms - delay_ms,
            "deliberate_wait_ms": wait_ms,
            "overhead_ms": total_ms - wait_ms,
            "join_spread_ms": (max(added) - min(added)) * 1000,
            "generation": group.tracker.generation,
            "rebalances_seen": len(group.rebalance_seen),
            "broker_cpu_ms": cpu * 1000,
            "rss_mb": stats.rss_bytes() / 1e6,
        }
    finally:
        await close_all(conns)


async def heartbeat_throughput(broker: Broker, p: CoordinatorParams) -> dict[str, Any]:
    n = p.heartbeat_groups * p.heartbeat_members
    names = [f"hb-{i // p.heartbeat_members}" for i in range(n)]
    conns, members = await _members(broker, n, names, session_ms=10_000, rebalance_ms=30_000)
    try:
        await _form_groups(members, timeout=60)
        stats = broker.stats()
        latencies: list[float] = []
        errors: dict[int, int] = {}

        async def loop(m: Member, until: float) -> None:
            perf = time.perf_counter
            while time.monotonic() < until:
                t = perf()
                code = await m.heartbeat()
                latencies.append(perf() - t)
                if code:
                    errors[code] = errors.get(code, 0) + 1

        # Warm up (first heartbeats after a rebalance, allocator, caches), then measure.
        await gather_bounded([loop(m, time.monotonic() + p.warmup_s) for m in members], 30)
        latencies.clear()
        errors.clear()
        cpu0 = stats.cpu_seconds()
        started = time.monotonic()
        until = started + p.heartbeat_seconds
        results = await gather_bounded([loop(m, until) for m in members],
                                       p.heartbeat_seconds + 30)
        elapsed = time.monotonic() - started
        cpu = stats.cpu_seconds() - cpu0
        failures = [r for r in results if isinstance(r, BaseException)]
        if not latencies:
            raise RuntimeError(f"no heartbeats answered: {failures[:1]!r}")
        count = len(latencies)
        return {
            "members": n,
            "heartbeats": count,
            "heartbeats_per_s": count / elapsed,
            "p50_ms": percentile(latencies, 50) * 1000,
            "p99_ms": percentile(latencies, 99) * 1000,
            "broker_cpu_us_per_hb": cpu / count * 1e6,
            "broker_cpu_pct": cpu / elapsed * 100,
            "errors": errors,
            "member_failures": len(failures),
        }
    finally:
        await close_all(conns)


async def _form_groups(members: Sequence[Member], timeout: float,
                       heartbeat_s: float = 0.5) -> None:
    """Bring every group to a synced generation with all its members, then stop heartbeating."""
    by_group: dict[str, list[Member]] = {}
    for m in members:
        by_group.setdefault(m.group, []).append(m)
    live = [LiveGroup(ms, heartbeat_s=heartbeat_s, deadline=time.monotonic() + timeout)
            for ms in by_group.values()]
    for g in live:
        g.start()
    try:
        await asyncio.gather(*[g.wait_synced(timeout) for g in live])
    finally:
        await asyncio.gather(*[g.stop() for g in live])


async def leave_rebalance(broker: Broker, p: CoordinatorParams) -> dict[str, Any]:
    """LeaveGroup sent -> every survivor synced at the new generation (heartbeats every 100 ms)."""
    conns, members = await _members(broker, p.leave_members, "leave", session_ms=10_000,
                                    rebalance_ms=30_000)
    group = LiveGroup(members, heartbeat_s=0.1, deadline=time.monotonic() + 120)
    try:
        group.start()
        await group.wait_synced(60)
        samples: list[float] = []
        remaining = list(members)
        leave_errors = 0
        budget_end = time.monotonic() + p.leave_budget_s
        heartbeat_s = 0.1
        for repeat in range(p.leave_repeats):
            if repeat and time.monotonic() > budget_end:
                break
            # Survivors heartbeat in step (their timers restart when the sync completes), so
            # the LeaveGroup goes out at a chosen phase of that 100 ms cycle; repeats spread
            # the phases evenly, as a leave at a random moment would.
            assert group.tracker.done_at is not None
            phase = heartbeat_s * (repeat + 0.5) / p.leave_repeats
            await asyncio.sleep(max(group.tracker.done_at + 0.3 + phase - time.monotonic(), 0))
            leaver = next(m for m in reversed(remaining) if not m.is_leader)
            await group.stop_member(leaver.index)
            remaining.remove(leaver)
            assert group.tracker.generation is not None
            group.tracker.reset(len(remaining), after=group.tracker.generation)
            started = time.monotonic()
            if await leaver.leave() != 0:
                leave_errors += 1
            done_at = await group.wait_synced(30)
            samples.append(done_at - started)
        return {
            "members": p.leave_members,
            "repeats": len(samples),
            "median_ms": percentile(samples, 50) * 1000,
            "max_ms": max(samples) * 1000,
            "runs_ms": [s * 1000 for s in samples],
            "leave_errors": leave_errors,
        }
    finally:
        await group.stop()
        await close_all(conns)


async def session_expiry(broker: Broker, p: CoordinatorParams) -> dict[str, Any]:
    """One member stops heartbeating; survivors (every 50 ms) see REBALANCE_IN_PROGRESS when?"""
    session = p.expiry_session_ms
    conns, members = await _members(broker, 3, "expiry", session_ms=session,
                                    rebalance_ms=30_000)
    group = LiveGroup(members, heartbeat_s=0.05, deadline=time.monotonic() + 120)
    try:
        group.start()
        await group.wait_synced(60)
        await asyncio.sleep(0.5)
        victim = next(m for m in reversed(members) if not m.is_leader)
        await group.stop_member(victim.index)
        last_heartbeat = victim.last_heartbeat_sent
        group.rebalance_seen.clear()
        deadline = time.monotonic() + session / 1000 * 2 + 5
        while time.monotonic() < deadline:
            if group.rebalance_seen:
                break
            if group.failures:
                raise RuntimeError(f"member failed: {group.failures[0]!r}")
            await asyncio.sleep(0.01)
        if not group.rebalance_seen:
            raise TimeoutError(f"no rebalance {2 * session / 1000 + 5:.0f}s after the last "
                               "heartbeat of the stopped member")
        seen_at, _, code = group.rebalance_seen[0]
        observed_ms = (seen_at - last_heartbeat) * 1000
        return {
            "session_ms": session,
            "observed_ms": observed_ms,
            "late_by_ms": observed_ms - session,
            "survivor_error_code": code,
            "resolution_ms": 50,
        }
    finally:
        await group.stop()
        await close_all(conns)


async def many_groups(broker: Broker, p: CoordinatorParams) -> dict[str, Any]:
    """`many_groups` one-member groups, each member on its own connection; RSS and idle CPU."""
    stats = broker.stats()
    rss_before = stats.rss_bytes()
    n = p.many_groups
    started = time.monotonic()
    conns, members = await _members(broker, n, [f"solo-{i}" for i in range(n)],
                                    session_ms=p.many_groups_session_ms, rebalance_ms=30_000,
                                    deadline=started + p.connect_s)
    try:
        rss_connected = stats.rss_bytes()
        deadline = time.monotonic() + p.many_groups_session_ms / 1000 * 0.8
        results = await gather_bounded([m.join_and_sync(deadline) for m in members],
                                       p.many_groups_session_ms / 1000 * 0.8)
        setup_s = time.monotonic() - started
        failures = [r for r in results if isinstance(r, BaseException)]
        if len(failures) == n:
            raise RuntimeError(f"no group formed: {failures[0]!r}")
        await asyncio.sleep(0.5)
        cpu0 = stats.cpu_seconds()
        t0 = time.monotonic()
        await asyncio.sleep(p.idle_seconds)
        idle_cpu = stats.cpu_seconds() - cpu0
        idle_elapsed = time.monotonic() - t0
        rss_after = stats.rss_bytes()
        formed = n - len(failures)
        return {
            "groups": n,
            "formed": formed,
            "setup_s": setup_s,
            "rss_mb": rss_after / 1e6,
            "rss_before_mb": rss_before / 1e6,
            "rss_connections_mb": rss_connected / 1e6,
            "kb_per_group": (rss_after - rss_connected) / formed / 1024 if formed else None,
            "idle_cpu_pct": idle_cpu / idle_elapsed * 100,
            "first_failure": repr(failures[0]) if failures else None,
        }
    finally:
        await close_all(conns)

