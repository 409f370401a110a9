"""Hand decoders for hot requests of a fixed, common shape; kio decodes everything else.

A consumer of the consumer group protocol sends a ConsumerGroupHeartbeat every heartbeat
interval, and in the steady state every optional field is null ("unchanged"): the member
tells the broker its id and epoch and nothing else. Decoding that frame by hand costs a
fraction of kio's generic reader plus the array guard. Every consumer commits too: an
OffsetCommit of the flexible versions (v8, v9) is read by hand into the command's own shape
(tuples of partitions), which saves kio's objects, the guard's walk and the conversion after
it; reading element by element, it allocates nothing the frame does not hold. A decoder here
returns None for any
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

__all__ = [
    "HAND_DECODERS",
    "ConsumerGroupHeartbeatFields",
    "OffsetCommitFields",
    "decode_consumer_group_heartbeat",
    "decode_offset_commit",
]

_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">iqi")  # partition index, committed offset, committed leader epoch
_CONSUMER_GROUP_HEARTBEAT = 68
_OFFSET_COMMIT = 8


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


def _header_v2(frame: bytes) -> tuple[int, int, str | None, int] | None:
    """Request header v2 (key, version, correlation id, int16-length client id, no tags):
    version, correlation id, client id and where the body starts; None for a client id that
    is not there or header tags. Raises on a frame too short (the callers decline then)."""
    _, version, correlation_id, client_length = _HEADER.unpack_from(frame, 0)
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
    return version, correlation_id, client_id, pos + 1


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
        header = _header_v2(frame)
        if header is None or header[0] > 1:
            return None
        version, correlation_id, client_id, pos = header
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


@dataclass(slots=True)
class OffsetCommitFields:
    """An OffsetCommit v8/v9 request: kio's attribute names, except that `topics` holds
    `(name, ((partition index, committed offset, committed leader epoch, committed metadata),
    ...))` tuples, the shape of the command (`coordinator/api/offset_commit.py` takes them as
    they are)."""

    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    group_instance_id: str | None
    topics: tuple[tuple[str, tuple[tuple[int, int, int, str | None], ...]], ...]


def decode_offset_commit(frame: bytes) -> tuple[int, int, str | None, Any] | None:
    """(api version, correlation id, client id, fields) of a v8/v9 request whose strings are
    shorter than 127 bytes and arrays shorter than 127 elements, without tagged fields; else
    None.

    Request header v2 as for ConsumerGroupHeartbeat. Body: group id (compact string),
    generation or member epoch (int32), member id (compact string), instance id (compact
    nullable string), topics (compact array): name (compact string), partitions (compact
    array): partition index (int32), committed offset (int64), committed leader epoch (int32),
    committed metadata (compact nullable string), tags; then the topic's tags; the body's tags.
    """
    try:
        header = _header_v2(frame)
        if header is None or header[0] not in (8, 9):
            return None
        version, correlation_id, client_id, pos = header
        group_id, pos = _string(frame, pos)
        (generation,) = _I32.unpack_from(frame, pos)
        member_id, pos = _string(frame, pos + 4)
        instance_id, pos = _nullable(frame, pos)
        count = frame[pos] - 1
        if count < 0 or count > 126:  # null (refused by kio) or a multi-byte count
            return None
        pos += 1
        topics = []
        for _ in range(count):
            name, pos = _string(frame, pos)
            partition_count = frame[pos] - 1
            if partition_count < 0 or partition_count > 126:
                return None
            pos += 1
            plain = _plain_partitions(frame, pos, partition_count)
            if plain is not None:
                topics.append((name, plain))
                pos += 18 * partition_count + 1
                if frame[pos - 1] != 0:  # topic tags
                    return None
                continue
            partitions = []
            for _ in range(partition_count):
                index, offset, leader_epoch = _PARTITION.unpack_from(frame, pos)
                pos += 16
                length = frame[pos] - 1
                if length == 0:
                    metadata: str | None = ""
                    pos += 1
                elif length < 0:
                    metadata = None
                    pos += 1
                else:
                    metadata, pos = _nullable(frame, pos)
                if frame[pos] != 0:  # partition tags
                    return None
                pos += 1
                partitions.append((index, offset, leader_epoch, metadata))
            if frame[pos] != 0:  # topic tags
                return None
            pos += 1
            topics.append((name, tuple(partitions)))
        if frame[pos] != 0:  # body tags
            return None
    except (_Decline, IndexError, struct.error, UnicodeDecodeError):
        return None
    return version, correlation_id, client_id, OffsetCommitFields(
        group_id, generation, member_id, instance_id, tuple(topics))


# Partitions whose metadata is empty or null and that carry no tags take 18 bytes each; a run of
# n of them is read by one `unpack_from` (n is below 127, so at most 126 layouts are made).
_PLAIN_PARTITIONS: dict[int, struct.Struct] = {}
_EMPTY_OR_NULL = (None, "")  # by the compact length byte: 0 null, 1 empty
_ZERO_OR_ONE = frozenset((0, 1))


def _plain_partitions(frame: bytes, pos: int, count: int
                      ) -> tuple[tuple[int, int, int, str | None], ...] | None:
    """The next `count` partitions when every one of them is plain, else None."""
    layout = _PLAIN_PARTITIONS.get(count)
    if layout is None:
        layout = _PLAIN_PARTITIONS[count] = struct.Struct(">" + "iqiBB" * count)
    try:
        values = layout.unpack_from(frame, pos)
    except struct.error:  # the frame is shorter: read partition by partition
        return None
    lengths = values[3::5]
    if not _ZERO_OR_ONE.issuperset(lengths) or any(values[4::5]):
        return None
    return tuple(zip(values[0::5], values[1::5], values[2::5],
                     map(_EMPTY_OR_NULL.__getitem__, lengths), strict=True))


def _string(frame: bytes, pos: int) -> tuple[str, int]:
    """A compact string that is not null, of at most 126 bytes."""
    length = frame[pos] - 1
    if length < 0 or length > 126:  # null (refused by kio) or a multi-byte length
        raise _Decline
    pos += 1
    end = pos + length
    if end > len(frame):
        raise _Decline
    return frame[pos:end].decode(), end


# api key -> hand decoder; `decode_request` asks it first.
HAND_DECODERS: dict[int, Callable[[bytes], tuple[int, int, str | None, Any] | None]] = {
    _CONSUMER_GROUP_HEARTBEAT: decode_consumer_group_heartbeat,
    _OFFSET_COMMIT: decode_offset_commit,
}
