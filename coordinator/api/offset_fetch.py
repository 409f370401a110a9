"""OffsetFetch (api key 9): kio request -> `OffsetFetch` command, outcome -> response.

Versions handled here: v0-v9 (kio has v1-v10; v10 names topics by id and is not advertised).

* v0: same layout as v1, but offsets kept in ZooKeeper: Kafka 3.x without ZooKeeper answers
  UNSUPPORTED_VERSION on every requested partition, and so does this broker
  (`coordinator/group/offset_decisions.py`).

* v1: one group, topics required; no top-level error, so a group error is answered on every
  requested partition.
* v2: null `topics` = every committed partition of the group; top-level `error_code`.
* v3+: `throttle_time`.
* v5: per-partition `committed_leader_epoch`.
* v6: flexible versions.
* v7: `require_stable` (KIP-447): pending commits answer UNSTABLE_OFFSET_COMMIT.
* v8: several groups per request (`groups`, each with its own error) (KIP-709).
* v9: per-group `member_id` / `member_epoch` (KIP-848; classic groups ignore them).

A group-level error comes back with no topics (v2+), as Kafka answers it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange
from coordinator.group.offset_commands import (
    ZOOKEEPER_OFFSETS_VERSION,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchGroupResult,
    OffsetFetchOutcome,
)
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import response_type

API_KEY = 9
MIN_VERSION = 0
ZOOKEEPER_ONLY_VERSION = ZOOKEEPER_OFFSETS_VERSION
MAX_VERSION = 9
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)
BATCH_MIN_VERSION = 8


def _topics(topics: Any) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    if topics is None:
        return None
    return tuple((t.name, tuple(t.partition_indexes)) for t in topics)


def to_command(request: Any, version: int, ref: RequestRef) -> OffsetFetch:
    require_stable = bool(getattr(request, "require_stable", False))
    if version >= BATCH_MIN_VERSION:
        groups = tuple(
            OffsetFetchGroup(
                group_id=g.group_id,
                topics=_topics(g.topics),
                member_id=getattr(g, "member_id", None),
                member_epoch=getattr(g, "member_epoch", -1),
            )
            for g in request.groups
        )
    else:
        groups = (OffsetFetchGroup(group_id=request.group_id, topics=_topics(request.topics)),)
    return OffsetFetch(ref=ref, groups=groups, require_stable=require_stable)


def _topic_entries(result: OffsetFetchGroupResult) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for p in result.partitions:
        by_topic.setdefault(p.topic, []).append(
            {
                "partition_index": p.partition,
                "committed_offset": p.offset,
                "committed_leader_epoch": p.leader_epoch,
                "metadata": p.metadata,
                "error_code": p.error,
            }
        )
    return [{"name": topic, "partitions": parts} for topic, parts in by_topic.items()]


def to_response(outcome: OffsetFetchOutcome, version: int) -> Any:
    return build(response_type(API_KEY, version), to_values(outcome, version))


def to_values(outcome: OffsetFetchOutcome, version: int) -> dict[str, Any]:
    """The response as plain values (for `build`, or `respond_in_slices` when it is large)."""
    if version >= BATCH_MIN_VERSION:
        return {
            "throttle_time": 0,
            "groups": [
                {
                    "group_id": g.group_id,
                    "error_code": g.error,
                    "topics": [] if g.error.value else _topic_entries(g),
                }
                for g in outcome.groups
            ],
        }
    if len(outcome.groups) != 1:
        raise AssertionError(f"OffsetFetch v{version} answers exactly one group")
    group = outcome.groups[0]
    if version >= 2 and group.error.value:
        return {"throttle_time": 0, "error_code": group.error, "topics": []}
    return {"throttle_time": 0, "error_code": group.error, "topics": _topic_entries(group)}


def error_values(request: Any, version: int, error: ErrorCode) -> dict[str, Any]:
    """The request answered `error` as Kafka's error response does: each group (v8+), else
    each requested partition, and the top-level error (v2+)."""
    if version >= BATCH_MIN_VERSION:
        return {"throttle_time": 0, "groups": [
            {"group_id": group.group_id, "error_code": error, "topics": ()}
            for group in request.groups]}
    return {"throttle_time": 0, "error_code": error, "topics": [
        {"name": topic.name, "partitions": [
            {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": "", "error_code": error} for index in topic.partition_indexes]}
        for topic in request.topics or ()]}
