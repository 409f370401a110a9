"""An outsider cannot get a member removed: a request the coordinator rejects for a member
leaves it, its session and its connections as they were.

The outsider reads the member id from DescribeGroups, as any client may, then speaks for the
member on a connection of its own (a wrong generation, an unknown member id, a SyncGroup at a
stale generation) and hangs up; it does so repeatedly. The member, heartbeating on its own
connection all along, must never be removed.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.bench.members import Member
from tests.bench.wire import Connection
from tests.broker_process import BrokerProcess
from tests.integration.group_workers import JOIN_TIMEOUT_S, create_topic, group_events

pytestmark = pytest.mark.integration

ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
GRACE_S = 1.0


async def _outsider_round(port: int, group: str, member_id: str, generation: int) -> list[int]:
    """One outsider connection: describe the group, speak for its member wrongly, hang up."""
    conn = await Connection.open("127.0.0.1", port)
    try:
        described = await conn.call(15, 5, {"groups": [group],
                                            "include_authorized_operations": False})
        assert [m.member_id for m in described.groups[0].members] == [member_id]
        codes = []
        for body in (
            {"group_id": group, "generation_id": generation + 7, "member_id": member_id,
             "group_instance_id": None},
            {"group_id": group, "generation_id": generation, "member_id": member_id + "-x",
             "group_instance_id": None},
        ):
            codes.append(int((await conn.call(12, 3, body)).error_code.value))
        sync = await conn.call(14, 3, {"group_id": group, "generation_id": generation + 7,
                                       "member_id": member_id, "group_instance_id": None,
                                       "assignments": []})
        codes.append(int(sync.error_code.value))
        return codes
    finally:
        await conn.close()


async def test_rejected_requests_from_another_connection_change_nothing(
        broker: BrokerProcess) -> None:
    topic = "outsiders"
    create_topic(broker, topic, 2)
    conn = await Connection.open("127.0.0.1", broker.port)
    member = Member(conn, "victims", session_ms=10_000, rebalance_ms=10_000, topic=topic)
    try:
        await member.join_and_sync(time.monotonic() + JOIN_TIMEOUT_S)
        assert await member.heartbeat() == 0  # its connection is now its own
        for _ in range(4):
            codes = await _outsider_round(broker.port, "victims", member.member_id,
                                          member.generation)
            assert codes == [ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION]
            # Longer than the grace, heartbeating on its own connection meanwhile.
            for _ in range(3):
                await asyncio.sleep(GRACE_S / 2)
                assert await member.heartbeat() == 0
        assert group_events(broker, "victims", "member_removed") == []
        assert len(group_events(broker, "victims", "rebalance_started")) == 1  # its own join
    finally:
        await conn.close()
