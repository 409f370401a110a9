"""The `consumer` embedded protocol of classic members: ConsumerProtocolSubscription (JoinGroup
metadata) and ConsumerProtocolAssignment (SyncGroup assignment), versions 0-3, non-flexible.

A consumer group reads a classic member's subscription to know its topics and the partitions it
still owns, and writes its assignment in the format the member's client reads. Layouts (int16
version first; strings int16-length, arrays and bytes int32-counted, -1 = null):

    Subscription v0: Topics []string, UserData bytes?
                 v1+: OwnedPartitions [](Topic string, Partitions []int32)
                 v2+: GenerationId int32          v3+: RackId string?
    Assignment   v0+: AssignedPartitions [](Topic string, Partitions []int32), UserData bytes?
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "EmbeddedProtocolError",
    "Subscription",
    "encode_assignment",
    "parse_assignment",
    "parse_subscription",
    "protocol_version",
]

MAX_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

TopicPartitions = Mapping[str, frozenset[int]]


class EmbeddedProtocolError(ValueError):
    """The bytes are not a readable consumer protocol structure."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _unpack(self, s: struct.Struct) -> int:
        try:
            (value,) = s.unpack_from(self.data, self.pos)
        except struct.error as exc:
            raise EmbeddedProtocolError(str(exc)) from None
        self.pos += s.size
        return int(value)

    def int16(self) -> int:
        return self._unpack(_I16)

    def int32(self) -> int:
        return self._unpack(_I32)

    def count(self) -> int:
        n = self.int32()
        if n < -1 or n > len(self.data) - self.pos:
            raise EmbeddedProtocolError(f"bad count {n} at {self.pos}")
        return n

    def string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        if n < 0 or self.pos + n > len(self.data):
            raise EmbeddedProtocolError(f"bad string length {n} at {self.pos}")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EmbeddedProtocolError(str(exc)) from None

    def skip_bytes(self) -> None:
        n = self.count()
        if n > 0:
            self.pos += n

    def topic_partitions(self) -> dict[str, frozenset[int]]:
        out: dict[str, frozenset[int]] = {}
        for _ in range(max(self.count(), 0)):
            topic = self.string() or ""
            partitions = frozenset(self.int32() for _ in range(max(self.count(), 0)))
            out[topic] = out.get(topic, frozenset()) | partitions
        return out

    @property
    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def protocol_version(data: bytes) -> int:
    """The version of a subscription or assignment, within what we write (0-3)."""
    if len(data) < 2:
        return 0
    return max(0, min(_I16.unpack_from(data, 0)[0], MAX_VERSION))


def parse_subscription(data: bytes) -> Subscription:
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise EmbeddedProtocolError(f"negative subscription version {version}")
    topics = tuple(r.string() or "" for _ in range(max(r.count(), 0)))
    r.skip_bytes()
    owned: dict[str, frozenset[int]] = {}
    rack_id = None
    # Newer versions only add fields at the end: read what we know, ignore the rest.
    if version >= 1 and not r.at_end:
        owned = r.topic_partitions()
    if version >= 2 and not r.at_end:
        r.int32()  # GenerationId
    if version >= 3 and not r.at_end:
        rack_id = r.string()
    return Subscription(version=version, topics=topics, owned=owned, rack_id=rack_id)


def parse_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The assigned partitions; empty bytes (a member not yet given any) are none."""
    if not data:
        return {}
    r = _Reader(data)
    if r.int16() < 0:
        raise EmbeddedProtocolError("negative assignment version")
    return r.topic_partitions()


def encode_assignment(assigned: TopicPartitions, version: int) -> bytes:
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
