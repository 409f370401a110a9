"""What one member's 10-partition OffsetCommit costs the broker's own code, durable or not.

    python -m tests.bench.commit_floor --commits 3000 --rounds 5

In this process, on uvloop: a real `Broker` (data directory under `--dir`, default the current
directory, where `make run` keeps `./data`), a topic of 10 partitions, one member of one stable
group on a `Connection` whose transport keeps what it is given (no socket, so no socket system
calls and no client), committing OffsetCommit v9 frames one at a time, each with new offsets,
the next sent once the answer is written. Two brokers, alternated round by round:

* `offsets.commit.fsync=always`: every commit is its own group commit (nothing else is in
  flight), so it pays the fsync and the hand-offs to the fsync thread and back;
* `offsets.commit.fsync=100`: the commit is answered once written, within `data_received`.

Per commit: CPU of the event loop's thread (`time.thread_time`), of the whole process (the fsync
threads too) and wall time; medians of the rounds. The difference between the two is what
durability costs a lone committer; the interval figure is the Python path from frame to answer.

`--gap-ms N` waits N ms (the loop idle) after each answer before the next frame, as a consumer
that commits now and then does: the same code then runs on caches and predictors that the idle
time and other work have cooled.

`--pin-fsync-threads` keeps the event loop's thread on the first CPU and the group log's fsync
threads (`group-log-fsync`, started by the first durable commit) on the second, so that the
fsync's work in the kernel never runs on the loop's CPU (for the rest of the run, once set).

`--split` also times, on the loop's thread, where a durable commit's CPU goes between the frame
and its answer: handling the frame (`Connection.data_received`: decode, the group core, the
records, the group-log write), the loop's sleep and wake until the fsync thread's completion is
read (with the hand-off of the fsync), the completion (`FsyncOffload._collect`), what runs
between it and the answer's write (the append's callbacks: offsets applied, the answer encoded,
the journal line), the write, and from the write to the next frame (this process's own turn).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog
import uvloop

from protocol.connection import Connection
from storage import fsync_offload
from tests.bench.wire import decode, encode
from tests.integration.test_heartbeat_now import Member, started

_PARTITIONS = 10
_WARMUP = 500
_OFFSET_COMMIT, _CREATE_TOPICS = 8, 19


async def _send(member: Member, frame: bytes) -> bytes:
    """`frame` on the member's connection; its answer, once written."""
    transport = member.transport
    transport.out.clear()
    transport.written = asyncio.get_running_loop().create_future()
    member.connection.data_received(frame)
    await transport.written
    return transport.out[0]


async def _commit_cost(directory: str, fsync: str, commits: int,
                       split: _Split | None = None, gap_s: float = 0.0,
                       pin: bool = False) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="commit-floor-", dir=directory) as scratch:
        broker = await started(Path(scratch), **{"offsets.commit.fsync": fsync})
        try:
            member = Member(broker)
            created = await member.call(_CREATE_TOPICS, 4, {
                "topics": [{"name": "t", "num_partitions": _PARTITIONS, "replication_factor": 1,
                            "assignments": [], "configs": []}],
                "timeout_ms": 10_000, "validate_only": False})
            assert created.topics[0].error_code.value == 0, created
            member_id, generation = await member.join_and_sync("g")
            frame = bytearray(encode(_OFFSET_COMMIT, 9, {
                "group_id": "g", "generation_id_or_member_epoch": generation,
                "member_id": member_id, "group_instance_id": None,
                "topics": [{"name": "t", "partitions": [
                    {"partition_index": p, "committed_offset": 1 << 40 | p,
                     "committed_leader_epoch": -1, "committed_metadata": ""}
                    for p in range(_PARTITIONS)]}]}))
            positions = [bytes(frame).index(struct.pack(">q", 1 << 40 | p))
                         for p in range(_PARTITIONS)]
            ok = await _send(member, _next(frame, positions, 0))
            if pin:
                _pin_fsync_threads()
            reply = decode(_OFFSET_COMMIT, 9, ok[4:])
            assert all(p.error_code.value == 0 for t in reply.topics for p in t.partitions), reply
            for n in range(1, _WARMUP):
                await _send(member, _next(frame, positions, n))
            if split is not None:
                split.reset()
            thread_before, process_before = time.thread_time(), time.process_time()
            wall_before = time.perf_counter()
            for n in range(_WARMUP, _WARMUP + commits):
                await _send(member, _next(frame, positions, n))
                if gap_s:
                    await asyncio.sleep(gap_s)
            figures = {
                "loop_thread_us": (time.thread_time() - thread_before) / commits * 1e6,
                "process_us": (time.process_time() - process_before) / commits * 1e6,
                "wall_us": (time.perf_counter() - wall_before) / commits * 1e6,
            }
            if gap_s:  # the wall time is then mostly the gaps and the timer's overshoot
                del figures["wall_us"]
            if split is not None:
                figures.update({f"{part} (loop thread µs)": spent / commits * 1e6
                                for part, spent in split.spent.items() if spent})
            return figures
        finally:
            await broker.stop()


