"""Reading the topics out of a `consumer` protocol subscription (ConsumerProtocolSubscription).

The coordinator treats member metadata as opaque except here: offset expiry and OffsetDelete
need to know which topics a live consumer group subscribes to. Layout: int16 version, then an
int32-counted array of int16-length topic names (the same in every version).
"""

from __future__ import annotations

import struct


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The subscribed topics, or None when the bytes are not a readable subscription."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        if count < 0 or count > 100_000:
            return None
        pos = 6
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(metadata[pos:pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
