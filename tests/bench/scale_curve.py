"""Per-request cost as members grow: join, heartbeat and commit CPU and RSS at 100 to 10,000.

    python -m tests.bench.scale_curve
    python -m tests.bench.scale_curve --sizes 100,1000 --brokers rebalanced --shapes groups

For each size N and shape (`group`: one group of N members; `groups`: N one-member groups), a
fresh broker, N connections (one per member), then:

* join: every member joins and syncs (JoinGroup with the member-id round trip, SyncGroup; a
  member told to rejoin does so): broker CPU from the first JoinGroup until all N are synced at
  one generation, in total and per member. The members heartbeat every `form_heartbeat_s`
  meanwhile, so a slow join also pays for some heartbeats;
* heartbeat: every member heartbeats every N / `heartbeat_rate` seconds, the members' phases
  spread evenly over the period, so the broker answers `heartbeat_rate` heartbeats/s at every
  size: broker CPU over `window_s` divided by the heartbeats answered in it;
* commit: the same at `commit_rate` OffsetCommits/s (10 partitions per commit for one group, 1
  for one-member groups), the broker's default (durable) commit policy: CPU per commit;
* idle: the broker's CPU over `idle_s` with every member joined and silent (its own timers),
  between the join and the heartbeats; the join is also given net of it;
* RSS after the join and at the end.

Broker CPU is utime + stime of the broker process (`ProcStats`), so the load generator, on the
same cores, is not counted. The peers (Tansu, the librdkafka mock) run the same load where they
can follow: a cell whose join does not finish within `join_timeout_s` is n/a, and so are the
larger sizes of that broker and shape. The open-file limit is raised (where this process may)
so that rebalanced's connection share admits every member; where it cannot be, every broker
gets as many members as rebalanced admits (`admitted_members`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coordinator.runtime.broker import connection_limit
from coordinator.settings import SETTINGS
from tests.bench.brokers import PEERS, REPO, Broker, BrokerStartError, Rebalanced
from tests.bench.commit_load import CommitFrame, _run
from tests.bench.coordinator_bench import _form_groups, _members
from tests.bench.dataplane import ensure_topic
from tests.bench.members import COMMIT_V, Member, close_all
from tests.bench.wire import decode

SHAPES = ("group", "groups")
_SPARE_CONNECTIONS = 8  # the topic set-up's admin client and metadata probes
BROKERS = ("rebalanced", *PEERS)


@dataclass(frozen=True, slots=True)
class ScaleParams:
    sizes: tuple[int, ...] = (100, 1_000, 10_000)
    heartbeat_rate: float = 1_000.0  # heartbeats/s answered by the broker, at every size
    commit_rate: float = 250.0  # OffsetCommits/s, at every size
    window_s: float = 10.0
    warmup_s: float = 1.0
    idle_s: float = 3.0
    session_ms: int = 45_000
    rebalance_ms: int = 120_000
    join_timeout_s: float = 120.0
    form_heartbeat_s: float = 10.0
    connect_s: float = 60.0


class Periodic:
    """Every member sends one request every `period_s`, phases spread evenly, until stopped;
    counts the answers and the non-zero error codes."""

    def __init__(self, members: Sequence[Member], period_s: float) -> None:
        self.members = members
        self.period_s = period_s
        self.answered = 0
        self.errors: dict[int, int] = {}
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        count = len(self.members)
        began = time.monotonic()
        self.tasks = [asyncio.ensure_future(self._loop(i, began + self.period_s * i / count))
                      for i in range(count)]

    async def _loop(self, index: int, next_at: float) -> None:
        # On a fixed schedule, not a period after each answer: members answered together (by
        # one fsync, or one busy loop turn) would otherwise drift into bursts, more so the
        # more periods a window holds, i.e. the fewer the members.
        while True:
            try:
                await asyncio.wait_for(self.stop.wait(), max(next_at - time.monotonic(), 0))
                return
            except TimeoutError:
                pass
            next_at += self.period_s
            code = await self.send(index)
            self.answered += 1
            if code:
                self.errors[code] = self.errors.get(code, 0) + 1

    async def send(self, index: int) -> int:
        raise NotImplementedError

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class Heartbeats(Periodic):
    async def send(self, index: int) -> int:
        return await self.members[index].heartbeat()


class Commits(Periodic):
    def __init__(self, members: Sequence[Member], period_s: float, topic: str,
                 partitions: int) -> None:
        super().__init__(members, period_s)
        self.frames = [CommitFrame(m, topic, partitions, COMMIT_V) for m in members]
        self.offsets = [0] * len(members)
        self.ok_body: bytes | None = None

    async def send(self, index: int) -> int:
        self.offsets[index] += 1
        frame = self.frames[index].next(self.offsets[index])
        reply = await asyncio.wait_for(self.members[index].conn.send_raw(frame), 30)
        body = reply[4:]
        if body == self.ok_body:
            return 0
        decoded = decode(8, COMMIT_V, reply)
        codes = [p.error_code.value for t in decoded.topics for p in t.partitions]
        if not any(codes):
            self.ok_body = body
            return 0
        return next(c for c in codes if c)


def loop_wakeups(pid: int) -> int:
    """Times the process's main thread (the event loop's) went to sleep and was woken: its
    voluntary context switches."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    return 0


