"""The hand-packed ConsumerGroupHeartbeat response equals kio's encoding of the same outcome."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from kio.schema.errors import ErrorCode

from coordinator.api import consumer_group_heartbeat as api
from coordinator.group.consumer.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatOutcome,
)
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


def test_the_command_builder_fills_every_field() -> None:
    """`to_command` fills the command's slots one by one: a field added to the command must be
    added there too, or it would be left unset."""
    assert set(api.COMMAND_FIELDS) == {f.name for f in dataclasses.fields(ConsumerGroupHeartbeat)}


@pytest.mark.parametrize("version", [0, 1])
def test_a_kept_steady_answer_matches_kio_for_every_correlation_id(version: int) -> None:
    outcome = ConsumerGroupHeartbeatOutcome(member_id="kept-" + str(version), member_epoch=9,
                                            heartbeat_interval_ms=5000)
    for correlation_id in (1, 2, -7, 2**31 - 1):
        expected = encode_response(api.API_KEY, version, correlation_id,
                                   api.to_response(outcome, version))
        assert api.encode(outcome, version, correlation_id) == expected
    moved = dataclasses.replace(outcome, member_epoch=10)
    assert api.encode(moved, version, 3) == encode_response(
        api.API_KEY, version, 3, api.to_response(moved, version))
