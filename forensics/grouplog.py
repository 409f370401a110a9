"""Decode `__consumer_offsets` segment files into flat rows, without Spark.

A segment (`__consumer_offsets-N/<base offset>.log`) is a run of magic-2 record batches, the
same bytes rebalanced's group log and an Apache Kafka broker write. Framing and checksums go
through the broker's own `storage.batch.scan_batches`; keys and values through
`coordinator.grouplog.codec.decode_record` (every OffsetCommit and GroupMetadata version Kafka
wrote).
This module adds only what the broker never needs: each record's timestamp, gzip batches, and
the `consumer` protocol assignment inside a member's metadata.

Bad input is never fatal: a corrupted or truncated batch becomes one `corrupt` row naming the
file and byte position (the rest of that segment is skipped: batch boundaries after a damaged
length cannot be trusted), an undecodable record an `undecodable` row, and a record type we do
not model (KIP-848 consumer groups, share groups, ...) an `unknown` row carrying its key version.
"""

from __future__ import annotations

import gzip
import re
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.group.embedded_protocol import EmbeddedProtocolError, assignment_partitions
from coordinator.grouplog.codec import RecordDecodeError, decode_record
from coordinator.grouplog.records import GroupMetadataRecord, OffsetCommitRecord
from forensics.files import list_dir, name_of, read_bytes
from storage.batch import scan_batches
from storage.varint import read_varint

try:
    from forensics import _grouplog_speedups as _speedups  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install time: `_batch_rows_py` does the same
    _speedups = None

__all__ = [
    "COMMIT_BUFFERS",
    "GROUP_LOG_COLUMNS",
    "Chunks",
    "CommitColumns",
    "decode_assignment",
    "decode_segment",
    "decode_segment_chunks",
    "empty_buffers",
    "find_segments",
    "grouplog_speedups",
    "record_row",
]

# Column order of a decoded row; `forensics.schema.GROUP_LOG_SCHEMA` gives the types.
GROUP_LOG_COLUMNS = (
    "source_file", "log_partition", "position", "offset", "timestamp", "record_type",
    "key_version", "value_version", "group_id", "topic", "partition", "committed_offset",
    "commit_timestamp", "expire_timestamp", "tombstone", "protocol_type", "generation",
    "protocol", "leader", "state_timestamp", "members", "error",
)

_SEGMENT_DIR = re.compile(r"^__consumer_offsets-(\d+)$")
_BATCH_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount, from byte 21
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OC_V3 = struct.Struct(">qih")  # offset, leaderEpoch, metadata length
_COMPRESSION = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_NOTHING = (None,) * 13  # group_id .. members, for rows that carry no record


def find_segments(data_dir: str | Path) -> list[tuple[str, int]]:
    """`(segment location, log partition)` of every `__consumer_offsets-N/*.log` under
    `data_dir` (a rebalanced `log.dirs` or a Kafka log directory; a local path or a URL,
    `forensics.files`), in partition and offset order."""
    found: list[tuple[str, int]] = []
    root = str(data_dir)
    candidates = ([(root, True)] if _SEGMENT_DIR.match(name_of(root)) else list_dir(root))
    for directory, is_directory in candidates:
        match = _SEGMENT_DIR.match(name_of(directory))
        if match and is_directory:
            partition = int(match.group(1))
            found.extend((p, partition) for p, is_sub in list_dir(directory)
                         if not is_sub and name_of(p).endswith(".log"))
    return sorted(found, key=lambda item: (item[1], name_of(item[0])))


@dataclass(slots=True)
class _Payload:
    """The uncompressed records of one batch, and where the batch starts in its file."""

    position: int
    base_offset: int
    base_timestamp: int
    records: bytes | memoryview
    count: int


def _payloads(path: str, log_partition: int) -> Iterator[_Payload | tuple[object, ...]]:
    """Each data batch of a segment as a `_Payload`, and a problem row (file and byte
    position) where a batch cannot be read."""
    try:
        data = read_bytes(path)
    except OSError as exc:
        yield _problem(path, log_partition, 0, "corrupt", f"unreadable: {exc}")
        return
    batches, _, error = scan_batches(data)
    for start, end, base_offset, _, _, count, _, attributes in batches:
        if attributes & 0x20:
            continue  # a control batch (transaction marker) holds no group records
        records: bytes | memoryview = memoryview(data)[start + 61:end]
        codec = attributes & 0x07
        if codec:
            if codec != 1:
                yield _problem(path, log_partition, start, "corrupt",
                               f"{_COMPRESSION.get(codec, codec)} batches are not supported")
                continue
            try:
                records = gzip.decompress(records)
            except (OSError, EOFError) as exc:
                yield _problem(path, log_partition, start, "corrupt", f"bad gzip batch: {exc}")
                continue
        base_timestamp = struct.unpack_from(">q", data, start + 27)[0]
        yield _Payload(start, base_offset, base_timestamp, records, count)
    if error is not None:
        yield _problem(path, log_partition, error.position, "corrupt", str(error))


