"""ListGroups (api key 16): kio request -> `ListGroups` command, outcome -> response.

* v1: `throttle_time` in the response.
* v3: flexible versions.
* v4: request `states_filter`, response `group_state` (KIP-518).
* v5: request `types_filter`, response `group_type` (KIP-848); every group here is "classic".
"""

from __future__ import annotations

from typing import Any

from coordinator.api.context import ApiVersionRange
from coordinator.group.commands import ListGroups
from coordinator.group.outcomes import ListGroupsOutcome
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)


def to_command(
    request: Any, api_version: int, ref: RequestRef, client_id: str, client_host: str
) -> ListGroups:
    return ListGroups(
        ref=ref,
        api_version=api_version,
        states_filter=frozenset(getattr(request, "states_filter", ()) or ()),
        types_filter=frozenset(getattr(request, "types_filter", ()) or ()),
    )


def to_response(outcome: ListGroupsOutcome, api_version: int) -> Any:
    return build(
        response_type(API_KEY, api_version),
        throttle_time=0,
        error_code=outcome.error,
        groups=[
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in outcome.groups
        ],
    )
