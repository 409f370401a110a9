"""Heartbeat (api key 12): kio request -> `Heartbeat` command, outcome -> response.

* v1: `throttle_time` in the response.
* v3: `group_instance_id` (KIP-345).
* v4: flexible versions.
"""

from __future__ import annotations

import struct
from typing import Any

from coordinator.api.context import ApiVersionRange
from coordinator.group.commands import Heartbeat
from coordinator.group.outcomes import HeartbeatOutcome
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)


def to_command(
    request: Any, api_version: int, ref: RequestRef, client_id: str, client_host: str
) -> Heartbeat:
    return Heartbeat(
        ref=ref,
        api_version=api_version,
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )


def to_response(outcome: HeartbeatOutcome, api_version: int) -> Any:
    return build(response_type(API_KEY, api_version), throttle_time=0, error_code=outcome.error)


_RESPONSE_V0 = struct.Struct(">iih")  # size, correlation id, error
_RESPONSE_V1 = struct.Struct(">iiih")  # size, correlation id, throttle, error
_RESPONSE_V4 = struct.Struct(">iibihb")  # size, correlation id, header tags, throttle, error, tags


def encode(outcome: HeartbeatOutcome, api_version: int, correlation_id: int) -> bytes:
    """The whole framed response, packed by hand: Heartbeat is the hottest request a
    coordinator serves, and its fixed shape makes the generic encoder's work unnecessary.
    `tests/unit/test_api_roundtrip.py` checks these bytes against kio's encoder."""
    return encode_error(outcome.error, api_version, correlation_id)


def encode_error(error: int, api_version: int, correlation_id: int) -> bytes:
    """`encode` of an outcome by its error code alone (the steady heartbeat's, NONE)."""
    if api_version == 0:
        return _RESPONSE_V0.pack(6, correlation_id, error)
    if api_version < 4:
        return _RESPONSE_V1.pack(10, correlation_id, 0, error)
    return _RESPONSE_V4.pack(12, correlation_id, 0, 0, error, 0)
