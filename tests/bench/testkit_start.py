"""How long the test kit's broker takes from `start()` to ready (Kafka port and, with the
control endpoint, its port accepting), forked from the warm parent and started cold.

    python -m tests.bench.testkit_start [--runs 20] [--cold-runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from coordinator.testkit.process import RebalancedBroker, prewarm
from tests.bench.stats import percentile


def measure(runs: int, warm: bool, control: bool) -> list[float]:
    times = []
    for _ in range(runs):
        broker = RebalancedBroker(warm=warm, control=control)
        started = time.perf_counter()
        broker.start()
        times.append((time.perf_counter() - started) * 1000)
        broker.stop()
        broker.remove_data()
    return times


def report(name: str, times: list[float]) -> None:
    print(f"{name:<34} runs={len(times):3d} median={statistics.median(times):7.1f} ms "
          f"p90={percentile(times, 90):7.1f} ms max={max(times):7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--cold-runs", type=int, default=5)
    parser.add_argument("--control", action="store_true",
                        help="with the test control endpoint")
    args = parser.parse_args()
    started = time.perf_counter()
    prewarm()
    broker = RebalancedBroker(control=args.control).start()  # waits for the parent's imports
    first = (time.perf_counter() - started) * 1000
    broker.stop()
    broker.remove_data()
    print(f"{'warm parent + first broker':<34} {first:7.1f} ms (once per test session)")
    report("fixture start to ready (warm)", measure(args.runs, True, args.control))
    report("fixture start to ready (cold)", measure(args.cold_runs, False, args.control))


if __name__ == "__main__":
    main()
