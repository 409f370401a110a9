"""What one fsync costs on the disk under the data directory: CPU of the calling process and
latency, for appends of a group-log batch's size.

    python -m tests.bench.fsync_cost --appends 2000 --size 300

The floor under a durable commit: the broker answers an OffsetCommit only after an fsync
covers its records (`offsets.commit.fsync=always`), so neither its CPU per commit nor its
latency can go below this disk's fsync shared among the commits it covers, whatever the
broker's own code costs. The file is appended to and fsynced `appends` times in a temporary
directory under `--dir` (default: the current directory, where `make run` keeps `./data`);
plain appends without an fsync are measured the same way for comparison.

`--preallocated` measures the same fsynced appends a second way: written in place (`pwrite`)
into a file whose size was set ahead of them (`ftruncate` to the total), so that no fsync has
a new file size to write (Kafka's `log.preallocate`). The log does not do this; the figure is
what that would save per fsync on this disk.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable

from tests.bench.stats import percentile


def measure(directory: str, appends: int, size: int, preallocated: bool = False
            ) -> dict[str, float]:
    payload = b"\0" * size
    with tempfile.TemporaryDirectory(prefix="fsync-cost-", dir=directory) as scratch:
        fd = os.open(os.path.join(scratch, "segment"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            cpu_before = time.process_time()
            for _ in range(appends):
                os.write(fd, payload)
            append_cpu = time.process_time() - cpu_before
            fsync_cpu, latencies = _fsynced(fd, appends, lambda _: os.write(fd, payload))
        finally:
            os.close(fd)
        figures = {
            "append_cpu_us": round(append_cpu / appends * 1e6, 1),
            "append_and_fsync_cpu_us": round(fsync_cpu / appends * 1e6, 1),
            "fsync_p50_ms": round(statistics.median(latencies) * 1e3, 3),
            "fsync_p99_ms": round(percentile(latencies, 99) * 1e3, 3),
        }
        if preallocated:
            figures.update(_preallocated(os.path.join(scratch, "preallocated"), appends,
                                         payload))
    return figures


def _fsynced(fd: int, appends: int, append: Callable[[int], object]
             ) -> tuple[float, list[float]]:
    """`append(n)` then an fsync, `appends` times: CPU seconds for all, each fsync's latency."""
    latencies = []
    cpu_before = time.process_time()
    for n in range(appends):
        append(n)
        started = time.perf_counter()
        os.fsync(fd)
        latencies.append(time.perf_counter() - started)
    return time.process_time() - cpu_before, latencies


def _preallocated(path: str, appends: int, payload: bytes) -> dict[str, float]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.ftruncate(fd, appends * len(payload))
        os.fsync(fd)
        cpu, latencies = _fsynced(fd, appends,
                                  lambda n: os.pwrite(fd, payload, n * len(payload)))
    finally:
        os.close(fd)
    return {
        "preallocated_append_and_fsync_cpu_us": round(cpu / appends * 1e6, 1),
        "preallocated_fsync_p50_ms": round(statistics.median(latencies) * 1e3, 3),
        "preallocated_fsync_p99_ms": round(percentile(latencies, 99) * 1e3, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--size", type=int, default=300, help="bytes per append")
    parser.add_argument("--dir", default=".", help="where the scratch file goes")
    parser.add_argument("--preallocated", action="store_true",
                        help="also into a file sized ahead (see above)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.dir, args.appends, args.size, args.preallocated), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
