"""ApiVersions: advertise exactly the (key, min, max) ranges this broker implements."""

from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from coordinator.api.context import ClientRequest
from protocol.build import build
from protocol.codec import response_type

API_VERSIONS = 18

# Kafka API key -> (min, max) this broker answers. Every minimum is Apache Kafka 3.9's;
# versions older than kio's schemas are read and written by `protocol.legacy_versions`.
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (0, 11),   # Produce (v0-v2: legacy message sets, up-converted)
    1: (0, 16),   # Fetch (v0-v3: down-converted to magic 0/1)
    2: (0, 11),   # ListOffsets (v0: max_num_offsets form)
    3: (0, 13),   # Metadata
    8: (0, 9),    # OffsetCommit (v0: UNSUPPORTED_VERSION, as Kafka 3.x without ZooKeeper)
    9: (0, 9),    # OffsetFetch (v0: likewise)
    10: (0, 6),   # FindCoordinator
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    15: (0, 5),   # DescribeGroups
    16: (0, 5),   # ListGroups
    18: (0, 4),   # ApiVersions
    19: (0, 7),   # CreateTopics
    20: (0, 6),   # DeleteTopics
    22: (0, 4),   # InitProducerId
    37: (0, 3),   # CreatePartitions
    42: (0, 2),   # DeleteGroups
    47: (0, 0),   # OffsetDelete
    # The consumer group protocol (KIP-848)
    68: (0, 1),   # ConsumerGroupHeartbeat
    69: (0, 1),   # ConsumerGroupDescribe
}


def advertised(implemented: set[int]) -> list[dict[str, int]]:
    return [
        {"api_key": key, "min_version": lo, "max_version": hi}
        for key, (lo, hi) in sorted(SUPPORTED.items())
        if key in implemented
    ]


def handle(ctx: ClientRequest, implemented: set[int]) -> None:
    cls = response_type(API_VERSIONS, ctx.version)
    ctx.respond(build(cls, error_code=ErrorCode.none, api_keys=advertised(implemented),
                      throttle_time=0))


def unsupported_version_response(correlation_id: int, implemented: set[int]) -> bytes:
    """The v0-layout answer Kafka gives to an ApiVersions version it does not know.

    A client newer than us learns our range from it and retries with a version we speak.
    """
    keys = advertised(implemented)
    body = bytearray(struct.pack(">ihi", correlation_id, ErrorCode.unsupported_version.value,
                                 len(keys)))
    for entry in keys:
        body += struct.pack(">hhh", entry["api_key"], entry["min_version"], entry["max_version"])
    return struct.pack(">i", len(body)) + bytes(body)
