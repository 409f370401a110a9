"""SyncGroup (api key 14): kio request -> `SyncGroup` command, outcome -> response.

* v1: `throttle_time` in the response.
* v3: `group_instance_id` (KIP-345).
* v4: flexible versions.
* v5: `protocol_type` and `protocol_name` in request (mandatory) and response (KIP-559).
"""

from __future__ import annotations

from typing import Any

from coordinator.api.context import ApiVersionRange
from coordinator.group.commands import SyncGroup
from coordinator.group.outcomes import SyncGroupOutcome
from coordinator.group.result import RequestRef
from protocol import fastpath as fp
from protocol.build import build
from protocol.codec import response_type

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)


def to_command(
    request: Any, api_version: int, ref: RequestRef, client_id: str, client_host: str
) -> SyncGroup:
    return SyncGroup(
        ref=ref,
        api_version=api_version,
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments=tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
    )


def to_response(outcome: SyncGroupOutcome, api_version: int) -> Any:
    return build(
        response_type(API_KEY, api_version),
        throttle_time=0,
        error_code=outcome.error,
        protocol_type=outcome.protocol_type,
        protocol_name=outcome.protocol_name,
        assignment=outcome.assignment,
    )


def encode(outcome: SyncGroupOutcome, api_version: int, correlation_id: int) -> bytes:
    """The whole framed response, packed by hand: a completed rebalance answers every member
    at once. `tests/unit/test_api_roundtrip.py` checks these bytes against kio's encoder."""
    enc = fp.COMPACT if api_version >= 4 else fp.LEGACY
    body = [fp.ZERO_I32] if api_version >= 1 else []  # throttle time
    body.append(fp.I16.pack(outcome.error.value))
    if api_version >= 5:
        body.append(enc.nullable_string(outcome.protocol_type))
        body.append(enc.nullable_string(outcome.protocol_name))
    body.append(enc.bytes_(outcome.assignment))
    body.append(enc.tags)
    return fp.frame(correlation_id, enc.flexible, body)
