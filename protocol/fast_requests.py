"""Hand decoders for hot requests of a fixed, common shape; kio decodes everything else.

A consumer of the consumer group protocol sends a ConsumerGroupHeartbeat every heartbeat
interval, and in the steady state every optional field is null ("unchanged"): the member
tells the broker its id and epoch and nothing else. Decoding that frame by hand costs a
fraction of kio's generic reader plus the array guard. A decoder here returns None for any
frame that is not of that shape (a non-null array, a tagged field, a multi-byte length, bytes
that are not UTF-8, a short frame), and `protocol.codec.decode_request` then decodes it with kio
as before; so the hand decoder never accepts a frame kio would refuse, and what it accepts it
reads as kio does. `tests/property/test_fast_requests.py` holds it to that: for generated and
mutated frames, the hand decoder either declines or gives what kio gives.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["HAND_DECODERS", "ConsumerGroupHeartbeatFields", "decode_consumer_group_heartbeat"]

_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_I32 = struct.Struct(">i")
_CONSUMER_GROUP_HEARTBEAT = 68


@dataclass(slots=True)
class ConsumerGroupHeartbeatFields:
    """The fields of a ConsumerGroupHeartbeat request, under kio's attribute names (the api
    module's `to_command` reads either). `rebalance_timeout` is in milliseconds."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout: int
    subscribed_topic_names: None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    topic_partitions: None


def decode_consumer_group_heartbeat(frame: bytes
                                    ) -> tuple[int, int, str | None, Any] | None:
    """(api version, correlation id, client id, fields) of a v0/v1 request whose arrays are
    null and whose strings are shorter than 127 bytes, without tagged fields; else None.

    Request header v2: key, version, correlation id, int16-length client id, tags. Body:
    group id, member id (compact strings), member epoch, instance id, rack id (compact nullable
    strings), rebalance timeout, subscribed topic names (compact nullable array), v1:
    subscribed topic regex, then server assignor (compact nullable strings), topic partitions
    (compact nullable array), tags. Bytes after the body are ignored, as kio ignores them.
    """
    try:
        _, version, correlation_id, client_length = _HEADER.unpack_from(frame, 0)
        if version > 1:
            return None
        pos = 10
        if client_length < 0:
            if client_length != -1:
                return None
            client_id = None
        else:
            end = pos + client_length
            if end > len(frame):
                return None
            client_id = frame[pos:end].decode()
            pos = end
        if frame[pos] != 0:  # header tags
            return None
        pos += 1
        # Compact strings: one length byte (n + 1, 0 for null) below 0x80, then n bytes.
        length = frame[pos] - 1
        if length < 0 or length > 126:  # null (not allowed) or a multi-byte length
            return None
        pos += 1
        end = pos + length
        if end > len(frame):
            return None
        group_id = frame[pos:end].decode()
        pos = end
        length = frame[pos] - 1
        if length < 0 or length > 126:
            return None
        pos += 1
        end = pos + length
        if end > len(frame):
            return None
        member_id = frame[pos:end].decode()
        pos = end
        (member_epoch,) = _I32.unpack_from(frame, pos)
        pos += 4
        instance_id, pos = _nullable(frame, pos)
        rack_id, pos = _nullable(frame, pos)
        (rebalance_timeout,) = _I32.unpack_from(frame, pos)
        pos += 4
        if frame[pos] != 0:  # subscribed topic names
            return None
        pos += 1
        regex = None
        if version >= 1:
            regex, pos = _nullable(frame, pos)
        server_assignor, pos = _nullable(frame, pos)
        if frame[pos] != 0 or frame[pos + 1] != 0:  # topic partitions, body tags
            return None
    except (_Decline, IndexError, struct.error, UnicodeDecodeError):
        return None
    return version, correlation_id, client_id, ConsumerGroupHeartbeatFields(
        group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout, None,
        regex, server_assignor, None)


class _Decline(Exception):
    """The frame is not of the shape decoded here."""


def _nullable(frame: bytes, pos: int) -> tuple[str | None, int]:
    length = frame[pos] - 1
    if length < 0:
        return None, pos + 1
    if length > 126:
        raise _Decline
    pos += 1
    end = pos + length
    if end > len(frame):
        raise _Decline
    return frame[pos:end].decode(), end


# api key -> hand decoder; `decode_request` asks it first.
HAND_DECODERS: dict[int, Callable[[bytes], tuple[int, int, str | None, Any] | None]] = {
    _CONSUMER_GROUP_HEARTBEAT: decode_consumer_group_heartbeat,
}
