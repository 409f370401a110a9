"""The append-only partition log: a directory of segments, appended to and read by offset.

`PartitionLog` owns one `<data_dir>/<topic>-<partition>/` directory. It validates and stores
Produce `records` fields as they came (assigning offsets by rewriting each batch's base offset),
serves Fetch reads of whole batches, answers ListOffsets, rolls segments, applies retention and
recovers after a crash. What the records mean is left to the callers (the data plane, the group
log); so are replication and the high watermark beyond "everything appended" (one node).

Theory of operation
-------------------
* **Append** validates every batch of the request first (framing, magic, CRC-32C, record count),
  so a bad request writes nothing. It then rewrites base offsets and the leader epoch in a copy
  of the request, and hands the whole thing to the active segment as one `write()`. The end
  offset, the tail position and the indexes are updated in memory only after the write (and the
  fsync, if configured) succeeded; on an `OSError` the file is cut back, so a failed append is
  neither readable nor recovered after a restart. `append_records` takes key/value records
  instead and builds their batch itself, already at its offset: nothing to check or copy.
* **Roll**: before an append that would push the active segment past `segment_bytes` (or past
  the int32 limits of the index entries, or older than `segment_ms`), a new segment named by
  the log end offset becomes the active one at once, and the old one is *sealed* (fsynced,
  then its index files written) on a worker thread, so a roll of a large segment does not
  stall the caller. `flush()` first finishes any seal still pending, so whatever it makes
  durable has every earlier segment durable too. A crash can tear the last segment, or a
  rolled segment whose seal did not finish (it has no index files): both are cut at the tear
  on open, and the segments after an interrupted seal are dropped (nothing in them was
  flushed, since a flush completes the seal first).
* **Recovery** (`open`): the last segment is CRC-checked batch by batch. Damage at its end with
  no valid batch after it is a torn write and is cut off. Damage anywhere else (valid batches
  follow it, or it is in a sealed segment) raises `CorruptLogError(path, position)` unless
  `repair=True`, which keeps every intact batch: the damaged stretch is cut out, the valid
  batches after it move to a new segment named by their first offset, later segments stay,
  and each loss is logged (file, bytes, offsets). A gap between segments (a segment file lost)
  is tolerated as Kafka does: a warning names the missing offsets, reads skip the gap. A
  recovery point left by `discard_after` cuts the log back to it.
* **Disk errors**: a failed write is rolled back and the rollback verified; a failed fsync, or a
  rollback that fails, takes the log offline (`LogOfflineError`, never retried). A segment
  file deleted while the log is open is noticed by the next flush (the active one: offline),
  read or roll (a sealed one: reported).
* **Open files**: given a `DescriptorBudget` (topic partitions; see `storage/descriptors.py`),
  segment files open on first use and the budget closes the least recently used ones: sealed
  first, then idle active ones once fsynced (`close_idle_active`; a failed fsync there takes
  the log offline). The group log has no budget and keeps its files open.
* **Durability**: `append` does not fsync unless `fsync_each_append`; `flush()` fsyncs the active
  segment (after completing pending seals). `flush()` and the seal of a rolled segment may run on
  a worker thread while the owning thread appends: they hold a lock that rolls, truncation,
  retention deletes and `close()` also take.

Raises (public methods): `CorruptRecordError` and subclasses (bad Produce input),
`OffsetOutOfRange`, `CorruptLogError` (open), `LogClosedError`, `OSError` (disk); anything else
is a bug.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from pathlib import Path

import structlog

from storage.batch import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    scan_batches,
    set_base_offset,
    set_leader_epoch,
    set_log_append_time,
)
from storage.descriptors import DescriptorBudget
from storage.fs import REAL_FS, FileSystem
from storage.fsync_offload import OffloadedFsync
from storage.record_batch import encode_batch
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_SEGMENT_POSITION,
    TIME_INDEX_SUFFIX,
    CorruptLogError,
    LogOfflineError,
    Segment,
    parse_segment_name,
)

__all__ = [
    "AppendInfo",
    "CorruptLogError",
    "CorruptRecordError",
    "InvalidConfigError",
    "LogClosedError",
    "LogConfig",
    "LogOfflineError",
    "OffsetOutOfRange",
    "PartitionLog",
]

log = structlog.get_logger("rebalanced.storage")

# Seals rolled segments (fsync + index files) off the appending thread; one thread keeps seals
# in roll order and bounds the disk work they add.
_SEALER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="segment-seal")

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
_WEEK_MS = 7 * 24 * 3600 * 1000


# Written by `discard_after` when an offline log's tail could not be cut: the offset the next
# `open` cuts the log back to.
RECOVERY_POINT = "recovery-point"


class InvalidConfigError(ValueError):
    """A topic config value the log cannot use. CreateTopics maps this to INVALID_CONFIG."""


class OffsetOutOfRange(Exception):
    """An offset outside `[log_start_offset, log_end_offset]`. Fetch maps this to
    OFFSET_OUT_OF_RANGE."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class LogClosedError(RuntimeError):
    """The log was closed or deleted (a topic deleted while a request was in flight)."""