def decode_segment(path: str, log_partition: int) -> Iterator[tuple[object, ...]]:
    """Every record of one segment file as a row in `GROUP_LOG_COLUMNS` order."""
    for item in _payloads(path, log_partition):
        if isinstance(item, tuple):
            yield item
            continue
        try:
            yield from _batch_rows(path, log_partition, item.position, item.base_offset,
                                   item.base_timestamp, item.records, item.count)
        except (IndexError, ValueError) as exc:
            yield _problem(path, log_partition, item.position, "corrupt",
                           f"malformed records: {exc}")


@dataclass(slots=True)
class CommitColumns:
    """Commit rows of one segment as column buffers in `COMMIT_BUFFERS` order: native-endian
    int64/int32 values, and each string column as int32 offsets (a leading 0, then each
    row's end) plus its UTF-8 bytes; the layouts of Arrow arrays, so they become Arrow
    columns without a Python object per row. Every row is an `offset_commit` of value
    version 3 from `source_file` (the fields `GROUP_LOG_COLUMNS` has beyond these are the
    same in each such row)."""

    source_file: str
    log_partition: int
    rows: int
    buffers: list[bytearray]


COMMIT_BUFFERS = (
    "position", "offset", "timestamp", "key_version", "partition", "committed_offset",
    "commit_timestamp", "group_id.offsets", "group_id.data", "topic.offsets", "topic.data",
)


def empty_buffers() -> list[bytearray]:
    """Column buffers in `COMMIT_BUFFERS` order with no row yet."""
    return [bytearray(b"\0\0\0\0") if name.endswith(".offsets") else bytearray()
            for name in COMMIT_BUFFERS]


class Chunks:
    """What one source decodes, handed out `max_rows` at a time: commits gathered in column
    `buffers` (the C loops add `commits` rows there), every other record in `others` rows."""

    def __init__(self, source: str, partition: int, max_rows: int) -> None:
        self.source = source
        self.partition = partition
        self.max_rows = max_rows
        self.buffers = empty_buffers()
        self.commits = 0
        self.others: list[tuple[object, ...]] = []

    def full(self) -> Iterator[CommitColumns | list[tuple[object, ...]]]:
        """The chunks that reached `max_rows`."""
        yield from self._take(self.max_rows)

    def rest(self) -> Iterator[CommitColumns | list[tuple[object, ...]]]:
        """Whatever is left, at the end of the source."""
        yield from self._take(1)

    def _take(self, at_least: int) -> Iterator[CommitColumns | list[tuple[object, ...]]]:
        if self.commits >= at_least:
            yield CommitColumns(self.source, self.partition, self.commits, self.buffers)
            self.buffers = empty_buffers()
            self.commits = 0
        if len(self.others) >= at_least:
            yield self.others
            self.others = []


def grouplog_speedups() -> Any:
    """The C loop's module when it was built (and its buffers are Arrow's layout here), else
    None."""
    return _speedups if _speedups is not None and sys.byteorder == "little" else None


def decode_segment_chunks(path: str, log_partition: int, max_rows: int = 65536
                          ) -> Iterator[CommitColumns | list[tuple[object, ...]]]:
    """The rows of `decode_segment`, in chunks of about `max_rows` (a chunk ends after the
    batch that fills it): the commit records the C loop unpacks as `CommitColumns`, every
    other row (group metadata, problems, ...) in lists. Row order across the two kinds is not
    kept; each row carries its offset and position. Without the C loop (or on a big-endian
    machine, where the buffers would not be Arrow's layout) every chunk is a list."""
    if _speedups is None or sys.byteorder != "little":
        rows: list[tuple[object, ...]] = []
        for row in decode_segment(path, log_partition):
            rows.append(row)
            if len(rows) >= max_rows:
                yield rows
                rows = []
        if rows:
            yield rows
        return
    chunks = Chunks(path, log_partition, max_rows)
    for item in _payloads(path, log_partition):
        if isinstance(item, tuple):
            chunks.others.append(item)
        else:
            try:
                added, records, error = _speedups.batch_columns(
                    item.records, item.count, item.base_offset, item.base_timestamp,
                    item.position, chunks.buffers)
                chunks.commits += added
                chunks.others.extend(_record_row(path, log_partition, item.position, *record)
                                     for record in records)
                if error is not None:
                    raise ValueError(error)
            except (IndexError, ValueError) as exc:
                chunks.others.append(_problem(path, log_partition, item.position, "corrupt",
                                              f"malformed records: {exc}"))
        yield from chunks.full()
    yield from chunks.rest()


