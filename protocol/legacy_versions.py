"""Request and response layouts of the old API versions the kio schemas no longer carry.

Apache Kafka 4.0 dropped these versions (KIP-896); Kafka 3.9 still served them, and so does this
broker. Each old request is read into the kio entity of the nearest version kio has (or a small
entity defined here when no kio version has the field), so the API handlers see one shape; each
response is built by the handler as that entity and written here in the old layout.

All use request header v1 and response header v0 (none of them is a flexible version).

    Produce v0-v2       request = v3 without transactional_id; response v0: no throttle time,
                        v1: throttle time last, v2 = v3 (adds log_append_time).
    Fetch v0-v3         request = v4 without isolation_level (and before v3 without max_bytes);
                        response v0: no throttle time; v1-v3 = v4 without last_stable_offset and
                        aborted transactions.
    ListOffsets v0      partitions ask for `max_num_offsets` offsets before a timestamp and get
                        a list of offsets back (`old_style_offsets`).
    OffsetCommit v0-v1  v0: no generation/member; v1: a commit timestamp per partition.
                        Response = v2.
    OffsetFetch v0      = v1 (v0 read ZooKeeper-stored offsets; the layout is the same).
    CreateTopics v0-v1  request = v2 (v0 without validate_only); response without throttle
                        time (v0 also without error_message).
    DeleteTopics v0     request = v1; response without throttle time.
    Describe/Create/DeleteAcls v0
                        = v1 without the resource pattern type (LITERAL).
"""

import datetime
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

__all__ = [
    "LEGACY_REQUESTS",
    "ListOffsetsPartitionV0",
    "ListOffsetsRequestV0",
    "ListOffsetsResponseV0",
    "OffsetCommitRequestV0",
    "legacy_request",
    "legacy_response",
]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes | memoryview, pos: int) -> None:
        self.data = data
        self.pos = pos

    def _take(self, packer: struct.Struct) -> int:
        (value,) = packer.unpack_from(self.data, self.pos)
        self.pos += packer.size
        return int(value)

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def nullable_string(self) -> str | None:
        length = self.i16()
        if length < 0:
            return None
        end = self.pos + length
        if end > len(self.data):
            raise ValueError("string runs past the end of the request")
        text = bytes(self.data[self.pos:end]).decode("utf-8")
        self.pos = end
        return text

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise ValueError("null where a string is required")
        return text

    def nullable_bytes(self) -> bytes | None:
        length = self.i32()
        if length < 0:
            return None
        end = self.pos + length
        if end > len(self.data):
            raise ValueError("bytes run past the end of the request")
        value = bytes(self.data[self.pos:end])
        self.pos = end
        return value

    def array(self, item: Callable[[], Any]) -> tuple[Any, ...]:
        count = self.i32()
        if count < 0:
            return ()
        # Every element takes at least one byte: a count beyond the bytes left is malformed,
        # and must not make us loop (or allocate) that many times.
        if count > len(self.data) - self.pos:
            raise ValueError(f"array of {count} elements in {len(self.data) - self.pos} bytes")
        return tuple(item() for _ in range(count))


# ------------------------------------------------------------------------------ entities

@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionV0:
    partition_index: int
    timestamp: int
    max_num_offsets: int


