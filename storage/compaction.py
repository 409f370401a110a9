"""Log compaction: keep the latest record per key in the sealed segments (SPEC §11).

`LogCleaner` cleans a set of partition logs of keyed records, one partition at a time. It knows
keys as bytes and nothing of what they mean; the group log (`coordinator/grouplog/log.py`) is
the one compacted log and names it in the log lines. For one partition:

1. **Offset map.** Read every *sealed* segment (CRC- and offset-checked) and remember, per key,
   the offset of its last record, and which segments hold something to drop. The active
   segment is left out on purpose: its tail may not be fsynced yet, and dropping an old value
   because a newer one sits in page cache could lose both in a crash. Sealed segments were
   fsynced when the log rolled past them.
2. **Rewrite** the segments with something to drop, oldest first. A record survives if it is
   the last one of its key and is not a tombstone older than `log.cleaner.delete.retention.ms`
   (by its record timestamp). Records keep their offsets: the cleaned segment has the same base
   offset and covers the same offset range with fewer records. Batch framing stays contiguous
   (each batch starts where the previous one ended, as the segment log requires) because a
   cleaned batch takes over the offset range of the original batches it replaces: its base
   offset is the first one's, its last offset delta reaches the last one's last offset, and the
   records inside keep their own offset deltas, with gaps. A segment with no survivors becomes
   one empty batch (61 bytes).
3. **Swap.** The cleaned segment is written to `<base>.log.cleaned.tmp` and fsynced; the old
   segment's index files are removed; the temp file is renamed over `<base>.log` and the
   directory fsynced; then the segment is reopened (CRC scan, fresh indexes) and replaces the
   old one in the `PartitionLog`. A crash leaves either the old segment (plus a `.tmp` file
   that `PartitionLog.open` removes) or the new one, maybe without index files, which the next
   open rebuilds. Nothing acknowledged is lost either way.

Oldest-first matters for tombstones: a tombstone is dropped only in the same pass that already
removed every older value of its key from the earlier segments, so an old value can never
reappear. A pass stops at the first failure of a partition, before touching later segments.

The cleaner runs on a worker thread and parses records in Python (about 7 us per record and
pass, two passes), so it sleeps briefly every few hundred records to let the event loop thread
take the GIL: commits stay fast while a large segment is cleaned.

What is imperfect: segments are never merged, so a long-lived partition keeps one small file
per segment ever rolled (an empty one is 61 bytes plus two empty index files); merging needs a
`PartitionLog` call that replaces several segments by one. Swapping a segment in a live
`PartitionLog` also reaches into its private state (`_swap_segment`), since the log has no
public call for it yet.

Raises: `CorruptLogError` (a damaged sealed segment: the partition is skipped and the error
logged by `clean`, raised by `verify_sealed`), `OSError`; anything else is a bug.
"""

from __future__ import annotations

import contextlib
import struct
import threading
import time
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import structlog

from storage.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    scan_batches,
)
from storage.crc import crc32c
from storage.fs import AppendHandle, FileSystem
from storage.log import PartitionLog
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    CorruptLogError,
    Segment,
    segment_name,
)
from storage.varint import read_varint, write_varint

__all__ = [
    "CLEANED_SUFFIX",
    "CleanStats",
    "LogCleaner",
    "iter_segment_batches",
    "verify_sealed",
]

log = structlog.get_logger("rebalanced.compaction")

CLEANED_SUFFIX = ".cleaned.tmp"  # ends in .tmp: PartitionLog.open removes leftovers
READ_CHUNK = 8 << 20
MAX_CLEANED_BATCH_BYTES = 1 << 20
PAUSE_EVERY_RECORDS = 256
PAUSE_S = 0.0005  # per PAUSE_EVERY_RECORDS: the cleaner gives way to the event loop

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I32 = struct.Struct(">i")
_NEVER = 2**63 - 1


# ------------------------------------------------------------------------------ reading


@dataclass(frozen=True, slots=True)
class _Batch:
    position: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    records_count: int
    data: memoryview  # the whole batch; valid until the reader moves on


@dataclass(frozen=True, slots=True)
class _Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: bytes  # the record's header section as stored (count varint + headers)


