"""Our codec for Kafka's `__consumer_offsets` record keys and values.

Owns the bytes: turning `coordinator.grouplog.records` dataclasses into exactly what Kafka
writes and reading back every version Kafka ever wrote. Framing, checksums and batches belong
to the log (`storage/segment.py`); what a record *means* belongs to the coordinator.

Layout (Kafka's `CoordinatorRecordSerde`, schemas in `group-coordinator/.../common/message/`):

* key   = int16 version, then the key body. The key version picks the record type:
  0/1 OffsetCommitKey, 2 GroupMetadataKey, 3-8 the KIP-848 consumer group records
  (ConsumerGroupMetadata, PartitionMetadata, MemberMetadata, TargetAssignmentMetadata,
  TargetAssignmentMember, CurrentMemberAssignment); 9+ share-group records we do not model
  (decoded as `UnknownRecord` so replay can skip them).
* value = int16 version, then the value body; no value at all is a tombstone.
* Non-flexible versions: big-endian ints, int16-length strings (-1 = null), int32-length bytes,
  int32-count arrays. Flexible versions (values v4): compact strings/bytes/arrays
  (uvarint length+1, 0 = null) and a tagged-field section after every struct; unknown tags are
  skipped on read, and we write none.

What we write: OffsetCommitKey v1, OffsetCommitValue v3 (v1 when an explicit expire timestamp
is set, which drops the leader epoch, as Kafka does), GroupMetadataKey v2, GroupMetadataValue v3.

Two layers:

* `encode(record_name, version, fields)` / `decode(record_name, raw)`: a generic codec driven by
  the schema tables below, with Kafka's camelCase field names. The golden tests use it.
* `encode_key` / `encode_value` / `encode_record` / `decode_record`: typed. OffsetCommit key and
  value (the hot path: one per committed partition) are hand-packed with `struct`; group
  metadata goes through the generic layer.

Errors: decoding raises `RecordDecodeError` (a `ValueError`) for truncated or malformed bytes,
unknown value versions, trailing garbage in non-flexible bodies and invalid UTF-8; encoding
raises `ValueError` for values the schema cannot represent (null in a non-nullable field,
out-of-range ints, over-long strings). Anything else is a bug.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

from coordinator.grouplog.records import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    CoordinatorRecord,
    GroupMemberRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
    SubscribedTopicMetadata,
    TopicAssignment,
)
from storage.varint import VarintError, read_uvarint, uvarint_bytes

FieldValue: TypeAlias = int | str | bytes | list[dict[str, "FieldValue"]] | None
Fields = dict[str, FieldValue]


class RecordDecodeError(ValueError):
    """The bytes are not a valid `__consumer_offsets` key or value we can read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownRecord:
    """A record whose key version we do not model (KIP-848 consumer groups, share groups, ...).

    Replay skips it; compaction may keep it by its raw key.
    """

    key_version: int
    key: bytes
    value: bytes | None


# --------------------------------------------------------------------------------------------
# Schema tables (transcribed from Kafka's JSON schemas; see tests/golden/README.md).


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    type: str  # int8 | int16 | int32 | int64 | uuid | string | bytes | array | []int32 | []string
    min_version: int
    max_version: int | None = None  # inclusive; None = open-ended
    nullable_from: int | None = None  # first version in which null is allowed
    default: FieldValue = None
    struct: tuple[_Field, ...] = ()  # element fields when type == "array"

    def present(self, version: int) -> bool:
        return version >= self.min_version and (
            self.max_version is None or version <= self.max_version
        )

    def nullable(self, version: int) -> bool:
        return self.nullable_from is not None and version >= self.nullable_from


@dataclass(frozen=True, slots=True)
class _Schema:
    name: str
    min_version: int
    max_version: int
    flexible_from: int | None
    fields: tuple[_Field, ...]

    def flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from


_MEMBER_METADATA = (
    _Field("memberId", "string", 0),
    _Field("groupInstanceId", "string", 3, nullable_from=3, default=None),
    _Field("clientId", "string", 0),
    _Field("clientHost", "string", 0),
    _Field("rebalanceTimeout", "int32", 1, default=-1),
    _Field("sessionTimeout", "int32", 0),
    _Field("subscription", "bytes", 0),
    _Field("assignment", "bytes", 0),
)

