"""What the metrics listener costs: heartbeat and commit benchmarks with it off and on.

    python -m tests.bench.metrics_overhead [--rounds 3] [--quick]

Each round runs the two subjects side by side at the same time (two brokers, two load
generators in two threads), so that a shared machine's load falls on both alike; `--sequential`
alternates them instead (off, on, on, off, ...). Reported: the median broker CPU per heartbeat /
commit of each, and the median of the per-round ratios. "On" is `metrics.listener` set,
/metrics scraped every second and the group page fetched every 5 s (its own refresh) during the
load (see `ops_scrape.py`).

The subject started second in a round measures a few per cent more CPU per operation than the
first, whichever it is (the two load generators share one interpreter), so the start order
alternates and the headline figure is order-balanced: the geometric mean of the median ratio of
the rounds where "on" started second and of those where it started first, which cancels an
order effect that multiplies both alike.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.bench import ops_scrape
from tests.bench.run import Params, run_subject


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.metrics_overhead",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--scrape-interval", type=float, default=ops_scrape.SCRAPE_INTERVAL_S,
                        metavar="SECONDS", help="0: never scrape (the listener only)")
    parser.add_argument("--scenario", action="append", choices=sorted(ops_scrape.COMPARED),
                        help="only these (repeatable)")
    parser.add_argument("--sequential", action="store_true",
                        help="one subject at a time instead of both at once")
    parser.add_argument("--out", type=Path, default=Path("bench-results/metrics-overhead.json"))
    args = parser.parse_args(argv)
    params = Params.make(args.quick)
    ops_scrape.SCRAPE_INTERVAL_S = args.scrape_interval
    workdir = Path(tempfile.mkdtemp(prefix="rebalanced-bench-"))
    incidents: list[dict[str, Any]] = []
    document: dict[str, Any] = {"rounds": args.rounds, "quick": args.quick,
                                "scrape_interval_s": args.scrape_interval,
                                "concurrent": not args.sequential, "scenarios": {}}
    try:
        for scenario, key in ops_scrape.COMPARED.items():
            if args.scenario and scenario not in args.scenario:
                continue
            samples: dict[str, list[float]] = {"rebalanced": [], ops_scrape.SUBJECT: []}
            ratios: list[float] = []
            on_second: list[float] = []  # ratios of the rounds where "on" started second
            on_first: list[float] = []
            for round_number in range(args.rounds):
                order = ["rebalanced", ops_scrape.SUBJECT]
                if round_number % 2:
                    order.reverse()
                results: dict[str, dict[str, Any]] = {}
                if args.sequential:
                    for subject in order:
                        results[subject] = run_subject(scenario, subject, params, workdir,
                                                       incidents)
                else:
                    def run(subject: str, scenario: str = scenario,
                            results: dict[str, dict[str, Any]] = results) -> None:
                        results[subject] = run_subject(scenario, subject, params, workdir,
                                                       incidents)

                    threads = [threading.Thread(target=run, args=(s,)) for s in order]
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
                for subject in order:
                    result = results[subject]
                    value = result.get(key)
                    status = f"{value:.1f} µs/op" if isinstance(value, float) else result.get(
                        "error", "no value")
                    print(f"  {scenario:<14} round {round_number} {subject:<20} {status}  "
                          f"(other CPU {result.get('other_cpu_pct', 0):.0f} %)", flush=True)
                    if isinstance(value, float):
                        samples[subject].append(value)
                off_value = results["rebalanced"].get(key)
                on_value = results[ops_scrape.SUBJECT].get(key)
                if isinstance(off_value, float) and isinstance(on_value, float):
                    ratios.append(on_value / off_value)
                    (on_first if order[0] == ops_scrape.SUBJECT else on_second).append(
                        on_value / off_value)
            off = statistics.median(samples["rebalanced"]) if samples["rebalanced"] else None
            on = (statistics.median(samples[ops_scrape.SUBJECT])
                  if samples[ops_scrape.SUBJECT] else None)
            entry: dict[str, Any] = {"metric": key, "off": samples["rebalanced"],
                                     "on": samples[ops_scrape.SUBJECT],
                                     "off_median": off, "on_median": on}
            if off and on:
                entry["overhead_pct"] = (on / off - 1) * 100
                entry["round_ratios"] = ratios
                paired = (statistics.median(ratios) - 1) * 100 if ratios else None
                entry["paired_overhead_pct"] = paired
                balanced = None
                if on_first and on_second:
                    balanced = ((statistics.median(on_first) * statistics.median(on_second))
                                ** 0.5 - 1) * 100
                    entry["on_started_first_ratios"] = on_first
                    entry["on_started_second_ratios"] = on_second
                entry["order_balanced_overhead_pct"] = balanced
                print(f"{scenario}: median broker CPU off {off:.2f}, on {on:.2f} µs/op -> "
                      f"{entry['overhead_pct']:+.1f} %; median of per-round ratios "
                      f"{paired if paired is not None else float('nan'):+.1f} %; "
                      f"order-balanced {balanced if balanced is not None else float('nan'):+.1f} %",
                      flush=True)
            document["scenarios"][scenario] = entry
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    document["incidents"] = incidents
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