def iter_segment_batches(fs: FileSystem, path: Path, base_offset: int, end_offset: int
                         ) -> Iterator[_Batch]:
    """Every batch of a sealed segment file, CRC-checked and checked to cover exactly
    `[base_offset, end_offset)` with contiguous batches.

    Raises `CorruptLogError(path, position)` at the first damage; `OSError`.
    """
    handle = fs.open_read(path)
    try:
        size = handle.size()
        pos = 0
        expected = base_offset
        need = 0
        while pos < size:
            buf = handle.pread(min(max(READ_CHUNK, need), size - pos), pos)
            batches, end, error = scan_batches(buf, expected_base=expected)
            view = memoryview(buf)
            for start, stop, base, delta, _max_ts, _count, _pid, _attrs in batches:
                header = _HEADER.unpack_from(buf, start)
                yield _Batch(pos + start, base, base + delta, header[2], header[5], header[7],
                             header[8], header[12], view[start:stop])
                expected = base + delta + 1
            need = 0
            if error is None:
                pos += end
                continue
            if error.truncated and pos + len(buf) < size:
                if end == 0:  # one batch bigger than the chunk: read all of it at once
                    need = _I32.unpack_from(buf, 8)[0] + 12 if len(buf) >= 12 else HEADER_SIZE
                    if pos + need > size:
                        raise CorruptLogError(path, pos, f"truncated: batch needs {need} "
                                              f"bytes, {size - pos} left")
                pos += end
                continue
            raise CorruptLogError(path, pos + max(error.position, 0), error.reason)
        if expected != end_offset:
            raise CorruptLogError(path, size, f"the segment ends at offset {expected} but the "
                                  f"next segment starts at offset {end_offset}")
    finally:
        handle.close()


def _records(batch: _Batch) -> Iterator[_Record]:
    """The records of an uncompressed data batch, with the timestamps and headers that
    `record_batch.iter_records` leaves out. Raises `ValueError` or `IndexError` if they do not
    parse."""
    data = batch.data
    end = len(data)
    pos = HEADER_SIZE
    for _ in range(batch.records_count):
        length, pos = read_varint(data, pos)
        body_end = pos + length
        if length < 1 or body_end > end:
            raise ValueError(f"record length {length} at byte {pos} is out of range")
        timestamp_delta, cursor = read_varint(data, pos + 1)  # after the attributes byte
        offset_delta, cursor = read_varint(data, cursor)
        key_length, cursor = read_varint(data, cursor)
        key = None if key_length < 0 else bytes(data[cursor:cursor + key_length])
        cursor += max(key_length, 0)
        value_length, cursor = read_varint(data, cursor)
        value = None if value_length < 0 else bytes(data[cursor:cursor + value_length])
        cursor += max(value_length, 0)
        if cursor >= body_end:
            raise ValueError(f"record at byte {pos} has no header count")
        yield _Record(batch.base_offset + offset_delta, batch.base_timestamp + timestamp_delta,
                      key, value, bytes(data[cursor:body_end]))
        pos = body_end
    if pos != end:
        raise ValueError(f"{end - pos} bytes after the last record")


def _data_records(path: Path, batch: _Batch) -> Iterator[_Record]:
    if batch.attributes & ATTR_CONTROL:
        return  # transaction markers: nothing to keep (the compacted logs never hold them)
    if batch.attributes & ATTR_COMPRESSION_MASK:
        raise CorruptLogError(path, batch.position, "compressed batches cannot be compacted")
    try:
        yield from _records(batch)
    except (ValueError, IndexError) as exc:
        raise CorruptLogError(path, batch.position, f"malformed record: {exc}") from None


def verify_sealed(partition_log: PartitionLog, fs: FileSystem) -> None:
    """CRC-check every sealed segment of `partition_log` (opening one checks only its tail).

    Raises `CorruptLogError` naming the file and the byte position of the damage; `OSError`.
    """
    for base, end in partition_log.sealed_ranges():
        for _ in iter_segment_batches(fs, _log_path(partition_log, base), base, end):
            pass


# ------------------------------------------------------------------------------ writing


