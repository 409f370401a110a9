"""The hand-packed ConsumerGroupHeartbeat response equals kio's encoding of the same outcome."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from coordinator.api import consumer_group_heartbeat as api
from coordinator.group.consumer.commands import ConsumerGroupHeartbeatOutcome
from protocol.codec import encode_response

OUTCOMES = [
    ConsumerGroupHeartbeatOutcome(member_id="ULJ19AQ/SNmjLvDTJ1ZyWg", member_epoch=7,
                                  heartbeat_interval_ms=5000),
    ConsumerGroupHeartbeatOutcome(error=ErrorCode.fenced_member_epoch, member_id="m",
                                  member_epoch=3),
    ConsumerGroupHeartbeatOutcome(member_id="m", member_epoch=1, heartbeat_interval_ms=500,
                                  assignment={uuid.UUID(int=5): frozenset({2, 0})}),
    ConsumerGroupHeartbeatOutcome(error=ErrorCode.invalid_request, error_message="bad",
                                  member_id=None, member_epoch=0),
    ConsumerGroupHeartbeatOutcome(member_id="x" * 300, member_epoch=2),
]


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_hand_packed_response_matches_kio(outcome: ConsumerGroupHeartbeatOutcome,
                                          version: int) -> None:
    expected = encode_response(api.API_KEY, version, 42, api.to_response(outcome, version))
    assert api.encode(outcome, version, 42) == expected
