"""The least CPU a durable commit can cost any broker built on this stack, beside the mock's.

    python -m tests.bench.commit_stack_floor --rounds 3 --seconds 3

Runs the load of the issue's comparison (`hardening_cost --mock --fsync always --version 9
--in-flight 1`: 10 members of one group, each committing 10 partitions with OffsetCommit v9, one
request in flight per member's connection) against three subjects, alternated round by round:

* `rebalanced`: the broker, `offsets.commit.fsync=always`;
* `floor`: the same broker started under a test-only wrapper (this module, with `--serve`) in
  which an OffsetCommit frame skips everything a commit means - no decode, no group, no records
  built, no offsets applied, no journal line. What is left is what every commit pays on this
  stack: uvloop reading the frame, the connection splitting it and reading its header, one
  `write` of a record batch of the real one's size to a file in the data directory, the group
  commit (one fsync on the C fsync thread for the appends written while the last one ran), the
  answer (a prepared v9 response with the request's correlation id) queued in the request's slot
  and written. Everything else (metadata, the group's join and sync) is the real broker's;
* `floor-gathered`: the floor, but an fsync starts only once every member's commit is waiting
  (10) or 1 ms after the first of them: one fsync per 10 commits, what any durable broker could
  at best make of this load, at the cost of the commits that wait for the others;
* `floor-memory`: the floor without the write and the fsync: each commit is answered at once,
  as an in-memory broker would (what the event loop and the connection alone cost);
* `mock`: librdkafka's in-memory mock cluster.

Prints broker CPU per commit and p50/p99 per subject and round, the medians, and each
median's ratio to the mock's. The floor is what no cut of the Python commit path can go below
while the event loop, the connection and the fsync stay as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

_OFFSET_COMMIT = 8
_FLOOR_FILE = "commit-floor.log"
_MODE_ENV = "REBALANCED_COMMIT_FLOOR"  # "durable", "gathered" or "memory"
_GATHER = 10  # commits one fsync waits for in the "gathered" mode: one per member
_GATHER_WAIT_S = 0.001


def _v9_answer_tail(partitions: int) -> bytes:
    """A v9 OffsetCommit response for `partitions` partitions of topic `commit-load`, all
    without error, after its size and correlation id."""
    from datetime import timedelta

    from kio.schema.errors import ErrorCode
    from kio.schema.offset_commit.v9 import response as r
    from kio.schema.types import TopicName
    from kio.static.primitive import i32, i32Timedelta

    from protocol.codec import encode_response

    answer = r.OffsetCommitResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)),
        topics=(r.OffsetCommitResponseTopic(
            name=TopicName("commit-load"),
            partitions=tuple(r.OffsetCommitResponsePartition(partition_index=i32(p),
                                                             error_code=ErrorCode.none)
                             for p in range(partitions))),))
    framed = encode_response(_OFFSET_COMMIT, 9, 0, answer)
    return bytes(framed[8:])  # after the size and the correlation id


def _record_batch(partitions: int) -> bytes:
    """A record batch of the size the broker writes for one 10-partition commit."""
    from coordinator.grouplog.codec import encode_records
    from coordinator.grouplog.records import offset_commit_record, offset_commit_value
    from storage.record_batch import encode_batch

    records = [offset_commit_record("committers", "commit-load", p,
                                    offset_commit_value(1000 + p, -1, "", 1_700_000_000_000, -1))
               for p in range(partitions)]
    return encode_batch(encode_records(records), 1_700_000_000_000)


def _serve(argv: list[str]) -> int:
    """The broker's entry point with OffsetCommit reduced to its stack's floor (test-only)."""
    import asyncio

    from coordinator.__main__ import main as broker_main
    from protocol.connection import Connection
    from storage.fsync_offload import FsyncOffload, OffloadedFsync

    data_dir = Path(argv[argv.index("--log.dirs") + 1])
    path = data_dir / _FLOOR_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stat = os.fstat(fd)
    batch = _record_batch(10)
    tail = _v9_answer_tail(10)
    size = struct.pack(">i", 4 + len(tail))
    state: dict[str, Any] = {"offload": None, "in_flight": False, "pending": [], "timer": None}
    mode = os.environ.get(_MODE_ENV, "durable")
    gathered = mode == "gathered"
    receive = Connection._receive

    def synced(covered: list[tuple[Connection, Any, bytes]], error: int, _named: bool) -> None:
        if error:
            raise OSError(error, os.strerror(error))
        for connection, slot, correlation in covered:
            connection.complete(slot, size + correlation + tail)
        state["in_flight"] = False
        ready()

    def ready() -> None:
        """Start the next fsync if its commits are waiting (all of them, when gathering)."""
        pending = state["pending"]
        if not pending or state["in_flight"]:
            return
        if not gathered or len(pending) >= _GATHER:
            fsync()
        elif state["timer"] is None:
            state["timer"] = asyncio.get_running_loop().call_later(_GATHER_WAIT_S, waited)

    def waited() -> None:
        state["timer"] = None
        if state["pending"] and not state["in_flight"]:
            fsync()

    def fsync() -> None:
        covered, state["pending"] = state["pending"], []
        if state["timer"] is not None:
            state["timer"].cancel()
            state["timer"] = None
        state["in_flight"] = True
        offload = state["offload"]
        if offload is None:
            offload = state["offload"] = FsyncOffload(asyncio.get_running_loop())
        offload.submit(OffloadedFsync(os.dup(fd), bytes(path), stat.st_dev, stat.st_ino),
                       lambda error, named: synced(covered, error, named))

    def memory_receive(self: Connection, body: bytes) -> bool:
        if body[1] != _OFFSET_COMMIT or body[0]:
            return receive(self, body)
        self.complete(self._reserve(None), size + body[4:8] + tail)
        return True

    def floor_receive(self: Connection, body: bytes) -> bool:
        if body[1] != _OFFSET_COMMIT or body[0]:
            return receive(self, body)
        slot = self._reserve(None)
        os.write(fd, batch)
        state["pending"].append((self, slot, body[4:8]))
        ready()
        return True

    Connection._receive = (  # type: ignore[method-assign]
        memory_receive if mode == "memory" else floor_receive)
    return broker_main(argv)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--serve"]:
        return _serve(args_in[1:])
    from tests.bench.brokers import LibrdkafkaMock, Rebalanced
    from tests.bench.commit_load import CommitParams, _run, commit_run

    parser = argparse.ArgumentParser(prog="python -m tests.bench.commit_stack_floor",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(args_in)
    params = CommitParams(seconds=args.seconds, version=9, in_flight=1)
    subjects = ("rebalanced", "floor", "floor-gathered", "floor-memory", "mock")
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in subjects}
    with tempfile.TemporaryDirectory(prefix="commit-stack-floor-") as scratch:
        workdir = Path(scratch)
        for round_no in range(args.rounds):
            order = subjects if round_no % 2 == 0 else tuple(reversed(subjects))
            for name in order:
                if name == "mock":
                    broker: Any = LibrdkafkaMock(workdir)
                else:
                    floor = name.startswith("floor")
                    entry = (("-m", "tests.bench.commit_stack_floor", "--serve") if floor
                             else ("-m", "coordinator"))
                    mode = {"floor-memory": "memory", "floor-gathered": "gathered"}.get(
                        name, "durable")
                    broker = Rebalanced(workdir, {"offsets.commit.fsync": "always"},
                                        entry=entry, environment={_MODE_ENV: mode})
                broker.start()
                try:
                    result = _run(commit_run(broker, params))
                finally:
                    if isinstance(broker, Rebalanced):
                        broker.cleanup()
                    else:
                        broker.stop()
                if result["partition_errors"]:
                    raise SystemExit(f"{name}: partition errors {result['partition_errors']}")
                rows[name].append(result)
                print(json.dumps({"round": round_no + 1, "subject": name,
                                  "cpu_us": round(result["broker_cpu_us_per_commit"], 1),
                                  "system_us": round(result["broker_system_us_per_commit"], 1),
                                  "p50_ms": round(result["p50_ms"], 3),
                                  "p99_ms": round(result["p99_ms"], 3)}), flush=True)
    mock_cpu = statistics.median(r["broker_cpu_us_per_commit"] for r in rows["mock"])
    mock_p99 = statistics.median(r["p99_ms"] for r in rows["mock"])
    print("\n| subject | CPU per commit (µs), rounds | median | to the mock's | in the kernel "
          "(µs) | p50 ms | p99 ms | p99 to the mock's |")
    print("|---|---|---|---|---|---|---|---|")
    for name in subjects:
        cpus = [r["broker_cpu_us_per_commit"] for r in rows[name]]
        median = statistics.median(cpus)
        system = statistics.median(r["broker_system_us_per_commit"] for r in rows[name])
        p50 = statistics.median(r["p50_ms"] for r in rows[name])
        p99 = statistics.median(r["p99_ms"] for r in rows[name])
        print(f"| {name} | {', '.join(f'{c:.1f}' for c in cpus)} | {median:.1f} | "
              f"{median / mock_cpu:.2f} | {system:.1f} | {p50:.3f} | {p99:.3f} | "
              f"{p99 / mock_p99:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
