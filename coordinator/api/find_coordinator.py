"""FindCoordinator (api key 10): answered directly, without the group manager.

This node owns every `__consumer_offsets` partition, so the coordinator of any group is this
node, unless the group's partition is still loading (COORDINATOR_LOAD_IN_PROGRESS, SPEC §2).

* v0: `key` only (a group id).
* v1: `key_type` (0 group, 1 transaction) and response `throttle_time`/`error_message`.
* v3: flexible versions.
* v4: batched `coordinator_keys`, one `coordinators` entry per key (KIP-699).
* v6: key type 2 (share group state coordinator, KIP-932).

Errors, as Kafka `KafkaApis.getCoordinator` answers them:

* an unknown key type is INVALID_REQUEST (Kafka `CoordinatorType.forId` throws
  InvalidRequestException, which becomes the error of every key);
* key type 2 is INVALID_REQUEST: before v6 it is not valid, and this node runs no share
  coordinator;
* key type 1 (transactional id) is answered with this node, as Kafka answers with the leader of
  the `__transaction_state` partition; the transaction APIs themselves are not advertised, so
  a transactional producer fails there with UNSUPPORTED_VERSION;
* Kafka does not validate the group id here (INVALID_GROUP_ID comes from the group APIs);
  an empty group id maps to its partition like any other.

Before v4 an error answer carries Kafka's "no node" (-1, "", -1) and the error's message; a
successful one carries error_message "NONE" (Kafka writes `Errors.NONE.message()`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange
from protocol.build import build
from protocol.codec import response_type

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)

Node = tuple[int, str, int]
NO_NODE: Node = (-1, "", -1)

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2

_MESSAGES = {
    ErrorCode.none: "NONE",
    ErrorCode.coordinator_load_in_progress: (
        "The coordinator is loading and hence can't process requests."
    ),
    ErrorCode.invalid_request: (
        "This most likely occurs because of a request being malformed by the client library "
        "or the message was sent to an incompatible broker. See the broker logs for more details."
    ),
}


def coordinator_for(
    key_type: int, key: str, node: Node, loading: Callable[[str], bool]
) -> tuple[ErrorCode, Node]:
    if key_type == KEY_TYPE_GROUP:
        if loading(key):
            return ErrorCode.coordinator_load_in_progress, NO_NODE
        return ErrorCode.none, node
    if key_type == KEY_TYPE_TRANSACTION:
        return ErrorCode.none, node
    return ErrorCode.invalid_request, NO_NODE


def handle(request: Any, api_version: int, node: Node, loading: Callable[[str], bool]) -> Any:
    """Answer `request` of `api_version`; `loading(group_id)` says if its partition loads."""
    cls = response_type(API_KEY, api_version)
    key_type = int(getattr(request, "key_type", KEY_TYPE_GROUP))
    if api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, (node_id, host, port) = coordinator_for(key_type, key, node, loading)
            coordinators.append(
                {"key": key, "node_id": node_id, "host": host, "port": port, "error_code": error}
            )
        return build(cls, throttle_time=0, coordinators=coordinators)
    error, (node_id, host, port) = coordinator_for(key_type, request.key, node, loading)
    return build(
        cls,
        throttle_time=0,
        error_code=error,
        error_message=_MESSAGES.get(error, error.name),
        node_id=node_id,
        host=host,
        port=port,
    )