async def _per_request(broker: Broker, load: Periodic, p: ScaleParams) -> dict[str, Any]:
    """Broker CPU per answered request over the window, after a warm-up; and the event loop's
    wake-ups per request, to tell whether requests arrive batched (< 1) or one at a time."""
    stats = broker.stats()
    load.start()
    try:
        await asyncio.sleep(p.warmup_s)
        cpu0, answered0, t0 = stats.cpu_seconds(), load.answered, time.monotonic()
        wakeups0 = loop_wakeups(broker.pid)
        await asyncio.sleep(p.window_s)
        cpu, answered = stats.cpu_seconds() - cpu0, load.answered - answered0
        wakeups = loop_wakeups(broker.pid) - wakeups0
        elapsed = time.monotonic() - t0
    finally:
        await load.finish()
    return {"per_s": answered / elapsed, "cpu_pct": cpu / elapsed * 100,
            "us_per_request": cpu / answered * 1e6 if answered else None,
            "wakeups_per_request": wakeups / answered if answered else None,
            "errors": dict(load.errors)}


async def cell(broker: Broker, size: int, shape: str, p: ScaleParams) -> dict[str, Any]:
    """One size and shape on a fresh broker."""
    topic = "scale"
    partitions = 10 if shape == "group" else 1
    await asyncio.to_thread(ensure_topic, broker, topic, partitions)
    stats = broker.stats()
    rss_start = stats.rss_bytes()
    groups: str | list[str] = "scale" if shape == "group" else [f"scale-{i}" for i in range(size)]
    cpu0 = stats.cpu_seconds()
    conns, members = await _members(broker, size, groups, session_ms=p.session_ms,
                                    rebalance_ms=p.rebalance_ms, topic=topic,
                                    deadline=time.monotonic() + p.connect_s)
    try:
        connect_cpu = stats.cpu_seconds() - cpu0
        cpu0, t0 = stats.cpu_seconds(), time.monotonic()
        await _form_groups(members, p.join_timeout_s, heartbeat_s=p.form_heartbeat_s)
        join_cpu, join_s = stats.cpu_seconds() - cpu0, time.monotonic() - t0
        rss_joined = stats.rss_bytes()
        await asyncio.sleep(0.5)
        idle0, t0 = stats.cpu_seconds(), time.monotonic()
        await asyncio.sleep(p.idle_s)
        idle_pct = (stats.cpu_seconds() - idle0) / (time.monotonic() - t0) * 100
        heartbeat = await _per_request(
            broker, Heartbeats(members, size / p.heartbeat_rate), p)
        commit = await _per_request(
            broker, Commits(members, size / p.commit_rate, topic, partitions), p)
        return {
            "members": size, "shape": shape,
            "connect_cpu_ms": connect_cpu * 1000,
            "join_s": join_s, "join_cpu_ms": join_cpu * 1000,
            "join_cpu_us_per_member": join_cpu / size * 1e6,
            # The join net of what the broker burns idle over as long (its timers, the
            # loop-lag monitor), which dominates small joins held by the initial delay.
            "join_net_cpu_us_per_member": max(join_cpu - idle_pct / 100 * join_s, 0) / size * 1e6,
            "idle_cpu_pct": idle_pct,
            "heartbeat": heartbeat, "commit": commit,
            "rss_start_mb": rss_start / 1e6, "rss_joined_mb": rss_joined / 1e6,
            "rss_end_mb": stats.rss_bytes() / 1e6,
        }
    finally:
        await close_all(conns)


def raise_fd_limit(need: int) -> int:
    """Raise this process's open-file limit (soft, and hard when permitted) to `need`, so that
    the brokers started from here inherit it; the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(hard, need)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def admitted_members(size: int) -> int:
    """`size`, or fewer when rebalanced, started from here, would refuse some connections:
    it takes at most its connections' share of the open-file limit (`connection_limit`). The
    same count is used for every broker, like for like."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    defaults = {s.key: s.default for s in SETTINGS}
    share = connection_limit(int(defaults["max.connections"]),
                             int(defaults["offsets.topic.num.partitions"]), soft)
    return min(size, share - _SPARE_CONNECTIONS)