def _batch_rows(path: str, log_partition: int, position: int, base_offset: int,
                base_timestamp: int, records: bytes | memoryview, count: int
                ) -> Iterator[tuple[object, ...]]:
    """The records of one batch: the C loop (`_grouplog_speedups.c`) when it was built, which
    unpacks the commit records itself and hands back the others, else `_batch_rows_py`."""
    if _speedups is None:
        yield from _batch_rows_py(path, log_partition, position, base_offset, base_timestamp,
                                  records, count)
        return
    items, error = _speedups.batch_rows(records, count, base_offset, base_timestamp,
                                        (path, log_partition, position))
    for item in items:
        if len(item) == 4:  # (offset, timestamp, key, value): not a commit the loop unpacks
            yield _record_row(path, log_partition, position, *item)
        else:
            yield item
    if error is not None:
        raise ValueError(error)


def _batch_rows_py(path: str, log_partition: int, position: int, base_offset: int,
                   base_timestamp: int, records: bytes | memoryview, count: int
                   ) -> Iterator[tuple[object, ...]]:
    """The records of one batch, in Python (the reference for the C loop). Single-byte
    varints are read inline and the record versions the broker writes on every commit
    (OffsetCommitKey v0/v1 + OffsetCommitValue v3) are unpacked in place. Every other record
    goes through `decode_record`; `tests/forensics/test_grouplog.py` checks that both agree."""
    data = bytes(records)
    unpack_oc_value = _OC_V3.unpack_from
    unpack_i16 = _I16.unpack_from
    unpack_i32 = _I32.unpack_from
    unpack_i64 = _I64.unpack_from
    pos = 0
    for _ in range(count):
        byte = data[pos]
        pos = pos + 1 if byte < 0x80 else read_varint(data, pos)[1]  # record length
        pos += 1  # attributes
        byte = data[pos]
        if byte < 0x80:
            timestamp_delta = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            timestamp_delta, pos = read_varint(data, pos)
        byte = data[pos]
        if byte < 0x80:
            offset_delta = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            offset_delta, pos = read_varint(data, pos)
        byte = data[pos]
        if byte < 0x80:
            key_len = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            key_len, pos = read_varint(data, pos)
        key_at = pos
        pos += max(key_len, 0)
        byte = data[pos]
        if byte < 0x80:
            value_len = (byte >> 1) ^ -(byte & 1)
            pos += 1
        else:
            value_len, pos = read_varint(data, pos)
        value_at = pos
        pos += max(value_len, 0)
        if data[pos] == 0:
            pos += 1  # no headers, as always in this topic
        else:
            headers, pos = read_varint(data, pos)
            for _ in range(headers):
                header_key_len, pos = read_varint(data, pos)
                pos += header_key_len
                header_value_len, pos = read_varint(data, pos)
                pos += max(header_value_len, 0)
        if pos > len(data):
            raise ValueError("record runs past the end of its batch")
        if key_len < 0:
            continue  # not a coordinator record
        offset = base_offset + offset_delta
        timestamp = base_timestamp + timestamp_delta
        if (key_len >= 10 and data[key_at] == 0 and data[key_at + 1] <= 1
                and value_len >= 24 and data[value_at] == 0 and data[value_at + 1] == 3):
            # Inline, not a call: OffsetCommitKey (int16 group length, group, int16 topic
            # length, topic, int32 partition) + OffsetCommitValue v3 (int64 offset, int32
            # leader epoch, int16 metadata length, metadata, int64 commit timestamp).
            (group_len,) = unpack_i16(data, key_at + 2)
            topic_at = key_at + 4 + group_len
            (topic_len,) = unpack_i16(data, topic_at)
            partition_at = topic_at + 2 + topic_len
            committed, _epoch, metadata_len = unpack_oc_value(data, value_at + 2)
            timestamp_at = value_at + 16 + metadata_len
            if (group_len >= 0 and topic_len >= 0 and partition_at + 4 == key_at + key_len
                    and metadata_len >= 0 and timestamp_at + 8 == value_at + value_len):
                try:
                    group = data[key_at + 4:topic_at].decode("utf-8")
                    topic = data[topic_at + 2:partition_at].decode("utf-8")
                except UnicodeDecodeError:
                    pass  # the generic codec reports it
                else:
                    yield (path, log_partition, position, offset, timestamp, "offset_commit",
                           data[key_at + 1], 3, group, topic, unpack_i32(data, partition_at)[0],
                           committed, unpack_i64(data, timestamp_at)[0], -1, False, None, None,
                           None, None, None, None, None)
                    continue
        key = data[key_at:key_at + key_len]
        value = data[value_at:value_at + value_len] if value_len >= 0 else None
        yield _record_row(path, log_partition, position, offset, timestamp, key, value)


