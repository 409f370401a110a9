"""Shortening the pause of a rebalance: parked fetches are released when their group starts
rebalancing, and a member whose connection flaps within the disconnect grace costs nothing.

The fetch test speaks raw Kafka frames (kio entities, `tests/bench/wire.py`) so that it can
hold a 10 s Fetch long-poll open while its group rebalances. The flapping test puts a small
loopback TCP proxy between a stock consumer and the broker (which advertises the proxy) and
cuts every connection through it, repeatedly.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.bench.members import GroupError, Member, subscription
from tests.bench.wire import Connection, decode, encode
from tests.broker_process import BrokerProcess, free_port
from tests.integration.group_workers import (
    JOIN_TIMEOUT_S,
    create_topic,
    group_events,
    stable_with,
    wait_until,
    worker_pool,
)

pytestmark = pytest.mark.integration

FETCH_V = 5
JOIN_V = 5
LONG_POLL_MS = 10_000
COORDINATOR_LOAD_IN_PROGRESS = 14


async def _join(member: Member) -> None:
    """Join and sync, waiting out the group log's loading right after the broker started."""
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:
        try:
            await member.join_and_sync(deadline)
            return
        except GroupError as exc:
            if exc.code != COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _fetch_held_through_a_rebalance(broker: BrokerProcess, topic: str) -> float:
    """Seconds from the rebalance's trigger to the answer of a 10 s Fetch long-poll."""
    coordinator = await Connection.open("127.0.0.1", broker.port)
    fetcher = await Connection.open("127.0.0.1", broker.port)
    newcomer = await Connection.open("127.0.0.1", broker.port)
    try:
        member = Member(coordinator, "long-poll", session_ms=30_000, rebalance_ms=30_000,
                        topic=topic)
        await _join(member)
        # The member's own client id ("bench", as all `wire` requests) on a second connection,
        # the way a client fetches from a partition leader; the topic is empty, so it parks.
        fetch = fetcher.send_raw(encode(1, FETCH_V, {
            "replica_id": -1, "max_wait": LONG_POLL_MS, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "fetch_offset": 0, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}],
        }))
        await asyncio.sleep(0.3)
        assert not fetch.done(), "the fetch should be parked: the topic is empty"
        # Another consumer joins: KIP-394 round trip, then its JoinGroup starts the rebalance.
        join = {"group_id": "long-poll", "session_timeout": 30_000,
                "rebalance_timeout": 30_000, "member_id": "", "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription([topic])}]}
        first = decode(11, JOIN_V, await newcomer.send_raw(encode(11, JOIN_V, join,
                                                                  client_id="newcomer")))
        join["member_id"] = first.member_id
        triggered = time.monotonic()
        parked_join = newcomer.send_raw(encode(11, JOIN_V, join, client_id="newcomer"))
        reply = decode(1, FETCH_V, await asyncio.wait_for(fetch, LONG_POLL_MS / 1000 + 5))
        released = time.monotonic() - triggered
        assert [p.error_code.value for t in reply.responses for p in t.partitions] == [0]
        parked_join.add_done_callback(lambda f: f.cancelled() or f.exception())
        return released
    finally:
        for conn in (coordinator, fetcher, newcomer):
            await conn.close()


def test_a_parked_fetch_returns_when_its_group_starts_rebalancing(
        broker: BrokerProcess) -> None:
    create_topic(broker, "quiet", 1)
    released = asyncio.run(_fetch_held_through_a_rebalance(broker, "quiet"))
    # Milliseconds in practice; the bound only has to tell it from the 10 s long-poll on a
    # loaded machine.
    assert released < 1.0, f"the fetch came back {released:.3f} s after the rebalance began"
    # The journal shows the rebalance the newcomer started (after the group's first one).
    wait_until(lambda: len(group_events(broker, "long-poll", "rebalance_started")) == 2, 10,
               "the newcomer's rebalance in the journal", broker=broker)


# -- flapping connections ------------------------------------------------------------------------


class FlakyProxy:
    """A loopback TCP proxy on its own event-loop thread. `cut()` closes every connection it
    carries; `refuse(seconds)` also turns new connections away (accept, then close) that long.
    `sent_since_cut` counts the client's writes on connections opened after the last cut.
    """

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._refuse_until = 0.0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.cuts = 0
        self.sent_since_cut = 0

    def __enter__(self) -> FlakyProxy:
        self._thread.start()
        assert self._ready.wait(10), "proxy did not start"
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    def _shutdown(self) -> None:
        self._close_all()
        if self._server is not None:
            self._server.close()
        self._loop.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self._refuse_until:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        opened_after = self.cuts
        await asyncio.gather(self._pipe(reader, up_writer, opened_after),
                             self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    client_opened_after: int | None = None) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
                if client_opened_after == self.cuts:
                    self.sent_since_cut += 1
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _close_all(self) -> None:
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()  # RST, like a dropped link
        self._writers.clear()

    def cut(self, refuse_s: float = 0.0) -> None:
        """Cut every connection; returns once they are cut."""
        done = threading.Event()

        def do() -> None:
            self._refuse_until = time.monotonic() + refuse_s
            self._close_all()
            self.cuts += 1
            self.sent_since_cut = 0
            done.set()

        self._loop.call_soon_threadsafe(do)
        assert done.wait(10), "the proxy did not cut"


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[BrokerProcess, FlakyProxy]]:
    """A broker whose clients reach it only through a FlakyProxy (it advertises the proxy)."""
    broker = BrokerProcess(tmp_path / "data")
    with FlakyProxy(broker.port) as proxy:
        broker.settings["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
        broker.settings["group.member.disconnect.grace.ms"] = str(GRACE_MS)
        broker.start()
        try:
            yield broker, proxy
        finally:
            broker.stop()


# Long enough that a client heartbeating every 300 ms reconnects well within it on a loaded
# machine; far shorter than the 30 s session, so a removal can only be the disconnect rule's.
GRACE_MS = 3_000
FLAP_TOPIC = "flap"
FLAP_GROUP = "flappers"


class DirectMember:
    """A raw-protocol member connected straight to the broker (not through the proxy), joining,
    heartbeating every 300 ms and rejoining on rebalances, on its own event-loop thread."""

    def __init__(self, broker: BrokerProcess, group: str, topic: str) -> None:
        self._broker = broker
        self._group = group
        self._topic = topic
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DirectMember:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)

    def _run(self) -> None:
        self._loop.run_until_complete(self._live())
        self._loop.close()

    async def _live(self) -> None:
        self._stop = asyncio.Event()
        conn = await Connection.open("127.0.0.1", self._broker.port)
        member = Member(conn, self._group, session_ms=30_000, rebalance_ms=30_000,
                        topic=self._topic)
        try:
            await _join(member)  # waits out the group log's loading
            await member.live(0.3, self._stop, lambda m: None)
            await member.leave()
        finally:
            await conn.close()


