"""The ops port's budget pieces: the request pacer, the shared cached build, slicing, and the
keep-alive rule. Over real HTTP: tests/integration/test_ops_limits.py."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.ops import http, page


class ManualClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pacer_allows_a_seconds_burst_then_spaces_turns() -> None:
    clock = ManualClock()
    pacer = http.Pacer(10, clock)
    # The turn now and a second's worth (10) before it, then one every 100 ms.
    assert [round(pacer.delay(), 3) for _ in range(13)] == [0.0] * 11 + [0.1, 0.2]
    clock.now += 5  # a quiet spell earns one second's worth again, not five
    assert sum(pacer.delay() == 0.0 for _ in range(20)) == 11


def test_one_build_is_shared_and_kept_for_its_interval() -> None:
    clock = ManualClock()
    builds: list[int] = []

    async def build() -> bytes:
        builds.append(len(builds))
        await asyncio.sleep(0.01)
        return f"body {len(builds)}".encode()

    async def scenario() -> None:
        builder = http.Builder(build, max_age_s=1.0, clock=clock)
        bodies = await asyncio.gather(*(builder.get() for _ in range(8)))
        assert set(bodies) == {b"body 1"} and builder.builds == 1
        clock.now += 0.9
        assert await builder.get() == b"body 1"
        clock.now += 0.2
        assert await builder.get() == b"body 2"

    asyncio.run(scenario())


def test_a_client_going_away_does_not_cancel_the_shared_build() -> None:
    async def build() -> bytes:
        await asyncio.sleep(0.05)
        return b"done"

    async def scenario() -> None:
        builder = http.Builder(build, max_age_s=1.0)
        first = asyncio.ensure_future(builder.get())
        second = asyncio.ensure_future(builder.get())
        await asyncio.sleep(0.01)
        first.cancel()
        assert await second == b"done"

    asyncio.run(scenario())


def test_a_failed_build_fails_its_waiters_and_the_next_request_builds_again() -> None:
    attempts: list[int] = []

    async def build() -> bytes:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("boom")
        return b"ok"

    async def scenario() -> None:
        builder = http.Builder(build, max_age_s=1.0)
        with pytest.raises(RuntimeError):
            await builder.get()
        assert await builder.get() == b"ok"

    asyncio.run(scenario())


def test_work_in_slices_gives_the_loop_back() -> None:
    ticks: list[int] = []

    def steps() -> object:
        for _ in range(50):
            sum(range(20_000))  # a bounded piece of work
            yield

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            ticks.append(1)
            await asyncio.sleep(0)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.ensure_future(ticker(stop))
        await asyncio.sleep(0)
        await http.in_slices(steps())  # type: ignore[arg-type]
        stop.set()
        await task

    asyncio.run(scenario())
    assert len(ticks) > 2


@pytest.mark.parametrize(("head", "kept"), [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", True),
    (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", False),
    (b"GET / HTTP/1.0\r\n\r\n", False),
    (b"GET / HTTP/1.0\r\nconnection: Keep-Alive\r\n\r\n", True),
])
def test_keep_alive_follows_the_http_version_and_the_connection_header(
        head: bytes, kept: bool) -> None:
    assert http._keep_alive(head) is kept


def test_http_connections_get_at_most_an_eighth_of_the_open_files() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert http.connection_limit(10**9) == max(1, soft // 8)
    assert http.connection_limit(3) == min(3, max(1, soft // 8))


def test_the_page_picks_the_same_groups_a_slice_at_a_time() -> None:
    import random

    ids = [f"group-{i:05d}" for i in range(5000)]
    random.Random(7).shuffle(ids)
    kept: list[str] = []
    for start in range(0, len(ids), 1000):
        kept = page.first_group_ids(ids[start:start + 1000], kept)
    assert kept == sorted(ids)[:page.MAX_GROUPS]


def test_metrics_in_slices_reformat_only_the_groups_that_moved() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from coordinator.ops import metrics as om
    from tests.unit.test_ops_metrics import rebalance

    metrics = om.BrokerMetrics(max_groups=10)
    for i, group in enumerate("abcde"):
        rebalance(metrics, group, 1000 * i, "removing member m on LeaveGroup")

    def scrape(cache: dict[str, object]) -> tuple[bytes, int]:
        parts: list[bytes] = []
        snap = metrics.snapshot(om.GroupCounts(), 0, 0, 9000)
        steps = sum(1 for _ in om.exposition_parts(snap, cache, parts))
        return b"".join(parts), steps

    cache: dict[str, object] = {}
    first, first_steps = scrape(cache)
    again, again_steps = scrape(cache)
    assert again == first and again_steps == first_steps - 5  # no group formatted again
    rebalance(metrics, "c", 8000, "removing member m on LeaveGroup")
    moved, moved_steps = scrape(cache)
    assert moved_steps == again_steps + 1
    assert moved == scrape({})[0]  # the same text as formatted from scratch
    counts = {s.labels["group"]: s.value for f in text_string_to_metric_families(moved.decode())
              for s in f.samples
              if s.name == "rebalanced_rebalance_duration_seconds_count"
              and s.labels["phase"] == "total"}
    assert counts == {"a": 1, "b": 1, "c": 2, "d": 1, "e": 1}