@dataclass
class LogConfig:
    """Per-partition log settings; `with_overrides` applies Kafka topic configs."""

    segment_bytes: int = 1 << 30
    retention_ms: int = _WEEK_MS  # -1 keeps data forever
    retention_bytes: int = -1  # -1: no size limit
    index_interval_bytes: int = 4096
    fsync_each_append: bool = False
    segment_ms: int = _WEEK_MS
    max_message_bytes: int = 1048588
    message_timestamp_type: str = CREATE_TIME

    def with_overrides(self, configs: Mapping[str, str]) -> LogConfig:
        """A copy with the Kafka topic configs in `configs` applied.

        Known keys: segment.bytes, segment.ms, retention.ms, retention.bytes,
        index.interval.bytes, max.message.bytes, message.timestamp.type, flush.messages
        (1 means fsync every append). Other keys are accepted and ignored here.
        Raises `InvalidConfigError` on a bad value for a known key.
        """
        changes: dict[str, object] = {}
        for key, value in configs.items():
            rule = _TOPIC_CONFIGS.get(key)
            if rule is None:
                continue
            attribute, minimum = rule
            if attribute == "message_timestamp_type":
                if value not in (CREATE_TIME, LOG_APPEND_TIME):
                    raise InvalidConfigError(
                        f"{key}={value!r}: expected CreateTime or LogAppendTime"
                    )
                changes[attribute] = value
                continue
            try:
                number = int(value)
            except (TypeError, ValueError):
                raise InvalidConfigError(f"{key}={value!r}: not an integer") from None
            if number < minimum or number > 2**63 - 1:
                raise InvalidConfigError(f"{key}={value!r}: must be at least {minimum}")
            if attribute == "fsync_each_append":
                changes[attribute] = number == 1
            else:
                changes[attribute] = number
        return replace(self, **changes)  # type: ignore[arg-type]


# Kafka topic config -> (LogConfig attribute, minimum value).
_TOPIC_CONFIGS: dict[str, tuple[str, int]] = {
    "segment.bytes": ("segment_bytes", 14),
    "segment.ms": ("segment_ms", 1),
    "retention.ms": ("retention_ms", -1),
    "retention.bytes": ("retention_bytes", -1),
    "index.interval.bytes": ("index_interval_bytes", 0),
    "max.message.bytes": ("max_message_bytes", 0),
    "message.timestamp.type": ("message_timestamp_type", 0),
    "flush.messages": ("fsync_each_append", 1),
}
assert {a for a, _ in _TOPIC_CONFIGS.values()} <= {f.name for f in fields(LogConfig)}


@dataclass(frozen=True)
class AppendInfo:
    """Where an append landed. All -1 for an empty `records` field (nothing written)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime


def _segment_missing(path: Path) -> LogOfflineError:
    """The active segment's path no longer names the open file (checked after its fsync)."""
    return LogOfflineError(path, FileNotFoundError(
        errno.ENOENT, "the active segment file was deleted or replaced while open"),
        "segment file missing")


