"""DeleteGroups (api key 42): kio request -> `DeleteGroups` command, outcome -> response.

Versions: v0-v2 (v1: no change on the wire, throttling behaviour only; v2: flexible versions).
Each group gets its own error: NONE, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR, ...
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange
from coordinator.group.offset_commands import DeleteGroups, DeleteGroupsOutcome
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)


def to_command(request: Any, version: int, ref: RequestRef) -> DeleteGroups:
    return DeleteGroups(ref=ref, group_ids=tuple(request.groups_names))


def to_response(outcome: DeleteGroupsOutcome, version: int) -> Any:
    return build(
        response_type(API_KEY, version),
        throttle_time=0,
        results=[
            {"group_id": group_id, "error_code": error} for group_id, error in outcome.results
        ],
    )


def error_values(request: Any, version: int, error: ErrorCode) -> dict[str, Any]:
    """Every named group answered `error`, as Kafka's error response does."""
    return {"throttle_time": 0, "results": [
        {"group_id": group_id, "error_code": error} for group_id in request.groups_names]}
