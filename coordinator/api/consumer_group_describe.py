"""ConsumerGroupDescribe (api key 69, KIP-848): kio request -> command, outcome -> response.

* v0: the consumer group protocol.
* v1: per-member `member_type` (KIP-1099); every member here uses the consumer protocol (1).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange
from coordinator.group.consumer.commands import ConsumerGroupDescribe, ConsumerGroupDescribeOutcome
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 69
MIN_VERSION = 0
MAX_VERSION = 1
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)

_CONSUMER_MEMBER_TYPE = 1  # KIP-1099: -1 unknown, 0 classic, 1 consumer


def to_command(request: Any, api_version: int, ref: RequestRef, client_id: str,
               client_host: str) -> ConsumerGroupDescribe:
    return ConsumerGroupDescribe(
        ref=ref, api_version=api_version, group_ids=tuple(request.group_ids),
        include_authorized_operations=bool(request.include_authorized_operations))


def _assignment(parts: tuple[Any, ...]) -> dict[str, Any]:
    return {"topic_partitions": [
        {"topic_id": topic_id, "topic_name": name, "partitions": list(partitions)}
        for topic_id, name, partitions in parts]}


def to_response(outcome: ConsumerGroupDescribeOutcome, api_version: int) -> Any:
    return build(
        response_type(API_KEY, api_version),
        throttle_time=0,
        groups=[
            {
                "error_code": g.error,
                "error_message": g.error_message,
                "group_id": g.group_id,
                "group_state": g.state,
                "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch,
                "assignor_name": g.assignor_name,
                "authorized_operations": g.authorized_operations,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_topic_names),
                        "subscribed_topic_regex": m.subscribed_topic_regex,
                        "assignment": _assignment(m.assignment),
                        "target_assignment": _assignment(m.target_assignment),
                        "member_type": _CONSUMER_MEMBER_TYPE,
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
        {"error_code": error, "error_message": None, "group_id": group_id, "group_state": "",
         "members": (), "authorized_operations": -(2**31)}
        for group_id in request.group_ids]}