SCHEMAS: Mapping[str, _Schema] = {
    "OffsetCommitKey": _Schema(
        "OffsetCommitKey",
        0,
        1,
        None,
        (
            _Field("group", "string", 0),
            _Field("topic", "string", 0),
            _Field("partition", "int32", 0),
        ),
    ),
    "OffsetCommitValue": _Schema(
        "OffsetCommitValue",
        0,
        4,
        4,
        (
            _Field("offset", "int64", 0),
            _Field("leaderEpoch", "int32", 3, default=-1),
            _Field("metadata", "string", 0),
            _Field("commitTimestamp", "int64", 0),
            _Field("expireTimestamp", "int64", 1, 1, default=-1),
        ),
    ),
    "GroupMetadataKey": _Schema(
        "GroupMetadataKey", 2, 2, None, (_Field("group", "string", 2),)
    ),
    "GroupMetadataValue": _Schema(
        "GroupMetadataValue",
        0,
        4,
        4,
        (
            _Field("protocolType", "string", 0),
            _Field("generation", "int32", 0),
            _Field("protocol", "string", 0, nullable_from=0),
            _Field("leader", "string", 0, nullable_from=0),
            _Field("currentStateTimestamp", "int64", 2, default=-1),
            _Field("members", "array", 0, struct=_MEMBER_METADATA),
        ),
    ),
}

# KIP-848 consumer group records: keys are non-flexible with a single version (the record
# type), values are flexible version 0.
_TOPIC_PARTITIONS = (
    _Field("TopicId", "uuid", 0),
    _Field("Partitions", "[]int32", 0),
)


def _key_schema(name: str, version: int, with_member: bool) -> _Schema:
    fields = [_Field("GroupId", "string", version)]
    if with_member:
        fields.append(_Field("MemberId", "string", version))
    return _Schema(name, version, version, None, tuple(fields))


CONSUMER_GROUP_SCHEMAS: Mapping[str, _Schema] = {
    "ConsumerGroupMetadataKey": _key_schema("ConsumerGroupMetadataKey", 3, False),
    "ConsumerGroupMetadataValue": _Schema(
        "ConsumerGroupMetadataValue", 0, 0, 0, (_Field("Epoch", "int32", 0),)
    ),
    "ConsumerGroupPartitionMetadataKey": _key_schema(
        "ConsumerGroupPartitionMetadataKey", 4, False),
    "ConsumerGroupPartitionMetadataValue": _Schema(
        "ConsumerGroupPartitionMetadataValue", 0, 0, 0,
        (_Field("Topics", "array", 0, struct=(
            _Field("TopicId", "uuid", 0),
            _Field("TopicName", "string", 0),
            _Field("NumPartitions", "int32", 0),
            _Field("PartitionMetadata", "array", 0, default=[], struct=(
                _Field("Partition", "int32", 0),
                _Field("Racks", "[]string", 0),
            )),
        )),),
    ),
    "ConsumerGroupMemberMetadataKey": _key_schema("ConsumerGroupMemberMetadataKey", 5, True),
    "ConsumerGroupMemberMetadataValue": _Schema(
        "ConsumerGroupMemberMetadataValue", 0, 0, 0,
        (
            _Field("InstanceId", "string", 0, nullable_from=0),
            _Field("RackId", "string", 0, nullable_from=0),
            _Field("ClientId", "string", 0),
            _Field("ClientHost", "string", 0),
            _Field("SubscribedTopicNames", "[]string", 0),
            _Field("SubscribedTopicRegex", "string", 0, nullable_from=0),
            _Field("RebalanceTimeoutMs", "int32", 0, default=-1),
            _Field("ServerAssignor", "string", 0, nullable_from=0),
            # ClassicMemberMetadata (tagged field 0, `_CLASSIC_MEMBER_METADATA`) is only
            # written for members speaking the classic protocol inside a consumer group.
        ),
    ),
    "ConsumerGroupTargetAssignmentMetadataKey": _key_schema(
        "ConsumerGroupTargetAssignmentMetadataKey", 6, False),
    "ConsumerGroupTargetAssignmentMetadataValue": _Schema(
        "ConsumerGroupTargetAssignmentMetadataValue", 0, 0, 0,
        (_Field("AssignmentEpoch", "int32", 0),),
    ),
    "ConsumerGroupTargetAssignmentMemberKey": _key_schema(
        "ConsumerGroupTargetAssignmentMemberKey", 7, True),
    "ConsumerGroupTargetAssignmentMemberValue": _Schema(
        "ConsumerGroupTargetAssignmentMemberValue", 0, 0, 0,
        (_Field("TopicPartitions", "array", 0, struct=_TOPIC_PARTITIONS),),
    ),
    "ConsumerGroupCurrentMemberAssignmentKey": _key_schema(
        "ConsumerGroupCurrentMemberAssignmentKey", 8, True),
    "ConsumerGroupCurrentMemberAssignmentValue": _Schema(
        "ConsumerGroupCurrentMemberAssignmentValue", 0, 0, 0,
        (
            _Field("MemberEpoch", "int32", 0),
            _Field("PreviousMemberEpoch", "int32", 0),
            _Field("State", "int8", 0),
            _Field("AssignedPartitions", "array", 0, struct=_TOPIC_PARTITIONS),
            _Field("PartitionsPendingRevocation", "array", 0, struct=_TOPIC_PARTITIONS),
        ),
    ),
}
SCHEMAS = {**SCHEMAS, **CONSUMER_GROUP_SCHEMAS}

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I8 = struct.Struct(">b")
_INT_STRUCTS = {"int8": _I8, "int16": _I16, "int32": _I32, "int64": _I64}

