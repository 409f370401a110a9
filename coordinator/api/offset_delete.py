"""OffsetDelete (api key 47, KIP-496): kio request -> `OffsetDelete` command, outcome -> response.

Versions: v0 only. Group-level errors (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...) go in the
top-level `error_code`; per partition GROUP_SUBSCRIBED_TO_TOPIC.
"""

from __future__ import annotations

from typing import Any

from coordinator.api.context import ApiVersionRange
from coordinator.group.offset_commands import OffsetDelete, OffsetDeleteOutcome
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)


def to_command(request: Any, version: int, ref: RequestRef) -> OffsetDelete:
    return OffsetDelete(
        ref=ref,
        group_id=request.group_id,
        topics=tuple(
            (t.name, tuple(p.partition_index for p in t.partitions)) for t in request.topics
        ),
    )


def to_response(outcome: OffsetDeleteOutcome, version: int) -> Any:
    return build(
        response_type(API_KEY, version),
        error_code=outcome.error,
        throttle_time=0,
        topics=[
            {
                "name": topic,
                "partitions": [
                    {"partition_index": partition, "error_code": error}
                    for partition, error in partitions
                ],
            }
            for topic, partitions in outcome.topics
        ],
    )
