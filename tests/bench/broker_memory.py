"""Where a running broker's memory goes, per connection and per one-member group.

    python -m tests.bench.broker_memory --groups 2000

Starts the broker under a test-only wrapper (this module, with `--serve`) that traces
allocations (tracemalloc, one frame) and on SIGUSR1 writes what was allocated since the
previous signal, by source line, plus the live objects by type (`gc.get_objects`, with
`sys.getsizeof`). The load side opens `groups` connections, then forms one one-member classic
group per connection (JoinGroup twice, SyncGroup, as librdkafka does), signalling after each
step, and prints both differences per connection and per group. Tracing slows the broker, so
its timings mean nothing; `commit_load idle` measures the untraced RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

_OUT_ENV = "REBALANCED_MEMORY_PROBE_OUT"


def _census() -> dict[str, tuple[int, int]]:
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for obj in gc.get_objects():
        name = type(obj).__qualname__
        counts[name] += 1
        sizes[name] += sys.getsizeof(obj)
    return {name: (counts[name], sizes[name]) for name in counts}


def _serve(argv: list[str]) -> int:
    """The broker's own entry point, with the dump on SIGUSR1 (test-only)."""
    out = Path(os.environ[_OUT_ENV])
    state: dict[str, Any] = {"snapshot": None, "census": {}, "step": 0}

    def dump(_sig: int, _frame: Any) -> None:
        gc.collect()
        # The census first: the snapshot's own trace tuples are then not counted as live.
        census = _census()
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)])
        lines: list[tuple[int, int, str]] = []
        if state["snapshot"] is not None:
            for stat in snapshot.compare_to(state["snapshot"], "lineno"):
                frame = stat.traceback[0]
                lines.append((stat.size_diff, stat.count_diff, f"{frame.filename}:{frame.lineno}"))
        types = {name: (count - state["census"].get(name, (0, 0))[0],
                        size - state["census"].get(name, (0, 0))[1])
                 for name, (count, size) in census.items()}
        state["snapshot"], state["census"] = snapshot, census
        step = state["step"] = state["step"] + 1
        traced, _peak = tracemalloc.get_traced_memory()
        (out / f"step-{step}.json").write_text(json.dumps(
            {"traced": traced, "lines": lines, "types": types}))

    tracemalloc.start(1)
    signal.signal(signal.SIGUSR1, dump)
    from coordinator.__main__ import main as broker_main

    return broker_main(argv)


async def _load(broker: Any, groups: int, out: Path) -> dict[str, Any]:
    from tests.bench.coordinator_bench import _members
    from tests.bench.members import close_all, gather_bounded

    def step(n: int) -> dict[str, Any]:
        assert broker.proc is not None
        os.kill(broker.proc.pid, signal.SIGUSR1)
        path = out / f"step-{n}.json"
        while not path.exists():
            time.sleep(0.05)
        time.sleep(0.2)
        return json.loads(path.read_text())

    await asyncio.sleep(0.5)
    step(1)
    conns, members = await _members(broker, groups, [f"mem-{i}" for i in range(groups)],
                                    session_ms=300_000, rebalance_ms=300_000,
                                    deadline=time.monotonic() + 300)
    try:
        await asyncio.sleep(1.0)
        connected = step(2)
        results = await gather_bounded([m.join_and_sync(time.monotonic() + 280) for m in members],
                                       280)
        formed = sum(not isinstance(r, BaseException) for r in results)
        await asyncio.sleep(1.0)
        grouped = step(3)
        return {"connected": connected, "grouped": grouped, "formed": formed}
    finally:
        await close_all(conns)


def _report(title: str, diff: dict[str, Any], per: int, top: int) -> None:
    total = sum(size for size, _count, _where in diff["lines"])
    print(f"\n== {title}: {total / per:.0f} B traced per unit ({per} units)")
    for size, count, where in sorted(diff["lines"], reverse=True)[:top]:
        print(f"{size / per:8.1f} B {count / per:6.2f} blocks  {where}")
    print("-- live objects by type (count, getsizeof) per unit")
    rows = sorted(diff["types"].items(), key=lambda kv: -kv[1][1])[:top]
    for name, (count, size) in rows:
        print(f"{size / per:8.1f} B {count / per:6.2f} objects  {name}")


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--serve"]:
        return _serve(args_in[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(args_in)
    from tests.bench.brokers import Rebalanced
    from tests.bench.commit_load import _raise_fd_limit, _run

    _raise_fd_limit(args.groups + 1000)
    workdir = Path(tempfile.mkdtemp(prefix="rebalanced-memory-"))
    out = workdir / "dumps"
    out.mkdir()
    broker = Rebalanced(workdir, entry=("-m", "tests.bench.broker_memory", "--serve"),
                        environment={_OUT_ENV: str(out)})
    broker.start()
    try:
        result = _run(_load(broker, args.groups, out))
    finally:
        broker.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    _report("per connection", result["connected"], args.groups, args.top)
    _report(f"per group ({result['formed']} formed)", result["grouped"], max(result["formed"], 1),
            args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
