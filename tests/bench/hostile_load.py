"""Valid but expensive requests against a real broker, while an unrelated group heartbeats.

    python -m tests.bench.hostile_load --load describe-groups:250000 --load metadata:5000

For each load a fresh broker starts on a free loopback port; a member of an unrelated group
joins (JoinGroup v5 two-step, SyncGroup) and heartbeats every 20 ms on its own connection, in a
process of its own, timing each round trip. Meanwhile the load runs once on another connection. Per
load: the heartbeat p50/p99/worst (ms) while it ran, whether every heartbeat was answered NONE
(the member was never removed), what the load was answered, and whether the broker was still
alive after it. Loads (N is the element count):

  metadata:N          Metadata v4 naming N new topics, auto-create on (the topic creation path)
  empty-names:N       Metadata v4 of N empty topic names (the request guard's decoded budget)
  describe-groups:N   DescribeGroups v5 of N group ids
  offset-fetch:N      OffsetFetch v7 of one group, one topic, N partitions
  list-offsets:N      ListOffsets v5 of one topic, N partitions
  join-burst:N        N JoinGroup v5 for new group ids (each answered MEMBER_ID_REQUIRED)
  join-burst-expiry:N the same, then 10 s in which their pending members expire
  big-member:N        a one-member group whose leader syncs an assignment of N bytes
  create-topics:N     CreateTopics v5 of one topic of N partitions
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.bench.stats import percentile
from tests.bench.wire import Connection, WireError, encode
from tests.broker_process import BrokerProcess

HEARTBEAT_INTERVAL_S = 0.02
SESSION = timedelta(seconds=30)


def _join_body(group: str, member_id: str, metadata: bytes = b"") -> dict[str, Any]:
    return {"group_id": group, "session_timeout": SESSION, "rebalance_timeout": SESSION,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": metadata}]}


async def join_group(conn: Connection, group: str) -> tuple[str, int]:
    """A one-member group: (member id, generation). Retries while the broker's group log is
    still loading (COORDINATOR_LOAD_IN_PROGRESS right after a start)."""
    for _ in range(200):
        first = await conn.call(11, 5, _join_body(group, ""))
        if first.error_code.name == "member_id_required":
            break
        await asyncio.sleep(0.05)
    member_id = first.member_id
    joined = await conn.call(11, 5, _join_body(group, member_id))
    if joined.error_code.value != 0:
        raise WireError(f"join {group}: {joined.error_code!r}")
    synced = await conn.call(14, 3, {"group_id": group, "generation_id": joined.generation_id,
                                     "member_id": member_id, "group_instance_id": None,
                                     "assignments": [{"member_id": member_id,
                                                      "assignment": b""}]})
    if synced.error_code.value != 0:
        raise WireError(f"sync {group}: {synced.error_code!r}")
    return member_id, joined.generation_id


class Heartbeater:
    """The unrelated group's member: a heartbeat every 20 ms, each round trip timed."""

    def __init__(self, conn: Connection, group: str, member_id: str, generation: int) -> None:
        self.conn = conn
        self.body = {"group_id": group, "generation_id": generation, "member_id": member_id,
                     "group_instance_id": None}
        self.latencies_ms: list[float] = []
        self.errors: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self.latencies_ms.clear()
        self.errors.clear()
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        # The flag too: Python 3.11's wait_for can swallow a cancellation that arrives as its
        # answer does, and the loop would then heartbeat on and never end.
        self._stopping = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        while not self._stopping:
            started = time.perf_counter()
            try:
                answer = await self.conn.call(12, 3, self.body, timeout=30)
            except (WireError, TimeoutError) as exc:
                self.errors.append(repr(exc))
                return
            self.latencies_ms.append((time.perf_counter() - started) * 1000)
            if answer.error_code.value != 0:
                self.errors.append(answer.error_code.name)
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)


def _error_names(answer: Any, path: str) -> dict[str, int]:
    """Counts of error code names found along `path` (dotted attribute/array names)."""
    items = [answer]
    for name in path.split("."):
        nxt: list[Any] = []
        for item in items:
            value = getattr(item, name)
            nxt.extend(value if isinstance(value, tuple) else [value])
        items = nxt
    counts: dict[str, int] = {}
    for code in items:
        counts[code.name] = counts.get(code.name, 0) + 1
    return counts