# --------------------------------------------------------------------------------------------
# Reading


class _Reader:
    __slots__ = ("buf", "pos", "tags")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos
        # Tagged fields seen, by tag, when the caller asked for them (`decode_with_tags`).
        self.tags: dict[int, bytes] | None = None

    def _take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            have = len(self.buf) - self.pos
            raise RecordDecodeError(f"need {n} bytes at {self.pos}, have {have}")
        chunk = self.buf[self.pos : end]
        self.pos = end
        return chunk

    def read_int(self, kind: str) -> int:
        s = _INT_STRUCTS[kind]
        if self.pos + s.size > len(self.buf):
            raise RecordDecodeError(f"truncated {kind} at {self.pos}")
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return int(v)

    def uvarint(self) -> int:
        try:
            value, self.pos = read_uvarint(self.buf, self.pos)
        except IndexError:
            raise RecordDecodeError("truncated varint") from None
        except VarintError:
            raise RecordDecodeError("varint longer than 5 bytes") from None
        return value

    def length(self, flexible: bool, wide: bool) -> int:
        """Length or count prefix; -1 means null."""
        if flexible:
            return self.uvarint() - 1
        return self.read_int("int32" if wide else "int16")

    def string(self, flexible: bool, nullable: bool) -> str | None:
        n = self.length(flexible, wide=False)
        if n < 0:
            if n == -1 and nullable:
                return None
            raise RecordDecodeError(f"invalid string length {n} at {self.pos}")
        try:
            return str(self._take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise RecordDecodeError(f"invalid UTF-8: {exc}") from exc

    def bytes_(self, flexible: bool, nullable: bool) -> bytes | None:
        n = self.length(flexible, wide=True)
        if n < 0:
            if n == -1 and nullable:
                return None
            raise RecordDecodeError(f"invalid bytes length {n} at {self.pos}")
        return bytes(self._take(n))

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            data = self._take(self.uvarint())
            if self.tags is not None:
                self.tags[tag] = bytes(data)

    def at_end(self) -> bool:
        return self.pos == len(self.buf)


def _read_struct(r: _Reader, fields: Sequence[_Field], version: int, flexible: bool) -> Fields:
    out: Fields = {}
    for f in fields:
        if not f.present(version):
            continue
        nullable = f.nullable(version)
        if f.type in _INT_STRUCTS:
            out[f.name] = r.read_int(f.type)
        elif f.type == "uuid":
            out[f.name] = bytes(r._take(16))
        elif f.type in ("[]int32", "[]string"):
            count = r.length(flexible, wide=True)
            if count < 0:
                if not nullable:
                    raise RecordDecodeError(f"null array {f.name}")
                out[f.name] = None
                continue
            if count > len(r.buf) - r.pos:
                raise RecordDecodeError(f"array {f.name} of {count} cannot fit")
            items: list[int | str | None] = []
            for _ in range(count):
                if f.type == "[]int32":
                    items.append(r.read_int("int32"))
                else:
                    items.append(r.string(flexible, nullable=False))
            out[f.name] = items  # type: ignore[assignment]  # list[int] or list[str]
        elif f.type == "string":
            s = r.string(flexible, nullable)
            if s is None and not nullable:
                raise RecordDecodeError(f"null {f.name}")
            out[f.name] = s
        elif f.type == "bytes":
            out[f.name] = r.bytes_(flexible, nullable)
        elif f.type == "array":
            count = r.length(flexible, wide=True)
            if count < 0:
                raise RecordDecodeError(f"null array {f.name}")
            if count > len(r.buf) - r.pos:  # every element takes at least one byte
                raise RecordDecodeError(f"array {f.name} of {count} cannot fit")
            out[f.name] = [_read_struct(r, f.struct, version, flexible) for _ in range(count)]
        else:  # pragma: no cover - schema tables are static
            raise AssertionError(f.type)
    if flexible:
        r.skip_tagged_fields()
    return out


def decode_with_tags(record_name: str, raw: bytes | memoryview
                     ) -> tuple[int, Fields, dict[int, bytes]]:
    """`decode`, also returning the raw tagged fields by tag (of the top-level struct, and of
    nested structs, which none of the records read this way have)."""
    schema = SCHEMAS[record_name]
    r = _Reader(raw)
    r.tags = {}
    version = r.read_int("int16")
    if not schema.min_version <= version <= schema.max_version:
        raise RecordDecodeError(f"{record_name} version {version} is not supported")
    fields = _read_struct(r, schema.fields, version, schema.flexible(version))
    if not r.at_end():
        raise RecordDecodeError(f"{record_name} v{version}: {len(r.buf) - r.pos} trailing bytes")
    return version, fields, r.tags


def decode(record_name: str, raw: bytes | memoryview) -> tuple[int, Fields]:
    """Decode a serialized key or value (with its int16 version prefix) by schema.

    Returns the version and the fields present at that version, in schema order, named as in
    Kafka's schema. `bytes` fields come back as `bytes`.
    """
    schema = SCHEMAS[record_name]
    r = _Reader(raw)
    version = r.read_int("int16")
    if not schema.min_version <= version <= schema.max_version:
        raise RecordDecodeError(f"{record_name} version {version} is not supported")
    flexible = schema.flexible(version)
    fields = _read_struct(r, schema.fields, version, flexible)
    if not r.at_end():
        raise RecordDecodeError(
            f"{record_name} v{version}: {len(r.buf) - r.pos} trailing bytes"
        )
    return version, fields


# --------------------------------------------------------------------------------------------
# Writing


def _write_length(out: list[bytes], n: int, flexible: bool, wide: bool) -> None:
    if flexible:
        out.append(uvarint_bytes(n + 1))
    elif wide:
        out.append(_I32.pack(n))
    else:
        out.append(_I16.pack(n))


def _write_struct(
    out: list[bytes], fields: Sequence[_Field], values: Mapping[str, FieldValue], version: int,
    flexible: bool,
) -> None:
    for f in fields:
        if not f.present(version):
            continue
        v = values.get(f.name, f.default)
        if v is None and not f.nullable(version):
            raise ValueError(f"{f.name} is not nullable at version {version}")
        if f.type in _INT_STRUCTS:
            if not isinstance(v, int):
                raise ValueError(f"{f.name} must be an int, got {v!r}")
            lo, hi = _INT_RANGES[f.type]
            if not lo <= v <= hi:
                raise ValueError(f"{f.name}={v} out of {f.type} range")
            out.append(_INT_STRUCTS[f.type].pack(v))
        elif f.type == "uuid":
            if not isinstance(v, bytes) or len(v) != 16:
                raise ValueError(f"{f.name} must be 16 bytes, got {v!r}")
            out.append(v)
        elif f.type in ("[]int32", "[]string"):
            if v is None:
                _write_length(out, -1, flexible, wide=True)
                continue
            if not isinstance(v, list | tuple):
                raise ValueError(f"{f.name} must be a list")
            _write_length(out, len(v), flexible, wide=True)
            for item in v:
                if f.type == "[]int32":
                    out.append(_I32.pack(item))
                else:
                    data = str(item).encode("utf-8")
                    _write_length(out, len(data), flexible, wide=False)
                    out.append(data)
        elif f.type == "string":
            if v is None:
                _write_length(out, -1, flexible, wide=False)
                continue
            if not isinstance(v, str):
                raise ValueError(f"{f.name} must be a str, got {v!r}")
            data = v.encode("utf-8")
            if len(data) > 0x7FFF:
                raise ValueError(f"{f.name} is {len(data)} bytes, over the int16 limit")
            _write_length(out, len(data), flexible, wide=False)
            out.append(data)
        elif f.type == "bytes":
            if v is None:
                _write_length(out, -1, flexible, wide=True)
                continue
            if not isinstance(v, bytes | bytearray | memoryview):
                raise ValueError(f"{f.name} must be bytes, got {type(v).__name__}")
            _write_length(out, len(v), flexible, wide=True)
            out.append(bytes(v))
        elif f.type == "array":
            if not isinstance(v, list | tuple):
                raise ValueError(f"{f.name} must be a list")
            _write_length(out, len(v), flexible, wide=True)
            for element in v:
                _write_struct(out, f.struct, element, version, flexible)
        else:  # pragma: no cover - schema tables are static
            raise AssertionError(f.type)
    if flexible:
        out.append(b"\x00")  # no tagged fields


def encode(record_name: str, version: int, fields: Mapping[str, FieldValue]) -> bytes:
    """Encode `fields` (Kafka schema names) as `record_name` at `version`, version prefix included.

    Fields absent at `version` are ignored; fields missing from `fields` take the schema default
    (an error if the schema has none and the field is not nullable).
    """
    schema = SCHEMAS[record_name]
    if not schema.min_version <= version <= schema.max_version:
        raise ValueError(f"{record_name} version {version} is not supported")
    out = [_I16.pack(version)]
    _write_struct(out, schema.fields, fields, version, schema.flexible(version))
    return b"".join(out)


# --------------------------------------------------------------------------------------------
# Typed layer

_OC_KEY_PREFIX = _I16.pack(OFFSET_COMMIT_KEY_VERSION)
_OC_VALUE_V3_HEAD = struct.Struct(">hqi")  # version, offset, leaderEpoch
_OC_TAIL_V3 = struct.Struct(">q")  # commitTimestamp
_OC_TAIL_V1 = struct.Struct(">qq")  # commitTimestamp, expireTimestamp
_OC_VALUE_V1_HEAD = struct.Struct(">hq")  # version, offset
# version, offset, leaderEpoch, metadata length (0: ""), commitTimestamp
_OC_VALUE_V3_NO_METADATA = struct.Struct(">hqihq")


def _str16(s: str) -> bytes:
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is over the int16 limit")
    return _I16.pack(len(data)) + data


@functools.lru_cache(maxsize=4096)
def _offset_commit_key_head(group: str, topic: str) -> bytes:
    """An OffsetCommitKey up to its partition: the same for every partition a group commits of
    a topic, so it is encoded once per (group, topic) rather than once per record."""
    return b"".join((_OC_KEY_PREFIX, _str16(group), _str16(topic)))


def encode_key(key: OffsetCommitKey | GroupMetadataKey) -> bytes:
    """The key bytes Kafka writes: OffsetCommitKey v1 or GroupMetadataKey v2."""
    try:
        if isinstance(key, OffsetCommitKey):
            return _offset_commit_key_head(key.group, key.topic) + _I32.pack(key.partition)
        return _I16.pack(GROUP_METADATA_KEY_VERSION) + _str16(key.group)
    except struct.error as exc:
        raise ValueError(f"cannot encode {key!r}: {exc}") from exc


def encode_value(
    value: OffsetCommitValue | GroupMetadataValue, version: int | None = None
) -> bytes:
    """The value bytes; `version` None picks what Kafka writes (see the module docstring)."""
    try:
        return _encode_value(value, version)
    except struct.error as exc:
        raise ValueError(f"cannot encode {value!r}: {exc}") from exc


def _encode_value(value: OffsetCommitValue | GroupMetadataValue, version: int | None) -> bytes:
    if isinstance(value, OffsetCommitValue):
        if version is None:
            version = (
                OFFSET_COMMIT_VALUE_VERSION
                if value.expire_timestamp == -1
                else OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY
            )
        if version == 3:
            if not value.metadata:
                return _OC_VALUE_V3_NO_METADATA.pack(
                    3, value.offset, value.leader_epoch, 0, value.commit_timestamp
                )
            return b"".join(
                (
                    _OC_VALUE_V3_HEAD.pack(3, value.offset, value.leader_epoch),
                    _str16(value.metadata),
                    _OC_TAIL_V3.pack(value.commit_timestamp),
                )
            )
        if version == 1:
            return b"".join(
                (
                    _OC_VALUE_V1_HEAD.pack(1, value.offset),
                    _str16(value.metadata),
                    _OC_TAIL_V1.pack(value.commit_timestamp, value.expire_timestamp),
                )
            )
        return encode("OffsetCommitValue", version, _offset_commit_fields(value))
    return encode(
        "GroupMetadataValue",
        GROUP_METADATA_VALUE_VERSION if version is None else version,
        _group_metadata_fields(value),
    )


def encode_record(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None for a tombstone)."""
    if isinstance(record, ConsumerGroupRecord):
        return _encode_consumer_group_record(record)
    key = encode_key(record.key)
    return key, None if record.value is None else encode_value(record.value)


def encode_records(records: Sequence[CoordinatorRecord]) -> list[tuple[bytes, bytes | None]]:
    """`encode_record` of each record, in order. The commonest record, an OffsetCommit whose
    value has neither metadata nor an expire timestamp, is packed inline here, with its key's
    group and topic encoded once per run: a commit writes one per partition. Raises what
    `encode_record` raises."""
    out: list[tuple[bytes, bytes | None]] = []
    append = out.append
    group = topic = ""
    head = b""
    for record in records:
        value = record.value
        if (
            type(record) is not OffsetCommitRecord
            or type(value) is not OffsetCommitValue
            or value.metadata
            or value.expire_timestamp != -1
        ):
            append(encode_record(record))
            continue
        key = record.key
        if not head or key.group != group or key.topic != topic:
            group, topic = key.group, key.topic
            head = _offset_commit_key_head(group, topic)
        try:
            append((head + _I32.pack(key.partition),
                    _OC_VALUE_V3_NO_METADATA.pack(3, value.offset, value.leader_epoch, 0,
                                                  value.commit_timestamp)))
        except struct.error:
            append(encode_record(record))  # raises the ValueError naming the bad field
    return out


def _offset_commit_fields(value: OffsetCommitValue) -> Fields:
    return {
        "offset": value.offset,
        "leaderEpoch": value.leader_epoch,
        "metadata": value.metadata,
        "commitTimestamp": value.commit_timestamp,
        "expireTimestamp": value.expire_timestamp,
    }


def _group_metadata_fields(value: GroupMetadataValue) -> Fields:
    return {
        "protocolType": value.protocol_type,
        "generation": value.generation,
        "protocol": value.protocol,
        "leader": value.leader,
        "currentStateTimestamp": value.current_state_timestamp,
        "members": [
            {
                "memberId": m.member_id,
                "groupInstanceId": m.group_instance_id,
                "clientId": m.client_id,
                "clientHost": m.client_host,
                "rebalanceTimeout": m.rebalance_timeout,
                "sessionTimeout": m.session_timeout,
                "subscription": m.subscription,
                "assignment": m.assignment,
            }
            for m in value.members
        ],
    }


def _decode_offset_commit_key(raw: bytes) -> OffsetCommitKey:
    # Versions 0 and 1 share one layout. Hand-unpacked: this runs once per committed partition
    # on replay. Any short read or bad length surfaces as struct.error/UnicodeDecodeError.
    try:
        (glen,) = _I16.unpack_from(raw, 2)
        gend = 4 + glen
        (tlen,) = _I16.unpack_from(raw, gend)
        tend = gend + 2 + tlen
        (partition,) = _I32.unpack_from(raw, tend)
        if glen < 0 or tlen < 0 or tend + 4 != len(raw):
            raise RecordDecodeError("malformed OffsetCommitKey")
        return OffsetCommitKey(
            group=raw[4:gend].decode("utf-8"),
            topic=raw[gend + 2 : tend].decode("utf-8"),
            partition=partition,
        )
    except (struct.error, UnicodeDecodeError) as exc:
        raise RecordDecodeError(f"malformed OffsetCommitKey: {exc}") from exc


_OC_V3_HEAD = struct.Struct(">qih")  # offset, leaderEpoch, metadata length


def _decode_offset_commit_value(raw: bytes) -> OffsetCommitValue:
    if raw[:2] == b"\x00\x03":  # the version we write: hand-unpacked fast path
        try:
            offset, leader_epoch, mlen = _OC_V3_HEAD.unpack_from(raw, 2)
            mend = 16 + mlen
            (commit_timestamp,) = _I64.unpack_from(raw, mend)
            if mlen < 0 or mend + 8 != len(raw):
                raise RecordDecodeError("malformed OffsetCommitValue v3")
            return OffsetCommitValue(
                offset=offset,
                leader_epoch=leader_epoch,
                metadata=raw[16:mend].decode("utf-8"),
                commit_timestamp=commit_timestamp,
            )
        except (struct.error, UnicodeDecodeError) as exc:
            raise RecordDecodeError(f"malformed OffsetCommitValue v3: {exc}") from exc
    _, f = decode("OffsetCommitValue", raw)
    return OffsetCommitValue(
        offset=_int(f["offset"]),
        leader_epoch=_int(f.get("leaderEpoch", -1)),
        metadata=_str(f["metadata"]),
        commit_timestamp=_int(f["commitTimestamp"]),
        expire_timestamp=_int(f.get("expireTimestamp", -1)),
    )


def _decode_group_metadata_value(raw: bytes) -> GroupMetadataValue:
    _, f = decode("GroupMetadataValue", raw)
    members = f["members"]
    assert isinstance(members, list)
    return GroupMetadataValue(
        protocol_type=_str(f["protocolType"]),
        generation=_int(f["generation"]),
        protocol=_opt_str(f["protocol"]),
        leader=_opt_str(f["leader"]),
        current_state_timestamp=_int(f.get("currentStateTimestamp", -1)),
        members=tuple(
            GroupMemberRecord(
                member_id=_str(m["memberId"]),
                group_instance_id=_opt_str(m.get("groupInstanceId")),
                client_id=_str(m["clientId"]),
                client_host=_str(m["clientHost"]),
                rebalance_timeout=_int(m.get("rebalanceTimeout", -1)),
                session_timeout=_int(m["sessionTimeout"]),
                subscription=_bytes(m["subscription"]),
                assignment=_bytes(m["assignment"]),
            )
            for m in members
        ),
    )


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord | UnknownRecord:
    """Decode one `__consumer_offsets` record; `value` None is a tombstone.

    The key version alone picks the type: 0-1 offsets, 2 classic group, 3-8 consumer group
    (KIP-848). Higher key versions (share groups, ...) give an `UnknownRecord`.
    Raises `RecordDecodeError` for bytes we cannot read.
    """
    if len(key) < 2:
        raise RecordDecodeError(f"key of {len(key)} bytes has no version")
    key_version = _I16.unpack_from(key, 0)[0]
    if key_version in (0, 1):
        return OffsetCommitRecord(
            key=_decode_offset_commit_key(key),
            value=None if value is None else _decode_offset_commit_value(value),
        )
    if key_version == 2:
        _, kf = decode("GroupMetadataKey", key)
        return GroupMetadataRecord(
            key=GroupMetadataKey(group=_str(kf["group"])),
            value=None if value is None else _decode_group_metadata_value(value),
        )
    if key_version in _CONSUMER_GROUP_KEY_NAMES:
        return _decode_consumer_group_record(key_version, key, value)
    if key_version >= 3:
        return UnknownRecord(key_version=key_version, key=bytes(key), value=value)
    raise RecordDecodeError(f"negative key version {key_version}")


def _int(v: FieldValue) -> int:
    assert isinstance(v, int)
    return v


def _str(v: FieldValue) -> str:
    assert isinstance(v, str)
    return v


def _opt_str(v: FieldValue) -> str | None:
    assert v is None or isinstance(v, str)
    return v


def _bytes(v: FieldValue) -> bytes:
    # Kafka's schema does not allow null here; treat a (non-conforming) null as empty.
    if v is None:
        return b""
    assert isinstance(v, bytes)
    return v


# --------------------------------------------------------------------------------------------
# KIP-848 consumer group records (generic layer; they are written on membership changes only)

_CONSUMER_GROUP_KEY_NAMES: Mapping[int, str] = {
    3: "ConsumerGroupMetadata",
    4: "ConsumerGroupPartitionMetadata",
    5: "ConsumerGroupMemberMetadata",
    6: "ConsumerGroupTargetAssignmentMetadata",
    7: "ConsumerGroupTargetAssignmentMember",
    8: "ConsumerGroupCurrentMemberAssignment",
}
_CONSUMER_GROUP_KEY_VERSIONS: Mapping[type, int] = {
    ConsumerGroupMetadataKey: 3,
    ConsumerGroupPartitionMetadataKey: 4,
    ConsumerGroupMemberMetadataKey: 5,
    ConsumerGroupTargetAssignmentMetadataKey: 6,
    ConsumerGroupTargetAssignmentMemberKey: 7,
    ConsumerGroupCurrentMemberAssignmentKey: 8,
}


def _assignment_fields(assignment: TopicAssignment) -> FieldValue:
    # `[]int32` fields hold plain lists of ints, outside the FieldValue alias.
    out: list[dict[str, Any]] = [
        {"TopicId": topic_id.bytes, "Partitions": list(partitions)}
        for topic_id, partitions in assignment]
    return out


def _assignment(v: FieldValue) -> TopicAssignment:
    assert isinstance(v, list)
    out = []
    for entry in v:
        raw_id = entry["TopicId"]
        partitions = entry["Partitions"]
        assert isinstance(raw_id, bytes) and isinstance(partitions, list)
        out.append((uuid.UUID(bytes=raw_id), tuple(sorted(_int(p) for p in partitions))))  # type: ignore[arg-type]
    return tuple(sorted(out))


def _consumer_value_fields(value: ConsumerGroupValue) -> Fields:
    match value:
        case ConsumerGroupMetadataValue():
            return {"Epoch": value.epoch}
        case ConsumerGroupPartitionMetadataValue():
            return {"Topics": [  # type: ignore[dict-item]
                {"TopicId": t.topic_id.bytes, "TopicName": t.topic_name,
                 "NumPartitions": t.num_partitions, "PartitionMetadata": []}
                for t in value.topics]}
        case ConsumerGroupMemberMetadataValue():
            return {
                "InstanceId": value.instance_id,
                "RackId": value.rack_id,
                "ClientId": value.client_id,
                "ClientHost": value.client_host,
                "SubscribedTopicNames": cast(FieldValue, list(value.subscribed_topic_names)),
                "SubscribedTopicRegex": value.subscribed_topic_regex,
                "RebalanceTimeoutMs": value.rebalance_timeout_ms,
                "ServerAssignor": value.server_assignor,
            }
        case ConsumerGroupTargetAssignmentMetadataValue():
            return {"AssignmentEpoch": value.assignment_epoch}
        case ConsumerGroupTargetAssignmentMemberValue():
            return {"TopicPartitions": _assignment_fields(value.topic_partitions)}
        case ConsumerGroupCurrentMemberAssignmentValue():
            return {
                "MemberEpoch": value.member_epoch,
                "PreviousMemberEpoch": value.previous_member_epoch,
                "State": value.state,
                "AssignedPartitions": _assignment_fields(value.assigned_partitions),
                "PartitionsPendingRevocation": _assignment_fields(
                    value.partitions_pending_revocation),
            }
    raise AssertionError(f"not a consumer group value: {value!r}")


# The tagged ClassicMemberMetadata of ConsumerGroupMemberMetadataValue (tag 0), flexible v0.
_CLASSIC_MEMBER_METADATA_TAG = 0
_CLASSIC_MEMBER_METADATA = (
    _Field("SessionTimeoutMs", "int32", 0),
    _Field("SupportedProtocols", "array", 0, struct=(
        _Field("Name", "string", 0),
        _Field("Metadata", "bytes", 0),
    )),
)


def _with_classic_member_metadata(encoded: bytes, classic: ClassicMemberMetadata) -> bytes:
    """`encoded` (a MemberMetadata value ending with an empty tagged-field section) with the
    ClassicMemberMetadata tagged field in that section instead."""
    payload: list[bytes] = []
    _write_struct(payload, _CLASSIC_MEMBER_METADATA, {
        "SessionTimeoutMs": classic.session_timeout_ms,
        "SupportedProtocols": [{"Name": name, "Metadata": metadata}  # type: ignore[dict-item]
                               for name, metadata in classic.supported_protocols],
    }, 0, True)
    data = b"".join(payload)
    assert encoded.endswith(b"\x00")
    return (encoded[:-1] + uvarint_bytes(1) + uvarint_bytes(_CLASSIC_MEMBER_METADATA_TAG)
            + uvarint_bytes(len(data)) + data)


def _classic_member_metadata(raw: bytes | None) -> ClassicMemberMetadata | None:
    if raw is None:
        return None
    r = _Reader(raw)
    f = _read_struct(r, _CLASSIC_MEMBER_METADATA, 0, True)
    protocols = f["SupportedProtocols"]
    assert isinstance(protocols, list)
    return ClassicMemberMetadata(
        session_timeout_ms=_int(f["SessionTimeoutMs"]),
        supported_protocols=tuple((_str(p["Name"]), _bytes(p["Metadata"]))  # type: ignore[arg-type]
                                  for p in protocols))


def _encode_consumer_group_record(record: ConsumerGroupRecord) -> tuple[bytes, bytes | None]:
    key = record.key
    version = _CONSUMER_GROUP_KEY_VERSIONS[type(key)]
    name = _CONSUMER_GROUP_KEY_NAMES[version]
    key_fields: Fields = {"GroupId": key.group}
    member_id = getattr(key, "member_id", None)
    if member_id is not None:
        key_fields["MemberId"] = member_id
    key_bytes = encode(name + "Key", version, key_fields)
    if record.value is None:
        return key_bytes, None
    value = encode(name + "Value", 0, _consumer_value_fields(record.value))
    if (isinstance(record.value, ConsumerGroupMemberMetadataValue)
            and record.value.classic_member_metadata is not None):
        value = _with_classic_member_metadata(value, record.value.classic_member_metadata)
    return key_bytes, value


def _decode_consumer_group_record(key_version: int, key: bytes,
                                  value: bytes | None) -> ConsumerGroupRecord:
    name = _CONSUMER_GROUP_KEY_NAMES[key_version]
    _, kf = decode(name + "Key", key)
    group = _str(kf["GroupId"])
    member_id = _str(kf["MemberId"]) if "MemberId" in kf else ""
    typed_key: ConsumerGroupKey
    match key_version:
        case 3:
            typed_key = ConsumerGroupMetadataKey(group=group)
        case 4:
            typed_key = ConsumerGroupPartitionMetadataKey(group=group)
        case 5:
            typed_key = ConsumerGroupMemberMetadataKey(group=group, member_id=member_id)
        case 6:
            typed_key = ConsumerGroupTargetAssignmentMetadataKey(group=group)
        case 7:
            typed_key = ConsumerGroupTargetAssignmentMemberKey(group=group, member_id=member_id)
        case _:
            typed_key = ConsumerGroupCurrentMemberAssignmentKey(group=group, member_id=member_id)
    if value is None:
        return ConsumerGroupRecord(key=typed_key, value=None)
    _, f, tags = decode_with_tags(name + "Value", value)
    typed_value: ConsumerGroupValue
    match key_version:
        case 3:
            typed_value = ConsumerGroupMetadataValue(epoch=_int(f["Epoch"]))
        case 4:
            topics = f["Topics"]
            assert isinstance(topics, list)
            typed_value = ConsumerGroupPartitionMetadataValue(topics=tuple(
                SubscribedTopicMetadata(topic_id=uuid.UUID(bytes=t["TopicId"]),  # type: ignore[arg-type]
                                        topic_name=_str(t["TopicName"]),
                                        num_partitions=_int(t["NumPartitions"]))
                for t in topics))
        case 5:
            names = f["SubscribedTopicNames"]
            assert isinstance(names, list)
            typed_value = ConsumerGroupMemberMetadataValue(
                instance_id=_opt_str(f["InstanceId"]),
                rack_id=_opt_str(f["RackId"]),
                client_id=_str(f["ClientId"]),
                client_host=_str(f["ClientHost"]),
                subscribed_topic_names=tuple(str(n) for n in names),
                subscribed_topic_regex=_opt_str(f["SubscribedTopicRegex"]),
                rebalance_timeout_ms=_int(f["RebalanceTimeoutMs"]),
                server_assignor=_opt_str(f["ServerAssignor"]),
                classic_member_metadata=_classic_member_metadata(
                    tags.get(_CLASSIC_MEMBER_METADATA_TAG)),
            )
        case 6:
            typed_value = ConsumerGroupTargetAssignmentMetadataValue(
                assignment_epoch=_int(f["AssignmentEpoch"]))
        case 7:
            typed_value = ConsumerGroupTargetAssignmentMemberValue(
                topic_partitions=_assignment(f["TopicPartitions"]))
        case _:
            typed_value = ConsumerGroupCurrentMemberAssignmentValue(
                member_epoch=_int(f["MemberEpoch"]),
                previous_member_epoch=_int(f["PreviousMemberEpoch"]),
                state=_int(f["State"]),
                assigned_partitions=_assignment(f["AssignedPartitions"]),
                partitions_pending_revocation=_assignment(f["PartitionsPendingRevocation"]),
            )
    return ConsumerGroupRecord(key=typed_key, value=typed_value)
