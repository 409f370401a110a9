"""Background upkeep of the group log: offset expiry and compaction, each on its own interval.

Expiry asks the core which offsets and groups are due (`GroupOffsets.expire`), a slice of the
groups at a time, and writes the tombstones through the same path as any Result
(`ResultApplier.apply`): they are applied, and deleted groups stay gone, only once durable.
Compaction rewrites sealed segments on a worker thread (SPEC §11). Neither runs while the group
log is still loading.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

import structlog

from coordinator.group.rewrite import current_records
from coordinator.group.service import GroupCoordinatorService
from coordinator.grouplog.log import GroupLog, GroupLogLoadError
from coordinator.grouplog.records import OffsetCommitRecord
from coordinator.runtime.apply import ResultApplier
from coordinator.runtime.clock import Clock
from coordinator.runtime.event_journal import EventJournal
from coordinator.runtime.loading import GroupLogLoader

if TYPE_CHECKING:
    from coordinator.ops.metrics import BrokerMetrics

log = structlog.get_logger("rebalanced.coordinator")

# Groups looked at per step of an offset-expiry pass (a step takes a few milliseconds).
EXPIRY_GROUPS_PER_STEP = 1000


class GroupLogMaintenance:
    def __init__(self, service: GroupCoordinatorService, applier: ResultApplier,
                 loader: GroupLogLoader, clock: Clock, journal: EventJournal,
                 metrics: BrokerMetrics | None, *,
                 retention_check_interval_ms: int, cleaner_backoff_ms: int,
                 delete_retention_ms: int) -> None:
        self.service = service
        self.applier = applier
        self.loader = loader
        self.clock = clock
        self.journal = journal
        self.metrics = metrics
        self.retention_check_interval_ms = retention_check_interval_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.delete_retention_ms = delete_retention_ms
        self.group_log: GroupLog  # set when the group log is opened

    # a lost segment ---------------------------------------------------------------------------

    def rewrite_lost(self, partition: int, lost: list[tuple[int, int]]) -> None:
        """A sealed segment of `partition` disappeared while the broker runs (noticed by a
        roll or a read): its records are gone from disk, not from memory, which holds every
        acknowledged change. Write the current state of every group of the partition again,
        and a tombstone for each key the rest of the partition still holds a value of that
        memory no longer has (its tombstone may have been in the lost segment), so that a
        restart keeps exactly what was acknowledged. Groups with a write in flight are left
        out: that write, newer, is already in the log. A rare fault path: the partition's
        surviving records are read once here, on the loop."""
        applier = self.applier
        busy = set(applier.group_writes)

        def wanted(group_id: str) -> bool:
            return group_id not in busy and self.group_log.partition_of(group_id) == partition

        service = applier.service
        records = current_records(service.durable_view(), service.consumer.groups.values(),
                                  service.offset_store, wanted)
        present = {record.key for record in records}
        try:
            for _, record in self.group_log.replay_partition_at(partition):
                if (record.value is not None and record.key not in present
                        and wanted(record.key.group)
                        and not (isinstance(record, OffsetCommitRecord)
                                 and applier.service.offset_store.commit_in_flight(record.key))):
                    records.append(dataclasses.replace(record, value=None))
        except (OSError, GroupLogLoadError) as exc:
            log.error("group log partition unreadable while writing a lost segment's groups "
                      "again", partition=partition, error=str(exc))
        ranges = [f"[{first}, {end})" for first, end in lost]
        if not records:
            log.warning("group log segment lost: nothing to write again", partition=partition,
                        lost_offsets=ranges)
            return
        written = self.group_log.append(records, self.clock.now_ms())

        def done(future: asyncio.Future[None]) -> None:
            if future.exception() is not None:
                log.error("group log segment lost: writing its groups again failed",
                          partition=partition, lost_offsets=ranges,
                          error=str(future.exception()))
                return
            log.warning("group log segment lost: its groups written again from memory",
                        partition=partition, lost_offsets=ranges, records=len(records),
                        groups=len({record.key.group for record in records}),
                        left_out_in_flight=len(busy))

        written.add_done_callback(done)

    # offset expiry ----------------------------------------------------------------------------

    async def expiry_loop(self) -> None:
        interval = self.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")

    async def expire_offsets(self) -> None:
        """One expiry pass, `EXPIRY_GROUPS_PER_STEP` groups at a time, each step written (and
        durable) before the next, with the event loop free in between: a pass over 100,000
        groups is many short steps, not one long stall."""
        if self.loader.loading:
            return
        candidates = self.service.offsets.expiry_candidates()
        expired_offsets = groups_deleted = 0
        for start in range(0, len(candidates), EXPIRY_GROUPS_PER_STEP):
            if start:
                await asyncio.sleep(0)
                if self.loader.loading:
                    break
            expired = self.service.expire_offsets(
                self.clock.now_ms(), candidates[start:start + EXPIRY_GROUPS_PER_STEP])
            removed = expired.result
            if not removed.records:
                continue
            written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            # Tombstones are applied, deleted groups stay gone and are told, only once durable.
            self.applier.apply(removed, then=written.set_result)
            if not await written:
                raise OSError("the group log did not take the expired offsets")
            if self.metrics is not None:
                self.metrics.offset_expirations += expired.expired_offsets
            expired_offsets += expired.expired_offsets
            groups_deleted += expired.groups_deleted
        if expired_offsets or groups_deleted:
            self.journal.event({"event": "offsets_expired", "partitions": expired_offsets,
                                "groups_deleted": groups_deleted})

    # compaction -------------------------------------------------------------------------------

    async def cleaner_loop(self) -> None:
        """Compact the group log every `log.cleaner.backoff.ms` on a worker thread (SPEC §11)."""
        interval = self.cleaner_backoff_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            if self.loader.loading:
                continue  # replay reads the segments the cleaner would swap
            try:
                await loop.run_in_executor(None, self.group_log.compact, self.clock.now_ms(),
                                           self.delete_retention_ms)
            except Exception:
                log.exception("group log compaction failed")
