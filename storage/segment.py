"""One log segment: a `.log` file of record batches and its two sparse indexes.

A segment is named by the offset of its first batch (`00000000000000000042.log`). Only the
last segment of a partition (the *active* one) is appended to; the others are *sealed*: they were
fsynced and had their index files written when the log rolled past them. The on-disk format is
described in `storage/README.md`.

Theory of operation
-------------------
The indexes live in memory as `array('q')` columns and are written to disk only when the
segment is sealed or the log is closed:

* offset index: `(last offset of a batch, byte position of that batch)`, one entry whenever more
  than `index_interval_bytes` were appended since the previous entry (Kafka's rule). To find
  the batch holding offset `o`, bisect for the last entry with offset <= `o` and walk batch
  headers forward from its position: at most about `index_interval_bytes` of headers.
* time index: `(max timestamp so far, last offset of the batch that first reached it)`, added
  next to an offset index entry when the running maximum grew. The first batch with
  `max_timestamp >= t` is at or after the last entry with timestamp <= `t`.

Opening a sealed segment trusts its index files after sanity checks and verifies only the
batches after the last offset index entry (a few KiB): that is enough to learn the segment's
end offset and to catch a torn or overwritten tail. A segment without usable index files, and
always the active segment, is scanned batch by batch with CRC checks and its indexes rebuilt.
A CRC error in the middle of a sealed segment is therefore only found by a full scan
(`repair=True`), the same trade Kafka makes after a clean shutdown.

Not thread-safe, except that `flush()` may run in another thread while the owner appends
(`PartitionLog` serialises it against rolls and closes).

Open files: a segment given a `DescriptorBudget` (`adopt`; topic partition logs) opens its file
only when first read or appended to, registers it in the budget, and may have it closed again
by the budget: a sealed one at any time on the owner thread, an active one only once fsynced
(`try_close_idle`). A closed active segment is always clean (nothing written since its last
successful fsync), so `flush` and `seal` have nothing to fsync for it. It is reopened by path,
and an active segment whose file changed size or vanished meanwhile takes its log offline
rather than appending to the wrong file. Without a budget (the group log) files stay open as
before.

Raises: `OSError` from the filesystem, `CorruptLogError` from `open_existing` callers;
anything else is a bug.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from storage.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    CorruptRecordError,
    first_record_at_or_after,
    first_record_with_timestamp,
    scan_batches,
)
from storage.crc import crc32c
from storage.fs import AppendHandle, FileSystem, ReadHandle
from storage.fsync_offload import OffloadedFsync

if TYPE_CHECKING:
    from collections import OrderedDict

    from storage.descriptors import DescriptorBudget, SegmentOwner

__all__ = [
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "MAX_SEGMENT_POSITION",
    "TIME_INDEX_SUFFIX",
    "CorruptLogError",
    "Damage",
    "LogOfflineError",
    "Segment",
    "parse_segment_name",
    "segment_name",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
MAX_SEGMENT_POSITION = 2**31 - 1  # index positions and relative offsets are int32
SCAN_CHUNK = 8 << 20  # recovery reads this much at a time
HEADER_CHUNK = 64 << 10  # header walks (timestamp lookup) read this much at a time
INLINE_READ = 64 << 10  # reads up to this size are served from one pread
WALK_WINDOW = 8 << 10  # header walk window when cutting a large read

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_AND_LENGTH = struct.Struct(">qi")
_I32 = struct.Struct(">i")
_BIG_ENDIAN = sys.byteorder == "big"


def segment_name(base_offset: int) -> str:
    """The 20-digit zero-padded file stem for a segment starting at `base_offset`."""
    return f"{base_offset:020d}"


def parse_segment_name(name: str, suffix: str) -> int | None:
    """The base offset encoded in a file name like `00000000000000000042.log`, else None."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class CorruptLogError(Exception):
    """A log file is damaged somewhere other than a torn tail; the broker must not start.

    `path` is the segment file and `position` the byte position of the damage in it.
    """

    def __init__(self, path: Path, position: int, reason: str = "corrupt record batch") -> None:
        super().__init__(
            f"{path}: corrupt log at byte {position}: {reason}. Valid data follows the damage, "
            "so it is not a torn write; restore the partition or reopen with repair=True "
            "(the broker's --repair flag) to truncate the log at this position "
            "(everything after it is lost)"
        )
        self.path = path
        self.position = position
        self.reason = reason


