"""OffsetCommit hot path and idle-group footprint, measured over raw Kafka frames.

    python -m tests.bench.commit_load commit --fsync always --fsync 100
    python -m tests.bench.commit_load commit --fsync 100 --profile /tmp/commit.txt
    python -m tests.bench.commit_load idle --groups 10000

`commit`: `members` members join one group (JoinGroup/SyncGroup as a consumer does), then each
commits `partitions` partitions of one topic as fast as it can, keeping `in_flight` OffsetCommit
requests pipelined on its connection. After a warm-up, over `seconds`: commits/s, latency
p50/p99 (request written -> response read), and broker CPU per commit (utime + stime of the
broker process from /proc/PID/stat, so the fsync worker thread is included). One broker is
started per fsync policy. `--profile FILE` also samples the broker with py-spy (raw collapsed
stacks) during the window; profile runs are slower, so their numbers are not comparable.

`--tree PATH` runs the broker of another checkout of the project, for a before-and-after.

`idle`: `groups` one-member groups, each member on its own connection, joined and synced with a
long session timeout; then the broker's RSS and its CPU while every member stays idle
(heartbeating every `heartbeat_s`).

Requests are encoded once with kio (with sentinel offsets whose byte positions are then
patched per request), replies are compared with the all-OK reply bytes and decoded only when
they differ, so the load generator costs a few microseconds per commit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.bench.brokers import REPO, Broker, Rebalanced, self_cpu_seconds
from tests.bench.coordinator_bench import _form_groups, _members
from tests.bench.dataplane import ensure_topic
from tests.bench.members import Member, close_all, gather_bounded
from tests.bench.stats import percentile
from tests.bench.wire import decode, encode

_I64 = struct.Struct(">q")
_SENTINEL = 0x5EED_0000_0000_0000  # + partition: marks where each offset sits in the frame


@dataclass(frozen=True, slots=True)
class CommitParams:
    members: int = 10
    partitions: int = 10
    in_flight: int = 4
    seconds: float = 5.0
    warmup_seconds: float = 1.0
    version: int = 8


@dataclass(frozen=True, slots=True)
class IdleParams:
    groups: int = 10_000
    session_ms: int = 30_000
    heartbeat_s: float = 10.0
    idle_seconds: float = 10.0


class CommitFrame:
    """One member's OffsetCommit request, re-sent with new offsets patched in place."""

    def __init__(self, member: Member, topic: str, partitions: int, version: int) -> None:
        body = {
            "group_id": member.group,
            "generation_id_or_member_epoch": member.generation,
            "member_id": member.member_id,
            "group_instance_id": None,
            "retention_time": -1,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": _SENTINEL + p,
                 "committed_leader_epoch": -1, "committed_metadata": ""}
                for p in range(partitions)]}],
        }
        self.frame = encode(8, version, body)
        raw = bytes(self.frame)
        self.positions = [raw.index(_I64.pack(_SENTINEL + p)) for p in range(partitions)]

    def next(self, offset: int) -> bytearray:
        frame = self.frame
        for position in self.positions:
            _I64.pack_into(frame, position, offset)
        return frame


class CommitLoad:
    """Keeps `in_flight` commits outstanding per member until `stop_at`; records latencies."""

    def __init__(self, members: Sequence[Member], frames: Sequence[CommitFrame], version: int,
                 in_flight: int) -> None:
        self.members = members
        self.frames = frames
        self.version = version
        self.in_flight = in_flight
        self.recording = False
        self.stop_at = 0.0
        self.latencies: list[float] = []
        self.ok_body: bytes | None = None
        self.errors: dict[int, int] = {}
        self.offsets = [0] * len(members)
        self.outstanding = 0
        self.finished = asyncio.get_running_loop().create_future()
        self.failure: BaseException | None = None

    def start(self, stop_at: float) -> None:
        self.stop_at = stop_at
        for index in range(len(self.members)):
            for _ in range(self.in_flight):
                self._send(index)

    def _send(self, index: int) -> None:
        self.offsets[index] += 1
        frame = self.frames[index].next(self.offsets[index])
        sent = time.perf_counter()
        future = self.members[index].conn.send_raw(frame)
        self.outstanding += 1
        future.add_done_callback(lambda f: self._done(index, sent, f))

    def _done(self, index: int, sent: float, future: asyncio.Future[bytes]) -> None:
        now = time.perf_counter()
        self.outstanding -= 1
        if future.cancelled() or future.exception() is not None:
            if self.failure is None:
                self.failure = future.exception() or asyncio.CancelledError()
        else:
            self._check(future.result())
            if self.recording:
                self.latencies.append(now - sent)
            if self.failure is None and time.monotonic() < self.stop_at:
                self._send(index)
                return
        if self.outstanding == 0 and not self.finished.done():
            self.finished.set_result(None)

    def _check(self, frame: bytes) -> None:
        body = frame[4:]  # past the correlation id
        if body == self.ok_body:
            return
        reply = decode(8, self.version, frame)
        codes = [p.error_code.value for t in reply.topics for p in t.partitions]
        if not any(codes):
            self.ok_body = body
            return
        for code in codes:
            if code:
                self.errors[code] = self.errors.get(code, 0) + 1