@dataclass(slots=True)
class _CleanedBatch:
    """Survivors of the original batches covering `[base_offset, last_offset]`."""

    base_offset: int
    last_offset: int
    leader_epoch: int
    max_timestamp: int  # of the covered originals: the stamp of a batch left empty
    records: list[_Record] = field(default_factory=list)
    size: int = HEADER_SIZE

    def encode(self) -> bytes:
        records = self.records
        if records:
            base_ts = min(r.timestamp for r in records)
            max_ts = max(r.timestamp for r in records)
        else:
            base_ts = max_ts = self.max_timestamp
        body = bytearray()
        for r in records:
            rec = bytearray(b"\x00")  # attributes
            write_varint(r.timestamp - base_ts, rec)
            write_varint(r.offset - self.base_offset, rec)
            if r.key is None:
                write_varint(-1, rec)
            else:
                write_varint(len(r.key), rec)
                rec += r.key
            if r.value is None:
                write_varint(-1, rec)
            else:
                write_varint(len(r.value), rec)
                rec += r.value
            rec += r.headers
            write_varint(len(rec), body)
            body += rec
        batch = bytearray(_HEADER.pack(
            self.base_offset, HEADER_SIZE - 12 + len(body), self.leader_epoch, 2, 0, 0,
            self.last_offset - self.base_offset, base_ts, max_ts, -1, -1, -1, len(records)))
        batch += body
        struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
        return bytes(batch)


# ------------------------------------------------------------------------------ cleaning


