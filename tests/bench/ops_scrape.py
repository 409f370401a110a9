"""The metrics-on subject of the heartbeat and commit benchmarks: scrape while the load runs.

`rebalanced-metrics` is rebalanced with `metrics.listener` set and a scraper that fetches
/metrics every second (Prometheus scrapes every 15-60 s, so this is the pessimistic case) and the
group page as one person watching it does: the page reloads itself every 5 s. Its broker CPU per
heartbeat or commit against plain `rebalanced` in the same run is the cost of the metrics and the
page.

`python -m tests.bench.ops_scrape --under-scrape`: the ops port against the Kafka port.
OffsetCommit p50/p99 of the commit load (10 members x 10 partitions, 4 in flight each, fsync
always) on a broker holding 20,000 groups, in alternating windows: idle, then while 8 clients (in
a process of their own) fetch / and /metrics back to back; the headline is the median scraped
window's p99 over the median idle window's.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from typing import Any

SUBJECT = "rebalanced-metrics"
SCENARIOS = ("heartbeat", "offset-commit")
SCRAPE_INTERVAL_S = 1.0
PAGE_INTERVAL_S = 5.0  # the page's own refresh (coordinator.ops.page.REFRESH_SECONDS)
COMPARED = {"heartbeat": "broker_cpu_us_per_hb", "offset-commit": "broker_cpu_us_per_commit"}


class Scraper:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.scrapes = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        if SCRAPE_INTERVAL_S <= 0:
            return
        next_page = 0.0
        while not self._stop.wait(SCRAPE_INTERVAL_S):
            paths = ["/metrics"]
            if time.monotonic() >= next_page:
                paths.append("/")
                next_page = time.monotonic() + max(PAGE_INTERVAL_S, SCRAPE_INTERVAL_S)
            for path in paths:
                try:
                    with urllib.request.urlopen(self.base_url + path, timeout=10) as response:
                        response.read()
                    self.scrapes += 1
                except OSError:
                    self.errors += 1


def overhead(results: dict[str, Any]) -> dict[str, Any]:
    """Broker CPU per operation with the listener on, relative to off, per scenario."""
    out: dict[str, Any] = {}
    for scenario, key in COMPARED.items():
        by_subject = results.get(scenario, {})
        off = by_subject.get("rebalanced", {}).get(key)
        on = by_subject.get(SUBJECT, {}).get(key)
        if isinstance(off, int | float) and isinstance(on, int | float) and off > 0:
            out[scenario] = {"off_us": off, "on_us": on, "overhead_pct": (on / off - 1) * 100,
                             "scrapes": by_subject[SUBJECT].get("scrapes")}
    return out


def scrape_cost(groups: int = 10, members: int = 10, scrapes: int = 40) -> dict[str, float]:
    """Broker CPU per /metrics scrape and per page render, `groups` of `members` idle members."""
    import asyncio
    import tempfile
    from pathlib import Path

    from tests.bench import coordinator_bench as cb
    from tests.bench.brokers import Rebalanced, free_port
    from tests.bench.members import close_all

    async def measure() -> dict[str, float]:
        port = free_port()
        # Every request built anew (no cache, no rate limit): the cost of one build.
        broker = Rebalanced(Path(tempfile.mkdtemp(prefix="rebalanced-bench-")),
                            {"metrics.listener": f"127.0.0.1:{port}", "metrics.cache.ms": "0",
                             "metrics.max.request.rate": "100000"}).start()
        try:
            names = [f"scraped-{i // members}" for i in range(groups * members)]
            conns, group_members = await cb._members(broker, len(names), names,
                                                     session_ms=120_000, rebalance_ms=30_000)
            await cb._form_groups(group_members, timeout=60)
            stats = broker.stats()
            out: dict[str, float] = {}
            for path in ("/metrics", "/"):
                def fetch(path: str = path) -> None:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                                timeout=10) as response:
                        response.read()

                await asyncio.to_thread(fetch)  # warm
                cpu = stats.cpu_seconds()
                for _ in range(scrapes):
                    await asyncio.to_thread(fetch)
                out[path] = (stats.cpu_seconds() - cpu) / scrapes * 1000
            await close_all(conns)
            return out
        finally:
            broker.cleanup()

    return asyncio.run(measure())


# The ops port against the Kafka port: OffsetCommit latency idle and while `clients` HTTP
# clients fetch / and /metrics back to back, of a broker holding `groups` groups.


def fetch_forever(base_url: str, clients: int) -> None:
    """The scraping side of `commit_under_scrape`, run in its own process so that its CPU and
    interpreter lock are not the load generator's: `clients` threads, each fetching / and
    /metrics alternately, back to back, until stdin closes. Prints "ready" after the first
    answer, then one JSON line of counts at the end."""
    import json
    import sys

    stop = threading.Event()
    counts = {"requests": 0, "errors": 0, "bytes": 0}
    latencies: list[float] = []
    ready = threading.Event()
    lock = threading.Lock()

    def client(index: int) -> None:
        paths = ("/", "/metrics") if index % 2 else ("/metrics", "/")
        turn = 0
        while not stop.is_set():
            path = paths[turn % 2]
            turn += 1
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(base_url + path, timeout=30) as response:
                    size = len(response.read())
                with lock:
                    counts["requests"] += 1
                    counts["bytes"] += size
                    latencies.append(time.perf_counter() - started)
                ready.set()
            except OSError:
                with lock:
                    counts["errors"] += 1
                time.sleep(0.01)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait(60)
    print("ready", flush=True)
    began = time.monotonic()
    sys.stdin.read()
    stop.set()
    for thread in threads:
        thread.join(35)
    from tests.bench.stats import percentile

    elapsed = time.monotonic() - began
    print(json.dumps({**counts, "requests_per_s": counts["requests"] / elapsed,
                      "http_p50_ms": percentile(latencies, 50) * 1000 if latencies else None,
                      "http_p99_ms": percentile(latencies, 99) * 1000 if latencies else None}),
          flush=True)


class ScrapingClients:
    """`fetch_forever` in a child process, started and stopped by its PID."""

    def __init__(self, base_url: str, clients: int) -> None:
        import subprocess
        import sys

        from tests.bench.brokers import REPO

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.ops_scrape", "--fetch-forever", base_url,
             "--clients", str(clients)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            self.proc.kill()
            raise RuntimeError("the scraping clients got no answer")

    def stop(self) -> dict[str, Any]:
        import json

        out, _ = self.proc.communicate(b"", timeout=60)
        return dict(json.loads(out.decode().strip().splitlines()[-1]))


async def _idle_groups(broker: Any, groups: int, topic: str) -> None:
    """`groups` groups without members, each with one committed offset (a simple consumer's
    commit, generation -1), pipelined over a few connections."""
    import asyncio

    from tests.bench.members import encode_offset_commit_v7
    from tests.bench.wire import Connection

    conns = [await Connection.open("127.0.0.1", broker.port) for _ in range(4)]
    try:
        for start in range(0, groups, 2000):
            futures = [conns[i % len(conns)].send_raw(encode_offset_commit_v7(
                f"idle-{i:05d}", -1, "", topic, [(0, i)])) for i in range(start,
                                                                   min(start + 2000, groups))]
            await asyncio.wait_for(asyncio.gather(*futures), 120)
    finally:
        for conn in conns:
            await conn.close()


def commit_under_scrape(groups: int = 20_000, clients: int = 8, seconds: float = 5.0,
                        rounds: int = 2, settings: dict[str, str] | None = None
                        ) -> dict[str, Any]:
    """OffsetCommit latency (10 members x 10 partitions, 4 in flight each, fsync always) in
    alternating windows: idle, then with `clients` clients fetching / and /metrics, `rounds`
    times, on one broker holding `groups` groups."""
    import asyncio
    import tempfile
    from pathlib import Path

    from tests.bench import commit_load as cl
    from tests.bench import coordinator_bench as cb
    from tests.bench.brokers import Rebalanced, free_port
    from tests.bench.dataplane import ensure_topic
    from tests.bench.members import close_all
    from tests.bench.stats import percentile

    async def measure(broker: Rebalanced, base_url: str) -> dict[str, Any]:
        topic = "commit-load"
        await asyncio.to_thread(ensure_topic, broker, topic, 10)
        began = time.monotonic()
        await _idle_groups(broker, groups, topic)
        setup_s = time.monotonic() - began
        conns, members = await cb._members(broker, 10, "committers", session_ms=600_000,
                                           rebalance_ms=30_000, topic=topic)
        try:
            await cb._form_groups(members, timeout=60)
            frames = [cl.CommitFrame(m, topic, 10, 8) for m in members]
            load = cl.CommitLoad(members, frames, 8, 4)
            load.start(time.monotonic() + 3600)
            await asyncio.sleep(1.0)  # warm-up
            windows: list[dict[str, Any]] = []
            stats = broker.stats()
            for _ in range(rounds):
                for scraped in (False, True):
                    scrapers = (await asyncio.to_thread(ScrapingClients, base_url, clients)
                                if scraped else None)
                    load.latencies = []
                    load.recording = True
                    cpu0, t0 = stats.cpu_seconds(), time.monotonic()
                    await asyncio.sleep(seconds)
                    load.recording = False
                    cpu, elapsed = stats.cpu_seconds() - cpu0, time.monotonic() - t0
                    http = await asyncio.to_thread(scrapers.stop) if scrapers else {}
                    latencies = load.latencies
                    windows.append({
                        "scraped": scraped, "commits": len(latencies),
                        "commits_per_s": len(latencies) / elapsed,
                        "p50_ms": percentile(latencies, 50) * 1000,
                        "p99_ms": percentile(latencies, 99) * 1000,
                        "max_ms": max(latencies) * 1000,
                        "broker_cpu_pct": cpu / elapsed * 100, **http})
            load.stop_at = 0.0
            await asyncio.wait_for(load.finished, 30)
            if load.failure is not None:
                raise RuntimeError(f"a commit failed: {load.failure!r}")
            idle = [w for w in windows if not w["scraped"]]
            busy = [w for w in windows if w["scraped"]]
            idle_p99 = percentile([w["p99_ms"] for w in idle], 50)
            busy_p99 = percentile([w["p99_ms"] for w in busy], 50)
            return {"groups": groups, "clients": clients, "setup_s": setup_s,
                    "windows": windows, "partition_errors": load.errors,
                    "idle_p99_ms": idle_p99, "scraped_p99_ms": busy_p99,
                    "ratio": busy_p99 / idle_p99}
        finally:
            await close_all(conns)

    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="rebalanced-bench-"))
    broker = Rebalanced(workdir, {"metrics.listener": f"127.0.0.1:{port}",
                                  **(settings or {})}).start()
    try:
        return cl._run(measure(broker, f"http://127.0.0.1:{port}"))
    finally:
        broker.cleanup()


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m tests.bench.ops_scrape")
    parser.add_argument("--under-scrape", action="store_true",
                        help="OffsetCommit p50/p99 idle vs. while clients fetch / and /metrics")
    parser.add_argument("--groups", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0, help="per window")
    parser.add_argument("--rounds", type=int, default=2, help="idle + scraped window pairs")
    parser.add_argument("--broker-setting", action="append", default=[],
                        metavar="KEY=VALUE", help="a broker setting (repeatable)")
    parser.add_argument("--fetch-forever", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fetch_forever:
        fetch_forever(args.fetch_forever, args.clients)
    elif args.under_scrape:
        settings = dict(item.split("=", 1) for item in args.broker_setting)
        result = commit_under_scrape(args.groups, args.clients, args.seconds, args.rounds,
                                     settings)
        for window in result["windows"]:
            print(json.dumps(window))
        print(f"OffsetCommit p99 idle {result['idle_p99_ms']:.1f} ms, with {args.clients} "
              f"clients fetching / and /metrics of {args.groups} groups "
              f"{result['scraped_p99_ms']:.1f} ms: {result['ratio']:.2f}x")
    else:
        # broker CPU per scrape of /metrics and of the page
        for path, ms in scrape_cost().items():
            print(f"{path}: {ms:.2f} ms of broker CPU per request (10 groups x 10 members)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
