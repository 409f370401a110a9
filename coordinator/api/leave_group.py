"""LeaveGroup (api key 13): kio request -> `LeaveGroup` command, outcome -> response.

* v0-v2: one `member_id`; the response has only a top-level error, which is the member's own
  error when there is no group-level one (Kafka `LeaveGroupResponse` for old versions).
* v1: `throttle_time` in the response.
* v3: a batch of `members` (member id, group instance id) with per-member errors (KIP-345).
* v4: flexible versions.
* v5: a `reason` per member (KIP-800).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange
from coordinator.group.commands import LeaveGroup, LeaveMember, client_reason
from coordinator.group.outcomes import LeaveGroupOutcome
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)


def to_command(
    request: Any, api_version: int, ref: RequestRef, client_id: str, client_host: str
) -> LeaveGroup:
    if api_version < 3:
        members: tuple[LeaveMember, ...] = (LeaveMember(member_id=request.member_id),)
    else:
        members = tuple(
            LeaveMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                reason=client_reason(getattr(m, "reason", None)),
            )
            for m in request.members
        )
    return LeaveGroup(
        ref=ref,
        api_version=api_version,
        group_id=request.group_id,
        members=members,
        client_id=client_id,
        client_host=client_host,
    )


def to_response(outcome: LeaveGroupOutcome, api_version: int) -> Any:
    cls = response_type(API_KEY, api_version)
    if api_version < 3:
        error = outcome.error
        if error is ErrorCode.none and outcome.members:
            error = outcome.members[0].error
        return build(cls, throttle_time=0, error_code=error)
    return build(
        cls,
        throttle_time=0,
        error_code=outcome.error,
        members=[
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "error_code": m.error,
            }
            for m in outcome.members
        ],
    )
