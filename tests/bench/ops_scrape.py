"""The metrics-on subject of the heartbeat and commit benchmarks: scrape while the load runs.

`rebalanced-metrics` is rebalanced with `metrics.listener` set and a scraper that fetches
/metrics every second (Prometheus scrapes every 15-60 s, so this is the pessimistic case) and the
group page as one person watching it does: the page reloads itself every 5 s. Its broker CPU per
heartbeat or commit against plain `rebalanced` in the same run is the cost of the metrics and the
page.
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
        broker = Rebalanced(Path(tempfile.mkdtemp(prefix="rebalanced-bench-")),
                            {"metrics.listener": f"127.0.0.1:{port}"}).start()
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


if __name__ == "__main__":
    # python -m tests.bench.ops_scrape: broker CPU per scrape of /metrics and of the page
    for path, ms in scrape_cost().items():
        print(f"{path}: {ms:.2f} ms of broker CPU per request (10 groups x 10 members)")
