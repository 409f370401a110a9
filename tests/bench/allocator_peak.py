"""Where a join storm's resident memory goes: pymalloc's arenas, live and free blocks, at the
storm's peak and after it.

    python -m tests.bench.allocator_peak --groups 10000

Starts the broker untraced under a test-only wrapper (this module, with `--serve`) that writes
`sys._debugmallocstats()` to its log on SIGUSR2, and on SIGUSR1 also the resident size by kind
of mapping (`/proc/self/smaps`: glibc's heap, anonymous mappings - pymalloc's 1 MiB arenas
among them -, the rest) and whether a collection finds cyclic garbage. The load is `commit_load
idle`'s (one connection per member, JoinGroup twice and SyncGroup as librdkafka does), with a
SIGUSR2 every 50 ms while the groups form. It prints the RSS per step, the arenas and their
free blocks after the storm, and per size class the blocks alive at the peak beyond those alive
after it (what the requests in flight held) and the free blocks left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _smaps_mb() -> dict[str, float]:
    kinds = {"heap": 0, "anonymous": 0, "other": 0}
    kind = "other"
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as f:
        for line in f:
            fields = line.split()
            if fields and not fields[0].endswith(":"):  # a mapping's first line
                name = fields[5] if len(fields) > 5 else ""
                kind = "heap" if name == "[heap]" else "anonymous" if not name else "other"
            elif fields and fields[0] == "Rss:":
                kinds[kind] += int(fields[1])
    return {k: round(v / 1024, 1) for k, v in kinds.items()}


def _serve(argv: list[str]) -> int:
    """The broker's own entry point, with the allocator's statistics on signals (test-only)."""

    def stats(_sig: int, _frame: Any) -> None:
        print("=== malloc stats", file=sys.stderr, flush=True)
        sys._debugmallocstats()

    def report(_sig: int, _frame: Any) -> None:
        print(f"=== resident {json.dumps(_smaps_mb())}", file=sys.stderr, flush=True)
        print(f"=== cyclic garbage {gc.collect()}", file=sys.stderr, flush=True)
        stats(_sig, _frame)

    signal.signal(signal.SIGUSR1, report)
    signal.signal(signal.SIGUSR2, stats)
    from coordinator.__main__ import main as broker_main

    return broker_main(argv)


async def _load(broker: Any, groups: int) -> dict[str, Any]:
    from tests.bench.coordinator_bench import _members
    from tests.bench.members import close_all, gather_bounded

    stats = broker.stats()
    rss = {"start": stats.rss_bytes()}
    conns, members = await _members(broker, groups, [f"peak-{i}" for i in range(groups)],
                                    session_ms=300_000, rebalance_ms=30_000,
                                    deadline=time.monotonic() + 120)
    try:
        await asyncio.sleep(0.5)
        rss["connected"] = stats.rss_bytes()

        async def sample() -> None:
            while True:
                os.kill(broker.pid, signal.SIGUSR2)
                await asyncio.sleep(0.05)

        sampler = asyncio.ensure_future(sample())
        results = await gather_bounded([m.join_and_sync(time.monotonic() + 100)
                                        for m in members], 100)
        sampler.cancel()
        formed = sum(not isinstance(r, BaseException) for r in results)
        await asyncio.sleep(2.0)
        rss["grouped"] = stats.rss_bytes()
        os.kill(broker.pid, signal.SIGUSR1)
        await asyncio.sleep(1.0)
        return {"formed": formed, "rss_mb": {k: round(v / 1e6, 1) for k, v in rss.items()}}
    finally:
        await close_all(conns)


def _parse(block: str) -> dict[str, Any]:
    in_use: dict[int, int] = {}
    free: dict[int, int] = {}
    for line in block.splitlines():
        m = re.match(r"\s+\d+\s+(\d+)\s+\d+\s+(\d+)\s+(\d+)$", line)
        if m:
            size = int(m.group(1))
            in_use[size], free[size] = int(m.group(2)), int(m.group(3))

    def number(label: str) -> int:
        found = re.search(rf"{label}\s+=\s+([\d,]+)", block)
        return int(found.group(1).replace(",", "")) if found else 0

    return {"in_use": in_use, "free": free, "live": number("bytes in allocated blocks"),
            "free_bytes": number("bytes in available blocks"),
            "arenas": number("arenas allocated current")}


def _summary(log_text: str, formed: int) -> None:
    blocks = [_parse(b) for b in log_text.split("=== malloc stats")[1:]]
    if not blocks:
        print("no allocator statistics in the broker's log")
        return
    after = blocks[-1]
    peak = max(blocks, key=lambda b: b["live"])
    resident = re.findall(r"=== resident (\{.*\})", log_text)
    garbage = re.findall(r"=== cyclic garbage (\d+)", log_text)
    print(f"resident after the storm by mapping (MB): {resident[-1] if resident else '?'}; "
          f"cyclic garbage found: {garbage[-1] if garbage else '?'}")
    print(f"pymalloc after: {after['arenas']} arenas of 1 MiB, {after['live'] / 1e6:.1f} MB in "
          f"live blocks, {after['free_bytes'] / 1e6:.1f} MB in free blocks of used pools")
    print(f"pymalloc live at the peak: {peak['live'] / 1e6:.1f} MB "
          f"({(peak['live'] - after['live']) / max(formed, 1):.0f} B per member beyond after)")
    print("size class | blocks per member alive at the peak beyond after | free after (MB)")
    for size in sorted(peak["in_use"]):
        extra = peak["in_use"][size] - after["in_use"].get(size, 0)
        free_mb = after["free"].get(size, 0) * size / 1e6
        if extra * size > 100_000 or free_mb > 0.5:
            print(f"{size:5d} B | {extra / max(formed, 1):6.2f} | {free_mb:5.2f}")


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--serve"]:
        return _serve(args_in[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=10_000)
    args = parser.parse_args(args_in)
    from tests.bench.brokers import Rebalanced
    from tests.bench.commit_load import _raise_fd_limit, _run

    _raise_fd_limit(args.groups + 1000)
    workdir = Path(tempfile.mkdtemp(prefix="rebalanced-allocator-"))
    broker = Rebalanced(workdir, entry=("-m", "tests.bench.allocator_peak", "--serve"))
    broker.start()
    try:
        result = _run(_load(broker, args.groups))
    finally:
        broker.cleanup()
    try:
        print(json.dumps(result))
        _summary(broker.log_path.read_text(errors="replace"), result["formed"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
