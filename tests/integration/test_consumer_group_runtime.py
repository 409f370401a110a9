"""Consumer groups through the running group runtime (kio requests in, kio responses out):
the wire mapping of ConsumerGroupHeartbeat/-Describe, ListGroups by type, member epochs on
OffsetCommit/OffsetFetch, and a failed group-log write that must not leave state behind."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from coordinator.runtime.broker import Broker
from protocol.build import build
from storage.fs import FaultyFileSystem
from tests.fakes import FakeConnection, FakeContext, FakeHeader

TOPIC = "t"
_connections = iter(range(5000, 10**9))


async def send(broker: Broker, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    request = build(load_request_schema(api_key, version), fields)
    ctx = FakeContext(FakeHeader(api_key, version), FakeConnection(next(_connections)))
    handler = {8: broker.groups.offset_commit, 9: broker.groups.offset_fetch}.get(
        api_key, broker.groups.member_request)
    handler(ctx, request)  # type: ignore[arg-type]
    for _ in range(500):
        if ctx.responses:
            return ctx.answer
        await asyncio.sleep(0.01)
    raise AssertionError("no answer")


def joining(member_id: str) -> dict[str, Any]:
    return {"group_id": "g", "member_id": member_id, "member_epoch": 0,
            "rebalance_timeout": 30_000, "subscribed_topic_names": [TOPIC],
            "topic_partitions": []}


async def test_heartbeat_describe_and_list_over_the_wire(
        faulty_disk_broker: tuple[Broker, FaultyFileSystem]) -> None:
    b, _ = faulty_disk_broker
    reply = await send(b, 68, 1, joining("m1"))
    assert reply.error_code is ErrorCode.none and reply.member_epoch == 1
    assert reply.heartbeat_interval.total_seconds() == 5
    (assigned,) = reply.assignment.topic_partitions
    assert assigned.topic_id == b.topics.get(TOPIC).topic_id  # type: ignore[union-attr]
    assert sorted(assigned.partitions) == [0, 1, 2, 3]

    described = await send(b, 69, 1, {"group_ids": ["g", "nope"],
                                       "include_authorized_operations": False})
    group, missing = described.groups
    assert (group.group_state, group.group_epoch, group.assignor_name) == ("Stable", 1,
                                                                            "uniform")
    assert group.members[0].assignment.topic_partitions[0].topic_name == TOPIC
    assert missing.error_code is ErrorCode.group_id_not_found

    listed = await send(b, 16, 5, {"states_filter": [], "types_filter": ["consumer"]})
    assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
        ("g", "consumer", "Stable")]
    classic = await send(b, 15, 5, {"groups": ["g"], "include_authorized_operations": False})
    assert classic.groups[0].group_state == "Dead"  # not a classic group


async def test_offset_apis_check_member_epochs(
        faulty_disk_broker: tuple[Broker, FaultyFileSystem]) -> None:
    b, _ = faulty_disk_broker
    await send(b, 68, 1, joining("m1"))

    def commit(epoch: int, member_id: str = "m1") -> dict[str, Any]:
        return {"group_id": "g", "generation_id_or_member_epoch": epoch,
                "member_id": member_id, "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": 0, "committed_offset": 5,
                     "committed_metadata": ""}]}]}

    def errors(response: Any) -> list[ErrorCode]:
        return [p.error_code for t in response.topics for p in t.partitions]

    assert errors(await send(b, 8, 9, commit(1))) == [ErrorCode.none]
    assert errors(await send(b, 8, 9, commit(0))) == [ErrorCode.stale_member_epoch]
    assert errors(await send(b, 8, 9, commit(1, "x"))) == [ErrorCode.unknown_member_id]
    fetch = {"groups": [{"group_id": "g", "member_id": "m1", "member_epoch": 3,
                         "topics": None}], "require_stable": False}
    fetched = await send(b, 9, 9, fetch)
    assert fetched.groups[0].error_code is ErrorCode.stale_member_epoch
    fetch["groups"][0]["member_epoch"] = 1  # type: ignore[index]
    fetched = await send(b, 9, 9, fetch)
    assert fetched.groups[0].error_code is ErrorCode.none
    assert fetched.groups[0].topics[0].partitions[0].committed_offset == 5


async def test_a_failed_write_leaves_no_state_behind(
        faulty_disk_broker: tuple[Broker, FaultyFileSystem]) -> None:
    b, fs = faulty_disk_broker
    await send(b, 68, 1, joining("m1"))
    fs.fail_next_write()
    failed = await send(b, 68, 1, joining("m2"))
    assert failed.error_code is ErrorCode.coordinator_not_available
    group = b.groups.service.consumer.group("g")
    assert group is not None and set(group.members) == {"m1"} and group.group_epoch == 1
    again = await send(b, 68, 1, {"group_id": "g", "member_id": "m1", "member_epoch": 1})
    assert again.error_code is ErrorCode.none and again.member_epoch == 1
