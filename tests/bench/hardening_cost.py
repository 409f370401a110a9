"""Broker CPU per Heartbeat and per OffsetCommit of several source trees, alternated in one run.

    python -m tests.bench.hardening_cost --tree before=../before-checkout --tree after=. --rounds 5

Each `--tree NAME=PATH` is a checkout of the project; its broker runs from that tree (`python -m
coordinator` with the tree as working directory, this virtualenv's packages) while the load
comes from this tree's generators, so every tree gets the same load. A round starts a fresh
broker per tree and scenario, in turn (the order flips every round, so that neither tree always
runs first), and measures:

* `heartbeat`: 10 groups of 10 members, each member heartbeating (v3, as librdkafka) in a closed
  loop for `--seconds`: broker CPU (utime + stime of the broker process) per heartbeat;
* `commit`: 10 members of one group, each committing 10 partitions (OffsetCommit v8, as
  kafka-python) with 4 requests in flight, `offsets.commit.fsync=100`: broker CPU per commit.

Broker CPU time, not wall time, so that other processes on the machine slow a run down without
changing its cost much; the machine's CPU busy outside the broker and this process is reported
per run. Prints a Markdown table: each tree's values per round, the median, and the change of
each median against the first tree's.

`--mock` adds librdkafka's in-memory mock cluster as one more subject of every round (its
helper process's CPU); `--fsync`, `--version` and `--in-flight` set the commit scenario, e.g.
the issue's comparison (durable commits, the versions librdkafka sends, one request at a time
per member's connection):

    python -m tests.bench.hardening_cost --tree main=../main-checkout --tree new=. --mock \
        --fsync always --version 9 --in-flight 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.bench.brokers import (
    Broker,
    LibrdkafkaMock,
    Rebalanced,
    self_cpu_seconds,
    system_busy_seconds,
)
from tests.bench.commit_load import CommitParams, _run, commit_run
from tests.bench.coordinator_bench import CoordinatorParams, heartbeat_throughput

SCENARIOS = ("heartbeat", "commit")
DEFAULT_COMMIT = CommitParams()
MOCK = "mock"  # a --tree name that stands for librdkafka's mock cluster
_UNIT = {"heartbeat": "broker CPU per Heartbeat v3, 100 members (µs)",
         "commit": "broker CPU per 10-partition OffsetCommit v{version}, fsync {fsync} (µs)"}


def measure(tree: Path | None, scenario: str, seconds: float, workdir: Path,
            commit: CommitParams = DEFAULT_COMMIT, fsync: str = "100") -> dict[str, Any]:
    """One run on a fresh broker; a run whose group could not form (a broker may answer
    COORDINATOR_LOAD_IN_PROGRESS while it reads its new group log) is run again."""
    for attempt in range(3):
        try:
            return _measure_once(tree, scenario, seconds, workdir, commit, fsync)
        except RuntimeError as exc:
            if attempt == 2:
                raise
            name = MOCK if tree is None else tree.name
            print(f"  {scenario} on {name}: {exc}; again", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def _measure_once(tree: Path | None, scenario: str, seconds: float, workdir: Path,
                  commit: CommitParams, fsync: str) -> dict[str, Any]:
    broker: Broker
    if tree is None:
        broker = LibrdkafkaMock(workdir)
    else:
        settings = {"offsets.commit.fsync": fsync} if scenario == "commit" else {}
        broker = Rebalanced(workdir, settings, repo=tree)
    broker.start()
    busy0, own0, t0 = system_busy_seconds(), self_cpu_seconds(), time.monotonic()
    cpu0 = broker.stats().cpu_seconds()
    try:
        if scenario == "heartbeat":
            result = _run(heartbeat_throughput(broker, CoordinatorParams(
                heartbeat_seconds=seconds)))
            value = result["broker_cpu_us_per_hb"]
        else:
            result = _run(commit_run(broker, replace(commit, seconds=seconds)))
            value = result["broker_cpu_us_per_commit"]
        elapsed = time.monotonic() - t0
        broker_cpu = broker.stats().cpu_seconds() - cpu0
        others = (system_busy_seconds() - busy0) - broker_cpu - (self_cpu_seconds() - own0)
    finally:
        if isinstance(broker, Rebalanced):
            broker.cleanup()
        else:
            broker.stop()
    return {"value_us": value, "others_cpu_pct": round(others / elapsed * 100), **result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.hardening_cost",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per run")
    parser.add_argument("--only", choices=SCENARIOS, action="append")
    parser.add_argument("--out", type=Path, help="raw results as JSON")
    parser.add_argument("--mock", action="store_true",
                        help="librdkafka's mock cluster as one more subject")
    parser.add_argument("--fsync", default="100", help="offsets.commit.fsync for `commit`")
    parser.add_argument("--version", type=int, default=DEFAULT_COMMIT.version,
                        choices=range(2, 10), help="OffsetCommit version for `commit`")
    parser.add_argument("--in-flight", type=int, default=DEFAULT_COMMIT.in_flight,
                        help="commits in flight per member's connection")
    args = parser.parse_args(argv)
    trees = []
    for spec in args.tree:
        name, _, path = spec.partition("=")
        if not path or not (Path(path) / "coordinator" / "__main__.py").exists():
            parser.error(f"--tree {spec}: expected NAME=PATH of a checkout with coordinator/")
        trees.append((name, Path(path).resolve()))
    subjects: list[tuple[str, Path | None]] = [*trees, *([(MOCK, None)] if args.mock else [])]
    commit = CommitParams(version=args.version, in_flight=args.in_flight)
    scenarios = args.only or list(SCENARIOS)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {name: [] for name, _ in subjects} for s in scenarios}
    workdir = Path(tempfile.mkdtemp(prefix="hardening-cost-"))
    for round_no in range(args.rounds):
        order = subjects if round_no % 2 == 0 else subjects[::-1]
        for scenario in scenarios:
            for name, path in order:
                result = measure(path, scenario, args.seconds, workdir, commit, args.fsync)
                runs[scenario][name].append(result)
                print(f"round {round_no + 1} {scenario} {name}: {result['value_us']:.1f} µs, "
                      f"p50/p99 {result['p50_ms']:.2f}/{result['p99_ms']:.2f} ms "
                      f"(others {result['others_cpu_pct']} % CPU, load average "
                      f"{os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    if args.out:
        args.out.write_text(json.dumps(runs, indent=2))
    base = trees[0][0]
    print(f"| {'measure'} | tree | per round | median | change vs {base} | "
          "p50 / p99 ms (medians) | others' CPU |")
    print("|---|---|---|---|---|---|---|")
    for scenario in scenarios:
        unit = _UNIT[scenario].format(version=args.version, fsync=args.fsync)
        base_median = statistics.median(r["value_us"] for r in runs[scenario][base])
        for name, _ in subjects:
            values = [r["value_us"] for r in runs[scenario][name]]
            median = statistics.median(values)
            others = [r["others_cpu_pct"] for r in runs[scenario][name]]
            p50 = statistics.median(r["p50_ms"] for r in runs[scenario][name])
            p99 = statistics.median(r["p99_ms"] for r in runs[scenario][name])
            change = "" if name == base else f"{(median / base_median - 1) * 100:+.1f} %"
            print(f"| {unit} | {name} | {', '.join(f'{v:.1f}' for v in values)} | "
                  f"{median:.1f} | {change} | {p50:.2f} / {p99:.2f} | "
                  f"{min(others)}-{max(others)} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
