"""Valid but expensive requests against the real broker, while a member of an unrelated group
heartbeats: each gets its Kafka answer (or, over a documented limit, a closed connection), the
member is never removed, the broker stays up. No timings are asserted: on a loaded 2-core
machine they would flake; `python -m tests.bench.hostile_load` measures them.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from protocol.guard import ANSWERED_ELEMENTS_FACTOR, ELEMENT_LIMITS
from tests.bench.hostile_load import Heartbeater, join_group
from tests.bench.wire import Connection, WireError
from tests.broker_process import BrokerProcess
from tests.integration.in_process import until


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", settings={
        "max.broker.partitions": "600", "controller.mutation.rate": "1"}).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
async def member(broker: BrokerProcess) -> AsyncIterator[Heartbeater]:
    """A member of group "unrelated", heartbeating every 20 ms on its own connection."""
    conn = await Connection.open("127.0.0.1", broker.port)
    member_id, generation = await join_group(conn, "unrelated")
    beater = Heartbeater(conn, "unrelated", member_id, generation)
    beater.start()
    try:
        yield beater
    finally:
        await beater.stop()
        await conn.close()


async def still_a_member(beater: Heartbeater) -> None:
    count = len(beater.latencies_ms)
    await until(lambda: len(beater.latencies_ms) > count + 2, "more heartbeats", 30)
    assert beater.errors == []  # every heartbeat answered NONE: never removed


async def call(broker: BrokerProcess, api_key: int, version: int, body: Any) -> Any:
    conn = await Connection.open("127.0.0.1", broker.port)
    try:
        return await conn.call(api_key, version, body, timeout=120)
    finally:
        await conn.close()


def metadata(names: list[str], auto_create: bool = True) -> dict[str, Any]:
    return {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": auto_create}


def create(name: str, partitions: int) -> dict[str, Any]:
    return {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout": timedelta(seconds=60), "validate_only": False}


async def test_auto_create_of_many_topics_answers_at_once_and_creates_them_off_the_loop(
    broker: BrokerProcess, member: Heartbeater,
) -> None:
    names = [f"auto-{i}" for i in range(500)]
    answer = await call(broker, 3, 4, metadata(names))
    assert {t.error_code.name for t in answer.topics} == {"leader_not_available"}
    await still_a_member(member)

    async def created() -> bool:
        again = await call(broker, 3, 4, metadata(names, auto_create=False))
        return all(t.error_code.name == "none" for t in again.topics)

    for _ in range(600):
        if await created():
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the auto-created topics never appeared")
    await still_a_member(member)


async def test_partitions_beyond_the_broker_limit_get_policy_violation(
    broker: BrokerProcess, member: Heartbeater, tmp_path: Path,
) -> None:
    answer = await call(broker, 19, 5, create("huge", 16_000))
    assert [t.error_code.name for t in answer.topics] == ["policy_violation"]
    assert not list((tmp_path / "data").glob("huge-*"))  # nothing left behind
    fits = await call(broker, 19, 5, create("fits", 8))
    assert [t.error_code.name for t in fits.topics] == ["none"]
    grow = await call(broker, 37, 1, {"topics": [{"name": "fits", "count": 10_000,
                                                  "assignments": None}],
                                      "timeout": timedelta(seconds=30), "validate_only": False})
    assert [r.error_code.name for r in grow.results] == ["policy_violation"]
    await still_a_member(member)


async def test_a_client_over_its_mutation_quota_is_throttled(broker: BrokerProcess) -> None:
    # controller.mutation.rate 1: a burst of 11 partitions, then the bucket is empty.
    first = await call(broker, 19, 6, create("q1", 20))
    assert [t.error_code.name for t in first.topics] == ["none"]
    second = await call(broker, 19, 6, create("q2", 1))
    assert [t.error_code.name for t in second.topics] == ["throttling_quota_exceeded"]
    assert second.throttle_time > timedelta(0)


async def test_an_empty_name_flood_is_refused_and_the_broker_stays(
    broker: BrokerProcess, member: Heartbeater,
) -> None:
    # Metadata v4 of a million empty topic names: 2 MB that would decode to ~130 MB.
    frame = bytearray(struct.pack(">hhih", 3, 4, 0, 1) + b"c" + struct.pack(">i", 1_000_000)
                      + b"\x00\x00" * 1_000_000 + b"\x01")
    conn = await Connection.open("127.0.0.1", broker.port)
    with pytest.raises((WireError, asyncio.TimeoutError, ConnectionError)):
        await asyncio.wait_for(conn.send_raw(bytearray(struct.pack(">i", len(frame)))
                                             + frame), 30)
    with contextlib.suppress(Exception):
        await conn.close()
    await still_a_member(member)
    assert broker.log_text().count("decoding would take about") == 1


def _partitions(n: int) -> list[dict[str, Any]]:
    return [{"partition_index": i, "current_leader_epoch": -1, "timestamp": -1}
            for i in range(n)]


# (api key, version, request of n elements, the error codes of its answer)
OVER_LIMIT_CASES = [
    (15, 5, lambda n: {"groups": [f"g{i}" for i in range(n)],
                       "include_authorized_operations": False},
     lambda answer: [g.error_code for g in answer.groups]),
    (42, 2, lambda n: {"groups_names": [f"g{i}" for i in range(n)]},
     lambda answer: [r.error_code for r in answer.results]),
    (9, 7, lambda n: {"group_id": "g", "topics": [{"name": "t", "partition_indexes":
                                                   list(range(n))}], "require_stable": False},
     lambda answer: [answer.error_code] + [p.error_code for t in answer.topics
                                           for p in t.partitions]),
    (9, 8, lambda n: {"groups": [{"group_id": f"g{i}", "topics": None} for i in range(n)],
                      "require_stable": False},
     lambda answer: [g.error_code for g in answer.groups]),
    (2, 5, lambda n: {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "t", "partitions": _partitions(n)}]},
     lambda answer: [p.error_code for t in answer.topics for p in t.partitions]),
    (3, 12, lambda n: {"topics": [{"name": f"t{i}", "topic_id": None} for i in range(n)],
                       "allow_auto_topic_creation": False,
                       "include_topic_authorized_operations": False},
     lambda answer: [t.error_code for t in answer.topics]),
]


@pytest.mark.parametrize(("api_key", "version", "body", "errors"), OVER_LIMIT_CASES)
async def test_requests_over_the_element_limit_are_answered_invalid_request(
    broker: BrokerProcess, member: Heartbeater, api_key: int, version: int, body: Any,
    errors: Any,
) -> None:
    limit = ELEMENT_LIMITS[api_key]
    at_limit = await call(broker, api_key, version, body(limit - 1))  # + its topic: limit
    assert "invalid_request" not in {e.name for e in errors(at_limit)}
    over = await call(broker, api_key, version, body(limit + 1))
    over_errors = errors(over)
    # Every element answered, each INVALID_REQUEST (Kafka's error response of the request).
    assert len(over_errors) >= limit + 1
    assert {e.name for e in over_errors} == {"invalid_request"}
    await still_a_member(member)
    log = broker.log_text()
    assert log.count("request answered INVALID_REQUEST") == 1
    assert "this API allows" in log and "Traceback" not in log


async def test_more_than_twice_the_element_limit_closes_the_connection(
    broker: BrokerProcess, member: Heartbeater,
) -> None:
    count = ELEMENT_LIMITS[15] * ANSWERED_ELEMENTS_FACTOR + 1
    with pytest.raises((WireError, asyncio.TimeoutError, ConnectionError)):
        await call(broker, 15, 5, {"groups": [f"g{i}" for i in range(count)],
                                   "include_authorized_operations": False})
    await still_a_member(member)
    log = broker.log_text()
    assert "connection closed on bad input" in log and "this API allows" in log


def test_a_kafka_client_over_the_limit_gets_invalid_request(broker: BrokerProcess) -> None:
    """kafka-python's admin client sends every partition it is asked about in one OffsetFetch:
    over the limit it raises InvalidRequestError instead of losing its connection."""
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import InvalidRequestError

    def partitions(n: int) -> list[TopicPartition]:
        return [TopicPartition("t", i) for i in range(n)]

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        limit = ELEMENT_LIMITS[9]
        # One group, one topic and its partitions: limit - 2 partitions is at the limit.
        fetched = admin.list_group_offsets({"g": partitions(limit - 2)})
        assert all(o.offset == -1 for o in fetched["g"].values())
        with pytest.raises(InvalidRequestError):
            admin.list_group_offsets({"g": partitions(limit + 1)})
        assert list(admin.list_group_offsets({"g": partitions(1)})["g"]) in ([],
                                                                          partitions(1))
    finally:
        admin.close()
    assert broker.log_text().count("request answered INVALID_REQUEST") == 1
