"""KIP-848 consumer groups: rebalanced side by side with the librdkafka mock, in one run.

    python -m tests.bench.consumer_group_bench [--quick] [--baseline TREE]

`--baseline TREE` adds the broker of another checkout (say, `git archive <commit> | tar -x -C
TREE`) as a third subject, so a change is measured before and after in one run.

Three measurements:

* `join`: a stable group of 10 members (each on its own connection, heartbeating as the broker
  tells it, acknowledging revocations at once) over a 20-partition topic; an 11th member
  joins. Reported: the longest time any partition that an old member kept was not owned by it
  (0 means the others never stopped), and how long the newcomer took to own its share, in
  heartbeat intervals of the broker.
* `heartbeat CPU`: broker CPU per steady-state ConsumerGroupHeartbeat (one reconciled member,
  pipelined requests, every optional field null as librdkafka sends it), beside the classic
  Heartbeat v3 and OffsetCommit v9 (librdkafka's versions) on the same broker.
* `assignor`: the uniform and range assignors computing a target for 1,000 members over
  10,000 partitions (in this process: a pure function), cold and after one member joins.

The consumer protocol's heartbeat interval is the broker's: rebalanced runs with 500 ms here;
the mock uses its own default (reported).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tests.bench.brokers import Broker, LibrdkafkaMock, Rebalanced
from tests.bench.members import Member
from tests.bench.wire import Connection, api_versions, decode, encode, pick_version

TOPIC = "kip848"
PARTITIONS = 20
GROUP = "modern"
SETTINGS = {
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
}


class ModernMember:
    """A KIP-848 member: owns what the broker last assigned, acknowledges at once."""

    def __init__(self, conn: Connection, version: int, name: str, group: str = GROUP) -> None:
        self.conn = conn
        self.group = group
        self.version = version
        self.member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22]
        self.epoch = 0
        self.interval_s = 0.5
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.name = name
        # (topic id, partition) -> [(assigned at, revoked at or None)]
        self.history: dict[tuple[uuid.UUID, int], list[list[float | None]]] = {}
        self.joined_at = 0.0

    def _body(self) -> dict[str, Any]:
        joining = self.epoch == 0
        return {
            "group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch,
            "instance_id": None, "rack_id": None,
            "rebalance_timeout": 60_000 if joining else -1,
            "subscribed_topic_names": [TOPIC] if joining else None,
            # As librdkafka: a topic list comes with an empty regex (the mock insists on both).
            "subscribed_topic_regex": "" if joining else None, "server_assignor": None,
            "topic_partitions": [{"topic_id": t, "partitions": sorted(p)}
                                 for t, p in self.owned.items()],
        }

    async def heartbeat(self) -> bool:
        """One heartbeat; True when the assignment changed (acknowledge at once)."""
        if self.epoch == 0:
            self.joined_at = time.monotonic()
        reply = await self.conn.call(68, self.version, self._body())
        if reply.error_code.value != 0:
            raise RuntimeError(f"{self.name}: ConsumerGroupHeartbeat error {reply.error_code}"
                               f" {reply.error_message}")
        if reply.member_id:
            self.member_id = reply.member_id
        self.epoch = reply.member_epoch
        self.interval_s = reply.heartbeat_interval.total_seconds()
        if reply.assignment is None:
            return False
        new = {tp.topic_id: frozenset(tp.partitions) for tp in reply.assignment.topic_partitions}
        now = time.monotonic()
        old_set = {(t, p) for t, ps in self.owned.items() for p in ps}
        new_set = {(t, p) for t, ps in new.items() for p in ps}
        for tp in new_set - old_set:
            self.history.setdefault(tp, []).append([now, None])
        for tp in old_set - new_set:
            self.history[tp][-1][1] = now
        self.owned = new
        return old_set != new_set

    async def live(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if await self.heartbeat():
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)

    def count(self) -> int:
        return sum(len(p) for p in self.owned.values())


async def create_topic(broker: Broker, conn: Connection) -> None:
    if broker.create_topic_out_of_band(TOPIC, PARTITIONS):
        return
    reply = await conn.call(19, 4, {"topics": [{
        "name": TOPIC, "num_partitions": PARTITIONS, "replication_factor": 1,
        "assignments": [], "configs": []}], "timeout": 10_000, "validate_only": False})
    if reply.topics[0].error_code.value not in (0, 36):
        raise RuntimeError(f"CreateTopics: {reply.topics[0].error_code}")


def split(members: list[ModernMember]) -> bool:
    counts = [m.count() for m in members]
    return sum(counts) == PARTITIONS and max(counts) - min(counts) <= 1


async def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.01)


async def join_scenario(broker: Broker) -> dict[str, Any]:
    host, port = broker.bootstrap.split(":")
    admin = await Connection.open(host, int(port))
    version = pick_version(await api_versions(admin), 68, 1)
    await create_topic(broker, admin)
    members = [ModernMember(await Connection.open(host, int(port)), version, f"m{i}")
               for i in range(10)]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(m.live(stop)) for m in members]
    try:
        await wait_for(lambda: split(members), 60, "10 members to split the topic")
        await asyncio.sleep(2 * members[0].interval_s)
        before = {m.name: {(t, p) for t, ps in m.owned.items() for p in ps} for m in members}
        t0 = time.monotonic()
        newcomer = ModernMember(await Connection.open(host, int(port)), version, "new")
        members.append(newcomer)
        tasks.append(asyncio.create_task(newcomer.live(stop)))
        await wait_for(lambda: split(members), 60, "11 members to split the topic")
        share_s = time.monotonic() - t0
        await asyncio.sleep(2 * members[0].interval_s)
        end = time.monotonic()
        gap = 0.0
        for m in members[:-1]:
            kept = before[m.name] & {(t, p) for t, ps in m.owned.items() for p in ps}
            for tp in kept:
                for _assigned, revoked in m.history[tp]:
                    if revoked is not None and revoked >= t0:
                        later = [a for a, _ in m.history[tp] if a is not None and a >= revoked]
                        gap = max(gap, (min(later) if later else end) - revoked)
        return {"kept_gap_s": gap, "share_s": share_s, "interval_s": members[0].interval_s,
                "share_intervals": share_s / members[0].interval_s}
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for m in members:
            await m.conn.close()
        await admin.close()


async def heartbeat_cpu(broker: Broker, count: int) -> dict[str, Any]:
    host, port = broker.bootstrap.split(":")
    conn = await Connection.open(host, int(port))
    version = pick_version(await api_versions(conn), 68, 1)
    # A group of its own: the join scenario's members stop heartbeating without leaving, and
    # until their sessions expire their group is not in the steady state.
    member = ModernMember(conn, version, "cpu", group=GROUP + "-cpu")
    await member.heartbeat()
    for _ in range(20):
        changed = await member.heartbeat()
        if not changed and member.count():
            break
    steady = member._body()
    steady.update({"rebalance_timeout": -1, "subscribed_topic_names": None,
                   "topic_partitions": None})
    frame = encode(68, version, steady)
    stats = broker.stats()

    async def pipelined(frame: bytearray) -> float:
        before = stats.cpu_seconds()
        for start in range(0, count, 200):
            await asyncio.gather(*(conn.send_raw(frame) for _ in range(min(200, count - start))))
        return (stats.cpu_seconds() - before) / count * 1e6

    modern_us = await pipelined(frame)
    last = decode(68, version, await conn.send_raw(frame))
    result: dict[str, Any] = {"modern_us": modern_us, "modern_error": last.error_code.name}
    classic_conn = await Connection.open(host, int(port))
    classic = Member(classic_conn, "classic", session_ms=45_000, rebalance_ms=60_000,
                     topic=TOPIC)
    try:
        await classic.join_and_sync(time.monotonic() + 30)
        classic_frame = encode(12, 3, {"group_id": "classic", "generation_id": classic.generation,
                                       "member_id": classic.member_id,
                                       "group_instance_id": None})
        before = stats.cpu_seconds()
        for start in range(0, count, 200):
            await asyncio.gather(*(classic_conn.send_raw(classic_frame)
                                   for _ in range(min(200, count - start))))
        result["classic_us"] = (stats.cpu_seconds() - before) / count * 1e6
    except Exception as exc:  # the mock's classic group may refuse: report, do not fail
        result["classic_us"] = None
        result["classic_error"] = repr(exc)
    else:
        # OffsetCommit v9 (librdkafka's) of one partition by the classic member, pipelined
        # as the heartbeats: the other hot path the consumer group work must not slow down.
        commit_frame = encode(8, 9, {
            "group_id": "classic", "generation_id_or_member_epoch": classic.generation,
            "member_id": classic.member_id, "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{
                "partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                "committed_metadata": ""}]}]})
        commits = count // 2
        before = stats.cpu_seconds()
        for start in range(0, commits, 200):
            await asyncio.gather(*(classic_conn.send_raw(commit_frame)
                                   for _ in range(min(200, commits - start))))
        result["commit_us"] = (stats.cpu_seconds() - before) / commits * 1e6
    await classic_conn.close()
    await conn.close()
    return result


def assignor_times() -> dict[str, Any]:
    from coordinator.group.assignors import ASSIGNORS, MemberSpec

    topics = {uuid.UUID(int=i + 1): 100 for i in range(100)}
    subscribed = frozenset(topics)
    members = [MemberSpec(member_id=f"m{i:04d}", subscribed=subscribed) for i in range(1000)]
    out: dict[str, Any] = {}
    for name, assign in ASSIGNORS.items():
        started = time.perf_counter()
        first = assign(members, topics)
        cold = time.perf_counter() - started
        grown = [MemberSpec(member_id=m.member_id, subscribed=subscribed,
                            current=first[m.member_id]) for m in members]
        grown.append(MemberSpec(member_id="new", subscribed=subscribed))
        times = []
        for _ in range(5):
            started = time.perf_counter()
            assign(grown, topics)
            times.append(time.perf_counter() - started)
        out[name] = {"cold_ms": cold * 1000, "join_ms": statistics.median(times) * 1000}
    return out


async def run_subject(broker: Broker, count: int) -> dict[str, Any]:
    broker.start()
    try:
        out: dict[str, Any] = {}
        for name, coro in (("join", join_scenario(broker)),
                           ("heartbeat", heartbeat_cpu(broker, count))):
            try:
                out[name] = await asyncio.wait_for(coro, 180)
            except Exception as exc:
                out[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        return out
    finally:
        broker.stop()
        broker.cleanup()


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}{unit}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", type=Path, metavar="TREE",
                        help="also run the broker of another checkout of this repository "
                             "(an earlier commit), to compare before and after in one run")
    args = parser.parse_args()
    count = 5_000 if args.quick else 20_000
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kip848-bench-") as tmp:
        subjects: list[tuple[str, Broker]] = [
            ("rebalanced", Rebalanced(Path(tmp), settings=SETTINGS)),
            ("librdkafka mock", LibrdkafkaMock(Path(tmp))),
        ]
        if args.baseline is not None:
            if not (args.baseline / "coordinator" / "__main__.py").is_file():
                parser.error(f"--baseline {args.baseline}: not a checkout of this repository")
            subjects.insert(1, ("rebalanced (baseline tree)",
                                Rebalanced(Path(tmp), settings=SETTINGS,
                                           repo=args.baseline.resolve())))
        for name, broker in subjects:
            results[name] = asyncio.run(run_subject(broker, count))
    print("| measure | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))

    def row(title: str, fn: Any) -> None:
        cells = []
        for r in results.values():
            try:
                cells.append(fn(r))
            except (KeyError, TypeError):
                cells.append("n/a (" + str(r.get("join", {}).get("error")
                                           or r.get("heartbeat", {}).get("error"))[:60] + ")")
        print(f"| {title} | " + " | ".join(cells) + " |")

    row("heartbeat interval given by the broker",
        lambda r: fmt(r["join"]["interval_s"] * 1000, " ms", 0))
    row("11th member joins: longest gap on partitions the others kept",
        lambda r: fmt(r["join"]["kept_gap_s"], " s", 3))
    row("11th member joins: time until everyone holds its share",
        lambda r: f'{fmt(r["join"]["share_s"], " s")} '
                  f'({fmt(r["join"]["share_intervals"], "", 1)} intervals)')
    row("broker CPU per steady-state ConsumerGroupHeartbeat",
        lambda r: fmt(r["heartbeat"]["modern_us"], " µs", 1))
    row("broker CPU per classic Heartbeat v3 (same broker)",
        lambda r: fmt(r["heartbeat"]["classic_us"], " µs", 1))
    row("broker CPU per OffsetCommit v9, one partition (same broker)",
        lambda r: fmt(r["heartbeat"]["commit_us"], " µs", 1))
    times = assignor_times()
    for name, t in times.items():
        print(f"| {name} assignor, 1,000 members x 10,000 partitions: cold / one member "
              f"joins | {fmt(t['cold_ms'], ' ms', 0)} / {fmt(t['join_ms'], ' ms', 0)} | "
              + " | ".join(["(same code)"] * (len(results) - 1)) + " |")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
