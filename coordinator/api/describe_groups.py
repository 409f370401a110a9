"""DescribeGroups (api key 15): kio request -> `DescribeGroups` command, outcome -> response.

* v1: `throttle_time` in the response.
* v3: `include_authorized_operations` and `authorized_operations` (KIP-430).
* v4: member `group_instance_id` (KIP-345).
* v5: flexible versions.
* v6: per-group `error_message`; a missing group is GROUP_ID_NOT_FOUND (KIP-1043), before v6 it
  is described as Dead with no error.

Members carry their metadata and assignment only while the group is Stable (Kafka).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange
from coordinator.group.commands import DescribeGroups
from coordinator.group.outcomes import DescribeGroupsOutcome
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)


def to_command(
    request: Any, api_version: int, ref: RequestRef, client_id: str, client_host: str
) -> DescribeGroups:
    return DescribeGroups(
        ref=ref,
        api_version=api_version,
        group_ids=tuple(request.groups),
        include_authorized_operations=bool(
            getattr(request, "include_authorized_operations", False)
        ),
    )


def to_response(outcome: DescribeGroupsOutcome, api_version: int) -> Any:
    return build(response_type(API_KEY, api_version), to_values(outcome, api_version))


def to_values(outcome: DescribeGroupsOutcome, api_version: int) -> dict[str, Any]:
    """The response as plain values (for `build`, or `respond_in_slices`: an admin tool may
    describe thousands of groups in one request)."""
    return dict(
        throttle_time=0,
        groups=[
            {
                "error_code": g.error,
                "error_message": g.error_message,
                "group_id": g.group_id,
                "group_state": g.state,
                "protocol_type": g.protocol_type,
                "protocol_data": g.protocol_data,
                "authorized_operations": g.authorized_operations,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in g.members
                ],
            }
            for g in outcome.groups
        ],
    )


def error_values(request: Any, api_version: int, error: ErrorCode) -> dict[str, Any]:
    """Every requested group answered `error`, as Kafka's error response does."""
    return {"throttle_time": 0, "groups": [
        {"error_code": error, "group_id": group_id, "group_state": "", "protocol_type": "",
         "protocol_data": "", "members": (), "authorized_operations": -(2**31)}
        for group_id in request.groups]}