class PartitionLog:
    """One partition's segmented log. See the module docstring."""

    def __init__(
        self, directory: Path, config: LogConfig, fs: FileSystem, segments: list[Segment],
        budget: DescriptorBudget | None = None,
    ) -> None:
        assert segments and segments[-1].is_active
        self.directory = directory
        self.config = config
        self.fs = fs
        # Stamped into every appended batch's partitionLeaderEpoch (no replication: constant).
        self.leader_epoch = 0
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._lock = threading.Lock()
        self._closed = False
        # Rolled segments not sealed yet, oldest first (see `_roll`); guarded by `_lock`.
        self._unsealed: list[Segment] = []
        self._seal_lock = threading.Lock()
        # Set once for good when the files can no longer be trusted (see `LogOfflineError`).
        self.offline: LogOfflineError | None = None
        self._reported_missing: set[int] = set()
        # (first offset, end offset) of each segment noticed missing, until its owner takes
        # them (`take_lost_segments`): what it held can only be written again from elsewhere.
        self.lost_segments: list[tuple[int, int]] = []
        self.budget = budget
        if budget is not None:
            for seg in segments:
                seg.adopt(budget, self)

    # ---------------------------------------------------------------- open and recovery

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        fs: FileSystem = REAL_FS,
        *,
        repair: bool = False,
        budget: DescriptorBudget | None = None,
    ) -> PartitionLog:
        """Open (creating if absent) and recover the log in `directory`. With a `budget`,
        its segment files are opened and closed under it (see the module docstring).

        Raises `CorruptLogError` on damage that is not a torn tail (see the module docstring)
        unless `repair`, which also CRC-checks every sealed segment; `OSError`.
        """
        fs.makedirs(directory)
        names = fs.listdir(directory)
        bases = sorted(b for n in names if (b := parse_segment_name(n, LOG_SUFFIX)) is not None)
        live = set(bases)
        for name in names:
            if name.endswith(".tmp"):
                fs.remove(directory / name)
                continue
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                base = parse_segment_name(name, suffix)
                if base is not None and base not in live:
                    fs.remove(directory / name)
        interval = config.index_interval_bytes
        if not bases:
            return cls(directory, config, fs, [Segment.create(fs, directory, 0, interval)],
                       budget)

        recovery_point = _read_recovery_point(fs, directory) if RECOVERY_POINT in names else None
        segments: list[Segment] = []
        try:
            cls._recover(fs, directory, interval, bases, segments, repair)
            for seg in segments[:-1]:
                if seg.is_active:  # cut by a repair that kept segments after it
                    seg.seal()
            segments[-1].reactivate()
        except BaseException:
            for seg in segments:
                seg.close_files()
            raise
        opened = cls(directory, config, fs, segments, budget)
        if recovery_point is not None:
            opened._cut_to_recovery_point(recovery_point)
        return opened

    @staticmethod
    def _recover(fs: FileSystem, directory: Path, interval: int, bases: list[int],
                 segments: list[Segment], repair: bool) -> None:
        """Open the segments named by `bases` into `segments` (see the module docstring).

        A repair keeps every intact batch: a damaged stretch is cut out of its segment and
        the valid batches after it (found by their CRC) move to a new segment named by their
        first offset, so only the damaged bytes are lost; each loss is logged with its file,
        byte range and offsets.
        """
        pending = list(bases)
        i = 0
        while i < len(pending):
            base = pending[i]
            last = i == len(pending) - 1
            prev = segments[-1] if segments else None
            if prev is not None and base < prev.next_offset:
                path = directory / f"{base:020d}{LOG_SUFFIX}"
                reason = (f"the segment file starts at offset {base}, inside the previous "
                          f"segment, which ends at offset {prev.next_offset}")
                if not repair:
                    raise CorruptLogError(path, 0, reason)
                log.warning("repair dropped a segment", path=str(path), reason=reason,
                            bytes_dropped=fs.getsize(path))
                _remove_segment_files(fs, directory, [base])
                del pending[i]
                continue
            if prev is not None and base > prev.next_offset:
                # Kafka tolerates offset gaps: what the lost segment held is gone, the
                # segments after it are kept (and reads skip the gap).
                log.warning("log has a gap", directory=str(directory),
                            missing_offsets=f"[{prev.next_offset}, {base})",
                            reason="a segment file is missing, or a repair cut damage out")
            # A rolled segment without index files: its seal (fsync, then index files) did
            # not finish before a crash, so its tail may be torn like the active one's.
            interrupted_seal = not last and not fs.exists(
                directory / f"{base:020d}{INDEX_SUFFIX}"
            )
            seg, damage = Segment.open_existing(
                fs, directory, base, interval, active=last, full_scan=repair
            )
            if damage is None:
                segments.append(seg)
                i += 1
                continue
            if damage.torn and (last or (interrupted_seal and not repair)):
                # A crash's torn tail. After an interrupted seal nothing later was flushed.
                if not last:
                    log.warning("cut a rolled segment whose seal a crash interrupted",
                                path=str(seg.path), position=damage.position,
                                segments_dropped=len(pending) - i - 1)
                seg.cut(damage.position)
                segments.append(seg)
                _remove_segment_files(fs, directory, pending[i + 1 :])
                return
            if not repair:
                seg.close_files()
                raise CorruptLogError(seg.path, damage.position, damage.reason)
            next_base = None if last else pending[i + 1]
            salvage = seg.next_valid_batch(damage.position, seg.next_offset)
            if salvage is not None and (salvage[1] <= base
                                        or (next_base is not None and salvage[1] >= next_base)):
                # It would overlap this segment's name or the next segment (kept instead).
                salvage = None
            if salvage is not None:
                position, salvaged_base = salvage
                seg.copy_tail(position, directory / f"{salvaged_base:020d}{LOG_SUFFIX}")
                pending.insert(i + 1, salvaged_base)
                lost_to: int | None = salvaged_base
            else:
                position, lost_to = seg.size, next_base
            log.warning("repair dropped damaged bytes", path=str(seg.path),
                        bytes=f"[{damage.position}, {position})",
                        offsets=f"[{seg.next_offset}, {lost_to if lost_to is not None else ''})",
                        reason=damage.reason,
                        kept_after="the batches after the damage" if salvage is not None
                        else "the segments after this one" if next_base is not None
                        else "nothing: this was the end of the log")
            seg.cut(damage.position)
            segments.append(seg)
            i += 1

    def _cut_to_recovery_point(self, offset: int) -> None:
        end = self.log_end_offset
        if offset < end:
            self.truncate_to(max(offset, self.log_start_offset))
            log.warning("log cut back to its recovery point", directory=str(self.directory),
                        offset=self.log_end_offset, records_dropped=end - self.log_end_offset,
                        reason="an earlier run stopped on a disk error before it could cut "
                        "records that were answered with an error")
        self.fs.remove(self.directory / RECOVERY_POINT)
        self.fs.fsync_dir(self.directory)

    # ---------------------------------------------------------------- offsets

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign; also the high watermark (no replication)."""
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    # ---------------------------------------------------------------- append

    def append(self, records: bytes | bytearray | memoryview, now_ms: int) -> AppendInfo:
        """Append one Produce `records` field; returns the offsets it got.

        Raises `CorruptRecordError` (bad framing, magic, CRC, trailing bytes),
        `InvalidRecordError` (empty batch, last_offset_delta != records_count - 1),
        `MessageTooLargeError` (a batch over `max_message_bytes`) before writing anything;
        `OSError` if the write (or the configured fsync) fails, leaving the log unchanged;
        `LogClosedError`.
        """
        self._check_usable()
        batches, _, error = scan_batches(records)
        if error is not None:
            raise error
        if not batches:
            return AppendInfo(-1, -1, -1)
        limit = self.config.max_message_bytes
        for start, end, _base, delta, _ts, count, _pid, _attrs in batches:
            if count < 1 or delta != count - 1:
                raise InvalidRecordError(
                    f"records_count {count} does not match last_offset_delta {delta}",
                    position=start,
                )
            if end - start > limit:
                raise MessageTooLargeError(
                    f"batch of {end - start} bytes exceeds max.message.bytes {limit}",
                    position=start,
                )
        buf = bytearray(records)
        log_append_time = self.config.message_timestamp_type == LOG_APPEND_TIME
        first = next_offset = self.log_end_offset
        epoch = self.leader_epoch
        entries: list[tuple[int, int, int, int]] = []
        for start, end, _base, delta, max_ts, _count, _pid, _attrs in batches:
            set_base_offset(buf, start, next_offset)
            set_leader_epoch(buf, start, epoch)
            if log_append_time:
                set_log_append_time(buf, start, end, now_ms)
                max_ts = now_ms
            next_offset += delta + 1
            entries.append((start, end - start, next_offset - 1, max_ts))
        segment = self._segments[-1]
        if self._should_roll(segment, len(buf), next_offset, now_ms):
            segment = self._roll()
        self._append(segment, buf, entries, next_offset, now_ms)
        return AppendInfo(first, next_offset - 1, now_ms if log_append_time else -1)

    def append_records(self, records: Sequence[tuple[bytes, bytes | None]],
                       timestamp_ms: int) -> AppendInfo:
        """Append key/value `records` (a None value is a tombstone) as one uncompressed batch
        built here, at the log end offset and with the leader epoch stamped, as `append` would
        store it. The group log writes through this: a batch built by `encode_batch` needs
        none of the checks `append` makes of a client's bytes, and skipping them (the walk,
        the CRC, the copy) is most of the cost of storing a small commit.

        Raises `InvalidRecordError` (no records), `MessageTooLargeError`, `OSError` (the log is
        left unchanged), `LogClosedError`.
        """
        self._check_usable()
        if not records:
            raise InvalidRecordError("a batch needs at least one record", position=0)
        first = self.log_end_offset
        batch = encode_batch(records, timestamp_ms, first, self.leader_epoch)
        if len(batch) > self.config.max_message_bytes:
            raise MessageTooLargeError(
                f"batch of {len(batch)} bytes exceeds max.message.bytes "
                f"{self.config.max_message_bytes}", position=0)
        if self.config.message_timestamp_type == LOG_APPEND_TIME:
            return self.append(batch, timestamp_ms)  # the timestamps are rewritten there
        next_offset = first + len(records)
        segment = self._segments[-1]
        if self._should_roll(segment, len(batch), next_offset, timestamp_ms):
            segment = self._roll()
        self._append(segment, batch, [(0, len(batch), next_offset - 1, timestamp_ms)],
                     next_offset, timestamp_ms)
        return AppendInfo(first, next_offset - 1, -1)

    def _append(self, segment: Segment, data: bytes | bytearray,
                entries: list[tuple[int, int, int, int]], next_offset: int, now_ms: int) -> None:
        try:
            segment.append(data, entries, next_offset, now_ms,
                           fsync=self.config.fsync_each_append)
        except LogOfflineError as exc:
            raise self._go_offline(exc) from exc.cause

    def _check_usable(self) -> None:
        if self._closed:
            raise LogClosedError(f"{self.directory}: log is closed")
        if self.offline is not None:
            raise self.offline

    def _go_offline(self, exc: LogOfflineError) -> LogOfflineError:
        """Take the log offline for good (the first failure is the one reported); one error
        line names the file and the error."""
        with self._lock:
            first = self.offline is None
            if first:
                self.offline = exc
        if first:
            log.error("log offline", path=str(exc.path), error=str(exc.cause), failed=exc.what)
        return self.offline or exc

    def _offline_from(self, exc: OSError, path: Path, what: str) -> LogOfflineError:
        if isinstance(exc, LogOfflineError):
            return self._go_offline(exc)
        return self._go_offline(LogOfflineError(path, exc, what))

    def _should_roll(self, seg: Segment, size: int, next_offset: int, now_ms: int) -> bool:
        if seg.empty:
            return False
        if seg.size + size > min(self.config.segment_bytes, MAX_SEGMENT_POSITION):
            return True
        if next_offset - 1 - seg.base_offset > MAX_SEGMENT_POSITION:
            return True
        return seg.rolling_base_ms is not None and now_ms - seg.rolling_base_ms >= (
            self.config.segment_ms
        )

    def _roll(self, *, seal: bool = True) -> Segment:
        """Start a new segment at the log end offset; the old one is sealed by `_SEALER`
        (unless it is about to be deleted).

        If creating the new segment fails, the old one stays active and nothing changed;
        if the directory fsync fails, the log goes offline.
        """
        try:
            with self._lock:
                old = self._segments[-1]
                new = Segment.create(
                    self.fs, self.directory, old.next_offset, self.config.index_interval_bytes
                )
                self._segments.append(new)
                self._bases.append(new.base_offset)
                if seal:
                    self._unsealed.append(old)
        except LogOfflineError as exc:
            raise self._go_offline(exc) from exc.cause
        if self.budget is not None:
            new.adopt(self.budget, self)  # outside the lock: it may close other files
        if seal:
            _SEALER.submit(self._seal_in_background)
        return new

    def close_idle_active(self, segment: Segment) -> bool:
        """For the descriptor budget (owner thread): close the active segment's file, fsyncing
        it first if anything was written since its last fsync. False, leaving it open, when
        `segment` is not the active one (a rolled segment waiting for its seal) or a flush
        holds the log right now. A failed fsync takes the log offline: the write-back error is
        reported, not lost with the descriptor."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._closed or segment is not self._segments[-1]:
                return False
            if self.offline is None and segment.dirty:
                try:
                    segment.flush()
                except OSError as exc:
                    failure = LogOfflineError(segment.path, exc, "fsync before closing an "
                                              "idle segment failed")
                    self.offline = failure
                    log.error("log offline", path=str(segment.path), error=str(exc),
                              failed=failure.what)
            segment.close_files()
            return True
        finally:
            self._lock.release()

    def _seal_in_background(self) -> None:
        # A failure takes the log offline (logged there); the next append or flush raises it.
        with contextlib.suppress(OSError):
            self._seal_unsealed()

    def sealed_ranges(self) -> list[tuple[int, int]]:
        """(base offset, end offset) of every sealed segment, oldest first: all but the active
        one and those whose seal is still pending (always the newest rolled ones). The end is
        the next segment's base offset unless a gap follows."""
        with self._lock:
            sealed = self._segments[: len(self._segments) - 1 - len(self._unsealed)]
            return [(seg.base_offset, seg.next_offset) for seg in sealed]

    def complete_seals(self) -> None:
        """Seal every rolled segment still waiting (on the caller's thread). Raises `OSError`.

        For readers that must see only finished segments (the group log's cleaner rewrites
        sealed segments and their index files). Raises `LogOfflineError` on an offline log."""
        if self.offline is not None:
            raise self.offline
        self._seal_unsealed()

    def _seal_unsealed(self) -> None:
        """Seal every rolled segment still waiting, oldest first. Raises `OSError`.

        Holds `_seal_lock` (one sealer at a time), but `_lock` only to pick and drop a
        segment: appends, rolls and retention on the owning thread never wait for an fsync.
        """
        with self._seal_lock:
            while True:
                with self._lock:
                    if self._closed or not self._unsealed:
                        return
                    if self.offline is not None:
                        raise self.offline
                    seg = self._unsealed[0]
                try:
                    seg.seal()
                except OSError as exc:
                    # Its fsync is never tried again (see `LogOfflineError`).
                    raise self._offline_from(exc, seg.path, "seal (fsync) of a rolled "
                                             "segment failed") from exc
                self._check_segments_present()
                with self._lock:
                    if self._unsealed and self._unsealed[0] is seg:
                        del self._unsealed[0]

    # ---------------------------------------------------------------- read

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the batch holding `offset`, up to `max_bytes` but never less than
        one batch; `b""` at the log end. Stops at a segment boundary.

        Raises `OffsetOutOfRange` outside `[log_start_offset, log_end_offset]`; `OSError`.
        """
        if self.offline is not None:
            raise self.offline
        segments = self._segments
        end = segments[-1].next_offset
        if offset == end:
            return b""
        if offset < segments[0].base_offset or offset > end:
            raise OffsetOutOfRange(offset, segments[0].base_offset, end)
        i = bisect_right(self._bases, offset) - 1
        seg = segments[i]
        missing = self._reported_missing
        while (offset >= seg.next_offset or seg.base_offset in missing) and i + 1 < len(segments):
            # In a gap (a segment lost, or damage a repair cut out) or a segment whose file
            # disappeared: go on after it.
            i += 1
            seg = segments[i]
            offset = seg.base_offset
        if offset >= seg.next_offset:
            return b""
        try:
            return seg.read(offset, max_bytes)
        except LogOfflineError as exc:  # the active segment's file changed while closed
            raise self._go_offline(exc) from exc.cause
        except FileNotFoundError:
            self._report_missing(seg)
            raise

    def position_of(self, offset: int) -> tuple[Path, int]:
        """The segment file holding `offset` and the byte position of its batch there (0 when
        the offset is outside the log), to name a damaged record."""
        segments = self._segments
        seg = segments[max(bisect_right(self._bases, offset) - 1, 0)]
        located = seg.locate(offset)
        return seg.path, located.position if located is not None else 0

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp_ms`, else None."""
        for seg in list(self._segments):
            found = seg.offset_for_timestamp(timestamp_ms)
            if found is not None:
                return found
        return None

    def segment_times(self) -> list[tuple[int, int, int]]:
        """(base offset, largest timestamp, size in bytes) of every segment, oldest first: the
        view ListOffsets v0 answers from (`largest_timestamp` falls back to the file's mtime)."""
        return [(seg.base_offset, seg.largest_timestamp() if seg.size else -1, seg.size)
                for seg in list(self._segments)]

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        best: Segment | None = None
        for seg in self._segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        return None if best is None else best.max_timestamp_offset()

    # ---------------------------------------------------------------- durability

    def flush(self) -> None:
        """fsync the active segment. Raises `OSError`; the appended data stays readable.

        A no-op on a closed log (`close()` already fsynced; a deleted log has nothing to keep).
        """
        self._seal_unsealed()
        with self._lock:
            if self._closed:
                return
            if self.offline is not None:
                raise self.offline
            seg = self._segments[-1]
            try:
                seg.flush()
            except OSError as exc:
                failure = LogOfflineError(seg.path, exc, "fsync failed")
            else:
                if seg.still_named():
                    return
                failure = _segment_missing(seg.path)
        raise self._go_offline(failure) from failure.cause

    def offloaded_flush(self) -> OffloadedFsync | None:
        """`flush` for a thread that runs without the interpreter (`storage.fsync_offload`):
        the active segment's fsync job, to be finished with `offloaded_flush_done`. None when
        `flush` itself must run: a rolled segment still to seal, a closed or offline log, a
        file system other than the real one. Raises `OSError` (no descriptor to spare)."""
        with self._lock:
            if self._closed or self.offline is not None or self._unsealed:
                return None
            return self._segments[-1].offloaded_fsync()

    def offloaded_flush_done(self, job: OffloadedFsync, error: int, still_named: bool) -> None:
        """The outcome of `job`: raises `LogOfflineError` (the log goes offline, as `flush`
        takes it) when the fsync failed or the path no longer names the file."""
        if error == 0 and still_named:
            return
        path = Path(os.fsdecode(job.path))
        failure = (LogOfflineError(path, OSError(error, os.strerror(error)), "fsync failed")
                   if error else _segment_missing(path))
        raise self._go_offline(failure) from failure.cause

    # ---------------------------------------------------------------- missing segments

    def _check_segments_present(self) -> None:
        """After a roll: report (once each) sealed segment files that disappeared while the
        log was open. Their records are gone; the log keeps serving the rest."""
        for seg in list(self._segments[:-1]):
            if seg.base_offset not in self._reported_missing and not self.fs.exists(seg.path):
                self._report_missing(seg)

    def _report_missing(self, seg: Segment) -> None:
        if seg.base_offset in self._reported_missing:
            return
        self._reported_missing.add(seg.base_offset)
        self.lost_segments.append((seg.base_offset, seg.next_offset))
        log.error("log segment missing", path=str(seg.path), first_offset=seg.base_offset,
                  end_offset=seg.next_offset,
                  advice="its records are lost; a restart keeps the segments around it")

    def take_lost_segments(self) -> list[tuple[int, int]]:
        """The offset ranges of segments noticed missing since the last call."""
        lost, self.lost_segments = self.lost_segments, []
        return lost

    # ---------------------------------------------------------------- retention, truncation

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest whole segments past `retention_ms` / `retention_bytes`.

        Time uses each segment's largest timestamp. When every segment has expired, the active
        one is rolled first (Kafka does the same), so the log ends up empty with its start and
        end offsets at the old end. Returns the number of segments deleted.
        """
        if self._closed or self.offline is not None:
            return 0
        removed = 0
        config = self.config
        if config.retention_ms >= 0:
            horizon = now_ms - config.retention_ms
            expired = 0
            for seg in self._segments:
                if seg.empty or seg.largest_timestamp() >= horizon:
                    break
                expired += 1
            if expired == len(self._segments):
                self._roll(seal=False)  # deleted just below: no use making it durable
            removed += self._delete_oldest(expired)
        if config.retention_bytes >= 0:
            excess = self.size_bytes - config.retention_bytes
            count = 0
            for seg in self._segments[:-1]:
                if excess - seg.size < 0:
                    break
                excess -= seg.size
                count += 1
            removed += self._delete_oldest(count)
        return removed

    def _delete_oldest(self, count: int) -> int:
        with self._lock:
            count = min(count, len(self._segments) - 1)  # never the active segment
            if self._unsealed:
                # Not a segment still being sealed: the next retention pass takes it.
                count = min(count, self._segments.index(self._unsealed[0]))
            if count <= 0:
                return 0
            doomed = self._segments[:count]
            del self._segments[:count]
            del self._bases[:count]
        for seg in doomed:
            seg.delete()
        self.fs.fsync_dir(self.directory)
        return count

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after the one holding `offset`.

        The new log end offset is that batch's base offset (<= `offset`): batches are never
        split. Raises `OffsetOutOfRange` if `offset < log_start_offset`; `OSError`.
        """
        self._check_usable()
        if offset >= self.log_end_offset:
            return
        if offset < self.log_start_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        # Truncation may reopen a rolled segment: let its seal finish first (a rare path).
        self._seal_unsealed()
        try:
            self._cut_back(offset)
        except OSError as exc:
            raise self._offline_from(exc, self._segments[-1].path, "truncation failed") from exc

    def _cut_back(self, offset: int) -> None:
        with self._lock:
            i = bisect_right(self._bases, offset) - 1
            seg = self._segments[i]
            located = seg.locate(offset)
            doomed = self._segments[i + 1 :]
            del self._segments[i + 1 :]
            del self._bases[i + 1 :]
            for other in doomed:
                other.delete()
            if located is None:  # `offset` is in a gap after `seg`: it stays whole
                assert offset >= seg.next_offset, f"offset {offset} not in {seg.path}"
                seg.reactivate()
                return
            seg.truncate(located.position)

    def discard_after(self, offset: int) -> bool:
        """The last act on an offline log whose owner stops: make sure a restart recovers
        nothing at or after `offset` (records that were answered with an error). Cuts the
        files there, verified; when that fails too, writes a recovery point (`open` cuts the
        log to it), fsynced if the disk lets it, else only into the page cache (which a restart
        of the process still sees). False, with an error line, when neither could be made.
        """
        if offset >= self.log_end_offset:
            return True
        try:
            with self._seal_lock:
                with self._lock:
                    # Rolled after the last flush, so at or after `offset`: never to be sealed.
                    self._unsealed.clear()
                self._cut_back(offset)
            return True
        except OSError as exc:
            cut_error = exc
        path, point = self.directory / RECOVERY_POINT, f"{offset}\n".encode()
        try:
            self.fs.write_atomic(path, point)
        except OSError as exc:
            sync_error = exc
        else:
            log.warning("log tail left for the restart to cut", directory=str(self.directory),
                        offset=offset, cut_error=str(cut_error))
            return True
        try:
            # Not durable, but the page cache outlives the process: the supervisor's restart
            # of this process still finds it (a crash of the machine may lose it, and with it
            # most likely the tail it is about, which was not durable either).
            self.fs.write_unsynced(path, point)
        except OSError as exc:
            log.error("log tail not discarded", directory=str(self.directory), offset=offset,
                      cut_error=str(cut_error), error=str(exc),
                      advice="a restart may recover records after this offset that were "
                      "answered with an error")
            return False
        log.warning("log tail left for the restart to cut, not durably",
                    directory=str(self.directory), offset=offset, cut_error=str(cut_error),
                    fsync_error=str(sync_error))
        return True

    # ---------------------------------------------------------------- lifetime

    def close(self) -> None:
        """fsync and write the active segment's indexes, then close every file.

        Raises `OSError` if the final fsync fails (the files are closed anyway). An offline log
        is closed without writing anything: its fsyncs are not to be retried.
        """
        if self.offline is not None:
            with self._seal_lock:
                self._close_files()
            return
        try:
            self._seal_unsealed()
        finally:
            self._close()

    def _close_files(self) -> None:
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close_files()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._segments[-1].close()
            finally:
                for seg in self._segments[:-1]:
                    seg.close_files()

    def delete(self) -> None:
        """Close without flushing and remove the partition directory (DeleteTopics)."""
        with self._seal_lock, self._lock:  # not under a seal still writing to these files
            self._closed = True
            for seg in self._segments:
                seg.close_files()
        self.fs.rmtree(self.directory)
        if self.fs.exists(self.directory.parent):
            self.fs.fsync_dir(self.directory.parent)

    @property
    def closed(self) -> bool:
        return self._closed


def _read_recovery_point(fs: FileSystem, directory: Path) -> int | None:
    try:
        return int(fs.read_bytes(directory / RECOVERY_POINT).decode().strip())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        log.warning("recovery point unreadable, ignored", directory=str(directory),
                    error=str(exc))
        return None


def _remove_segment_files(fs: FileSystem, directory: Path, bases: list[int]) -> None:
    """Remove whole segments dropped by a repair (the `.log` first)."""
    for base in bases:
        stem = f"{base:020d}"
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            fs.remove(directory / (stem + suffix))
    if bases:
        fs.fsync_dir(directory)