def _rebalances(broker: BrokerProcess) -> int:
    return len(group_events(broker, FLAP_GROUP, "rebalance_started"))


def test_a_flapping_connection_costs_no_rebalance_and_a_long_drop_one_removal(
        proxied: tuple[BrokerProcess, FlakyProxy], tmp_path: Path) -> None:
    broker, proxy = proxied
    proxy_view = BrokerProcess(broker.data_dir, port=proxy.port)  # the consumer's bootstrap
    create_topic(broker, FLAP_TOPIC, 4)
    with worker_pool(proxy_view, tmp_path) as spawn, DirectMember(broker, FLAP_GROUP,
                                                                  FLAP_TOPIC):
        flapper = spawn("confluent", FLAP_TOPIC, FLAP_GROUP, "flapper", session_ms=30_000,
                        heartbeat_ms=300)
        wait_until(lambda: stable_with(broker, FLAP_GROUP, 2) and bool(flapper.assignment),
                   JOIN_TIMEOUT_S, "the consumer behind the proxy and the direct member to form "
                   "a group", [flapper], broker)
        before = _rebalances(broker)
        for _ in range(4):
            proxy.cut()  # every connection of the consumer, coordinator's included
            # It reconnects and keeps talking (heartbeats every 300 ms) within the grace.
            wait_until(lambda: proxy.sent_since_cut >= 3, JOIN_TIMEOUT_S,
                       "the consumer to talk again after the cut", [flapper], broker)
            assert _rebalances(broker) == before, group_events(broker, FLAP_GROUP)[-5:]
        time.sleep(GRACE_MS / 1000 + 1)  # any grace still running would have ended by now
        assert _rebalances(broker) == before
        assert group_events(broker, FLAP_GROUP, "member_removed") == []

        # Now the link stays down past the grace: the member is removed once, for the
        # disconnect; the direct member takes over, and the consumer comes back as a new
        # member when the link does.
        proxy.cut(refuse_s=GRACE_MS / 1000 + 2)
        wait_until(lambda: bool(group_events(broker, FLAP_GROUP, "member_removed")),
                   JOIN_TIMEOUT_S, "the cut-off member to be removed", [flapper], broker)
        wait_until(lambda: stable_with(broker, FLAP_GROUP, 2), JOIN_TIMEOUT_S,
                   "the consumer to rejoin after the long drop", [flapper], broker)
    removed = group_events(broker, FLAP_GROUP, "member_removed")
    assert [(e["client_id"], e["cause"]) for e in removed][:1] == [("flapper", "disconnect")]
    after_drop = [e for e in group_events(broker, FLAP_GROUP, "rebalance_started")[before:]
                  if "LeaveGroup" not in e["reason"]]  # the direct member's leave at the end
    # One rebalance drops the member, one takes it back (they merge when it returns while the
    # first is still open); never a storm.
    assert 1 <= len(after_drop) <= 2, after_drop


async def _member_then_garbage(broker: BrokerProcess) -> None:
    conn = await Connection.open("127.0.0.1", broker.port)
    member = Member(conn, "garbled", session_ms=30_000, rebalance_ms=30_000, topic="quiet")
    await _join(member)
    assert await member.heartbeat() == 0  # its heartbeat makes the connection its own
    conn.send_raw(bytearray(b"\xff\xff\xff\xf0" + b"\x00" * 12)).add_done_callback(
        lambda f: f.cancelled() or f.exception())  # a negative frame size: malformed
    await asyncio.sleep(0.2)
    await conn.close()


def test_a_connection_the_broker_closes_on_bad_input_counts_as_a_disconnect(
        broker: BrokerProcess) -> None:
    create_topic(broker, "quiet", 1)
    asyncio.run(_member_then_garbage(broker))
    wait_until(lambda: bool(group_events(broker, "garbled", "member_removed")), 10,
               "the member of the garbled connection to be removed", broker=broker)
    removed = group_events(broker, "garbled", "member_removed")
    assert [e["cause"] for e in removed] == ["disconnect"]
    assert "connection closed on bad input" in broker.log_text()
