"""An in-process broker for the runtime's integration tests, and requests sent straight to its
handlers through the in-memory request context (`tests.fakes.FakeContext`).

The broker runs for real (files in a temporary directory, the event loop, the wall clock), so
waits are bounded and poll a condition (`until`), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from coordinator.runtime.broker import Broker
from coordinator.security.listeners import listener_security
from coordinator.settings import defaults
from protocol.build import build
from protocol.server import KafkaServer
from storage.fs import FileSystem
from tests.fakes import FakeConnection, FakeContext, FakeHeader

TOPIC = "t"
_connection_ids = itertools.count(5000)


async def until(predicate: Any, what: str = "condition", timeout: float = 10.0) -> None:
    """Wait, bounded, for `predicate()` to hold: a loaded machine may take seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def started_broker(data_dir: Path, overrides: Mapping[str, str] | None = None, *,
                         groups_fs: FileSystem | None = None,
                         topics_fs: FileSystem | None = None,
                         partitions: int | None = 2) -> Broker:
    """A started broker whose group log has loaded, with topic `TOPIC` of `partitions`
    partitions (none when None) unless it exists already."""
    broker = Broker(defaults().with_overrides({"log.dirs": str(data_dir), **(overrides or {})}))
    if groups_fs is not None:
        broker.groups.fs = groups_fs
    if topics_fs is not None:
        broker.topics_fs = topics_fs
    await broker.start()
    if partitions is not None and broker.topics.get(TOPIC) is None:
        broker.create_topic(TOPIC, partitions, {}, reason="test")
    await until(lambda: not broker.groups.loading, "load")
    return broker


@asynccontextmanager
async def ssl_server(data_dir: Path, settings: Mapping[str, str],
                     **server_options: Any) -> AsyncIterator[KafkaServer]:
    """A started broker without topics behind one SSL listener on a free loopback port
    (`settings` give its TLS material), served by a KafkaServer with `server_options`."""
    broker = await started_broker(data_dir, {"listeners": "SSL://127.0.0.1:0", **settings},
                                  partitions=None)
    server = KafkaServer(broker, listeners=[("SSL", "127.0.0.1", 0)],
                         security=listener_security(broker.settings), max_frame_bytes=1 << 20,
                         **server_options)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await broker.stop()


def send(broker: Broker, api_key: int, version: int, body: dict[str, Any],
         connection: int | None = None) -> FakeContext:
    """Hand one request to the broker's handler for `api_key`; the answer lands in the
    returned context's `responses` (at once, or once the handler answers)."""
    request = build(load_request_schema(api_key, version), body)
    ctx = FakeContext(FakeHeader(api_key, version),
                      FakeConnection(connection or next(_connection_ids)))
    handler = broker._handlers[api_key]
    handler(ctx, request)
    return ctx


def join(broker: Broker, group: str, member_id: str = "",
         connection: int | None = None) -> FakeContext:
    return send(broker, 11, 3, {
        "group_id": group, "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": member_id,
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"m"}],
    }, connection)


def sync(broker: Broker, group: str, generation: int, member_id: str,
         assignments: dict[str, bytes] | None = None) -> FakeContext:
    return send(broker, 14, 3, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "group_instance_id": None,
        "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
    })


async def completing_group(broker: Broker, group: str = "g") -> tuple[str, str, int]:
    """Two members that got their JoinGroup answers: (leader, follower, generation)."""
    first, second = join(broker, group), join(broker, group)
    await until(lambda: first.responses and second.responses, "join answers")
    assert first.answer.error_code == ErrorCode.none, first.answer
    leader = first.answer.leader
    ids = {first.answer.member_id, second.answer.member_id}
    (follower,) = ids - {leader}
    return leader, follower, first.answer.generation_id