def record_row(path: str, log_partition: int, position: int, offset: int, timestamp: int,
               key: bytes | None, value: bytes | None) -> tuple[object, ...]:
    """One record given as its key and value (a live fetch): the commit records the broker
    writes on every commit unpacked in place, every other one through `decode_record`."""
    if key is None:
        return (path, log_partition, position, offset, timestamp, "undecodable", None, None,
                *_NOTHING, "a record without a key is not a group coordinator record")
    key_len = len(key)
    if (value is not None and key_len >= 10 and key[0] == 0 and key[1] <= 1
            and len(value) >= 24 and value[0] == 0 and value[1] == 3):
        (group_len,) = _I16.unpack_from(key, 2)
        topic_at = 4 + group_len
        topic_len = _I16.unpack_from(key, topic_at)[0] if topic_at + 2 <= key_len else -1
        partition_at = topic_at + 2 + topic_len
        committed, _epoch, metadata_len = _OC_V3.unpack_from(value, 2)
        timestamp_at = 16 + metadata_len
        if (group_len >= 0 and topic_len >= 0 and partition_at + 4 == key_len
                and metadata_len >= 0 and timestamp_at + 8 == len(value)):
            try:
                group = key[4:topic_at].decode("utf-8")
                topic = key[topic_at + 2:partition_at].decode("utf-8")
            except UnicodeDecodeError:
                pass  # the generic codec reports it
            else:
                return (path, log_partition, position, offset, timestamp, "offset_commit",
                        key[1], 3, group, topic, _I32.unpack_from(key, partition_at)[0],
                        committed, _I64.unpack_from(value, timestamp_at)[0], -1, False, None,
                        None, None, None, None, None, None)
    return _record_row(path, log_partition, position, offset, timestamp, key, value)


def _record_row(path: str, log_partition: int, position: int, offset: int, timestamp: int,
                key: bytes, value: bytes | None) -> tuple[object, ...]:
    head = (path, log_partition, position, offset, timestamp)
    key_version = _I16.unpack_from(key, 0)[0] if len(key) >= 2 else None
    value_version = _I16.unpack_from(value, 0)[0] if value is not None and len(value) >= 2 \
        else None
    try:
        record = decode_record(key, value)
    except RecordDecodeError as exc:
        return (*head, "undecodable", key_version, value_version, *_NOTHING, str(exc))
    if isinstance(record, OffsetCommitRecord):
        v = record.value
        return (*head, "offset_commit", key_version, value_version, record.key.group,
                record.key.topic, record.key.partition,
                v.offset if v else None, v.commit_timestamp if v else None,
                v.expire_timestamp if v else None, v is None,
                None, None, None, None, None, None, None)
    if isinstance(record, GroupMetadataRecord):
        g = record.value
        if g is None:
            return (*head, "group_metadata", key_version, value_version, record.key.group,
                    None, None, None, None, None, True, None, None, None, None, None, None, None)
        members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.session_timeout, m.rebalance_timeout,
                    decode_assignment(m.assignment) if g.protocol_type == "consumer" else None)
                   for m in g.members]
        return (*head, "group_metadata", key_version, value_version, record.key.group,
                None, None, None, None, None, False, g.protocol_type, g.generation, g.protocol,
                g.leader, g.current_state_timestamp, members, None)
    # Consumer-group (KIP-848) records and key versions this job does not model yet are
    # counted as unknown and skipped; the journal carries those groups' rebalances.
    return (*head, "unknown", key_version, value_version, *_NOTHING, None)


def _problem(path: str, log_partition: int, position: int, kind: str, error: str
             ) -> tuple[object, ...]:
    return (path, log_partition, position, None, None, kind, None, None, *_NOTHING, error)


def decode_assignment(raw: bytes) -> list[tuple[str, int]] | None:
    """The `(topic, partition)` pairs of a `consumer` protocol ConsumerProtocolAssignment, or
    None when the bytes are not one."""
    try:
        return assignment_partitions(raw)
    except EmbeddedProtocolError:
        return None
