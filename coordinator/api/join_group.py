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
from typing import Any

from coordinator.commands import JoinGroup, Protocol
from coordinator.outcomes import JoinGroupOutcome
from coordinator.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9

_ONE_MS = datetime.timedelta(milliseconds=1)


def to_command(
    request: Any, api_version: int, ref: RequestRef, client_id: str, client_host: str
) -> JoinGroup:
    session_timeout_ms = request.session_timeout // _ONE_MS
    rebalance = getattr(request, "rebalance_timeout", None)
    return JoinGroup(
        ref=ref,
        api_version=api_version,
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=session_timeout_ms if rebalance is None else rebalance // _ONE_MS,
        protocol_type=request.protocol_type,
        protocols=tuple(
            Protocol(name=p.name, metadata=bytes(p.metadata)) for p in request.protocols
        ),
        reason=getattr(request, "reason", None),
        client_id=client_id,
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
