"""JoinGroup (api key 11): kio request -> `JoinGroup` command, outcome -> response.

* v0: no `rebalance_timeout`; Kafka uses the session timeout for it.
* v1: `rebalance_timeout` (KIP-62).
* v2: `throttle_time` in the response.
* v4: MEMBER_ID_REQUIRED for the first join of a dynamic member (KIP-394; see commands.py).
* v5: `group_instance_id` in request and response members (KIP-345).
* v6: flexible versions.
* v7: response `protocol_type`; `protocol_name` becomes nullable (KIP-559). Before v7 a missing
  protocol name is written as "" (Kafka `GroupCoordinator.NoProtocol`).
* v8: request `reason` (KIP-800).
* v9: response `skip_assignment` (KIP-814).
"""

from __future__ import annotations

import datetime
import struct
import sys
from typing import Any

from coordinator.api.context import ApiVersionRange
from coordinator.group.commands import JoinGroup, Protocol, client_reason
from coordinator.group.outcomes import JoinGroupOutcome
from coordinator.group.result import RequestRef
from protocol import fastpath as fp
from protocol.build import build
from protocol.codec import response_type

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)

_ONE_MS = datetime.timedelta(milliseconds=1)

# Timeouts repeat across members (a client's defaults), but each division makes a new int that
# the member then keeps: equal values share one object here. Bounded, since clients choose them.
_SHARED_MS: dict[int, int] = {}
_SHARED_MS_MAX = 64


def _shared_ms(value: datetime.timedelta) -> int:
    ms = value // _ONE_MS
    shared = _SHARED_MS.get(ms)
    if shared is not None:
        return shared
    if len(_SHARED_MS) < _SHARED_MS_MAX:
        _SHARED_MS[ms] = ms
    return ms


def to_command(
    request: Any, api_version: int, ref: RequestRef, client_id: str, client_host: str
) -> JoinGroup:
    session_timeout_ms = _shared_ms(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)
    return JoinGroup(
        ref=ref,
        api_version=api_version,
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=session_timeout_ms if rebalance is None else _shared_ms(rebalance),
        # Interned: every member of every group keeps these, and they repeat across members.
        protocol_type=sys.intern(request.protocol_type),
        protocols=tuple(
            Protocol(name=sys.intern(p.name), metadata=bytes(p.metadata))
            for p in request.protocols
        ),
        reason=client_reason(getattr(request, "reason", None)),
        client_id=sys.intern(client_id),
        client_host=client_host,
    )


def to_response(outcome: JoinGroupOutcome, api_version: int) -> Any:
    return build(
        response_type(API_KEY, api_version),
        throttle_time=0,
        error_code=outcome.error,
        generation_id=outcome.generation_id,
        protocol_type=outcome.protocol_type,
        protocol_name=outcome.protocol_name,
        leader=outcome.leader,
        skip_assignment=outcome.skip_assignment,
        member_id=outcome.member_id,
        members=[
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in outcome.members
        ],
    )


_ERROR_AND_GENERATION = struct.Struct(">hi")


def encode(outcome: JoinGroupOutcome, api_version: int, correlation_id: int) -> bytes:
    """The whole framed response, packed by hand: the leader's answer lists every member's
    metadata, and kio's generic writer made it the costliest part of a large rebalance.
    `tests/unit/test_api_roundtrip.py` checks these bytes against kio's encoder."""
    enc = fp.COMPACT if api_version >= 6 else fp.LEGACY
    string, nullable_string, tags = enc.string, enc.nullable_string, enc.tags
    body = [fp.ZERO_I32] if api_version >= 2 else []  # throttle time
    body.append(_ERROR_AND_GENERATION.pack(outcome.error.value, outcome.generation_id))
    if api_version >= 7:
        body.append(nullable_string(outcome.protocol_type))
        body.append(nullable_string(outcome.protocol_name))
    else:
        body.append(string(outcome.protocol_name or ""))
    body.append(string(outcome.leader))
    if api_version >= 9:
        body.append(b"\x01" if outcome.skip_assignment else b"\x00")
    body.append(string(outcome.member_id))
    body.append(enc.array_length(len(outcome.members)))
    metadata = enc.bytes_
    with_instance_id = api_version >= 5
    for m in outcome.members:
        body.append(string(m.member_id))
        if with_instance_id:
            body.append(nullable_string(m.group_instance_id))
        body.append(metadata(m.metadata))
        body.append(tags)
    body.append(tags)
    return fp.frame(correlation_id, enc.flexible, body)
