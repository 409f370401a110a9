"""Loading the group log at start-up: replay every partition into the core, then serve it.

Partitions are replayed one after another; reading and decoding a partition runs in a worker
thread so the loop keeps serving partitions already loaded, and applying its records stays on
the loop. Until a partition is loaded its groups are answered COORDINATOR_LOAD_IN_PROGRESS. A
partition that cannot be replayed is never served (NOT_COORDINATOR) and stops the broker with
the file and position of the record (`on_failure`): serving it without some of its groups and
offsets would answer wrongly, and waiting would leave its clients told "loading" forever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from coordinator.group.offsets import OffsetStore
from coordinator.group.service import GroupCoordinatorService
from coordinator.grouplog.log import GroupLog, GroupLogLoadError
from coordinator.grouplog.records import (
    ConsumerGroupRecord,
    CoordinatorRecord,
    GroupMetadataRecord,
)
from coordinator.runtime.apply import ResultApplier
from coordinator.runtime.clock import Clock

log = structlog.get_logger("rebalanced.coordinator")


class GroupLogLoader:
    def __init__(self, service: GroupCoordinatorService, offsets: OffsetStore,
                 applier: ResultApplier, clock: Clock, num_partitions: int,
                 on_failure: Callable[[BaseException], None]) -> None:
        self.service = service
        self.offsets = offsets
        self.applier = applier
        self.clock = clock
        self.num_partitions = num_partitions
        self.on_failure = on_failure
        self.group_log: GroupLog  # set when the group log is opened
        # Partitions not served yet: being replayed, or (also in `failed`) failed to replay.
        self.loading: set[int] = set(range(num_partitions))
        self.failed: set[int] = set()
        # Told a replayed partition's transactional offsets that have no marker yet.
        self.on_open_transactions: Callable[
            [int, dict[int, list[CoordinatorRecord]]], None] | None = None

    # what requests see ------------------------------------------------------------------------

    def is_loading(self, group_id: str) -> bool:
        return bool(self.loading) and self.group_log.partition_of(group_id) in self.loading

    def is_still_loading(self, group_id: str) -> bool:
        return self.is_loading(group_id) and (
            not self.failed or self.group_log.partition_of(group_id) not in self.failed)

    def unavailable(self, group_id: str | None) -> ErrorCode:
        """The answer for a group whose partition is not served (`is_loading`)."""
        if self.failed and (group_id is None
                            or self.group_log.partition_of(group_id) in self.failed):
            return ErrorCode.not_coordinator
        return ErrorCode.coordinator_load_in_progress

    def refusal(self, group_id: str) -> ErrorCode | None:
        """`unavailable` for a group not served now, None for a group that is (the core's
        `Refusal`)."""
        return self.unavailable(group_id) if self.is_loading(group_id) else None

    # replay -----------------------------------------------------------------------------------

    async def load(self) -> None:
        """Replay every partition of the group log; requests for a partition wait meanwhile."""
        started = self.clock.monotonic_ms()
        total = 0
        loop = asyncio.get_running_loop()
        for partition in range(self.num_partitions):
            try:
                total += await self._load_partition(loop, partition)
            except Exception as exc:
                self._load_failed(partition, exc)
                continue
            self.loading.discard(partition)
        if self.failed:
            return
        log.info("group log loaded", records=total, groups=len(self.service.groups),
                 duration_ms=self.clock.monotonic_ms() - started)

    async def _load_partition(self, loop: asyncio.AbstractEventLoop, partition: int) -> int:
        count = 0
        apply_timers = self.applier.apply_timers
        # Reading and decoding a partition runs in a worker thread so the loop keeps
        # accepting and serving loaded partitions; applying the records stays on the loop.
        open_transactions: dict[int, list[CoordinatorRecord]] = {}
        records = await loop.run_in_executor(
            None, lambda: list(self.group_log.replay_partition_at(partition,
                                                                  open_transactions)))
        for offset, record in records:
            try:
                if isinstance(record, GroupMetadataRecord):
                    apply_timers(self.service.replay(record, self.clock.now_ms()))
                elif isinstance(record, ConsumerGroupRecord):
                    apply_timers(self.service.consumer.replay(record, self.clock.now_ms()))
                else:
                    self.offsets.apply(record)
            except Exception as exc:
                raise self.group_log.load_error(
                    partition, offset, f"replaying {type(record).__name__}: {exc!r}") from exc
            count += 1
            if count % 20_000 == 0:
                await asyncio.sleep(0)  # keep serving other partitions' requests
        apply_timers(self.service.consumer.finish_replay(self.clock.now_ms()))
        self._restore_offset_only_groups(partition)
        if open_transactions and self.on_open_transactions is not None:
            self.on_open_transactions(partition, open_transactions)
        return count

    def _load_failed(self, partition: int, exc: Exception) -> None:
        """A partition that cannot be replayed is not served (NOT_COORDINATOR for its groups)
        and stops the broker: serving it without some of its groups and offsets would answer
        wrongly, and waiting would leave its clients told "loading" forever."""
        where: dict[str, Any] = {}
        if isinstance(exc, GroupLogLoadError):
            where = {"file": str(exc.path), "position": exc.position, "offset": exc.offset}
        log.error("group log load failed", partition=partition, error=str(exc), **where,
                  exc_info=not isinstance(exc, GroupLogLoadError))
        self.failed.add(partition)
        self.on_failure(exc)

    def _restore_offset_only_groups(self, partition: int) -> None:
        """A group known only by its offsets (a standalone consumer's) comes back Empty, as
        Kafka recreates it when replaying its offset records."""
        now = self.clock.now_ms()
        for group_id in self.offsets.groups_with_offsets():
            if (self.service.group(group_id) is None
                    and self.group_log.partition_of(group_id) == partition):
                _, result = self.service.validate_offset_commit(group_id, "", -1, None, now)
                self.applier.apply_timers(result)
