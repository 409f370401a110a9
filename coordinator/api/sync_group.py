"""SyncGroup (api key 14): kio request -> `SyncGroup` command, outcome -> response.

* v1: `throttle_time` in the response.
* v3: `group_instance_id` (KIP-345).
* v4: flexible versions.
* v5: `protocol_type` and `protocol_name` in request (mandatory) and response (KIP-559).
"""

from __future__ import annotations

from typing import Any

from coordinator.commands import SyncGroup
from coordinator.outcomes import SyncGroupOutcome
from coordinator.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5


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