class _Split:
    """Loop-thread CPU between the points of a durable commit named in the module docstring,
    measured by wrapping the methods that mark them (for this process only)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = dict.fromkeys(
            ("frame handled", "sleep and wake until the fsync's completion", "completion read",
             "completion to the answer's write", "answer written", "to the next frame"), 0.0)
        self._last: dict[str, float] = {}

    def install(self) -> None:
        clock, spent, last = time.thread_time, self.spent, self._last

        def timed(owner: Any, name: str, before: str | None, gap: str, during: str) -> None:
            original = getattr(owner, name)

            def wrapper(*args: Any) -> Any:
                started = clock()
                if before is not None and before in last:
                    spent[gap] += started - last.pop(before)
                try:
                    return original(*args)
                finally:
                    ended = clock()
                    spent[during] += ended - started
                    last[name] = ended
            setattr(owner, name, wrapper)

        timed(Connection, "data_received", "_scheduled_write", "to the next frame",
              "frame handled")
        timed(fsync_offload.FsyncOffload, "_collect", "data_received",
              "sleep and wake until the fsync's completion", "completion read")
        timed(Connection, "_scheduled_write", "_collect", "completion to the answer's write",
              "answer written")

    def reset(self) -> None:
        for key in self.spent:
            self.spent[key] = 0.0
        self._last.clear()


def _pin_fsync_threads() -> None:
    os.sched_setaffinity(0, {0})  # this thread: the event loop's
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        if (task / "comm").read_text().strip() == "group-log-fsync":
            os.sched_setaffinity(int(task.name), {1})


def _next(frame: bytearray, positions: list[int], n: int) -> bytes:
    struct.pack_into(">i", frame, 8, n)  # correlation id
    for position in positions:
        struct.pack_into(">q", frame, position, n)
    return bytes(frame)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.commit_floor",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=".", help="where the scratch data directory goes")
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="idle time after each answer (see above)")
    parser.add_argument("--pin-fsync-threads", action="store_true",
                        help="the loop on CPU 0, the fsync threads on CPU 1 (see above)")
    parser.add_argument("--split", action="store_true",
                        help="also split the durable commit's loop-thread CPU (see above)")
    args = parser.parse_args(argv)
    split = None
    if args.split:
        split = _Split()
        split.install()
    # The broker's info lines would time the terminal, not the broker.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    rounds: dict[str, list[dict[str, float]]] = {"always": [], "100": []}
    for round_no in range(args.rounds):
        order = ["always", "100"] if round_no % 2 == 0 else ["100", "always"]
        for fsync in order:
            figures = uvloop.run(_commit_cost(args.dir, fsync, args.commits, split,
                                              args.gap_ms / 1000, args.pin_fsync_threads))
            rounds[fsync].append(figures)
            print(f"round {round_no + 1} fsync={fsync}: " + ", ".join(
                f"{k} {v:.1f}" for k, v in figures.items()), flush=True)
    summary = {f"fsync={fsync}": {key: round(statistics.median(r.get(key, 0.0) for r in runs), 1)
                                  for key in runs[0]}
               for fsync, runs in rounds.items()}
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