@dataclass(slots=True)
class CleanStats:
    """What one pass did, summed over the partitions it cleaned."""

    partitions: int = 0
    segments_rewritten: int = 0
    records_read: int = 0
    records_dropped: int = 0
    tombstones_dropped: int = 0
    bytes_before: int = 0
    bytes_after: int = 0

    def add(self, other: CleanStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(frozen=True, slots=True)
class _Checked:
    """A partition's sealed segments at its last clean pass, and when a kept tombstone expires."""

    sealed: tuple[int, ...]
    next_tombstone_expiry_ms: int


class _Stopped(Exception):
    pass


class LogCleaner:
    """Compacts the sealed segments of a set of partition logs. See the module docstring.

    `clean` runs on a worker thread while the event loop appends to the active segments;
    `stop` (from the owning thread, before the logs close) waits for the running step.
    `name` is what the log lines call the logs ("group log compacted").
    """

    def __init__(self, logs: Sequence[PartitionLog], fs: FileSystem, name: str = "log") -> None:
        self.logs = logs
        self.fs = fs
        self.name = name
        self.max_batch_bytes = MAX_CLEANED_BATCH_BYTES
        self._checked: dict[int, _Checked] = {}
        self._running = threading.Lock()
        self._stopping = False
        self._records_since_pause = 0

    def _pace(self) -> None:
        """Every few hundred records, let the event loop thread take the GIL, and give up if
        the log is closing."""
        self._records_since_pause += 1
        if self._records_since_pause >= PAUSE_EVERY_RECORDS:
            self._records_since_pause = 0
            if self._stopping:
                raise _Stopped
            time.sleep(PAUSE_S)

    def stop(self) -> None:
        self._stopping = True
        with self._running:
            pass

    def clean(self, now_ms: int, delete_retention_ms: int) -> CleanStats:
        """One pass over every partition. A damaged or failing partition is logged and skipped
        (it is tried again next pass); `OSError`s do not escape."""
        total = CleanStats()
        for partition in range(len(self.logs)):
            if self._stopping:
                break
            try:
                stats = self.clean_partition(partition, now_ms, delete_retention_ms)
            except _Stopped:
                break
            except (CorruptLogError, OSError) as exc:
                log.error(f"{self.name} compaction failed", partition=partition, error=str(exc))
                continue
            if stats is not None:
                total.add(stats)
        return total

    def clean_partition(self, partition: int, now_ms: int, delete_retention_ms: int
                        ) -> CleanStats | None:
        """Clean one partition; None when nothing changed since its last pass.

        Raises `CorruptLogError`, `OSError` (the partition is left as it was, or with some
        segments already cleaned; both are complete logs).
        """
        with self._running:
            if self._stopping:
                raise _Stopped
            partition_log = self.logs[partition]
            if partition_log.closed:
                raise _Stopped
            # A rolled segment is sealed (fsync, index files) on another thread: not rewritten
            # before that is done, or the seal would write index files of the old content.
            partition_log.complete_seals()
            sealed = partition_log.sealed_ranges()
            checked = self._checked.get(partition)
            if not sealed or (checked is not None
                              and checked.sealed == tuple(b for b, _ in sealed)
                              and now_ms < checked.next_tombstone_expiry_ms):
                return None
            self._checked.pop(partition, None)
            horizon_ms = now_ms - delete_retention_ms
            stats = CleanStats(partitions=1)
            latest, dirty, next_expiry = self._offset_map(partition_log, sealed, horizon_ms,
                                                          delete_retention_ms, stats)
            for base, end in sealed:
                if base in dirty:
                    if self._stopping:
                        raise _Stopped
                    stats.add(self._clean_segment(partition_log, base, end, latest, horizon_ms))
            self._checked[partition] = _Checked(tuple(b for b, _ in sealed), next_expiry)
        if stats.segments_rewritten:
            log.info(f"{self.name} compacted", partition=partition,
                     segments=stats.segments_rewritten, records_dropped=stats.records_dropped,
                     tombstones_dropped=stats.tombstones_dropped,
                     bytes_before=stats.bytes_before, bytes_after=stats.bytes_after)
        return stats

    def _offset_map(self, partition_log: PartitionLog, sealed: list[tuple[int, int]],
                    horizon_ms: int, delete_retention_ms: int, stats: CleanStats
                    ) -> tuple[dict[bytes, int], set[int], int]:
        """Read the sealed segments once: the last offset of every key, the base offsets of
        the segments holding anything to drop, and when the earliest kept tombstone expires."""
        bases = [base for base, _ in sealed]
        latest: dict[bytes, int] = {}
        tombstones: dict[bytes, int] = {}  # key -> timestamp, while its last record is one
        dirty: set[int] = set()
        for base, end in sealed:
            path = _log_path(partition_log, base)
            for batch in iter_segment_batches(self.fs, path, base, end):
                if batch.attributes & ATTR_TRANSACTIONAL:
                    # Transactional records count only from their marker on, and an aborted
                    # one never: keeping the latest record per key would lose the value an
                    # aborted record hides. Such a partition is left as it is.
                    return latest, set(), _NEVER
                for record in _data_records(path, batch):
                    stats.records_read += 1
                    self._pace()
                    key = record.key
                    if key is None:
                        dirty.add(base)
                        continue
                    previous = latest.get(key)
                    if previous is not None:
                        dirty.add(bases[bisect_right(bases, previous) - 1])
                    latest[key] = record.offset
                    if record.value is None:
                        tombstones[key] = record.timestamp
                    else:
                        tombstones.pop(key, None)
        next_expiry = _NEVER
        for key, timestamp in tombstones.items():
            if timestamp < horizon_ms:
                dirty.add(bases[bisect_right(bases, latest[key]) - 1])
            else:
                next_expiry = min(next_expiry, timestamp + delete_retention_ms + 1)
        return latest, dirty, next_expiry

    def _clean_segment(self, partition_log: PartitionLog, base: int, end: int,
                       latest: dict[bytes, int], horizon_ms: int) -> CleanStats:
        tmp, stats = self.write_cleaned(partition_log, base, end, latest, horizon_ms)
        try:
            self.install(partition_log, base, end, tmp)
        except BaseException:
            with contextlib.suppress(OSError):
                self.fs.remove(tmp)
            raise
        stats.segments_rewritten = 1
        return stats

    def write_cleaned(self, partition_log: PartitionLog, base: int, end: int,
                      latest: dict[bytes, int], horizon_ms: int) -> tuple[Path, CleanStats]:
        """Write the cleaned copy of segment `base` to its temp file and fsync it.

        Returns the temp file's path and the tombstone / byte counts. Raises `CorruptLogError`,
        `OSError` (the temp file is removed).
        """
        path = _log_path(partition_log, base)
        tmp = path.with_name(path.name + CLEANED_SUFFIX)
        stats = CleanStats()
        handle = self.fs.open_append(tmp)
        try:
            handle.truncate(0)
            pending: _CleanedBatch | None = None
            current: _CleanedBatch | None = None
            for batch in iter_segment_batches(self.fs, path, base, end):
                stats.bytes_before += len(batch.data)
                if current is None:
                    current = _CleanedBatch(batch.base_offset, batch.last_offset,
                                            batch.leader_epoch, batch.max_timestamp)
                current.last_offset = batch.last_offset
                current.max_timestamp = max(current.max_timestamp, batch.max_timestamp)
                for record in _data_records(path, batch):
                    self._pace()
                    if _keep(record, latest, horizon_ms):
                        current.records.append(record)
                        current.size += len(record.headers) + len(record.key or b"") + len(
                            record.value or b"") + 24
                        continue
                    stats.records_dropped += 1
                    if record.value is None and latest.get(record.key or b"") == record.offset:
                        stats.tombstones_dropped += 1
                if current.size >= self.max_batch_bytes:
                    if pending is not None:
                        stats.bytes_after += _write(handle, pending)
                    pending, current = current, None
            if current is not None and not current.records and pending is not None:
                pending.last_offset = current.last_offset  # no empty batch at the end
                current = None
            for cleaned in (pending, current):
                if cleaned is not None:
                    stats.bytes_after += _write(handle, cleaned)
            handle.fsync()
        except BaseException:
            handle.close()
            with contextlib.suppress(OSError):
                self.fs.remove(tmp)
            raise
        handle.close()
        return tmp, stats

    def install(self, partition_log: PartitionLog, base: int, end: int, tmp: Path) -> None:
        """Swap the cleaned temp file in for segment `base`, on disk and in `partition_log`.

        Raises `CorruptLogError` if the cleaned file does not cover `[base, end)`, `OSError`.
        """
        fs = self.fs
        directory = partition_log.directory
        stem = segment_name(base)
        for _ in iter_segment_batches(fs, tmp, base, end):
            pass
        # Without index files the next open scans the whole segment: stale ones must not
        # survive next to the cleaned file, whose batches sit at other positions.
        fs.remove(directory / (stem + INDEX_SUFFIX))
        fs.remove(directory / (stem + TIME_INDEX_SUFFIX))
        fs.fsync_dir(directory)
        _keep_old_segment_open(partition_log, base)
        fs.rename(tmp, directory / (stem + LOG_SUFFIX))
        fs.fsync_dir(directory)
        segment, damage = Segment.open_existing(
            fs, directory, base, partition_log.config.index_interval_bytes, active=False,
            full_scan=True)
        if damage is not None or segment.next_offset != end:
            segment.close_files()
            raise CorruptLogError(segment.path, damage.position if damage else segment.size,
                                  damage.reason if damage else "cleaned segment ends early")
        _swap_segment(partition_log, base, segment)


def _keep(record: _Record, latest: dict[bytes, int], horizon_ms: int) -> bool:
    if record.key is None or latest.get(record.key) != record.offset:
        return False  # a later record of the same key supersedes it
    return record.value is not None or record.timestamp >= horizon_ms


def _write(handle: AppendHandle, cleaned: _CleanedBatch) -> int:
    data = cleaned.encode()
    handle.write(data)
    return len(data)


def _log_path(partition_log: PartitionLog, base: int) -> Path:
    return partition_log.directory / (segment_name(base) + LOG_SUFFIX)


# -------------------------------------------------------------- PartitionLog internals
# The segment log has no public call to replace a sealed segment; these two functions are the
# only places that reach into it. They hold the log's lock, which `flush`, rolls and `close`
# also take.


def _keep_old_segment_open(partition_log: PartitionLog, base: int) -> None:
    """Open the old segment's descriptor before the rename, so a reader that gets to it before
    `_swap_segment` reads the old file, which its in-memory indexes describe."""
    with partition_log._lock:
        if partition_log.closed:
            raise OSError(f"{partition_log.directory}: log closed during compaction")
        partition_log._segments[_index_of(partition_log, base)]._reader()


def _swap_segment(partition_log: PartitionLog, base: int, segment: Segment) -> None:
    with partition_log._lock:
        if partition_log.closed:
            segment.close_files()
            return
        i = _index_of(partition_log, base)
        old = partition_log._segments[i]
        assert not old.is_active, f"compaction swapped the active segment {old.path}"
        partition_log._segments[i] = segment
    old.close_files()


def _index_of(partition_log: PartitionLog, base: int) -> int:
    i = partition_log._bases.index(base)
    assert i < len(partition_log._bases) - 1, "only sealed segments are compacted"
    return i