def _start_profiler(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(spy), "record", "-p", str(pid), "-f", "raw", "-o", str(out), "-d",
         str(max(1, int(seconds))), "-r", "250", "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def commit_run(broker: Broker, p: CommitParams,
                     profile: Path | None = None) -> dict[str, Any]:
    topic = "commit-load"
    await asyncio.to_thread(ensure_topic, broker, topic, p.partitions)
    conns, members = await _members(broker, p.members, "committers", session_ms=30_000,
                                    rebalance_ms=30_000, topic=topic)
    try:
        await _form_groups(members, timeout=60)
        frames = [CommitFrame(m, topic, p.partitions, p.version) for m in members]
        load = CommitLoad(members, frames, p.version, p.in_flight)
        stats = broker.stats()
        began = time.monotonic()
        load.start(began + p.warmup_seconds + p.seconds)
        await asyncio.sleep(p.warmup_seconds)
        spy = None if profile is None else _start_profiler(broker.pid, profile, p.seconds)
        load.recording = True
        (user0, system0), self0, t0 = (stats.user_system_seconds(), self_cpu_seconds(),
                                       time.monotonic())
        await asyncio.sleep(p.seconds)
        load.recording = False
        (user, system), own, elapsed = (stats.user_system_seconds(), self_cpu_seconds(),
                                        time.monotonic())
        user, system, own, elapsed = user - user0, system - system0, own - self0, elapsed - t0
        cpu = user + system
        await asyncio.wait_for(load.finished, 30)
        if spy is not None:
            spy.wait(60)
        if load.failure is not None:
            raise RuntimeError(f"a commit failed: {load.failure!r}")
        count = len(load.latencies)
        if not count:
            raise RuntimeError("no commit answered in the window")
        return {
            "members": p.members,
            "partitions_per_commit": p.partitions,
            "in_flight_per_member": p.in_flight,
            "version": p.version,
            "commits": count,
            "commits_per_s": count / elapsed,
            "p50_ms": percentile(load.latencies, 50) * 1000,
            "p99_ms": percentile(load.latencies, 99) * 1000,
            "broker_cpu_us_per_commit": cpu / count * 1e6,
            "broker_system_us_per_commit": system / count * 1e6,
            "broker_cpu_pct": cpu / elapsed * 100,
            "load_generator_cpu_pct": own / elapsed * 100,
            "partition_errors": load.errors,
            "broker_rss_mb": stats.rss_bytes() / 1e6,
        }
    finally:
        await close_all(conns)


async def _keep_alive(member: Member, first_s: float, period_s: float,
                      stop: asyncio.Event) -> int:
    """Heartbeat after `first_s`, then every `period_s`, until `stop`; the first non-zero
    error code, else 0."""
    wait = first_s
    while True:
        try:
            await asyncio.wait_for(stop.wait(), wait)
            return 0
        except TimeoutError:
            pass
        wait = period_s
        code = await member.heartbeat()
        if code:
            return code


