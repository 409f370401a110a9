"""A steady Heartbeat answered from its frame (the connection's immediate answers) is answered
exactly as the full path answers it, keeps the connection's response order, is counted in the
metrics (and sampled for latency through the full path), and is left to the full path while
the test kit's faults are installed or an authorizer is configured.

A real `Broker` in process, one `Connection` over a transport that keeps what it is given.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.ops.metrics.counters import SAMPLE_EVERY
from coordinator.runtime.broker import Broker
from coordinator.settings import defaults
from protocol.connection import Connection
from tests.bench.members import assignment, subscription
from tests.bench.wire import decode, encode

HEARTBEAT = 12


class KeptTransport:
    def __init__(self) -> None:
        self.out: list[bytes] = []
        # Completed by the next write, for a caller that awaits an answer without polling.
        self.written: asyncio.Future[None] | None = None

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 5555) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.out.append(bytes(data))
        if self.written is not None and not self.written.done():
            self.written.set_result(None)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...


class Member:
    def __init__(self, broker: Broker) -> None:
        self.connection = Connection(broker, max_frame_bytes=1 << 20)
        self.transport = KeptTransport()
        self.connection.connection_made(self.transport)  # type: ignore[arg-type]

    def send(self, api_key: int, version: int, body: dict[str, Any],
             correlation_id: int = 0) -> None:
        frame = bytearray(encode(api_key, version, body))
        struct.pack_into(">i", frame, 8, correlation_id)
        self.connection.data_received(bytes(frame))

    async def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.transport.out.clear()
        self.send(api_key, version, body)
        for _ in range(1000):
            if self.transport.out:
                return decode(api_key, version, self.transport.out[0][4:])
            await asyncio.sleep(0.002)
        raise AssertionError("no answer")

    async def join_and_sync(self, group: str) -> tuple[str, int]:
        body = {"group_id": group, "session_timeout": 45_000, "rebalance_timeout": 60_000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription(["t"])}]}
        body["member_id"] = (await self.call(11, 5, body)).member_id
        joined = await self.call(11, 5, body)
        synced = await self.call(14, 3, {
            "group_id": group, "generation_id": joined.generation_id,
            "member_id": joined.member_id, "group_instance_id": None,
            "assignments": [{"member_id": joined.member_id,
                             "assignment": assignment("t", [0])}]})
        assert synced.error_code.value == 0
        # The first heartbeat re-arms the session timer through the full path; then steady.
        await self.call(HEARTBEAT, 3, self.heartbeat_body(group, joined.member_id,
                                                          joined.generation_id))
        return joined.member_id, joined.generation_id

    @staticmethod
    def heartbeat_body(group: str, member_id: str, generation: int) -> dict[str, Any]:
        return {"group_id": group, "generation_id": generation, "member_id": member_id,
                "group_instance_id": None}


async def started(tmp_path: Path, **overrides: str) -> Broker:
    broker = Broker(defaults().with_overrides({
        "log.dirs": str(tmp_path / "data"), "group.initial.rebalance.delay.ms": "0",
        **overrides}))
    await broker.start()
    for _ in range(500):
        if not broker.groups.loader.loading:
            break
        await asyncio.sleep(0.01)
    return broker


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = await started(tmp_path, **{"metrics.listener": "127.0.0.1:0"})
    try:
        yield broker
    finally:
        await broker.stop()


async def test_the_answer_now_is_the_full_path_s_answer(broker: Broker) -> None:
    member = Member(broker)
    member_id, generation = await member.join_and_sync("g")
    for version in range(5):  # each version's codec loads with its first request
        await member.call(HEARTBEAT, version, member.heartbeat_body("g", member_id, generation))
    answer_now = broker.immediate_answers[HEARTBEAT]
    answered: list[bool] = []

    def watched(*args: Any) -> bytes | None:
        answer = answer_now(*args)
        answered.append(answer is not None)
        return answer

    broker.immediate_answers[HEARTBEAT] = watched
    answered_now: list[bytes] = []
    for version in range(5):
        body = member.heartbeat_body("g", member_id, generation)
        member.transport.out.clear()
        member.send(HEARTBEAT, version, body, correlation_id=40 + version)
        assert len(member.transport.out) == 1  # answered within `data_received`
        answered_now.append(member.transport.out[0])
    assert answered == [True] * 5
    broker.immediate_answers[HEARTBEAT] = answer_now
    full_path: list[bytes] = []
    saved = dict(broker.immediate_answers)
    broker.immediate_answers.clear()  # the dict the connection holds: the full path only
    try:
        for version in range(5):
            member.transport.out.clear()
            member.send(HEARTBEAT, version, member.heartbeat_body("g", member_id, generation),
                        correlation_id=40 + version)
            full_path.append(member.transport.out[0])
    finally:
        broker.immediate_answers.update(saved)
    assert answered_now == full_path
    # An unknown member and an old generation are declined and answered by the full path.
    member.transport.out.clear()
    member.send(HEARTBEAT, 3, member.heartbeat_body("g", "nobody", generation))
    member.send(HEARTBEAT, 3, member.heartbeat_body("g", member_id, generation - 1))
    errors = [decode(HEARTBEAT, 3, out[4:]).error_code.value for out in member.transport.out]
    assert errors == [25, 22]  # UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION


async def test_an_answer_now_never_overtakes_an_earlier_answer_still_owed(
        tmp_path: Path) -> None:
    broker = await started(tmp_path, **{"group.initial.rebalance.delay.ms": "300"})
    try:
        member = Member(broker)
        member_id, generation = await member.join_and_sync("g")
        # On the same connection: a JoinGroup of a new group (parked for the initial delay),
        # then a steady heartbeat of "g".
        fresh = {"group_id": "fresh", "session_timeout": 45_000, "rebalance_timeout": 60_000,
                 "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                 "protocols": [{"name": "range", "metadata": subscription(["t"])}]}
        fresh["member_id"] = (await member.call(11, 5, fresh)).member_id
        member.transport.out.clear()
        member.send(11, 5, fresh, correlation_id=7)
        member.send(HEARTBEAT, 3, member.heartbeat_body("g", member_id, generation),
                    correlation_id=8)
        assert member.transport.out == []  # the heartbeat waits behind the parked JoinGroup
        for _ in range(1000):
            if member.transport.out:
                break
            await asyncio.sleep(0.005)
        answered = b"".join(member.transport.out)
        size = struct.unpack_from(">i", answered, 0)[0]
        join_correlation = struct.unpack_from(">i", answered, 4)[0]
        heartbeat_correlation = struct.unpack_from(">i", answered, 4 + size + 4)[0]
        assert (join_correlation, heartbeat_correlation) == (7, 8)
    finally:
        await broker.stop()


async def test_answers_now_are_counted_and_sampled(broker: Broker) -> None:
    member = Member(broker)
    member_id, generation = await member.join_and_sync("g")
    metrics = broker.metrics
    assert metrics is not None
    before = metrics.request_count(HEARTBEAT, 4)
    sent = 4 * SAMPLE_EVERY[HEARTBEAT]
    for i in range(sent):
        member.send(HEARTBEAT, 4, member.heartbeat_body("g", member_id, generation),
                    correlation_id=i)
    assert metrics.request_count(HEARTBEAT, 4) - before == sent
    # One in SAMPLE_EVERY went through the full path and was timed.
    assert metrics.requests[(HEARTBEAT, 4)].count == 4


async def test_the_test_kit_s_faults_and_an_authorizer_see_every_heartbeat(
        broker: Broker, tmp_path: Path) -> None:
    member = Member(broker)
    member_id, generation = await member.join_and_sync("g")
    seen: list[int] = []

    class Observe:
        def intercept(self, connection: Any, slot: Any, header: Any, request: Any) -> bool:
            seen.append(header.api_key)
            return False

    broker.faults = Observe()
    member.send(HEARTBEAT, 3, member.heartbeat_body("g", member_id, generation))
    broker.faults = None
    assert seen == [HEARTBEAT]
    guarded = await started(tmp_path / "acl", **{
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    try:
        assert guarded.immediate_answers == {}
    finally:
        await guarded.stop()
