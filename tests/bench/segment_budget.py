"""Cost of the segment descriptor budget on the partition log's hot paths, in process.

    python -m tests.bench.segment_budget                     # this tree
    python -m tests.bench.segment_budget --budget 0          # no budget (files stay open)

Appends of one 100-byte record batch and reads of one batch, round-robin over `--partitions`
partition logs in a temporary directory, for `--seconds` of CPU each: operations per second of
the process's CPU time (median of `--rounds`). With a budget of at least the number of
partitions every segment stays open, so an operation pays only the LRU move; a smaller budget
(`--budget 4 --partitions 64`) shows the cost of reopening files. Runs on trees without the
budget too (`--budget` is then ignored), so the same command compares before and after.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from storage.log import LogConfig, PartitionLog
from tests.unit._batches import make_batch

NOW = 1_700_000_000_000


def _open_logs(root: Path, partitions: int, budget_size: int) -> tuple[list[PartitionLog], Any]:
    config = LogConfig(segment_bytes=64 << 20)
    kwargs: dict[str, Any] = {}
    budget = None
    if budget_size > 0 and "budget" in inspect.signature(PartitionLog.open).parameters:
        from storage.descriptors import DescriptorBudget

        budget = DescriptorBudget(budget_size)
        kwargs["budget"] = budget
    return [PartitionLog.open(root / f"t-{p}", config, **kwargs)
            for p in range(partitions)], budget


def _rate(action: Any, logs: list[PartitionLog], seconds: float) -> float:
    """Operations per second of this process's CPU time (user + system), so that other load on
    the machine changes the figure less than it would wall time."""
    count = 0
    n = len(logs)
    started = time.process_time()
    deadline = started + seconds
    while True:
        for _ in range(1000):
            action(logs[count % n], count)
            count += 1
        now = time.process_time()
        if now >= deadline:
            return count / (now - started)


def run(partitions: int, budget_size: int, seconds: float) -> tuple[float, float]:
    batch = make_batch([b"x" * 100])
    with tempfile.TemporaryDirectory() as tmp:
        logs, _budget = _open_logs(Path(tmp), partitions, budget_size)
        appends = _rate(lambda log, _i: log.append(batch, NOW), logs, seconds)
        reads = _rate(lambda log, i: log.read((i // partitions) % log.log_end_offset, 1),
                      logs, seconds)
        for log in logs:
            log.close()
    return appends, reads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.segment_budget",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--budget", type=int, default=1000, help="0: no budget")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    results = [run(args.partitions, args.budget, args.seconds) for _ in range(args.rounds)]
    appends = statistics.median(r[0] for r in results)
    reads = statistics.median(r[1] for r in results)
    print(f"partitions={args.partitions} budget={args.budget}: "
          f"append {appends:,.0f}/s, read {reads:,.0f}/s (median of {args.rounds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
