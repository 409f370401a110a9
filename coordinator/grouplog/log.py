"""The group log: the stand-in for `__consumer_offsets`, with group commit.

`offsets.topic.num.partitions` partition logs (`<data>/__consumer_offsets-N/`), written through
the same segment log as topics, each record batch holding records in Kafka's own key/value
schemas. A group's records go to partition `abs(hash(group)) % N`, so a group's history is
ordered within one partition.

Durability: `append` writes the batches at once (one `write` per partition) and returns a future
that completes when they are durable. With `offsets.commit.fsync=always` every append waiting in
the same event-loop turn, and every append arriving while an fsync runs, shares the next fsync
(group commit); the fsync runs in a worker thread so the event loop keeps serving. With an
interval policy the future completes after the write and a timer fsyncs every interval.
A failed write whose rollback is verified (disk full before any byte of the batch was durable)
fails only its own future, and the log carries on. A failed fsync, or a rollback that fails or
cannot be verified, is never retried nor carried on from (PostgreSQL's PANIC, Kafka's offline
log directory): every future not yet durable fails, the unacknowledged tails are cut (or left
for the restart to cut, see `PartitionLog.discard_after`), every later append fails, and
`on_failure` stops the broker, whose restart recovers exactly the durable prefix.

Replies that read state another append is still writing wait by log offset: `acknowledged(p)`
returns None when everything written to partition `p` is acknowledged, else a future that
completes once the acknowledged end of `p` reaches today's log end offset (and fails if the
write holding that offset fails). A steady stream of later appends does not delay it.

A transaction's writes bypass the group commit and are fsynced on the caller's thread, as the
transaction log's own writes are (a transaction already waits for three of those; the hand-off
to the fsync thread cost more than the fsync): a TxnOffsetCommit's batch before its answer
(`append_transactional`), a commit or abort marker before the transaction coordinator records
anything after it, its completion record or the producer's next transaction (`append_marker`,
then `flush_transactional`). A replay that found the transaction log past a transaction whose
marker it lost would judge the marker-less offsets by the wrong transaction. `acknowledged`
waits for neither: the staged offsets are invisible until their marker, and the marker's outcome
is already durable in the transaction log.

Compaction (`storage/compaction.py`) rewrites sealed segments in place, keeping offsets; `compact`
runs one pass on the caller's thread and `close` waits for a running one to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from coordinator.grouplog.codec import UnknownRecord, decode_record, encode_records
from coordinator.grouplog.placement import partition_for
from coordinator.grouplog.records import CoordinatorRecord
from storage import fsync_offload
from storage.batch import RawBatch, scan_batches
from storage.compaction import CleanStats, LogCleaner, verify_sealed
from storage.crc import crc32c
from storage.fs import REAL_FS, FileSystem
from storage.log import LogConfig, LogOfflineError, PartitionLog
from storage.record_batch import encode_batch, fold_latest, iter_records
from storage.transactions import (
    COMMIT_MARKER,
    CONTROL,
    TRANSACTIONAL,
    control_type,
    encode_control_batch,
)

log = structlog.get_logger("rebalanced.group_log")

TOPIC = "__consumer_offsets"

# The C fsync threads (`storage.fsync_offload`): the dirty partitions of one group commit are
# fsynced at once, as many as this.
_FSYNC_THREADS = 4


# What a replayed record is: a plain one, one inside a transaction, a marker ending one.
_PLAIN, _IN_TRANSACTION, _COMMIT, _ABORT = range(4)
_PRODUCER = struct.Struct(">hiqqqhi")  # attributes .. base sequence, after the CRC
_MARKER_KEY = b"\x00\x00\x00\x00"  # stands in for a marker's key (never None)


def transactional_batch(batch: bytes, producer_id: int, producer_epoch: int) -> bytes:
    """`batch` (one batch from `encode_batch`) marked transactional for the producer, its CRC
    computed again."""
    buf = bytearray(batch)
    (attributes, delta, first_ts, max_ts, _, _, _) = _PRODUCER.unpack_from(buf, 21)
    _PRODUCER.pack_into(buf, 21, attributes | TRANSACTIONAL, delta, first_ts, max_ts,
                        producer_id, producer_epoch, -1)
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def _records_of_batches(chunk: bytes | memoryview, batches: Sequence[RawBatch]
                        ) -> Iterator[tuple[int, bytes | None, bytes | None, int, int]]:
    view = memoryview(chunk)
    for start, end, base, _, _, _, producer_id, attributes in batches:
        if attributes & CONTROL:
            if attributes & TRANSACTIONAL:
                kind = _COMMIT if control_type(view, start) == COMMIT_MARKER else _ABORT
                yield base, _MARKER_KEY, None, producer_id, kind
            continue
        kind = _IN_TRANSACTION if attributes & TRANSACTIONAL else _PLAIN
        for record_offset, key, value in iter_records(view[start:end]):
            yield record_offset, key, value, producer_id, kind


class GroupLogLoadError(Exception):
    """A group-log record that cannot be replayed: where it is and why."""

    def __init__(self, partition: int, path: Path, position: int, offset: int,
                 reason: str) -> None:
        super().__init__(f"{path}: position {position} (offset {offset}): {reason}")
        self.partition = partition
        self.path = path
        self.position = position
        self.offset = offset
        self.reason = reason


class _FsyncThread:
    """One long-lived thread for the fsync of a single dirty partition (the usual case) where
    the C thread (`storage.fsync_offload`) was not built or cannot take the job: the job is
    handed over through a `SimpleQueue` and its outcome comes back with one
    `call_soon_threadsafe`, where an executor job costs a queue with a condition, a
    concurrent future, an asyncio future and a done callback, each with its own wake-up."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop, Callable[[], None],
                  Callable[[BaseException | None], None]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, loop: asyncio.AbstractEventLoop, flush: Callable[[], None],
               done: Callable[[BaseException | None], None]) -> None:
        """Run `flush` on the thread, then `done(error or None)` on `loop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="group-log-fsync",
                                            daemon=True)
            self._thread.start()
        self._jobs.put((loop, flush, done))

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, flush, done = job
            error: BaseException | None = None
            try:
                flush()
            except BaseException as exc:  # every failure fails the appends it covers
                error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(done, error)

    def stop(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None


class GroupLog:
    def __init__(self, logs: list[PartitionLog], fsync_policy: str,
                 fs: FileSystem = REAL_FS) -> None:
        self.logs = logs
        self.cleaner = LogCleaner(logs, fs, name="group log")
        self.fsync_always = fsync_policy == "always"
        self.fsync_interval_ms = 0 if self.fsync_always else int(fsync_policy)
        self._dirty: set[int] = set()
        # Per partition, the log end offset covered by the last successful fsync.
        self._durable_end = [partition_log.log_end_offset for partition_log in logs]
        # Per partition, the end of what every append future has been completed for, and the
        # futures of `acknowledged` waiting for it to reach an offset (in offset order).
        self._acked_end = list(self._durable_end)
        # Per partition, the log end after the last append whose writer waits for its fsync
        # (what `acknowledged` waits for: a marker is not waited for), and the end after the
        # last marker written without an fsync of its own.
        self._awaited_end = list(self._durable_end)
        # Partition -> log end after its last write outside the group commit (transactional
        # batches and markers) that no fsync has covered yet.
        self._unsynced: dict[int, int] = {}
        self._offset_waiters: dict[int, deque[tuple[int, asyncio.Future[None]]]] = {}
        self._waiting: list[asyncio.Future[None]] = []
        self._flushing = False
        self._fsync_thread = _FsyncThread()
        self._offload: fsync_offload.FsyncOffload | None = None  # made on the first flush
        self._interval_task: asyncio.Task[None] | None = None
        self.appends = 0
        self.fsyncs = 0
        # Set for good by a failed fsync or an unverifiable rollback (see the module docstring);
        # `on_failure` is told once (the broker stops).
        self.failure: OSError | None = None
        self.on_failure: Callable[[BaseException], None] | None = None
        # Told (partition, lost offset ranges) when a sealed segment is noticed missing (the
        # roll or read after its file was deleted): the owner writes its state again.
        self.on_segments_lost: Callable[[int, list[tuple[int, int]]], None] | None = None

    @classmethod
    def open(cls, data_dir: Path, num_partitions: int, config: LogConfig, fsync_policy: str,
             fs: FileSystem = REAL_FS, *, repair: bool = False) -> GroupLog:
        """Open and recover every partition. Raises `CorruptLogError` naming the damaged file
        and byte position (without `repair`, every sealed segment is CRC-checked too: a flipped
        bit there would otherwise replay as a wrong committed offset); `OSError`."""
        def open_partition(p: int) -> PartitionLog:
            partition_log = PartitionLog.open(data_dir / f"{TOPIC}-{p}", config, fs,
                                              repair=repair)
            try:
                if not repair:  # a repair already scanned every segment
                    verify_sealed(partition_log, fs)
            except BaseException:
                partition_log.close()
                raise
            return partition_log

        if (repair or num_partitions == 1 or type(fs) is not FileSystem
                or fs.exists(data_dir / f"{TOPIC}-0")):
            # Partitions that exist are opened one after another: recovering them reads their
            # segments, and reading from several threads left each thread's malloc arena
            # holding memory (+20 MB of RSS after loading 1,000,000 records). A repair logs its
            # cuts partition by partition, and a fault plan counts the file operations in the
            # order they come.
            logs: list[PartitionLog] = []
            try:
                for p in range(num_partitions):
                    logs.append(open_partition(p))
            except BaseException:
                for partition_log in logs:
                    partition_log.close()
                raise
            return cls(logs, fsync_policy, fs)
        # A new group log: each partition's directory and segment are made durable by fsyncs
        # of their directories; run side by side, the file system commits them together
        # (fifty partitions: ~30 ms instead of ~60-470 on ext4).
        with ThreadPoolExecutor(min(num_partitions, 8), "group-log-open") as pool:
            opening = [pool.submit(open_partition, p) for p in range(num_partitions)]
        failed = [future for future in opening if future.exception() is not None]
        if failed:
            for future in opening:
                if future.exception() is None:
                    future.result().close()
            raise failed[0].exception()  # type: ignore[misc]
        return cls([future.result() for future in opening], fsync_policy, fs)

    @property
    def acknowledges_on_write(self) -> bool:
        """True with an interval fsync policy: `append` returns a future that is already done
        (completed, or failed by the write)."""
        return not self.fsync_always

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, len(self.logs))

    # recovery ---------------------------------------------------------------------------------

    def replay_partition(self, partition: int) -> Iterator[CoordinatorRecord]:
        """The latest record of every key of one partition, in the order of those last writes.

        Replaying only the last value per key yields the same state as replaying the whole
        history (latest value wins; a tombstone deletes), and lets recovery decode each live key
        once instead of once per commit ever made. Unknown record types are skipped. Raises
        `GroupLogLoadError` naming the file and position of a record that cannot be read.
        """
        for _, record in self.replay_partition_at(partition):
            yield record

    def replay_partition_at(
        self, partition: int,
        open_transactions: dict[int, list[CoordinatorRecord]] | None = None,
    ) -> Iterator[tuple[int, CoordinatorRecord]]:
        """`replay_partition`, each record with its offset (for `locate` when applying it
        fails).

        Transactional records (TxnOffsetCommit) count from their producer's commit marker on,
        as if written there; an abort marker drops them. Those of a transaction with no
        marker yet are put in `open_transactions` (producer id -> records, in log order)."""
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        staged: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        for chunk, batches, start in self._chunks(partition):
            if not staged and not any(attributes & TRANSACTIONAL for *_, attributes in batches):
                # Nearly always: no transaction open or in this chunk; the keys are folded
                # into `latest` without a Python object per record (storage/record_batch.py).
                try:
                    fold_latest(chunk, latest, start)
                except Exception as exc:
                    raise self.load_error(partition, start,
                                          f"unreadable batch: {exc!r}") from exc
                continue
            self._replay_chunk(partition, chunk, batches, start, latest, staged)
        for key, (offset, value) in latest.items():
            record = self._decode(partition, offset, key, value)
            if record is not None:
                yield offset, record
        if open_transactions is not None:
            for producer_id, entries in staged.items():
                decoded = [self._decode(partition, offset, key, value)
                           for offset, key, value in entries]
                open_transactions[producer_id] = [r for r in decoded if r is not None]

    def _replay_chunk(self, partition: int, chunk: memoryview | bytes,
                      batches: Sequence[RawBatch], start: int,
                      latest: dict[bytes, tuple[int, bytes | None]],
                      staged: dict[int, list[tuple[int, bytes, bytes | None]]]) -> None:
        """`replay_partition_at`'s step for a chunk with transactional batches, or read while
        a transaction is open (a tombstone then also deletes the key's staged offsets)."""
        try:
            read = list(_records_of_batches(chunk, batches))
        except Exception as exc:
            raise self.load_error(partition, start, f"unreadable batch: {exc!r}") from exc
        for offset, key, value, producer_id, kind in read:
            if key is None or offset < start:
                continue
            if kind == _PLAIN:
                latest.pop(key, None)  # re-insert so dict order follows the last write
                latest[key] = (offset, value)
                if value is None and staged:
                    # A tombstone deletes the key's offsets of open transactions too.
                    for entries in staged.values():
                        entries[:] = [entry for entry in entries if entry[1] != key]
            elif kind == _IN_TRANSACTION:
                staged.setdefault(producer_id, []).append((offset, key, value))
            else:
                ended = staged.pop(producer_id, [])
                if kind == _COMMIT:
                    for record_offset, record_key, record_value in ended:
                        latest.pop(record_key, None)
                        latest[record_key] = (record_offset, record_value)

    def _decode(self, partition: int, offset: int, key: bytes,
                value: bytes | None) -> CoordinatorRecord | None:
        try:
            record = decode_record(key, value)
        except Exception as exc:
            raise self.load_error(partition, offset, f"undecodable record: {exc!r}") from exc
        return None if isinstance(record, UnknownRecord) else record

    def load_error(self, partition: int, offset: int, reason: str) -> GroupLogLoadError:
        """The error for the record at `offset` of `partition`: its segment file and the byte
        position of its batch there."""
        path, position = self.logs[partition].position_of(offset)
        return GroupLogLoadError(partition, path, position, offset, reason)

    def _chunks(self, partition: int
                ) -> Iterator[tuple[memoryview | bytes, list[RawBatch], int]]:
        """The partition's log in chunks of whole batches: (chunk, its batches, the offset read
        from). A chunk's first batch may begin before that offset (a read returns whole
        batches), and its records before it are not the chunk's."""
        partition_log = self.logs[partition]
        offset = partition_log.log_start_offset
        end = partition_log.log_end_offset
        while offset < end:
            chunk = partition_log.read(offset, 8 << 20)
            if not chunk:
                break
            batches = scan_batches(chunk, verify_crc=False)[0]
            if not batches:
                break
            yield chunk, batches, offset
            # Move on from the end of the last batch, not its last record: a compacted batch
            # keeps the offset range of the batches it replaced, with fewer records.
            _, _, base, last_delta, *_ = batches[-1]
            offset = base + last_delta + 1

    # appends ----------------------------------------------------------------------------------

    def append(self, records: Sequence[CoordinatorRecord], now_ms: int | None = None, *,
               group_id: str | None = None) -> asyncio.Future[None]:
        """Write `records`, each to its group's partition; `group_id` when every record is
        that group's (an OffsetCommit's are), which saves looking at each."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self.failure is not None:
            future.set_exception(self.failure)
            return future
        timestamp = int(time.time() * 1000) if now_ms is None else now_ms
        grouped: Mapping[int, Sequence[CoordinatorRecord]]
        if group_id is not None:
            grouped = {self.partition_of(group_id): records}
        else:
            # Records come in runs of one group: look its partition up once per run.
            runs: dict[int, list[CoordinatorRecord]] = {}
            group: str | None = None
            run: list[CoordinatorRecord] = []
            for record in records:
                if record.key.group != group:
                    group = record.key.group
                    run = runs.setdefault(self.partition_of(group), [])
                run.append(record)
            grouped = runs
        by_partition = {partition: encode_records(run) for partition, run in grouped.items()}
        written: list[tuple[int, int]] = []  # (partition, end before this append)
        try:
            for partition, encoded in by_partition.items():
                partition_log = self.logs[partition]
                end_before = partition_log.log_end_offset
                partition_log.append_records(encoded, timestamp)
                written.append((partition, end_before))
                self._dirty.add(partition)
        except OSError as exc:
            future.set_exception(exc)
            if isinstance(exc, LogOfflineError):
                self._fail_stop(exc)
                return future
            log.error("group log write failed", error=str(exc))
            # A multi-partition append is all or nothing: take back what did get written.
            try:
                for partition, end_before in written:
                    self.logs[partition].truncate_to(end_before)
            except OSError as cut_failed:
                self._fail_stop(cut_failed)
            return future
        self.appends += 1
        for partition, _ in written:
            if self.logs[partition].lost_segments:
                self._segments_lost(partition)
        if not self.fsync_always:
            future.set_result(None)
            for partition, _ in written:
                self._acked_end[partition] = self.logs[partition].log_end_offset
            self._ensure_interval_flusher()
            return future
        for partition, _ in written:
            self._awaited_end[partition] = self.logs[partition].log_end_offset
        self._waiting.append(future)
        if not self._flushing:
            self._flushing = True
            loop.call_soon(self._start_flush)
        return future

    def append_transactional(self, group_id: str, records: Sequence[CoordinatorRecord],
                             producer_id: int, producer_epoch: int, now_ms: int) -> None:
        """Write a TxnOffsetCommit's records as one transactional batch of the producer (as
        Kafka writes them to `__consumer_offsets`): they count only once a commit marker of
        that producer follows them in the partition. Durable on return, fsynced on the
        caller's thread as the transaction log's writes are (see the module docstring).
        Raises `OSError`: a failed write is rolled back, a failed fsync stops the log."""
        batch = transactional_batch(encode_batch(encode_records(records), now_ms),
                                    producer_id, producer_epoch)
        self._append_outside_group_commit(self.partition_of(group_id), batch, now_ms)
        self.flush_transactional()

    def append_marker(self, partition: int, producer_id: int, producer_epoch: int,
                      committed: bool, now_ms: int) -> None:
        """Write the commit or abort marker (a control batch) of the producer's transaction,
        not waiting for an fsync: the transaction coordinator makes it durable with
        `flush_transactional` before it records anything after the transaction (see the
        module docstring). Raises `OSError` as `append_transactional`."""
        batch = encode_control_batch(producer_id, producer_epoch, committed, now_ms)
        self._append_outside_group_commit(partition, batch, now_ms)

    def _append_outside_group_commit(self, partition: int, batch: bytes, now_ms: int) -> None:
        if self.failure is not None:
            raise self.failure
        partition_log = self.logs[partition]
        try:
            partition_log.append(batch, now_ms)
        except OSError as exc:
            if isinstance(exc, LogOfflineError):
                self._fail_stop(exc)
            else:
                log.error("group log write failed", error=str(exc))
            raise
        self._dirty.add(partition)
        self.appends += 1
        if partition_log.lost_segments:
            self._segments_lost(partition)
        if not self.fsync_always:
            self._acked_end[partition] = partition_log.log_end_offset
            self._ensure_interval_flusher()
            return
        self._unsynced[partition] = partition_log.log_end_offset

    def flush_transactional(self) -> None:
        """fsync, on the caller's thread, every partition holding a transactional batch or
        marker no fsync has covered yet. Raises `OSError` after stopping the log as a failed
        group commit does."""
        if self.failure is not None:
            raise self.failure
        if not self._unsynced:
            return
        unsynced, self._unsynced = self._unsynced, {}
        for partition, end in unsynced.items():
            if end <= self._durable_end[partition]:
                continue  # a group commit covered it
            try:
                self.logs[partition].flush()
            except OSError as exc:
                self._fail_stop(exc)
                raise
            self.fsyncs += 1
            # Appends waiting in this partition are durable now too, but their futures (and
            # `acknowledged`) are completed by their own group commit, in order.
            self._durable_end[partition] = max(self._durable_end[partition], end)
            if self._acked_end[partition] >= self._awaited_end[partition]:
                # No append waits here: the next group commit need not fsync it again.
                self._dirty.discard(partition)

    def _segments_lost(self, partition: int) -> None:
        lost = self.logs[partition].take_lost_segments()
        if self.on_segments_lost is not None:
            asyncio.get_running_loop().call_soon(self.on_segments_lost, partition, lost)

    def _start_flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        dirty, self._dirty = self._dirty, set()
        if not waiting:
            self._flushing = False
            return
        loop = asyncio.get_running_loop()
        ends = {p: self.logs[p].log_end_offset for p in dirty}
        # The C fsync threads where they were built (each dirty partition on one of them, in
        # parallel: they are independent files); otherwise, or for a partition they cannot
        # take, the Python fsync thread (one partition, the usual case: the appends of a turn
        # went to one partition) or the executor.
        if self._offload_flush(loop, dirty, waiting, ends):
            return
        if len(dirty) == 1:
            (partition,) = dirty
            self._fsync_thread.submit(
                loop, self.logs[partition].flush,
                lambda error: self._flushed([] if error is None else [error], waiting, ends))
            return
        jobs = [loop.run_in_executor(None, self.logs[p].flush) for p in dirty]
        gathered = asyncio.gather(*jobs, return_exceptions=True)
        gathered.add_done_callback(lambda done: self._flushed(
            [r for r in done.result() if isinstance(r, BaseException)], waiting, ends))

    def _offload_flush(self, loop: asyncio.AbstractEventLoop, partitions: set[int],
                       waiting: list[asyncio.Future[None]], ends: dict[int, int]) -> bool:
        """fsync `partitions` on the C threads (`storage.fsync_offload`), any that a partition
        log must flush itself (`offloaded_flush` says None) on the executor, then `_flushed`
        once for all. False, with nothing started, when the C threads are not built or can
        take none of them."""
        offload = self._offload
        if offload is None or offload.loop is not loop:
            if not fsync_offload.AVAILABLE:
                return False
            if offload is not None:
                offload.close()
            offload = self._offload = fsync_offload.FsyncOffload(loop, _FSYNC_THREADS)
        jobs: list[tuple[PartitionLog, fsync_offload.OffloadedFsync]] = []
        by_themselves: list[PartitionLog] = []
        for partition in partitions:
            partition_log = self.logs[partition]
            try:
                job = partition_log.offloaded_flush()
            except OSError:
                job = None  # no descriptor to spare: a thread fsyncs the log's own
            if job is None:
                by_themselves.append(partition_log)
            else:
                jobs.append((partition_log, job))
        if not jobs:
            return False
        errors: list[BaseException] = []
        remaining = len(partitions)

        def finished(error: BaseException | None) -> None:
            nonlocal remaining
            if error is not None:
                errors.append(error)
            remaining -= 1
            if remaining == 0:
                self._flushed(errors, waiting, ends)

        def outcome(partition_log: PartitionLog, job: fsync_offload.OffloadedFsync
                    ) -> Callable[[int, bool], None]:
            def done(error: int, still_named: bool) -> None:
                try:
                    partition_log.offloaded_flush_done(job, error, still_named)
                except OSError as exc:
                    finished(exc)
                    return
                finished(None)
            return done

        for partition_log, job in jobs:
            offload.submit(job, outcome(partition_log, job))
        for partition_log in by_themselves:
            loop.run_in_executor(None, partition_log.flush).add_done_callback(
                lambda future: finished(
                    asyncio.CancelledError() if future.cancelled() else future.exception()))
        return True

    def _fsync(self, partitions: set[int]) -> None:
        for partition in partitions:
            self.logs[partition].flush()

    def _flushed(self, errors: list[BaseException],
                 waiting: list[asyncio.Future[None]], ends: dict[int, int]) -> None:
        self.fsyncs += 1
        exc: BaseException | None = errors[0] if errors else None
        if self.failure is not None:  # stopped while this fsync ran: its appends failed too
            for future in waiting:
                if not future.done():
                    future.set_exception(self.failure)
            return
        if exc is not None:
            self._fail_stop(exc, waiting)
            return
        for partition, end in ends.items():
            self._durable_end[partition] = max(self._durable_end[partition], end)
        for future in waiting:
            if not future.done():
                future.set_result(None)
        # After the appends' own futures, so that their replies go out first.
        for partition in ends:
            self._acknowledge(partition, self._durable_end[partition])
        if self._waiting:
            self._start_flush()
        else:
            self._flushing = False

    def _fail_stop(self, exc: BaseException,
                   waiting: Sequence[asyncio.Future[None]] = ()) -> None:
        """Stop on a failure that leaves the files unknown: fail everything not durable, cut
        the unacknowledged tails, refuse every later append and tell `on_failure`. With an
        interval fsync policy what was written is already acknowledged: it stays."""
        if self.failure is not None:
            return
        self.failure = exc if isinstance(exc, OSError) else OSError(str(exc))
        for future in [*waiting, *self._waiting]:
            if not future.done():
                future.set_exception(self.failure)
        self._waiting = []
        self._dirty.clear()
        for partition in list(self._offset_waiters):
            self._fail_offset_waiters(partition, self.failure)
        if self.fsync_always:
            for partition, partition_log in enumerate(self.logs):
                if partition_log.log_end_offset > self._durable_end[partition]:
                    partition_log.discard_after(self._durable_end[partition])
        if self._interval_task is not None:
            self._interval_task.cancel()
        if self.on_failure is not None:
            self.on_failure(self.failure)

    def acknowledged(self, partition: int) -> asyncio.Future[None] | None:
        """None if every append to `partition` so far is acknowledged; else a future done
        when the ones written up to now are (failed with the error of a write that fails).
        A transaction marker is acknowledged once written (`append_marker`)."""
        end = (self._awaited_end[partition] if self.fsync_always
               else self.logs[partition].log_end_offset)
        if self._acked_end[partition] >= end:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.failure is not None:  # what is not acknowledged now never will be
            future.set_exception(self.failure)
            return future
        self._offset_waiters.setdefault(partition, deque()).append((end, future))
        return future

    def _acknowledge(self, partition: int, end: int) -> None:
        self._acked_end[partition] = max(self._acked_end[partition], end)
        acked = self._acked_end[partition]
        waiters = self._offset_waiters.get(partition)
        while waiters and waiters[0][0] <= acked:
            _, future = waiters.popleft()
            if not future.done():
                future.set_result(None)
        if waiters is not None and not waiters:
            del self._offset_waiters[partition]

    def _fail_offset_waiters(self, partition: int, exc: BaseException) -> None:
        """The partition was cut back to its durable end: whatever waited past it failed."""
        end = self.logs[partition].log_end_offset
        self._acked_end[partition] = min(self._acked_end[partition], end)
        for _, future in self._offset_waiters.pop(partition, ()):
            if not future.done():
                future.set_exception(exc)

    def _ensure_interval_flusher(self) -> None:
        if self._interval_task is None:
            self._interval_task = asyncio.get_running_loop().create_task(self._interval_flush())

    async def _interval_flush(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.fsync_interval_ms / 1000)
            dirty, self._dirty = self._dirty, set()
            if dirty:
                try:
                    await loop.run_in_executor(None, self._fsync, dirty)
                    self.fsyncs += 1
                except OSError as exc:
                    self._fail_stop(exc)
                    return

    def flush(self) -> None:
        """fsync what is written (on the caller's thread). Nothing after a failure."""
        if self.failure is not None:
            return
        dirty, self._dirty = self._dirty, set()
        self._fsync(dirty)

    # compaction -------------------------------------------------------------------------------

    def compact(self, now_ms: int, delete_retention_ms: int) -> CleanStats:
        """One compaction pass over every partition (blocking: run it on a worker thread)."""
        return self.cleaner.clean(now_ms, delete_retention_ms)

    def close(self) -> None:
        self.cleaner.stop()
        self._fsync_thread.stop()
        if self._offload is not None:
            self._offload.close()
            self._offload = None
        if self._interval_task is not None:
            self._interval_task.cancel()
        self.flush()
        if self.failure is None:
            for partition_log in self.logs:
                partition_log.close()
            return
        # The broker stops on the failure already reported: close what can be, in one line.
        unclean: list[int] = []
        first: OSError | None = None
        for partition, partition_log in enumerate(self.logs):
            try:
                partition_log.close()
            except OSError as exc:
                unclean.append(partition)
                first = first or exc
        if unclean:
            log.warning("group log partitions not closed cleanly", partitions=unclean,
                        error=str(first))
