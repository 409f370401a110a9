"""Online migration through the running group runtime: a conversion whose records fail to be
written leaves the group as the log has it (the type it had, with its members)."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.group.embedded_protocol import encode_assignment
from coordinator.runtime.broker import Broker
from storage.fs import FaultyFileSystem
from tests.integration.in_process import started_broker
from tests.integration.test_consumer_group_runtime import joining, send
from tests.migration_helpers import subscription

TOPIC = "t"


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[tuple[Broker, FaultyFileSystem]]:
    fs = FaultyFileSystem()
    broker = await started_broker(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"},
                                  groups_fs=fs, partitions=4)
    try:
        yield broker, fs
    finally:
        await broker.stop()


async def classic_member(b: Broker) -> tuple[str, int]:
    """A classic group `g` of one member owning every partition: (member id, generation)."""
    joined = await send(b, 11, 3, {
        "group_id": "g", "session_timeout": datetime.timedelta(seconds=10),
        "rebalance_timeout": datetime.timedelta(seconds=10), "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription([TOPIC])}]})
    assert joined.error_code is ErrorCode.none, joined
    member, generation = joined.member_id, joined.generation_id
    assignment = encode_assignment({TOPIC: frozenset(range(4))}, 0)
    synced = await send(b, 14, 3, {
        "group_id": "g", "generation_id": generation, "member_id": member,
        "group_instance_id": None,
        "assignments": [{"member_id": member, "assignment": assignment}]})
    assert synced.error_code is ErrorCode.none, synced
    return member, generation


def types(b: Broker) -> tuple[Any, Any]:
    return b.groups.service.group("g"), b.groups.service.consumer.group("g")


async def test_a_failed_upgrade_leaves_the_classic_group(
        broker: tuple[Broker, FaultyFileSystem]) -> None:
    b, fs = broker
    member, generation = await classic_member(b)
    fs.fail_next_write()
    failed = await send(b, 68, 1, joining("n1"))
    assert failed.error_code is ErrorCode.coordinator_not_available
    classic, consumer = types(b)
    assert consumer is None and classic is not None
    assert set(classic.members) == {member} and classic.generation_id == generation
    beat = await send(b, 12, 3, {"group_id": "g", "generation_id": generation,
                                 "member_id": member})
    assert beat.error_code is ErrorCode.none
    upgraded = await send(b, 68, 1, joining("n1"))  # the retry converts it
    assert upgraded.error_code is ErrorCode.none
    classic, consumer = types(b)
    assert classic is None and set(consumer.members) == {member, "n1"}


async def test_a_failed_downgrade_leaves_the_consumer_group(
        broker: tuple[Broker, FaultyFileSystem]) -> None:
    b, fs = broker
    member, _ = await classic_member(b)
    assert (await send(b, 68, 1, joining("n1"))).error_code is ErrorCode.none
    epoch = b.groups.service.consumer.group("g").members["n1"].member_epoch  # type: ignore[union-attr]
    fs.fail_next_write()
    leaving = {"group_id": "g", "member_id": "n1", "member_epoch": -1}
    assert (await send(b, 68, 1, leaving)).error_code is ErrorCode.coordinator_not_available
    classic, consumer = types(b)
    assert classic is None and set(consumer.members) == {member, "n1"}
    assert consumer.members["n1"].member_epoch == epoch
    assert (await send(b, 68, 1, leaving)).error_code is ErrorCode.none
    classic, consumer = types(b)
    assert consumer is None and set(classic.members) == {member}
