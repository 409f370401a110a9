"""ApiVersions: advertise exactly the (key, min, max) ranges this broker serves.

The ranges are not listed here: each API module declares its own (`VERSIONS`, an
`ApiVersionRange`), the broker registers it with the API's handler, and what is registered is
what this answers (`Broker.served_versions`). Every minimum is Apache Kafka 3.9's; versions
older than kio's schemas are read and written by `protocol.legacy_versions`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from protocol.build import build
from protocol.codec import response_type

API_VERSIONS = 18
VERSIONS = ApiVersionRange(API_VERSIONS, 0, 4)

# api key -> (min, max) version served
ServedVersions = Mapping[int, tuple[int, int]]


def advertised(served: ServedVersions) -> list[dict[str, int]]:
    return [{"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(served.items())]


def handle(ctx: ClientRequest, served: ServedVersions) -> None:
    cls = response_type(API_VERSIONS, ctx.version)
    ctx.respond(build(cls, error_code=ErrorCode.none, api_keys=advertised(served),
                      throttle_time=0))


def unsupported_version_response(correlation_id: int, served: ServedVersions) -> bytes:
    """The v0-layout answer Kafka gives to an ApiVersions version it does not know.

    A client newer than us learns our range from it and retries with a version we speak.
    """
    keys = advertised(served)
    body = bytearray(struct.pack(">ihi", correlation_id, ErrorCode.unsupported_version.value,
                                 len(keys)))
    for entry in keys:
        body += struct.pack(">hhh", entry["api_key"], entry["min_version"], entry["max_version"])
    return struct.pack(">i", len(body)) + bytes(body)