class LogOfflineError(OSError):
    """The log can no longer be trusted to match its files: an fsync failed (the kernel may
    have dropped the pages it could not write, and a later fsync would report success), or a
    failed write could not be rolled back and verified. Never retried: the owner takes the log
    offline (a topic partition answers KAFKA_STORAGE_ERROR; the group log stops the broker)
    and a restart recovers the durable prefix.

    `path` is the file and `cause` the `OSError` that took the log offline.
    """

    def __init__(self, path: Path, cause: OSError, what: str) -> None:
        super().__init__(cause.errno, f"{path}: {what}: {cause.strerror or cause}")
        self.path = path
        self.cause = cause
        self.what = what


@dataclass(frozen=True, slots=True)
class Damage:
    """Where a scan stopped. `torn` is true when no valid batch follows (a torn write)."""

    position: int
    reason: str
    torn: bool


@dataclass(frozen=True, slots=True)
class _Located:
    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int


class Segment:
    """A `.log` file plus its in-memory indexes. See the module docstring."""

    __slots__ = (
        "_active",
        "_budget",
        "_bytes_since_index",
        "_dirty",
        "_handle",
        "_index_offsets",
        "_index_positions",
        "_interval",
        "_lru",
        "_owner",
        "_time_offsets",
        "_time_stamps",
        "_writer",
        "base_offset",
        "fs",
        "index_path",
        "max_timestamp",
        "next_offset",
        "offset_of_max_timestamp",
        "path",
        "rolling_base_ms",
        "size",
        "time_index_path",
    )

    def __init__(
        self, fs: FileSystem, directory: Path, base_offset: int, index_interval_bytes: int
    ) -> None:
        stem = segment_name(base_offset)
        self.fs = fs
        self.base_offset = base_offset
        self.path = directory / (stem + LOG_SUFFIX)
        self.index_path = directory / (stem + INDEX_SUFFIX)
        self.time_index_path = directory / (stem + TIME_INDEX_SUFFIX)
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        # Wall time of the first append since this segment was created or opened (segment.ms).
        self.rolling_base_ms: int | None = None
        self._interval = index_interval_bytes
        self._bytes_since_index = 0
        self._index_offsets = array("q")
        self._index_positions = array("q")
        self._time_stamps = array("q")
        self._time_offsets = array("q")
        self._handle: ReadHandle | None = None
        self._writer: AppendHandle | None = None
        # Appendable (the active segment, or a rolled one until sealed), open or not.
        self._active = False
        # Written since the last successful fsync (or recovered: unknown), so not closable.
        self._dirty = False
        self._budget: DescriptorBudget | None = None
        self._owner: SegmentOwner | None = None
        self._lru: OrderedDict[Segment, None] | None = None  # the budget's LRU it is in

    # ---------------------------------------------------------------- creation and recovery

    @classmethod
    def create(
        cls, fs: FileSystem, directory: Path, base_offset: int, index_interval_bytes: int
    ) -> Segment:
        """A new, empty, active segment. The file and its directory entry are made durable.

        Raises `OSError` (nothing changed), `LogOfflineError` when the directory fsync fails."""
        seg = cls(fs, directory, base_offset, index_interval_bytes)
        fs.remove(seg.index_path)
        fs.remove(seg.time_index_path)
        handle = fs.open_append(seg.path)
        try:
            if handle.size() != 0:
                # Left behind by an earlier roll that failed halfway; it holds no live data.
                handle.truncate(0)
                handle.fsync()  # durably empty, so the segment starts clean
            try:
                fs.fsync_dir(directory)
            except OSError as exc:  # never retried, like a file's fsync
                raise LogOfflineError(seg.path, exc, "directory fsync failed") from exc
        except BaseException:
            handle.close()
            raise
        seg._handle = seg._writer = handle
        seg._active = True
        return seg

    @classmethod
    def open_existing(
        cls,
        fs: FileSystem,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        *,
        active: bool,
        full_scan: bool,
    ) -> tuple[Segment, Damage | None]:
        """Load a segment file. Returns the segment and the first damage found, if any.

        The active segment, and any segment when `full_scan`, is CRC-checked batch by batch.
        On damage, `next_offset` and the indexes describe the valid prefix, which ends at
        `damage.position`; `size` is still the file size until the caller truncates.
        """
        seg = cls(fs, directory, base_offset, index_interval_bytes)
        if active:
            seg._handle = seg._writer = fs.open_append(seg.path)
            # Written by an earlier run and perhaps never fsynced: the next flush makes sure.
            seg._active = seg._dirty = True
        else:
            seg._handle = fs.open_read(seg.path)
        try:
            seg.size = seg._handle.size()
            loaded = not active and not full_scan and seg._load_indexes()
            if loaded and seg._check_tail():
                seg.close_files()  # sealed segments reopen lazily on first read
                return seg, None
            seg._reset_indexes()
            damage = seg._scan(0, base_offset)
            if damage is None:
                if not active:
                    seg._maybe_append_time_entry()
                    seg.write_indexes(only_if_changed=True)
                    seg.close_files()
                return seg, None
            # Torn: nothing valid follows the damage (the tail of a write a crash cut short).
            torn = not seg._valid_batch_after(damage.position, seg.next_offset)
            return seg, Damage(damage.position, damage.reason, torn)
        except BaseException:
            seg.close_files()
            raise

    def _scan(self, start: int, expected_base: int, *, index: bool = True) -> Damage | None:
        """CRC-check batches from `start` to the end of the file, feeding the indexes."""
        reader = self._reader()
        size = self.size
        pos = start
        expected = expected_base
        need = 0
        while pos < size:
            want = min(max(SCAN_CHUNK, need), size - pos)
            buf = reader.pread(want, pos)
            batches, end, error = scan_batches(buf, expected_base=expected)
            for s, e, base, delta, max_ts, _count, _pid, _attrs in batches:
                if index:
                    self._on_batch(pos + s, e - s, base + delta, max_ts)
                else:
                    self._track_max(base + delta, max_ts)
                expected = base + delta + 1
            self.next_offset = expected
            if error is None:
                pos += end
                need = 0
                continue
            if error.truncated and pos + len(buf) < size:
                # The chunk ended inside a batch: read on from that batch, all of it at once
                # if it is bigger than a chunk.
                need = 0
                if end == 0:
                    need = (
                        _I32.unpack_from(buf, 8)[0] + LOG_OVERHEAD
                        if len(buf) >= LOG_OVERHEAD
                        else HEADER_SIZE
                    )
                    if pos + need > size:
                        return Damage(pos, f"truncated: batch needs {need} bytes, "
                                      f"{size - pos} left", torn=False)
                pos += end
                continue
            return Damage(pos + error.position, error.reason, torn=False)
        return None

    def _valid_batch_after(self, position: int, expected_base: int) -> bool:
        """Is there a CRC-valid batch, with a plausible offset, anywhere after `position`?

        Tells damage in the middle of the active segment (valid batches follow) from a torn
        tail (only garbage follows).
        """
        return self.next_valid_batch(position, expected_base) is not None

    def next_valid_batch(self, position: int, expected_base: int) -> tuple[int, int] | None:
        """(byte position, base offset) of the first CRC-valid batch after `position` whose
        base offset is at or after `expected_base`, else None. Candidates are found by their
        magic byte."""
        reader = self._reader()
        size = self.size
        pos = position + 1
        while pos + HEADER_SIZE <= size:
            buf = reader.pread(min(SCAN_CHUNK, size - pos), pos)
            i = buf.find(b"\x02", 16)
            while i >= 0:
                q = i - 16
                base, length = _BASE_AND_LENGTH.unpack_from(buf, q)
                total = length + LOG_OVERHEAD
                if (
                    0 <= base - expected_base < 2**31
                    and length >= MIN_BATCH_LENGTH
                    and pos + q + total <= size
                ):
                    batch = (
                        buf[q : q + total]
                        if q + total <= len(buf)
                        else reader.pread(total, pos + q)
                    )
                    crc = _HEADER.unpack_from(batch, 0)[4]
                    if crc32c(memoryview(batch)[21:]) == crc:
                        return pos + q, base
                i = buf.find(b"\x02", i + 1)
            if len(buf) <= HEADER_SIZE:
                break
            pos += len(buf) - 16
        return None

    def copy_tail(self, position: int, path: Path) -> None:
        """Copy the bytes from `position` to the end of the file into a new file `path`
        (written to a temporary name, fsynced, renamed, directory fsynced)."""
        reader = self._reader()
        tmp = path.with_name(path.name + ".tmp")
        self.fs.remove(tmp)
        out = self.fs.open_append(tmp)
        try:
            pos = position
            while pos < self.size:
                chunk = reader.pread(min(SCAN_CHUNK, self.size - pos), pos)
                if not chunk:
                    break
                out.write(chunk)
                pos += len(chunk)
            out.fsync()
        except BaseException:
            out.close()
            self.fs.remove(tmp)
            raise
        out.close()
        self.fs.rename(tmp, path)
        self.fs.fsync_dir(path.parent)

    def _check_tail(self) -> bool:
        """Verify the batches after the last offset index entry; learn `next_offset`."""
        if not self._index_offsets:
            return False  # nothing to start from: the full scan is as cheap
        position = self._index_positions[-1]
        last = self._index_offsets[-1]
        head = self._reader().pread(HEADER_SIZE, position)
        if len(head) < HEADER_SIZE:
            return False
        header = _HEADER.unpack_from(head, 0)
        base = header[0]
        if base + header[6] != last:
            return False
        if self._time_stamps:
            self.max_timestamp = self._time_stamps[-1]
            self.offset_of_max_timestamp = self._time_offsets[-1]
        if self._scan(position, base, index=False) is not None:
            return False
        return not (self._time_offsets and self._time_offsets[-1] >= self.next_offset)

    # ---------------------------------------------------------------- indexes

    def _reset_indexes(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        self._index_offsets = array("q")
        self._index_positions = array("q")
        self._time_stamps = array("q")
        self._time_offsets = array("q")

    def _track_max(self, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset

    def _on_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        """Account one batch appended at `position` (Kafka's `LogSegment.append` rule)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index > self._interval:
            self._index_offsets.append(last_offset)
            self._index_positions.append(position)
            self._maybe_append_time_entry()
            self._bytes_since_index = 0
        self._bytes_since_index += size

    def _maybe_append_time_entry(self) -> None:
        if self.max_timestamp >= 0 and (
            not self._time_stamps or self.max_timestamp > self._time_stamps[-1]
        ):
            self._time_stamps.append(self.max_timestamp)
            self._time_offsets.append(self.offset_of_max_timestamp)

    def _load_indexes(self) -> bool:
        """Read and sanity-check the index files; False if absent or not trustworthy."""
        try:
            raw = self.fs.read_bytes(self.index_path)
            raw_time = self.fs.read_bytes(self.time_index_path)
        except OSError:
            return False
        if len(raw) % OFFSET_ENTRY.size or len(raw_time) % TIME_ENTRY.size:
            return False
        pairs = array("i")
        pairs.frombytes(raw)
        if not _BIG_ENDIAN:
            pairs.byteswap()
        base = self.base_offset
        offsets = array("q", (base + rel for rel in pairs[0::2]))
        positions = array("q", pairs[1::2])
        if not _strictly_increasing(offsets) or not _strictly_increasing(positions):
            return False
        if offsets and (offsets[0] < base or positions[0] < 0 or positions[-1] >= self.size):
            return False
        stamps = array("q")
        time_offsets = array("q")
        for stamp, rel in TIME_ENTRY.iter_unpack(raw_time):
            stamps.append(stamp)
            time_offsets.append(base + rel)
        if not _strictly_increasing(stamps) or (stamps and stamps[0] < 0):
            return False
        if any(b < a for a, b in itertools.pairwise(time_offsets)):
            return False
        if time_offsets and time_offsets[0] < base:
            return False
        self._index_offsets, self._index_positions = offsets, positions
        self._time_stamps, self._time_offsets = stamps, time_offsets
        return True

    def write_indexes(self, *, only_if_changed: bool = False) -> None:
        """Write both index files from memory (atomically, fsynced)."""
        base = self.base_offset
        pairs = array("i", [0]) * (2 * len(self._index_offsets))
        pairs[0::2] = array("i", (o - base for o in self._index_offsets))
        pairs[1::2] = array("i", self._index_positions)
        if not _BIG_ENDIAN:
            pairs.byteswap()
        time_raw = b"".join(
            TIME_ENTRY.pack(stamp, offset - base)
            for stamp, offset in zip(self._time_stamps, self._time_offsets, strict=True)
        )
        for path, raw in ((self.index_path, pairs.tobytes()), (self.time_index_path, time_raw)):
            if only_if_changed and self._file_equals(path, raw):
                continue
            self.fs.write_atomic(path, raw)

    def _file_equals(self, path: Path, raw: bytes) -> bool:
        try:
            return self.fs.read_bytes(path) == raw
        except OSError:
            return False

    # ---------------------------------------------------------------- append side

    @property
    def is_active(self) -> bool:
        return self._active

    @property
    def is_open(self) -> bool:
        return self._handle is not None

    @property
    def empty(self) -> bool:
        return self.size == 0

    def append(
        self,
        data: bytes | bytearray,
        batches: list[tuple[int, int, int, int]],
        next_offset: int,
        now_ms: int,
        *,
        fsync: bool,
    ) -> None:
        """Write `data` (whole batches, offsets assigned) with one write call.

        `batches` holds `(start in data, size, last offset, max timestamp)` per batch. A
        failed write is cut back to where it was and the cut verified (the file's size is
        `size` again), nothing is indexed, and the `OSError` is raised: a failed append leaves
        no trace a reader (or a restart) could see. Raises `LogOfflineError` when the fsync
        fails or the cut cannot be made or verified (the segment's tail is then unknown).
        """
        assert self._active, "append to a sealed segment"
        writer = self._writer
        if writer is None:
            writer = self._reopen_writer()
        elif self._lru is not None:
            self._lru.move_to_end(self)
        try:
            writer.write(data)
        except OSError as exc:
            self._rollback(writer, exc)
            raise
        if fsync:
            try:
                writer.fsync()
            except OSError as exc:
                # Cut what did not become durable, so a restart does not bring it back.
                with contextlib.suppress(OSError):
                    self._rollback(writer, exc)
                raise LogOfflineError(self.path, exc, "fsync failed") from exc
        self._dirty = not fsync
        position = self.size
        for start, size, last_offset, max_timestamp in batches:
            self._on_batch(position + start, size, last_offset, max_timestamp)
        self.size = position + len(data)
        self.next_offset = next_offset
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms

    def _rollback(self, writer: AppendHandle, cause: OSError) -> None:
        """Cut the file back to `size` after a failed write and check that it is."""
        try:
            writer.truncate(self.size)
            actual = writer.size()
        except OSError as exc:
            raise LogOfflineError(self.path, exc, f"rollback of a failed write ({cause}) "
                                  "failed") from exc
        if actual != self.size:
            raise LogOfflineError(self.path, cause, f"rollback of a failed write left "
                                  f"{actual} bytes, expected {self.size}")

    def flush(self) -> None:
        """fsync the segment file (raises OSError). Nothing to do when it is closed: a closed
        segment is clean."""
        writer = self._writer
        if writer is not None:
            # Cleared first: an append racing this fsync sets it again, and everything written
            # before it is covered by this fsync.
            self._dirty = False
            writer.fsync()

    def offloaded_fsync(self) -> OffloadedFsync | None:
        """What `flush` and `still_named` do, for a thread that runs without the interpreter
        (`storage.fsync_offload`): a descriptor of its own for the file (the log may close or
        roll the segment meanwhile), the path and the file's (device, inode). None when the
        segment is closed or not on the real file system (a test's faulty one fsyncs through
        `flush`)."""
        writer = self._writer
        if writer is None or type(writer) is not AppendHandle or type(self.fs) is not FileSystem:
            return None
        identity = writer.identity()
        fd = os.dup(writer.fileno())
        self._dirty = False  # as in `flush`: an append racing the fsync sets it again
        return OffloadedFsync(fd, os.fsencode(self.path), identity[0], identity[1])

    @property
    def dirty(self) -> bool:
        return self._dirty

    def still_named(self) -> bool:
        """Does the segment's path still name the open file? False when it was deleted or
        replaced behind the log's back (appends would go to a file no restart can see)."""
        handle = self._handle
        if handle is None:
            return self.fs.exists(self.path)
        return self.fs.same_file(self.path, handle)

    def seal(self) -> None:
        """Make this segment read-only: fsync it and write its index files."""
        assert self._active, "seal of a sealed segment"
        writer = self._writer
        if writer is not None:  # else closed by the budget, and so already fsynced
            writer.fsync()
            self._dirty = False
        self._maybe_append_time_entry()
        self.write_indexes()
        self._writer = None  # the descriptor stays open for reads
        self._active = False  # last: from here on the budget may close it as sealed
        if self._budget is not None:
            self._budget.now_sealed(self)

    def reactivate(self) -> None:
        """Make a sealed segment appendable again (a failed roll, `truncate_to`, a repair)."""
        if self._writer is not None:
            return
        self._active = True
        if isinstance(self._handle, AppendHandle):
            self._writer = self._handle
            self._move_to(active=True)
            return
        if self._handle is not None:
            self.close_files()
        self._reopen_writer()

    def cut(self, position: int) -> None:
        """Cut the file at `position`, where a scan stopped: the indexes already end there."""
        self.reactivate()
        writer = self._writer
        assert writer is not None
        writer.truncate(position)
        writer.fsync()
        actual = writer.size()
        if actual != position:
            raise OSError(errno.EIO, f"{self.path}: cut to {position} bytes left {actual}")
        self.size = position

    def truncate(self, position: int) -> None:
        """Cut the file at `position` (a batch boundary) and rebuild the indexes for the rest."""
        self.cut(position)
        self._reset_indexes()
        damage = self._scan(0, self.base_offset)
        assert damage is None, f"{self.path}: damage below a truncation point: {damage}"

    # ---------------------------------------------------------------- read side

    def _reader(self) -> ReadHandle:
        handle = self._handle
        if handle is None:
            if self._active:
                return self._reopen_writer()
            handle = self._handle = self.fs.open_read(self.path)
            self._registered(active=False)
        elif self._lru is not None:
            self._lru.move_to_end(self)
        return handle

    def _reopen_writer(self) -> AppendHandle:
        """Open the file of an appendable segment again (it was closed clean by the budget).
        It must still be the file this segment describes: same size, still there. Raises
        `LogOfflineError` if not (appending would put records where no index or restart
        expects them), `OSError` if it cannot be opened."""
        try:
            writer = self.fs.open_append(self.path, create=False)
        except FileNotFoundError as exc:
            raise LogOfflineError(self.path, exc, "segment file missing") from exc
        try:
            actual = writer.size()
        except BaseException:
            writer.close()
            raise
        if actual != self.size:
            writer.close()
            raise LogOfflineError(self.path, OSError(errno.EIO, "the segment file changed "
                                  "while closed"), f"segment file has {actual} bytes, "
                                  f"expected {self.size}")
        self._handle = self._writer = writer
        self._registered(active=True)
        return writer

    def adopt(self, budget: DescriptorBudget, owner: SegmentOwner) -> None:
        """Put this segment's file under `budget` (see the module docstring). On a thread
        other than the budget's, the file is closed here (fsynced first if dirty) and
        reopened on the owner thread when first used."""
        self._budget = budget
        self._owner = owner
        if self._handle is None:
            return
        if budget.on_owner_thread():
            self._registered(active=self._active)
            return
        if self._dirty:
            self.flush()
        self.close_files()

    def _registered(self, *, active: bool) -> None:
        budget = self._budget
        if budget is not None and budget.on_owner_thread():
            self._lru = budget.opened(self, active=active)

    def _move_to(self, *, active: bool) -> None:
        lru = self._lru
        if lru is not None:
            del lru[self]
            self._lru = None
            self._registered(active=active)

    def try_close_idle(self) -> bool:
        """For the budget: close this segment's file if nothing else can be using it. A sealed
        segment is closed at once, an active one by its log (fsynced first); False if in use
        (a rolled segment waiting for its seal, or a log being flushed)."""
        if self._handle is None:
            self._forget()
            return True
        if not self._active:
            self.close_files()
            return True
        owner = self._owner
        return owner is not None and owner.close_idle_active(self)

    def _forget(self) -> None:
        lru, self._lru = self._lru, None
        if lru is not None:
            lru.pop(self, None)

    def _lookup(self, offset: int) -> int:
        """Byte position to start walking from to reach the batch holding `offset`."""
        i = bisect_right(self._index_offsets, offset) - 1
        return self._index_positions[i] if i >= 0 else 0

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `offset`, at most `max_bytes` of them, but at
        least one. `offset` must be in `[base_offset, next_offset)`.

        A small read (a consumer near the tail) is one `pread` of the batches plus the walk
        from the index entry before them. A large read first finds where the last whole batch
        ends (index jump, then a short header walk) and then reads exactly that range, so the
        data is copied once.
        """
        reader = self._reader()
        end = self.size
        pos = self._lookup(offset)
        want = max(max_bytes, 0)
        window = (want if want <= INLINE_READ else 0) + self._interval + HEADER_SIZE
        if end - pos <= INLINE_READ:
            window = INLINE_READ  # near the tail: everything left in one read
        buf = reader.pread(min(window, end - pos), pos)
        q = 0
        unpack = _HEADER.unpack_from
        while True:
            if q + HEADER_SIZE > len(buf):
                pos += q
                if pos >= end:
                    return b""
                buf = reader.pread(min(window, end - pos), pos)
                q = 0
                if len(buf) < HEADER_SIZE:
                    return b""
            header = unpack(buf, q)
            size = header[1] + LOG_OVERHEAD
            if header[0] + header[6] >= offset:
                break
            q += size
        start = pos + q
        limit = start + min(max(size, want), end - start)
        # The furthest indexed batch start inside the range is a boundary for free.
        cut = start + size
        i = bisect_right(self._index_positions, limit) - 1
        if i >= 0 and self._index_positions[i] > cut:
            cut = self._index_positions[i]
        if limit - pos <= len(buf):
            length_at = _I32.unpack_from
            while cut + LOG_OVERHEAD <= limit:
                nxt = cut + length_at(buf, cut - pos + 8)[0] + LOG_OVERHEAD
                if nxt > limit:
                    break
                cut = nxt
            if q == 0 and cut - pos == len(buf):
                return buf
            return buf[q : cut - pos]
        cut = self._last_boundary(cut, limit)
        return reader.pread(cut - start, start)

    def _last_boundary(self, position: int, limit: int) -> int:
        """The furthest batch end <= `limit` reachable by walking headers from `position`."""
        reader = self._reader()
        length_at = _I32.unpack_from
        while position + LOG_OVERHEAD <= limit:
            window = reader.pread(min(limit - position, WALK_WINDOW), position)
            q = 0
            while q + LOG_OVERHEAD <= len(window):
                nxt = q + length_at(window, q + 8)[0] + LOG_OVERHEAD
                if position + nxt > limit:
                    return position + q
                q = nxt
            if q == 0:
                break
            position += q
        return position

    def _headers_from(self, position: int) -> Iterator[_Located]:
        reader = self._reader()
        end = self.size
        unpack = _HEADER.unpack_from
        while position < end:
            buf = reader.pread(min(HEADER_CHUNK, end - position), position)
            q = 0
            while q + HEADER_SIZE <= len(buf):
                header = unpack(buf, q)
                size = header[1] + LOG_OVERHEAD
                yield _Located(position + q, header[0], header[0] + header[6], header[8], size)
                q += size
            if q == 0:
                return
            position += q

    def locate(self, offset: int) -> _Located | None:
        """The batch holding `offset`, if this segment has it."""
        if not self.base_offset <= offset < self.next_offset:
            return None
        for batch in self._headers_from(self._lookup(offset)):
            if batch.last_offset >= offset:
                return batch
        return None

    def read_batch(self, batch: _Located) -> bytes:
        return self._reader().pread(batch.size, batch.position)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp_ms`."""
        if self.size == 0 or self.max_timestamp < timestamp_ms:
            return None
        i = bisect_right(self._time_stamps, timestamp_ms) - 1
        from_offset = self._time_offsets[i] if i >= 0 else self.base_offset
        for batch in self._headers_from(self._lookup(from_offset)):
            if batch.max_timestamp >= timestamp_ms:
                try:
                    return first_record_at_or_after(self.read_batch(batch), timestamp_ms)
                except CorruptRecordError:
                    # The producer's records do not parse; the batch is still the answer.
                    return batch.base_offset, batch.max_timestamp
        raise AssertionError(f"{self.path}: max timestamp {self.max_timestamp} not found")

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying this segment's max timestamp."""
        if self.max_timestamp < 0:
            return None
        batch = self.locate(self.offset_of_max_timestamp)
        assert batch is not None
        try:
            offset = first_record_with_timestamp(self.read_batch(batch), self.max_timestamp)
        except CorruptRecordError:
            offset = batch.last_offset
        return offset, self.max_timestamp

    def largest_timestamp(self) -> int:
        """For time retention: the max timestamp, else the file's modification time."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.fs.mtime_ms(self.path)

    # ---------------------------------------------------------------- lifetime

    def close_files(self) -> None:
        """Close the descriptor (no fsync). Safe to call twice."""
        handle, self._handle, self._writer = self._handle, None, None
        self._forget()
        if handle is not None:
            handle.close()

    def close(self) -> None:
        """fsync and write the indexes if active, then close the descriptor."""
        try:
            if self._active:
                if self._writer is not None:  # else closed by the budget, already fsynced
                    self._writer.fsync()
                    self._dirty = False
                self._maybe_append_time_entry()
                self.write_indexes()
        finally:
            self.close_files()

    def delete(self) -> None:
        """Close and remove this segment's files (the `.log` first)."""
        self.close_files()
        self.fs.remove(self.path)
        self.fs.remove(self.index_path)
        self.fs.remove(self.time_index_path)


def _strictly_increasing(values: array[int]) -> bool:
    return all(b > a for a, b in itertools.pairwise(values))