def make_broker(name: str, workdir: Path, tree: Path = REPO) -> Broker:
    if name == "rebalanced":
        # Kafka's initial delay; and room for a 10,000-member group's assignment record
        # (1.2 MB, over the default 1 MB, which Kafka refuses the same way).
        return Rebalanced(workdir, {"group.initial.rebalance.delay.ms": "3000",
                                    "offsets.topic.max.message.bytes": str(8 << 20)},
                          repo=tree)
    return PEERS[name](workdir)


def run_curve(brokers: Sequence[str], shapes: Sequence[str], p: ScaleParams,
              workdir: Path, tree: Path = REPO) -> dict[str, dict[str, dict[str, Any]]]:
    """results[broker][shape][size]; a cell is a result or {"na": reason}."""
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for shape in shapes:
        for name in brokers:
            skip = ""
            for size in p.sizes:
                out = results.setdefault(name, {}).setdefault(shape, {})
                if skip:
                    out[str(size)] = {"na": skip}
                    continue
                broker = make_broker(name, workdir, tree)
                try:
                    broker.start()
                    out[str(size)] = _run(asyncio.wait_for(
                        cell(broker, admitted_members(size), shape, p),
                        p.join_timeout_s + p.connect_s + 120))
                except (BrokerStartError, TimeoutError, RuntimeError, OSError) as exc:
                    skip = f"{size} members did not complete: {type(exc).__name__}: {exc}"[:200]
                    print(f"{name} log tail:\n{broker.log_tail(10)}", file=sys.stderr)
                    out[str(size)] = {"na": skip}
                finally:
                    broker.cleanup()
                print(json.dumps({"broker": name, "shape": shape, "size": size,
                                  **out[str(size)]}), flush=True)
    return results


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def render(results: dict[str, dict[str, dict[str, Any]]], p: ScaleParams) -> str:
    """Markdown tables: one per shape, a row per broker and size."""
    lines: list[str] = []
    for shape in SHAPES:
        rows = [(name, size, cells[shape][size]) for name, cells in results.items()
                if shape in cells for size in cells[shape]]
        if not rows:
            continue
        title = ("one group of N members, 10-partition commits" if shape == "group"
                 else "N one-member groups, 1-partition commits")
        lines += [f"**{title}**", "",
                  "| broker | N | join CPU (ms) | join µs per member (net of idle) "
                  "| idle CPU (%) | heartbeat µs per request | commit µs per request "
                  "| RSS joined / end (MB) |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, size, r in rows:
            if "na" in r:
                lines.append(f"| {name} | {int(size):,} | n/a: {r['na']} | | | | | |")
                continue
            lines.append(
                f"| {name} | {r['members']:,} | {_fmt(r['join_cpu_ms'], 0)} "
                f"| {_fmt(r['join_cpu_us_per_member'], 0)} "
                f"({_fmt(r['join_net_cpu_us_per_member'], 0)}) | {_fmt(r['idle_cpu_pct'], 2)} "
                f"| {_fmt(r['heartbeat']['us_per_request'])} "
                f"| {_fmt(r['commit']['us_per_request'])} "
                f"| {_fmt(r['rss_joined_mb'])} / {_fmt(r['rss_end_mb'])} |")
        lines.append("")
    lines.append(f"Heartbeats at {p.heartbeat_rate:,.0f}/s and commits at {p.commit_rate:,.0f}/s"
                 f" in total at every size; {p.window_s:.0f} s windows.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.scale_curve",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    d = ScaleParams()
    parser.add_argument("--sizes", default=",".join(map(str, d.sizes)))
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--heartbeat-rate", type=float, default=d.heartbeat_rate)
    parser.add_argument("--commit-rate", type=float, default=d.commit_rate)
    parser.add_argument("--window-s", type=float, default=d.window_s)
    parser.add_argument("--join-timeout-s", type=float, default=d.join_timeout_s)
    parser.add_argument("--tree", type=Path, default=REPO,
                        help="run rebalanced from this checkout (to compare trees)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    brokers = [b for b in args.brokers.split(",") if b]
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = set(brokers) - set(BROKERS) | set(shapes) - set(SHAPES)
    if unknown:
        parser.error(f"unknown: {sorted(unknown)}")
    p = ScaleParams(sizes=sizes, heartbeat_rate=args.heartbeat_rate,
                    commit_rate=args.commit_rate, window_s=args.window_s,
                    join_timeout_s=args.join_timeout_s)
    # The members' connections here, and the broker's share (half its limit) there.
    limit = raise_fd_limit(2 * max(sizes) + 4_000)
    print(f"open-file limit {limit}", file=sys.stderr, flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="rebalanced-scale-"))
    try:
        results = run_curve(brokers, shapes, p, workdir, args.tree.resolve())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"params": asdict(p), "results": results}, indent=2))
    print(render(results, p))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
