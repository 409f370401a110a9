"""The `consumer` embedded protocol of classic groups: ConsumerProtocolSubscription (JoinGroup
metadata) and ConsumerProtocolAssignment (SyncGroup assignment), versions 0-3, non-flexible,
read and written with kio's types for them.

The coordinator treats a classic member's protocol bytes as opaque except where it must look
inside: a consumer group reads a classic member's subscription (its topics and the partitions it
still owns) and writes its assignment in the format the member's client reads; offset expiry and
OffsetDelete need the topics a classic `consumer` group subscribes to; the operators' page and
the forensics job show assignments. They all read through this module. Layouts (int16 version
first; strings int16-length, arrays and bytes int32-counted, -1 = null):

    Subscription v0: Topics []string, UserData bytes?
                 v1+: OwnedPartitions [](Topic string, Partitions []int32)
                 v2+: GenerationId int32          v3+: RackId string?
    Assignment   v0+: AssignedPartitions [](Topic string, Partitions []int32), UserData bytes?

A version above 3 is read as version 3 (newer versions only add fields at the end), and a
subscription that ends where one of its version's later fields would start is read without
them, as Kafka's clients of older releases wrote them.

Reading is kio's: its readers are compiled and 5-20 times faster than the parser that was here
(about 1-4 us against 11-20 us for a subscription or an assignment of a few topics). Writing an
assignment is ours (see `encode_assignment`). This module and `protocol/` are the only users of
`kio.serial`.

Raises `EmbeddedProtocolError` (a `ValueError`) for bytes that are not such a structure.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.consumer_protocol_assignment.v0 import data as assignment_v0
from kio.schema.consumer_protocol_assignment.v1 import data as assignment_v1
from kio.schema.consumer_protocol_assignment.v2 import data as assignment_v2
from kio.schema.consumer_protocol_assignment.v3 import data as assignment_v3
from kio.schema.consumer_protocol_subscription.v0 import data as subscription_v0
from kio.schema.consumer_protocol_subscription.v1 import data as subscription_v1
from kio.schema.consumer_protocol_subscription.v2 import data as subscription_v2
from kio.schema.consumer_protocol_subscription.v3 import data as subscription_v3
from kio.serial import entity_reader
from kio.serial.errors import BufferUnderflow, SerialError

__all__ = [
    "EmbeddedProtocolError",
    "Subscription",
    "assignment_partitions",
    "encode_assignment",
    "parse_assignment",
    "parse_subscription",
    "protocol_version",
    "subscribed_topics",
]

MAX_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

TopicPartitions = Mapping[str, frozenset[int]]

_SUBSCRIPTION_TYPES: tuple[type, ...] = (
    subscription_v0.ConsumerProtocolSubscription, subscription_v1.ConsumerProtocolSubscription,
    subscription_v2.ConsumerProtocolSubscription, subscription_v3.ConsumerProtocolSubscription)
_ASSIGNMENT_TYPES: tuple[type, ...] = (
    assignment_v0.ConsumerProtocolAssignment, assignment_v1.ConsumerProtocolAssignment,
    assignment_v2.ConsumerProtocolAssignment, assignment_v3.ConsumerProtocolAssignment)
_SUBSCRIPTION_READERS: tuple[Callable[[bytes, int], tuple[Any, int]], ...] = tuple(
    entity_reader(t) for t in _SUBSCRIPTION_TYPES)
_ASSIGNMENT_READERS: tuple[Callable[[bytes, int], tuple[Any, int]], ...] = tuple(
    entity_reader(t) for t in _ASSIGNMENT_TYPES)


class EmbeddedProtocolError(ValueError):
    """The bytes are not a readable consumer protocol structure."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]
    rack_id: str | None = None


def protocol_version(data: bytes) -> int:
    """The version of a subscription or assignment, within what we write (0-3)."""
    if len(data) < 2:
        return 0
    return max(0, min(_I16.unpack_from(data, 0)[0], MAX_VERSION))


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise EmbeddedProtocolError(f"{what} of {len(data)} bytes has no version")
    version = int(_I16.unpack_from(data, 0)[0])
    if version < 0:
        raise EmbeddedProtocolError(f"negative {what} version {version}")
    return min(version, MAX_VERSION)


def _merged(pairs: Iterable[Any]) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for entry in pairs:
        out[entry.topic] = out.get(entry.topic, frozenset()) | frozenset(entry.partitions)
    return out


def parse_subscription(data: bytes) -> Subscription:
    top = _version(data, "subscription")
    for version in range(top, -1, -1):
        try:
            read, size = _SUBSCRIPTION_READERS[version](data, 2)  # size: bytes it read
        except BufferUnderflow as exc:
            if version == 0:
                raise EmbeddedProtocolError(str(exc)) from None
            continue  # perhaps the bytes end where this version's last field would start
        except (SerialError, ValueError) as exc:
            raise EmbeddedProtocolError(str(exc)) from None
        if version < top and 2 + size != len(data):
            raise EmbeddedProtocolError(f"subscription v{top} cut inside a field")
        return Subscription(
            version=int(_I16.unpack_from(data, 0)[0]), topics=tuple(read.topics),
            owned=_merged(getattr(read, "owned_partitions", ())),
            rack_id=getattr(read, "rack_id", None))
    raise AssertionError("version 0 returns or raises")  # pragma: no cover


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The subscribed topics, or None when the bytes are not a readable subscription."""
    try:
        return set(parse_subscription(metadata).topics)
    except EmbeddedProtocolError:
        return None


def assignment_partitions(data: bytes) -> list[tuple[str, int]]:
    """The `(topic, partition)` pairs of an assignment in the order it lists them; empty bytes
    (a member not yet given any) are none."""
    if not data:
        return []
    version = _version(data, "assignment")
    try:
        read, _ = _ASSIGNMENT_READERS[version](data, 2)
    except (SerialError, ValueError) as exc:
        raise EmbeddedProtocolError(str(exc)) from None
    return [(entry.topic, int(p)) for entry in read.assigned_partitions
            for p in entry.partitions]


def parse_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The assigned partitions by topic; empty bytes (a member not yet given any) are none."""
    if not data:
        return {}
    version = _version(data, "assignment")
    try:
        read, _ = _ASSIGNMENT_READERS[version](data, 2)
    except (SerialError, ValueError) as exc:
        raise EmbeddedProtocolError(str(exc)) from None
    return _merged(read.assigned_partitions)


def encode_assignment(assigned: TopicPartitions, version: int) -> bytes:
    """An assignment in `version` (clamped to 0-3), topics and partitions sorted, no user data.

    Written here rather than by kio's writer, which takes about 60 us for five topics of ten
    partitions against 8 us for this, once per classic member at every rebalance of a consumer
    group; `tests/property/test_embedded_protocol.py` checks both give the same bytes."""
    out = [_I16.pack(max(0, min(version, MAX_VERSION)))]
    topics = sorted(t for t, p in assigned.items() if p)
    out.append(_I32.pack(len(topics)))
    for topic in topics:
        name = topic.encode("utf-8")
        out.append(_I16.pack(len(name)) + name)
        partitions = sorted(assigned[topic])
        out.append(_I32.pack(len(partitions)))
        out.extend(_I32.pack(p) for p in partitions)
    out.append(_I32.pack(-1))  # no user data
    return b"".join(out)
