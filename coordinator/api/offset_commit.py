"""OffsetCommit (api key 8): kio request -> `OffsetCommit` command, outcome -> response.

Versions handled here: v0-v9 (kio 0.6.5 has v2-v10; v10 names topics by id and is not
advertised; v0-v1 are read by `protocol.legacy_versions`).

* v0: offsets kept in ZooKeeper. Kafka 3.x without ZooKeeper answers UNSUPPORTED_VERSION on
  every partition (the connection stays open); so does this broker
  (`coordinator/runtime/groups.py`).
* v1: group generation and member id, and a `commit_timestamp` per partition: -1 means "now",
  anything else is stored as the commit timestamp.

* v2-v4: `retention_time` (kio: a timedelta; -1 ms = broker default). An explicit retention
  gives the offsets an absolute expire timestamp, stored as OffsetCommitValue v1.
* v3+: `throttle_time` in the response.
* v5: `retention_time` removed.
* v6: per-partition `committed_leader_epoch`.
* v7: `group_instance_id` (KIP-345).
* v8: flexible versions.
* v9: `generation_id_or_member_epoch` may carry a KIP-848 member epoch; classic groups read it
  as the generation.

Group-level errors are answered on every partition (Kafka has no top-level error here).
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

from coordinator.api.context import ApiVersionRange
from coordinator.group.offset_commands import (
    ZOOKEEPER_OFFSETS_VERSION,
    OffsetCommit,
    OffsetCommitOutcome,
    new_offset_commit,
)
from coordinator.group.offsets import DEFAULT_RETENTION_TIME_MS
from coordinator.group.result import RequestRef
from protocol import fastpath as fp
from protocol.build import build
from protocol.codec import response_type
from protocol.fast_requests import OffsetCommitFields

API_KEY = 8
MIN_VERSION = 0
ZOOKEEPER_ONLY_VERSION = ZOOKEEPER_OFFSETS_VERSION
DEFAULT_COMMIT_TIMESTAMP = -1
MAX_VERSION = 9
VERSIONS = ApiVersionRange(API_KEY, MIN_VERSION, MAX_VERSION)

_ONE_MS = datetime.timedelta(milliseconds=1)


def _commit_timestamps(request: Any) -> dict[tuple[str, int], int] | None:
    """OffsetCommit v1's explicit commit timestamps (-1, "now", is left out)."""
    chosen = {(topic.name, p.partition_index): p.commit_timestamp
              for topic in request.topics for p in topic.partitions
              if p.commit_timestamp != DEFAULT_COMMIT_TIMESTAMP}
    return chosen or None


def to_command(request: Any, version: int, ref: RequestRef) -> OffsetCommit:
    if type(request) is OffsetCommitFields:  # read by hand, topics already in this shape
        return new_offset_commit(ref, request.group_id, request.generation_id_or_member_epoch,
                                 request.member_id, request.group_instance_id,
                                 DEFAULT_RETENTION_TIME_MS, request.topics, None)
    retention = getattr(request, "retention_time", None)
    retention_ms = DEFAULT_RETENTION_TIME_MS if retention is None else retention // _ONE_MS
    return OffsetCommit(
        ref=ref,
        group_id=request.group_id,
        generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        retention_time_ms=retention_ms if version <= 4 else DEFAULT_RETENTION_TIME_MS,
        topics=tuple(
            (
                topic.name,
                tuple([
                    (p.partition_index, p.committed_offset, p.committed_leader_epoch,
                     p.committed_metadata)
                    for p in topic.partitions
                ] if version >= 6 else [
                    (p.partition_index, p.committed_offset, -1, p.committed_metadata)
                    for p in topic.partitions
                ]),
            )
            for topic in request.topics
        ),
        commit_timestamps=_commit_timestamps(request) if version == 1 else None,
    )


def to_response(outcome: OffsetCommitOutcome, version: int) -> Any:
    return build(
        response_type(API_KEY, version),
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


_PARTITION = struct.Struct(">ih")  # partition index, error code
_PARTITION_FLEXIBLE = struct.Struct(">ihB")  # ... and an empty tagged-field section


def encode(outcome: OffsetCommitOutcome, api_version: int, correlation_id: int) -> bytes:
    """The whole framed response, packed by hand: every commit is answered with one entry per
    partition, and kio's generic writer cost more than the rest of the commit together.
    `tests/unit/test_api_offsets.py` checks these bytes against kio's encoder."""
    enc = fp.COMPACT if api_version >= 8 else fp.LEGACY
    string, array_length = enc.string, enc.array_length
    pack = (_PARTITION_FLEXIBLE if enc.flexible else _PARTITION).pack
    tags = enc.tags
    body = [fp.ZERO_I32] if api_version >= 3 else []  # throttle time
    body.append(array_length(len(outcome.topics)))
    for topic, partitions in outcome.topics:
        body.append(string(topic))
        body.append(array_length(len(partitions)))
        # ErrorCode is an IntEnum: struct packs the member itself.
        if tags:
            body.extend([pack(partition, error, 0) for partition, error in partitions])
            body.append(tags)
        else:
            body.extend([pack(partition, error) for partition, error in partitions])
    body.append(tags)
    return fp.frame(correlation_id, enc.flexible, body)