async def run_load(port: int, kind: str, n: int) -> str:
    """Run one load on its own connection; a short account of its answer."""
    conn = await Connection.open("127.0.0.1", port)
    try:
        if kind == "metadata":
            names = [{"name": f"auto-{time.monotonic_ns()}-{i}"} for i in range(n)]
            answer = await conn.call(3, 4, {"topics": names, "allow_auto_topic_creation": True},
                                     timeout=300)
            return json.dumps(_error_names(answer, "topics.error_code"))
        if kind == "empty-names":
            answer = await conn.call(3, 4, {"topics": [{"name": ""}] * n,
                                            "allow_auto_topic_creation": False}, timeout=300)
            return json.dumps(_error_names(answer, "topics.error_code"))
        if kind == "describe-groups":
            answer = await conn.call(15, 5, {"groups": [f"d{i}" for i in range(n)],
                                             "include_authorized_operations": False},
                                     timeout=300)
            return json.dumps(_error_names(answer, "groups.error_code"))
        if kind == "offset-fetch":
            answer = await conn.call(9, 7, {"group_id": "fetcher", "topics": [
                {"name": "t", "partition_indexes": list(range(n))}], "require_stable": False},
                timeout=300)
            return json.dumps({"top": answer.error_code.name,
                               **_error_names(answer, "topics.partitions.error_code")})
        if kind == "list-offsets":
            answer = await conn.call(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": "t", "partitions": [{"partition_index": i, "current_leader_epoch": -1,
                                              "timestamp": -1} for i in range(n)]}]},
                timeout=300)
            return json.dumps(_error_names(answer, "topics.partitions.error_code"))
        if kind in ("join-burst", "join-burst-expiry"):
            session = timedelta(seconds=6)
            futures = [conn.send_raw(encode(11, 5, {
                **_join_body(f"burst-{i}", ""), "session_timeout": session}))
                for i in range(n)]
            await asyncio.wait_for(asyncio.gather(*futures), 600)
            if kind == "join-burst-expiry":
                await asyncio.sleep(10)  # the pending members expire (6 s session) meanwhile
            return f"{n} answered"
        if kind == "big-member":
            return await _big_member(port, conn, n)
        if kind == "create-topics":
            answer = await conn.call(19, 5, {"topics": [
                {"name": f"many-{time.monotonic_ns()}", "num_partitions": n,
                 "replication_factor": 1, "assignments": [], "configs": []}],
                "timeout": timedelta(seconds=60), "validate_only": False}, timeout=600)
            return json.dumps(_error_names(answer, "topics.error_code"))
        raise SystemExit(f"unknown load {kind}")
    except (WireError, TimeoutError) as exc:
        return f"no answer: {exc!r}"
    finally:
        await conn.close()


async def _big_member(port: int, conn: Connection, n: int) -> str:
    """A one-member group whose leader syncs an assignment of `n` bytes to itself."""
    group = f"big-{time.monotonic_ns()}"
    member_id = (await conn.call(11, 5, _join_body(group, ""))).member_id
    joined = await conn.call(11, 5, _join_body(group, member_id))
    synced = await conn.call(14, 3, {
        "group_id": group, "generation_id": joined.generation_id, "member_id": member_id,
        "group_instance_id": None,
        "assignments": [{"member_id": member_id, "assignment": b"a" * n}]}, timeout=120)
    return f"sync {synced.error_code.name}"


async def alive(port: int) -> bool:
    try:
        conn = await Connection.open("127.0.0.1", port, timeout=5)
        await conn.call(18, 0, {}, timeout=10)
        await conn.close()
        return True
    except (WireError, TimeoutError):
        return False


def _beat_in_child(port: int, pipe: Any) -> None:
    """The unrelated member, in a process of its own, so that the benchmark's own encoding of
    a large request cannot delay its heartbeats: joins, says "ready", heartbeats until told
    "stop", then sends back (latencies, errors)."""

    async def run() -> None:
        conn = await Connection.open("127.0.0.1", port)
        member_id, generation = await join_group(conn, "unrelated")
        beater = Heartbeater(conn, "unrelated", member_id, generation)
        pipe.send("ready")
        while True:
            beater.start()
            while not pipe.poll():
                await asyncio.sleep(0.05)
            pipe.recv()
            await beater.stop()
            pipe.send((list(beater.latencies_ms), list(beater.errors)))
            if beater.errors:  # rejoin, so that the next window measures a member again
                member_id, generation = await join_group(conn, "unrelated")
                beater = Heartbeater(conn, "unrelated", member_id, generation)

    asyncio.run(run())


async def one_load(load: str, settings: dict[str, str]) -> dict[str, Any]:
    """A fresh broker, the heartbeating member (in its own process), then `load`."""
    kind, _, count = load.partition(":")
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", settings=settings).start()
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        child = context.Process(target=_beat_in_child, args=(broker.port, theirs), daemon=True)
        try:
            setup = await Connection.open("127.0.0.1", broker.port)
            await setup.call(19, 5, {"topics": [
                {"name": "t", "num_partitions": 4, "replication_factor": 1, "assignments": [],
                 "configs": []}], "timeout": timedelta(seconds=30), "validate_only": False})
            await setup.close()
            child.start()
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, ours.recv) == "ready"
            await asyncio.sleep(0.3)  # a baseline before the load
            started = time.perf_counter()
            answer = await run_load(broker.port, kind, int(count or 0))
            took = time.perf_counter() - started
            await asyncio.sleep(0.3)
            ours.send("stop")
            lat, errors = await loop.run_in_executor(None, ours.recv)
            return {
                "load": load, "seconds": round(took, 2), "answer": answer,
                "heartbeats": len(lat),
                "hb_p50_ms": round(percentile(lat, 50), 1) if lat else None,
                "hb_p99_ms": round(percentile(lat, 99), 1) if lat else None,
                "hb_max_ms": round(max(lat), 1) if lat else None,
                "hb_errors": sorted(set(errors)),
                "broker_alive": await alive(broker.port),
            }
        finally:
            if child.pid is not None:
                child.kill()
                child.join()
            broker.stop()


async def main_async(loads: list[str], settings: dict[str, str]) -> list[dict[str, Any]]:
    results = []
    for load in loads:
        results.append(await one_load(load, settings))
        print(json.dumps(results[-1]), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load", action="append", required=True, help="KIND:N (see above)")
    parser.add_argument("--setting", action="append", default=[],
                        help="a broker setting, KEY=VALUE")
    args = parser.parse_args()
    settings = dict(s.split("=", 1) for s in args.setting)
    asyncio.run(main_async(args.load, settings))


if __name__ == "__main__":
    main()
