"""Heartbeat (api key 12): kio request -> `Heartbeat` command, outcome -> response.

* v1: `throttle_time` in the response.
* v3: `group_instance_id` (KIP-345).
* v4: flexible versions.
"""

from __future__ import annotations

from typing import Any

from coordinator.commands import Heartbeat
from coordinator.outcomes import HeartbeatOutcome
from coordinator.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


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
