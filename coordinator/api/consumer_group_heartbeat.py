"""ConsumerGroupHeartbeat (api key 68, KIP-848): kio request -> command, outcome -> response.

* v0: the consumer group protocol.
* v1: `subscribed_topic_regex`.
"""

from __future__ import annotations

import struct
from datetime import timedelta
from typing import Any

from coordinator.group.consumer.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatOutcome,
)
from coordinator.group.consumer.heartbeat import owned_from_wire
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import encode_response, response_type

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1


def to_command(request: Any, api_version: int, ref: RequestRef, client_id: str,
               client_host: str) -> ConsumerGroupHeartbeat:
    names = request.subscribed_topic_names
    rebalance_timeout = request.rebalance_timeout
    return ConsumerGroupHeartbeat(
        ref=ref,
        api_version=api_version,
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=(int(rebalance_timeout.total_seconds() * 1000)
                              if isinstance(rebalance_timeout, timedelta)
                              else int(rebalance_timeout)),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=owned_from_wire(request.topic_partitions),
        client_id=client_id,
        client_host=client_host,
    )


def to_response(outcome: ConsumerGroupHeartbeatOutcome, api_version: int) -> Any:
    assignment = None
    if outcome.assignment is not None:
        assignment = {"topic_partitions": [
            {"topic_id": topic_id, "partitions": sorted(partitions)}
            for topic_id, partitions in sorted(outcome.assignment.items()) if partitions]}
    return build(
        response_type(API_KEY, api_version),
        throttle_time=0,
        error_code=outcome.error,
        error_message=outcome.error_message,
        member_id=outcome.member_id,
        member_epoch=outcome.member_epoch,
        heartbeat_interval=outcome.heartbeat_interval_ms,
        assignment=assignment,
    )


# size, correlation id, header tags, throttle, error, error message (null); then the member id
_HEAD = struct.Struct(">iibihb")
# member epoch, heartbeat interval, assignment (null: -1), body tags
_TAIL = struct.Struct(">iibb")


def encode(outcome: ConsumerGroupHeartbeatOutcome, api_version: int, correlation_id: int
           ) -> bytes:
    """The framed response. The steady-state answer (no error message, no assignment: the
    member is reconciled) is packed by hand, as Heartbeat's: it is what every member sends
    every heartbeat interval. `tests/unit/test_consumer_group_wire.py` checks these bytes
    against kio's encoder."""
    member_id = outcome.member_id
    if (outcome.assignment is not None or outcome.error_message is not None
            or member_id is None or len(member_id) > 126):
        return encode_response(API_KEY, api_version, correlation_id,
                               to_response(outcome, api_version))
    raw_id = member_id.encode()
    if len(raw_id) > 126:  # the compact length would take more than one byte
        return encode_response(API_KEY, api_version, correlation_id,
                               to_response(outcome, api_version))
    size = _HEAD.size - 4 + 1 + len(raw_id) + _TAIL.size
    return b"".join((
        _HEAD.pack(size, correlation_id, 0, 0, outcome.error.value, 0),
        bytes((len(raw_id) + 1,)), raw_id,
        _TAIL.pack(outcome.member_epoch, outcome.heartbeat_interval_ms, -1, 0),
    ))