@dataclass(frozen=True, slots=True)
class ListOffsetsTopicV0:
    name: str
    partitions: tuple[ListOffsetsPartitionV0, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsRequestV0:
    replica_id: int
    topics: tuple[ListOffsetsTopicV0, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResponseV0:
    partition_index: int
    error_code: ErrorCode
    old_style_offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsTopicResponseV0:
    name: str
    partitions: tuple[ListOffsetsPartitionResponseV0, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsResponseV0:
    topics: tuple[ListOffsetsTopicResponseV0, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitPartitionV0:
    partition_index: int
    committed_offset: int
    commit_timestamp: int  # v1; -1 (v0, or "now") otherwise
    committed_metadata: str | None


@dataclass(frozen=True, slots=True)
class OffsetCommitTopicV0:
    name: str
    partitions: tuple[OffsetCommitPartitionV0, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequestV0:
    """OffsetCommit v0 and v1 (v0: generation -1 and member id "")."""

    group_id: str
    generation_id_or_member_epoch: int
    member_id: str
    topics: tuple[OffsetCommitTopicV0, ...]


# ------------------------------------------------------------------------------ requests

_ProduceV3: Any = load_request_schema(0, 3)
_FetchV4: Any = load_request_schema(1, 4)


def _nested(cls: Any, field: str) -> Any:
    return cls.__dataclass_fields__[field].type.__args__[0]


_TopicProduceData = _nested(_ProduceV3, "topic_data")
_PartitionProduceData = _nested(_TopicProduceData, "partition_data")
_FetchTopic = _nested(_FetchV4, "topics")
_FetchPartition = _nested(_FetchTopic, "partitions")
_NO_MAX_BYTES = 0x7FFFFFFF


def _read_produce(r: _Reader) -> Any:
    acks = r.i16()
    timeout = r.i32()

    def partition() -> Any:
        return _PartitionProduceData(index=r.i32(), records=r.nullable_bytes())

    def topic() -> Any:
        return _TopicProduceData(name=r.string(), partition_data=r.array(partition))

    return _ProduceV3(transactional_id=None, acks=acks,
                      timeout=datetime.timedelta(milliseconds=timeout),
                      topic_data=r.array(topic))


def _read_fetch(version: int) -> Callable[[_Reader], Any]:
    def read(r: _Reader) -> Any:
        replica_id = r.i32()
        max_wait = r.i32()
        min_bytes = r.i32()
        max_bytes = r.i32() if version >= 3 else _NO_MAX_BYTES

        def partition() -> Any:
            return _FetchPartition(partition=r.i32(), fetch_offset=r.i64(),
                                   partition_max_bytes=r.i32())

        def topic() -> Any:
            return _FetchTopic(topic=r.string(), partitions=r.array(partition))

        return _FetchV4(replica_id=replica_id, max_wait=datetime.timedelta(milliseconds=max_wait),
                        min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0,
                        topics=r.array(topic))
    return read


def _read_list_offsets(r: _Reader) -> ListOffsetsRequestV0:
    replica_id = r.i32()

    def partition() -> ListOffsetsPartitionV0:
        return ListOffsetsPartitionV0(r.i32(), r.i64(), r.i32())

    def topic() -> ListOffsetsTopicV0:
        return ListOffsetsTopicV0(r.string(), r.array(partition))

    return ListOffsetsRequestV0(replica_id, r.array(topic))


def _read_offset_commit(version: int) -> Callable[[_Reader], OffsetCommitRequestV0]:
    def read(r: _Reader) -> OffsetCommitRequestV0:
        group_id = r.string()
        generation, member_id = (r.i32(), r.string()) if version >= 1 else (-1, "")

        def partition() -> OffsetCommitPartitionV0:
            index, offset = r.i32(), r.i64()
            timestamp = r.i64() if version >= 1 else -1
            return OffsetCommitPartitionV0(index, offset, timestamp, r.nullable_string())

        def topic() -> OffsetCommitTopicV0:
            return OffsetCommitTopicV0(r.string(), r.array(partition))

        return OffsetCommitRequestV0(group_id, generation, member_id, r.array(topic))
    return read


BodyReader = Callable[[Any, int], tuple[Any, int]]


# The ACL APIs' v0 is v1 without the resource pattern type: LITERAL (3) then.
_LITERAL = 3
_DescribeAclsV1: Any = load_request_schema(29, 1)
_CreateAclsV1: Any = load_request_schema(30, 1)
_AclCreation = _nested(_CreateAclsV1, "creations")
_DeleteAclsV1: Any = load_request_schema(31, 1)
_DeleteAclsFilter = _nested(_DeleteAclsV1, "filters")


def _acl_filter_fields(r: _Reader) -> dict[str, Any]:
    return {"resource_type_filter": r.i8(), "resource_name_filter": r.nullable_string(),
            "pattern_type_filter": _LITERAL, "principal_filter": r.nullable_string(),
            "host_filter": r.nullable_string(), "operation": r.i8(),
            "permission_type": r.i8()}


def _read_describe_acls(r: _Reader) -> Any:
    return _DescribeAclsV1(**_acl_filter_fields(r))


def _read_create_acls(r: _Reader) -> Any:
    return _CreateAclsV1(creations=r.array(lambda: _AclCreation(
        resource_type=r.i8(), resource_name=r.string(), resource_pattern_type=_LITERAL,
        principal=r.string(), host=r.string(), operation=r.i8(), permission_type=r.i8())))


def _read_delete_acls(r: _Reader) -> Any:
    return _DeleteAclsV1(filters=r.array(lambda: _DeleteAclsFilter(**_acl_filter_fields(r))))


def _hand_read(read: Callable[[_Reader], Any]) -> BodyReader:
    def body_reader(data: Any, offset: int) -> tuple[Any, int]:
        r = _Reader(data, offset)
        try:
            entity = read(r)
        except struct.error as exc:
            raise ValueError(f"request ends early: {exc}") from None
        return entity, r.pos
    return body_reader


def _kio_read(api_key: int, kio_version: int, suffix: bytes = b"") -> BodyReader:
    reader = entity_reader(load_request_schema(api_key, kio_version))
    if not suffix:
        return reader  # type: ignore[no-any-return]

    def body_reader(data: Any, offset: int) -> tuple[Any, int]:
        # The old version is the kio one without its last field(s): read it with them added.
        entity, _ = reader(bytes(data[offset:]) + suffix, 0)
        return entity, len(data)
    return body_reader


LEGACY_REQUESTS: dict[tuple[int, int], BodyReader] = {
    (0, 0): _hand_read(_read_produce),
    (0, 1): _hand_read(_read_produce),
    (0, 2): _hand_read(_read_produce),
    (1, 0): _hand_read(_read_fetch(0)),
    (1, 1): _hand_read(_read_fetch(1)),
    (1, 2): _hand_read(_read_fetch(2)),
    (1, 3): _hand_read(_read_fetch(3)),
    (2, 0): _hand_read(_read_list_offsets),
    (8, 0): _hand_read(_read_offset_commit(0)),
    (8, 1): _hand_read(_read_offset_commit(1)),
    (9, 0): _kio_read(9, 1),
    (19, 0): _kio_read(19, 2, suffix=b"\x00"),  # validate_only = false
    (19, 1): _kio_read(19, 2),
    (20, 0): _kio_read(20, 1),
    (29, 0): _hand_read(_read_describe_acls),
    (30, 0): _hand_read(_read_create_acls),
    (31, 0): _hand_read(_read_delete_acls),
}

# The request type a handler may ask for (by `protocol.codec.request_type`).
_REQUEST_TYPES: dict[tuple[int, int], type] = {
    **{(0, v): _ProduceV3 for v in range(3)},
    **{(1, v): _FetchV4 for v in range(4)},
    (2, 0): ListOffsetsRequestV0,
    (8, 0): OffsetCommitRequestV0,
    (8, 1): OffsetCommitRequestV0,
    (9, 0): load_request_schema(9, 1),
    (19, 0): load_request_schema(19, 2),
    (19, 1): load_request_schema(19, 2),
    (20, 0): load_request_schema(20, 1),
    (29, 0): _DescribeAclsV1,
    (30, 0): _CreateAclsV1,
    (31, 0): _DeleteAclsV1,
}

_REQUEST_HEADER = load_request_schema(0, 3).__header_schema__  # header v1
_RESPONSE_HEADER = load_response_schema(0, 3).__header_schema__  # header v0


# Old versions read by a kio reader: the kio schema (for the codec's array-count guard).
_KIO_READ = {(9, 0): (9, 1), (19, 0): (19, 2), (19, 1): (19, 2), (20, 0): (20, 1)}


def legacy_request(api_key: int, api_version: int
                   ) -> tuple[type, BodyReader, type, type | None] | None:
    """(request type, body reader, request header type, kio schema that reads the body or None
    for a hand-written reader) of an old version, else None."""
    reader = LEGACY_REQUESTS.get((api_key, api_version))
    if reader is None:
        return None
    kio = _KIO_READ.get((api_key, api_version))
    return (_REQUEST_TYPES[(api_key, api_version)], reader, _REQUEST_HEADER,
            load_request_schema(*kio) if kio is not None else None)


# ------------------------------------------------------------------------------ responses

BodyWriter = Callable[[io.BytesIO, Any], None]


def _string(out: io.BytesIO, text: str) -> None:
    data = text.encode()
    out.write(_I16.pack(len(data)))
    out.write(data)


def _nullable_string(out: io.BytesIO, text: str | None) -> None:
    if text is None:
        out.write(b"\xff\xff")
    else:
        _string(out, text)


def _nullable_bytes(out: io.BytesIO, data: bytes | None) -> None:
    if data is None:
        out.write(b"\xff\xff\xff\xff")
    else:
        out.write(_I32.pack(len(data)))
        out.write(data)


def _throttle(out: io.BytesIO, response: Any) -> None:
    throttle = response.throttle_time
    ms = throttle // datetime.timedelta(milliseconds=1) if throttle else 0
    out.write(_I32.pack(ms))


def _write_produce(version: int) -> BodyWriter:
    def write(out: io.BytesIO, response: Any) -> None:
        out.write(_I32.pack(len(response.responses)))
        for topic in response.responses:
            _string(out, topic.name)
            out.write(_I32.pack(len(topic.partition_responses)))
            for p in topic.partition_responses:
                out.write(struct.pack(">ihq", p.index, p.error_code, p.base_offset))
        if version >= 1:
            _throttle(out, response)
    return write


def _write_fetch(version: int) -> BodyWriter:
    def write(out: io.BytesIO, response: Any) -> None:
        if version >= 1:
            _throttle(out, response)
        out.write(_I32.pack(len(response.responses)))
        for topic in response.responses:
            _string(out, topic.topic)
            out.write(_I32.pack(len(topic.partitions)))
            for p in topic.partitions:
                out.write(struct.pack(">ihq", p.partition_index, p.error_code, p.high_watermark))
                _nullable_bytes(out, p.records)
    return write


def _write_list_offsets(out: io.BytesIO, response: ListOffsetsResponseV0) -> None:
    out.write(_I32.pack(len(response.topics)))
    for topic in response.topics:
        _string(out, topic.name)
        out.write(_I32.pack(len(topic.partitions)))
        for p in topic.partitions:
            out.write(struct.pack(">ihi", p.partition_index, p.error_code,
                                  len(p.old_style_offsets)))
            for offset in p.old_style_offsets:
                out.write(_I64.pack(offset))


def _write_create_topics(version: int) -> BodyWriter:
    def write(out: io.BytesIO, response: Any) -> None:
        out.write(_I32.pack(len(response.topics)))
        for topic in response.topics:
            _string(out, topic.name)
            out.write(_I16.pack(topic.error_code))
            if version >= 1:
                _nullable_string(out, topic.error_message)
    return write


def _write_delete_topics(out: io.BytesIO, response: Any) -> None:
    out.write(_I32.pack(len(response.responses)))
    for topic in response.responses:
        _string(out, topic.name)
        out.write(_I16.pack(topic.error_code))


def _write_describe_acls(out: io.BytesIO, response: Any) -> None:
    _throttle(out, response)
    out.write(_I16.pack(response.error_code))
    _nullable_string(out, response.error_message)
    out.write(_I32.pack(len(response.resources)))
    for resource in response.resources:
        out.write(_I8.pack(resource.resource_type))
        _string(out, resource.resource_name)
        out.write(_I32.pack(len(resource.acls)))
        for acl in resource.acls:
            _string(out, acl.principal)
            _string(out, acl.host)
            out.write(_I8.pack(acl.operation))
            out.write(_I8.pack(acl.permission_type))


def _write_delete_acls(out: io.BytesIO, response: Any) -> None:
    _throttle(out, response)
    out.write(_I32.pack(len(response.filter_results)))
    for result in response.filter_results:
        out.write(_I16.pack(result.error_code))
        _nullable_string(out, result.error_message)
        out.write(_I32.pack(len(result.matching_acls)))
        for acl in result.matching_acls:
            out.write(_I16.pack(acl.error_code))
            _nullable_string(out, acl.error_message)
            out.write(_I8.pack(acl.resource_type))
            _string(out, acl.resource_name)
            _string(out, acl.principal)
            _string(out, acl.host)
            out.write(_I8.pack(acl.operation))
            out.write(_I8.pack(acl.permission_type))


def _kio_write(api_key: int, kio_version: int) -> tuple[type, BodyWriter]:
    cls = load_response_schema(api_key, kio_version)
    return cls, entity_writer(cls)


_ProduceResponseV3 = load_response_schema(0, 3)
_FetchResponseV4 = load_response_schema(1, 4)

LEGACY_RESPONSES: dict[tuple[int, int], tuple[type, BodyWriter]] = {
    (0, 0): (_ProduceResponseV3, _write_produce(0)),
    (0, 1): (_ProduceResponseV3, _write_produce(1)),
    (0, 2): _kio_write(0, 3),
    (1, 0): (_FetchResponseV4, _write_fetch(0)),
    (1, 1): (_FetchResponseV4, _write_fetch(1)),
    (1, 2): (_FetchResponseV4, _write_fetch(2)),
    (1, 3): (_FetchResponseV4, _write_fetch(3)),
    (2, 0): (ListOffsetsResponseV0, _write_list_offsets),  # type: ignore[dict-item]
    (8, 0): _kio_write(8, 2),
    (8, 1): _kio_write(8, 2),
    (9, 0): _kio_write(9, 1),
    (19, 0): (load_response_schema(19, 2), _write_create_topics(0)),
    (19, 1): (load_response_schema(19, 2), _write_create_topics(1)),
    (20, 0): (load_response_schema(20, 1), _write_delete_topics),
    (29, 0): (load_response_schema(29, 1), _write_describe_acls),
    (30, 0): _kio_write(30, 1),  # the same layout
    (31, 0): (load_response_schema(31, 1), _write_delete_acls),
}


def legacy_response(api_key: int, api_version: int) -> tuple[type, BodyWriter, type] | None:
    """(response type, body writer, response header type) of an old version, else None."""
    found = LEGACY_RESPONSES.get((api_key, api_version))
    if found is None:
        return None
    return found[0], found[1], _RESPONSE_HEADER
