"""What one group commit of the group log costs: the C fsync threads against the Python ones.

    python -m tests.bench.group_commit_cost --partitions 1,4 --commits 600 --rounds 3

In this process, on uvloop: a group log with `offsets.commit.fsync=always` on the real file
system under `--dir` (default: the current directory, where `make run` keeps `./data`), 50
partitions. Each group commit appends one two-partition OffsetCommit for each of `partitions`
groups on distinct group-log partitions and waits until all are durable; process CPU and wall
time per group commit are reported, with the fsyncs on the C threads (`storage.fsync_offload`)
and with the Python fsync thread and executor it replaces (the extension hidden for the run).
Rounds alternate the two; the medians are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from coordinator.grouplog.log import GroupLog
from storage import fsync_offload
from storage.fs import REAL_FS
from storage.log import LogConfig
from tests.bench.commit_load import _run
from tests.unit.test_group_log_flush import commit_records, groups_on_distinct_partitions

_WARMUP = 50


async def measure(directory: str, partitions: int, commits: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per group commit."""
    with tempfile.TemporaryDirectory(prefix="group-commit-cost-", dir=directory) as scratch:
        log = GroupLog.open(Path(scratch), 50, LogConfig(), "always", REAL_FS)
        try:
            groups = groups_on_distinct_partitions(log, partitions)
            records = {g: commit_records(g) for g in groups}
            for done in range(_WARMUP + commits):
                if done == _WARMUP:
                    cpu_before, wall_before = time.process_time(), time.perf_counter()
                await asyncio.gather(*[log.append(records[g], 1, group_id=g) for g in groups])
            cpu = time.process_time() - cpu_before
            wall = time.perf_counter() - wall_before
        finally:
            log.close()
    return cpu / commits * 1e6, wall / commits * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.group_commit_cost",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="1,4",
                        help="group-log partitions per group commit (comma-separated)")
    parser.add_argument("--commits", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=".")
    args = parser.parse_args(argv)
    if not fsync_offload.AVAILABLE:
        parser.exit(2, "storage._fsync_worker is not built: nothing to compare\n")
    results: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for c_threads in (True, False):
            fsync_offload.AVAILABLE = c_threads
            for partitions in (int(p) for p in args.partitions.split(",")):
                cpu, wall = _run(measure(args.dir, partitions, args.commits))
                key = f"{partitions} partitions, {'C' if c_threads else 'Python'} threads"
                cell = results.setdefault(key, {"cpu_us": [], "wall_us": []})
                cell["cpu_us"].append(round(cpu, 1))
                cell["wall_us"].append(round(wall, 1))
                print(f"{key}: {cpu:.1f} µs CPU, {wall:.1f} µs wall per group commit",
                      flush=True)
    fsync_offload.AVAILABLE = True
    summary = {key: {"cpu_us_median": statistics.median(cell["cpu_us"]),
                     "wall_us_median": statistics.median(cell["wall_us"]), **cell}
               for key, cell in results.items()}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
