"""ConsumerGroupHeartbeat (api key 68, KIP-848): kio request -> command, outcome -> response.

* v0: the consumer group protocol.
* v1: `subscribed_topic_regex`.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange
from coordinator.group.consumer.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatOutcome,
)
from coordinator.group.consumer.heartbeat import owned_from_wire
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import encode_response, response_type

API_KEY = 68
MIN_VERSION = 0
MAX_VERSION = 1
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)


# The command's slots, filled directly: a frozen dataclass's keyword `__init__` costs more than
# the rest of a steady-state heartbeat's decoding (see `coordinator.grouplog.records`' builders).
# `tests/unit/test_consumer_group_wire.py` checks these are all of its fields.
COMMAND_FIELDS = (
    "ref", "api_version", "group_id", "member_id", "member_epoch", "instance_id", "rack_id",
    "rebalance_timeout_ms", "subscribed_topic_names", "subscribed_topic_regex",
    "server_assignor", "owned", "client_id", "client_host")
(_set_ref, _set_api_version, _set_group_id, _set_member_id, _set_member_epoch, _set_instance_id,
 _set_rack_id, _set_rebalance_timeout_ms, _set_subscribed_topic_names,
 _set_subscribed_topic_regex, _set_server_assignor, _set_owned, _set_client_id,
 _set_client_host) = (vars(ConsumerGroupHeartbeat)[name].__set__ for name in COMMAND_FIELDS)
_new = object.__new__


def to_command(request: Any, api_version: int, ref: RequestRef, client_id: str,
               client_host: str) -> ConsumerGroupHeartbeat:
    """`ConsumerGroupHeartbeat(...)` from a kio request or the hand decoder's fields."""
    names = request.subscribed_topic_names
    rebalance_timeout = request.rebalance_timeout
    topics = request.topic_partitions
    command = _new(ConsumerGroupHeartbeat)
    _set_ref(command, ref)
    _set_api_version(command, api_version)
    _set_group_id(command, request.group_id)
    _set_member_id(command, request.member_id)
    _set_member_epoch(command, request.member_epoch)
    _set_instance_id(command, request.instance_id)
    _set_rack_id(command, request.rack_id)
    _set_rebalance_timeout_ms(command, rebalance_timeout if type(rebalance_timeout) is int
                              else int(rebalance_timeout.total_seconds() * 1000))
    _set_subscribed_topic_names(command, None if names is None else tuple(names))
    _set_subscribed_topic_regex(command, getattr(request, "subscribed_topic_regex", None))
    _set_server_assignor(command, request.server_assignor)
    _set_owned(command, None if topics is None else owned_from_wire(topics))
    _set_client_id(command, client_id)
    _set_client_host(command, client_host)
    return command


def to_response(outcome: ConsumerGroupHeartbeatOutcome, api_version: int) -> Any:
    assignment = None
    if outcome.assignment is not None:
        assignment = {"topic_partitions": [
            {"topic_id": topic_id, "partitions": sorted(partitions)}
            for topic_id, partitions in sorted(outcome.assignment.items()) if partitions]}
    return build(
        response_type(API_KEY, api_version),
        throttle_time=0,
        error_code=outcome.error,
        error_message=outcome.error_message,
        member_id=outcome.member_id,
        member_epoch=outcome.member_epoch,
        heartbeat_interval=outcome.heartbeat_interval_ms,
        assignment=assignment,
    )


# size, correlation id, header tags, throttle, error, error message (null); then the member id
_HEAD = struct.Struct(">iibihb")
# member epoch, heartbeat interval, assignment (null: -1), body tags
_TAIL = struct.Struct(">iibb")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
_NO_ERROR = ErrorCode.none

# (member id, member epoch, heartbeat interval) -> (size, the bytes after the correlation id)
# of the steady-state answer, which is the same every heartbeat interval until the epoch moves.
_STEADY_ANSWERS: dict[tuple[str, int, int], tuple[int, bytes]] = {}
_STEADY_ANSWERS_MAX = 8192


def encode(outcome: ConsumerGroupHeartbeatOutcome, api_version: int, correlation_id: int
           ) -> bytes:
    """The framed response. The steady-state answer (no error message, no assignment: the
    member is reconciled) is packed by hand, as Heartbeat's, and kept per member and epoch:
    it is what every member sends every heartbeat interval. `tests/unit/test_consumer_group_wire.py`
    checks these bytes against kio's encoder."""
    member_id = outcome.member_id
    if (outcome.assignment is not None or outcome.error_message is not None
            or member_id is None):
        return encode_response(API_KEY, api_version, correlation_id,
                               to_response(outcome, api_version))
    steady = outcome.error is _NO_ERROR
    if steady:
        key = (member_id, outcome.member_epoch, outcome.heartbeat_interval_ms)
        known = _STEADY_ANSWERS.get(key)
        if known is not None:
            return _SIZE_AND_CORRELATION.pack(known[0], correlation_id) + known[1]
    raw_id = member_id.encode()
    if len(raw_id) > 126:  # the compact length would take more than one byte
        return encode_response(API_KEY, api_version, correlation_id,
                               to_response(outcome, api_version))
    size = _HEAD.size - 4 + 1 + len(raw_id) + _TAIL.size
    framed = b"".join((
        _HEAD.pack(size, correlation_id, 0, 0, outcome.error.value, 0),
        bytes((len(raw_id) + 1,)), raw_id,
        _TAIL.pack(outcome.member_epoch, outcome.heartbeat_interval_ms, -1, 0),
    ))
    if steady:
        if len(_STEADY_ANSWERS) >= _STEADY_ANSWERS_MAX:
            _STEADY_ANSWERS.clear()
        _STEADY_ANSWERS[key] = (size, framed[_SIZE_AND_CORRELATION.size:])
    return framed