async def idle_run(broker: Rebalanced, p: IdleParams) -> dict[str, Any]:
    stats = broker.stats()
    rss_start = stats.rss_bytes()
    started = time.monotonic()
    conns, members = await _members(broker, p.groups, [f"idle-{i}" for i in range(p.groups)],
                                    session_ms=p.session_ms, rebalance_ms=30_000,
                                    deadline=started + 120)
    stop = asyncio.Event()
    try:
        rss_connected = stats.rss_bytes()
        deadline = time.monotonic() + p.session_ms / 1000 * 0.8
        results = await gather_bounded([m.join_and_sync(deadline) for m in members],
                                       p.session_ms / 1000 * 0.8)
        failures = [r for r in results if isinstance(r, BaseException)]
        setup_s = time.monotonic() - started
        alive = [m for m, r in zip(members, results, strict=True)
                 if not isinstance(r, BaseException)]
        # Spread the heartbeats over the period, as independent consumers would.
        keepers = []
        for i, m in enumerate(alive):
            m.last_heartbeat_sent = time.monotonic()
            keepers.append(asyncio.ensure_future(
                _keep_alive(m, p.heartbeat_s * (i + 1) / len(alive), p.heartbeat_s, stop)))
        await asyncio.sleep(1.0)
        cpu0, t0 = stats.cpu_seconds(), time.monotonic()
        await asyncio.sleep(p.idle_seconds)
        idle_cpu, elapsed = stats.cpu_seconds() - cpu0, time.monotonic() - t0
        rss = stats.rss_bytes()
        stop.set()
        codes = await asyncio.gather(*keepers, return_exceptions=True)
        bad = [c for c in codes if c != 0]
        return {
            "groups": p.groups,
            "formed": len(alive),
            "setup_s": setup_s,
            "rss_start_mb": rss_start / 1e6,
            "rss_connected_mb": rss_connected / 1e6,
            "rss_mb": rss / 1e6,
            "kb_per_connection": (rss_connected - rss_start) / p.groups / 1024,
            "kb_per_group": (rss - rss_connected) / max(len(alive), 1) / 1024,
            "idle_cpu_pct": idle_cpu / elapsed * 100,
            "heartbeats_per_s": len(alive) / p.heartbeat_s,
            "heartbeat_failures": len(bad),
            "first_failure": repr(failures[0]) if failures else None,
        }
    finally:
        stop.set()
        await close_all(conns)


def _raise_fd_limit(need: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))


def _run(coro: Any) -> Any:
    try:
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    except ImportError:
        return asyncio.run(coro)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.commit_load",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    commit = sub.add_parser("commit")
    commit.add_argument("--fsync", action="append", default=[],
                        help="offsets.commit.fsync policy (repeatable); default: always and 100")
    cp = CommitParams()
    commit.add_argument("--members", type=int, default=cp.members)
    commit.add_argument("--partitions", type=int, default=cp.partitions)
    commit.add_argument("--in-flight", type=int, default=cp.in_flight)
    commit.add_argument("--seconds", type=float, default=cp.seconds)
    commit.add_argument("--version", type=int, default=cp.version, choices=range(2, 10))
    commit.add_argument("--profile", type=Path, help="py-spy raw output (suffixed per policy)")
    idle = sub.add_parser("idle")
    ip = IdleParams()
    idle.add_argument("--groups", type=int, default=ip.groups)
    idle.add_argument("--session-ms", type=int, default=ip.session_ms)
    idle.add_argument("--heartbeat-s", type=float, default=ip.heartbeat_s)
    idle.add_argument("--idle-seconds", type=float, default=ip.idle_seconds)
    parser.add_argument("--tree", type=Path, default=None,
                        help="run the broker of another checkout of the project (to compare)")
    parser.add_argument("--keep-broker", action="store_true",
                        help="print the broker PID and wait for Enter before stopping it")
    args = parser.parse_args(argv)
    repo = REPO if args.tree is None else args.tree.resolve()
    workdir = Path(tempfile.mkdtemp(prefix="rebalanced-commit-load-"))
    results: dict[str, Any] = {}
    try:
        if args.mode == "commit":
            params = CommitParams(args.members, args.partitions, args.in_flight, args.seconds,
                                  cp.warmup_seconds, args.version)
            for policy in args.fsync or ["always", "100"]:
                broker = Rebalanced(workdir, {"offsets.commit.fsync": policy}, repo=repo)
                broker.start()
                try:
                    profile = None if args.profile is None else args.profile.with_name(
                        f"{args.profile.stem}-{policy}{args.profile.suffix}")
                    result = _run(commit_run(broker, params, profile))
                    result["fsync"] = policy
                    results[f"fsync={policy}"] = result
                    if args.keep_broker:
                        input(f"broker PID {broker.pid}; Enter to stop ")
                finally:
                    broker.cleanup()
                print(json.dumps(result), flush=True)
            results["params"] = asdict(params)
        else:
            _raise_fd_limit(args.groups + 1000)
            iparams = IdleParams(args.groups, args.session_ms, args.heartbeat_s,
                                 args.idle_seconds)
            broker = Rebalanced(workdir, repo=repo)
            broker.start()
            try:
                results["idle"] = _run(idle_run(broker, iparams))
                if args.keep_broker:
                    input(f"broker PID {broker.pid}; Enter to stop ")
            finally:
                broker.cleanup()
            results["params"] = asdict(iparams)
            print(json.dumps(results["idle"]), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
