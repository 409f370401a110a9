"""The asyncio side of group coordination: feeds the pure core, persists, replies.

For every group request: kio request -> command (`coordinator/api/*`), `now_ms` from the clock,
`Result` from the core, then in order: timer changes to the wheel, records appended to the group
log, and - only once those records are durable - the replies. A reply may answer a request
parked earlier (the last JoinGroup of a rebalance completes them all). If the append or its
fsync fails, no reply of that Result is delivered as success: each gets
COORDINATOR_NOT_AVAILABLE, the offsets stay unacknowledged, and affected groups rebalance.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog
from kio.schema.errors import ErrorCode

from coordinator import offset_commands as oc
from coordinator.api import (
    delete_groups,
    describe_groups,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
)
from coordinator.classic.state import GroupState
from coordinator.clock import SystemClock
from coordinator.config import GroupConfig
from coordinator.consumer_protocol import subscribed_topics
from coordinator.context import RequestContext
from coordinator.manager import GroupCoordinator
from coordinator.offsets import (
    FetchedOffset,
    GroupExpiryView,
    OffsetStore,
    expire_timestamp_ms,
)
from coordinator.outcomes import error_outcome
from coordinator.records import CoordinatorRecord, GroupMetadataRecord, OffsetCommitRecord
from coordinator.result import RequestRef, Result
from protocol.refusals import REFUSALS
from storage.fs import REAL_FS, FileSystem
from storage.log import LogConfig
from storage.offsets_topic import GroupLog

if TYPE_CHECKING:
    from coordinator.runtime import Broker

log = structlog.get_logger("rebalanced.coordinator")
events_log = structlog.get_logger("rebalanced.events")

_MEMBER_APIS: dict[int, ModuleType] = {
    11: join_group, 14: sync_group, 12: heartbeat, 13: leave_group,
    15: describe_groups, 16: list_groups,
}


# What `json.dumps` makes of the `offsets_committed` event (default separators, ASCII only).
_OFFSETS_COMMITTED_LINE = ('{"ts": %d, "event": "offsets_committed", "group_id": %s, '
                           '"member_id": %s, "generation_id": %d, "partitions": %d}\n')
_json_string = encode_basestring_ascii


@dataclass(slots=True)
class _Pending:
    ctx: RequestContext
    module: ModuleType
    command: Any


def new_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupRuntime:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        settings = broker.settings
        self.clock = SystemClock()
        self.config = GroupConfig(
            node_id=settings["node.id"],
            group_min_session_timeout_ms=settings["group.min.session.timeout.ms"],
            group_max_session_timeout_ms=settings["group.max.session.timeout.ms"],
            group_initial_rebalance_delay_ms=settings["group.initial.rebalance.delay.ms"],
            group_max_size=settings["group.max.size"],
            offsets_topic_num_partitions=settings["offsets.topic.num.partitions"],
            offset_metadata_max_bytes=settings["offset.metadata.max.bytes"],
            offsets_retention_minutes=settings["offsets.retention.minutes"],
            offsets_retention_check_interval_ms=settings["offsets.retention.check.interval.ms"],
        )
        self.manager = GroupCoordinator(self.config, new_member_id)
        self.offsets = OffsetStore(self.config)
        self.group_log: GroupLog
        self.loading: set[int] = set(range(self.config.offsets_topic_num_partitions))
        self._pending: dict[RequestRef, _Pending] = {}
        self._sequence = itertools.count()
        self._journal: Any = None
        self._writes_in_flight: dict[int, int] = {}  # group-log partition -> pending writes
        self._held: dict[int, list[Result]] = {}  # group-log partition -> replies held back
        self._journal_flush_pending = False
        self._tasks: list[asyncio.Task[None]] = []
        self.fs: FileSystem = REAL_FS  # the group log's filesystem; tests inject faults here

    # lifecycle --------------------------------------------------------------------------------

    def open(self, data_dir: Path, repair: bool) -> None:
        settings = self.broker.settings
        # A group-metadata record holds every member's subscription and assignment: no cap.
        config = LogConfig(segment_bytes=settings["offsets.topic.segment.bytes"],
                           retention_ms=-1, retention_bytes=-1, max_message_bytes=2**31 - 1)
        self.group_log = GroupLog.open(data_dir, self.config.offsets_topic_num_partitions,
                                       config, settings["offsets.commit.fsync"], self.fs,
                                       repair=repair)
        journal_path = settings["journal.path"] or str(data_dir / "events.jsonl")
        self._journal = open(journal_path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._load()))
        self._tasks.append(loop.create_task(self._expiry_loop()))
        self._tasks.append(loop.create_task(self._cleaner_loop()))

    async def _load(self) -> None:
        """Replay every partition of the group log; requests for a partition wait meanwhile."""
        started = self.clock.monotonic_ms()
        total = 0
        loop = asyncio.get_running_loop()
        for partition in range(self.config.offsets_topic_num_partitions):
            count = 0
            # Reading and decoding a partition runs in a worker thread so the loop keeps
            # accepting and serving loaded partitions; applying the records stays on the loop.
            records = await loop.run_in_executor(
                None, lambda p=partition: list(self.group_log.replay_partition(p)))  # type: ignore[misc]
            for record in records:
                if isinstance(record, GroupMetadataRecord):
                    self._apply_timers(self.manager.replay(record, self.clock.now_ms()))
                else:
                    self.offsets.apply(record)
                count += 1
                if count % 20_000 == 0:
                    await asyncio.sleep(0)  # keep serving other partitions' requests
            self._restore_offset_only_groups(partition)
            self.loading.discard(partition)
            total += count
        log.info("group log loaded", records=total, groups=len(self.manager.groups),
                 duration_ms=self.clock.monotonic_ms() - started)

    def _restore_offset_only_groups(self, partition: int) -> None:
        """A group known only by its offsets (a standalone consumer's) comes back Empty, as
        Kafka recreates it when replaying its offset records."""
        now = self.clock.now_ms()
        for group_id in self.offsets.groups_with_offsets():
            if (self.manager.group(group_id) is None
                    and self.group_log.partition_of(group_id) == partition):
                _, result = self.manager.validate_offset_commit(group_id, "", -1, None, now)
                self._apply_timers(result)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.group_log.close()
        if self._journal is not None:
            self._journal.close()

    # requests ---------------------------------------------------------------------------------

    def _ref(self, ctx: RequestContext) -> RequestRef:
        return RequestRef(ctx.connection.id, next(self._sequence))

    def _is_loading(self, group_id: str) -> bool:
        return bool(self.loading) and self.group_log.partition_of(group_id) in self.loading

    def find_coordinator(self, ctx: RequestContext, request: Any) -> None:
        host, port = self.broker.advertised
        ctx.respond(find_coordinator.handle(request, ctx.version,
                                            (self.broker.node_id, host, port), self._is_loading))

    def member_request(self, ctx: RequestContext, request: Any) -> None:
        module = _MEMBER_APIS[ctx.header.api_key]
        ref = self._ref(ctx)
        command = module.to_command(request, ctx.version, ref, ctx.client_id, ctx.client_host)
        group_id = getattr(command, "group_id", None)
        if self.loading and self._waits_for_loading(ctx, command, group_id):
            ctx.respond(module.to_response(
                error_outcome(command, ErrorCode.coordinator_load_in_progress), ctx.version))
            return
        self._pending[ref] = _Pending(ctx, module, command)
        result = self.manager.handle(command, self.clock.now_ms())
        # The group's log partition matters to `apply` only while a group write is in flight;
        # a heartbeat to an idle group should not hash the group id.
        self.apply(result, self.group_log.partition_of(group_id)
                   if group_id is not None and self._writes_in_flight else None)

    def _waits_for_loading(self, ctx: RequestContext, command: Any, group_id: str | None
                           ) -> bool:
        """Does the request touch a group-log partition still being replayed?"""
        if ctx.header.api_key == list_groups.API_KEY:
            return True
        group_ids = getattr(command, "group_ids", None)
        if group_ids is not None:
            return any(self._is_loading(g) for g in group_ids)
        return group_id is not None and self._is_loading(group_id)

    def offset_commit(self, ctx: RequestContext, request: Any) -> None:
        command = offset_commit.to_command(request, ctx.version, self._ref(ctx))
        if ctx.version == offset_commit.ZOOKEEPER_ONLY_VERSION:
            self._refuse_zookeeper_version(ctx, "OffsetCommit")
            self._answer_commit(ctx, oc.OffsetCommitOutcome.failed(
                command, ErrorCode.unsupported_version))
            return
        if self._is_loading(command.group_id):
            self._answer_commit(ctx, oc.OffsetCommitOutcome.failed(
                command, ErrorCode.coordinator_load_in_progress))
            return
        now = self.clock.now_ms()
        group_known = self.manager.group(command.group_id) is not None
        error, result = self.manager.validate_offset_commit(
            command.group_id, command.member_id, command.generation_id,
            command.group_instance_id, now)
        self.apply(result)
        if (error is ErrorCode.illegal_generation and not group_known
                and ctx.version >= 9):
            error = ErrorCode.group_id_not_found  # KIP-848 changed this answer from v9 on
        if error is not None:
            self._answer_commit(ctx, oc.OffsetCommitOutcome.failed(command, error))
            return
        expire = expire_timestamp_ms(command.retention_time_ms, now)
        errors, records = self.offsets.commit(
            command.group_id, command.topics, self.clock.wall_ms(),
            topic_exists=self._partition_exists, expire_timestamp=expire,
            commit_timestamps=command.commit_timestamps)
        if not records:
            self._answer_commit(ctx, oc.OffsetCommitOutcome.from_errors(errors))
            return
        durable = self.group_log.append(list(records), self.clock.wall_ms())

        def committed(done: asyncio.Future[None]) -> None:
            if done.exception() is not None:
                self.offsets.abort(records)
                self._answer_commit(ctx, oc.OffsetCommitOutcome.failed(
                    command, ErrorCode.coordinator_not_available))
                return
            self.offsets.apply_all(records)
            self._answer_commit(ctx, oc.OffsetCommitOutcome.from_errors(errors))
            self._journal_offsets_committed(command, len(records))

        if durable.done():
            committed(durable)  # an interval fsync policy: durable once written, answer now
        else:
            durable.add_done_callback(committed)

    def _answer_commit(self, ctx: RequestContext, outcome: oc.OffsetCommitOutcome) -> None:
        ctx.respond_raw(offset_commit.encode(outcome, ctx.version, ctx.header.correlation_id))

    def _journal_offsets_committed(self, command: oc.OffsetCommit, partitions: int) -> None:
        """The quiet `offsets_committed` event: the journal line `_event` would write, formatted
        directly, as one is written per commit."""
        if self._journal is None:
            return
        self._journal.write(_OFFSETS_COMMITTED_LINE % (
            self.clock.wall_ms(), _json_string(command.group_id),
            _json_string(command.member_id), command.generation_id, partitions))
        self._schedule_journal_flush()

    def _partition_exists(self, topic: str, partition: int) -> bool:
        found = self.broker.topics.get(topic)
        return found is not None and 0 <= partition < len(found.partitions)

    def _refuse_zookeeper_version(self, ctx: RequestContext, api: str) -> None:
        REFUSALS.refused(
            "request version answered UNSUPPORTED_VERSION", client_id=ctx.client_id,
            api_key=ctx.header.api_key, api_version=ctx.version, problem="zookeeper offsets",
            advice=(f"{api} v0 keeps offsets in ZooKeeper, which this broker (like Kafka 3.x "
                    f"without ZooKeeper) does not have: use {api} v1 or later (kafka-python "
                    "api_version >= (0, 8, 2), librdkafka broker.version.fallback >= 0.8.2)"),
            client_host=ctx.client_host)

    def offset_fetch(self, ctx: RequestContext, request: Any) -> None:
        command = offset_fetch.to_command(request, ctx.version, self._ref(ctx))
        results = []
        if ctx.version == offset_fetch.ZOOKEEPER_ONLY_VERSION:
            self._refuse_zookeeper_version(ctx, "OffsetFetch")
            for group in command.groups:
                results.append(oc.OffsetFetchGroupResult(group_id=group.group_id, partitions=tuple(
                    FetchedOffset(topic, partition, -1, -1, "", ErrorCode.unsupported_version)
                    for topic, partitions in group.topics or ()
                    for partition in partitions)))
            ctx.respond(offset_fetch.to_response(oc.OffsetFetchOutcome(groups=tuple(results)),
                                                 ctx.version))
            return
        for group in command.groups:
            if self._is_loading(group.group_id):
                results.append(oc.OffsetFetchGroupResult.failed(
                    group, ErrorCode.coordinator_load_in_progress))
                continue
            fetched = self.offsets.fetch(group.group_id, group.topics,
                                         require_stable=command.require_stable)
            results.append(oc.OffsetFetchGroupResult(group_id=group.group_id,
                                                     partitions=tuple(fetched)))
        ctx.respond(offset_fetch.to_response(oc.OffsetFetchOutcome(groups=tuple(results)),
                                             ctx.version))

    def offset_delete(self, ctx: RequestContext, request: Any) -> None:
        command = offset_delete.to_command(request, ctx.version, self._ref(ctx))
        group = self.manager.group(command.group_id)
        if self._is_loading(command.group_id):
            outcome = oc.OffsetDeleteOutcome(error=ErrorCode.coordinator_load_in_progress)
        elif (group is None and not self.offsets.has_offsets(command.group_id)) or (
                group is not None and group.state is GroupState.DEAD):
            outcome = oc.OffsetDeleteOutcome(error=ErrorCode.group_id_not_found)
        elif (group is not None and group.members
                and self._subscriptions(command.group_id) is None):
            # A live group whose subscriptions we cannot read (not the consumer protocol):
            # Kafka refuses to delete its offsets.
            outcome = oc.OffsetDeleteOutcome(error=ErrorCode.non_empty_group)
        else:
            subscribed = self._subscriptions(command.group_id) or set()
            errors, tombstones = self.offsets.delete(command.group_id, command.topics,
                                                     subscribed)
            outcome = oc.OffsetDeleteOutcome.from_errors(errors)
            if tombstones:
                self._persist_then(tombstones, ctx, lambda: offset_delete.to_response(
                    outcome, ctx.version), lambda: offset_delete.to_response(
                    oc.OffsetDeleteOutcome(error=ErrorCode.coordinator_not_available),
                    ctx.version))
                return
        ctx.respond(offset_delete.to_response(outcome, ctx.version))

    def delete_groups(self, ctx: RequestContext, request: Any) -> None:
        command = delete_groups.to_command(request, ctx.version, self._ref(ctx))
        now = self.clock.now_ms()
        results: list[tuple[str, ErrorCode]] = []
        records: list[CoordinatorRecord] = []
        for group_id in command.group_ids:
            if self._is_loading(group_id):
                results.append((group_id, ErrorCode.coordinator_load_in_progress))
                continue
            had_offsets = self.offsets.has_offsets(group_id)
            error, result = self.manager.delete_group(group_id, now)
            if error is ErrorCode.group_id_not_found and had_offsets:
                error = None  # offsets without a group record: a standalone consumer's
            if error is not None:
                results.append((group_id, error))
                continue
            self._apply_timers(result)
            self._emit(result)
            records.extend(result.records)
            records.extend(self.offsets.delete_group(group_id))
            results.append((group_id, ErrorCode.none))
        outcome = oc.DeleteGroupsOutcome(results=tuple(results))
        if not records:
            ctx.respond(delete_groups.to_response(outcome, ctx.version))
            return
        failed = oc.DeleteGroupsOutcome(results=tuple(
            (g, ErrorCode.coordinator_not_available if e is ErrorCode.none else e)
            for g, e in results))
        self._persist_then(records, ctx, lambda: delete_groups.to_response(outcome, ctx.version),
                           lambda: delete_groups.to_response(failed, ctx.version))

    def _persist_then(self, records: Sequence[CoordinatorRecord], ctx: RequestContext,
                      ok: Callable[[], Any], failed: Callable[[], Any]) -> None:
        durable = self.group_log.append(list(records), self.clock.wall_ms())

        def done(future: asyncio.Future[None]) -> None:
            if future.exception() is not None:
                ctx.respond(failed())
                return
            for record in records:
                if isinstance(record, OffsetCommitRecord):
                    self.offsets.apply(record)
            ctx.respond(ok())

        durable.add_done_callback(done)

    def _subscriptions(self, group_id: str) -> set[str] | None:
        group = self.manager.group(group_id)
        if group is None or group.protocol_type != "consumer" or not group.members:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            for protocol in member.protocols:
                if protocol.name == group.protocol_name:
                    parsed = subscribed_topics(protocol.metadata)
                    if parsed is None:
                        return None
                    topics |= parsed
        return topics

    # applying results -------------------------------------------------------------------------

    def apply(self, result: Result, log_partition: int | None = None) -> None:
        """Apply a Result; `log_partition` is the group-log partition of the request's group.

        A Result without records may still depend on one that is not yet durable (a follower's
        SyncGroup answered from the assignment the leader's pending write carries), so while a
        group-metadata write is in flight on that partition its replies are held back until the
        write completes, as Kafka's coordinator runtime holds them.
        """
        self._apply_timers(result)
        self._emit(result)
        if not result.records:
            if log_partition is not None and self._writes_in_flight.get(log_partition):
                self._held.setdefault(log_partition, []).append(result)
            else:
                self._deliver(result)
            return
        records = list(result.records)
        partitions = {self.group_log.partition_of(r.key.group) for r in records}
        for partition in partitions:
            self._writes_in_flight[partition] = self._writes_in_flight.get(partition, 0) + 1
        try:
            durable = self.group_log.append(records, self.clock.wall_ms())
        except Exception as exc:
            # Whatever went wrong, the parked requests of this Result must still be answered.
            log.exception("group log append failed")
            durable = asyncio.get_running_loop().create_future()
            durable.set_exception(exc)

        def persisted(done: asyncio.Future[None]) -> None:
            try:
                settle(done)
            finally:
                for partition in partitions:
                    self._writes_in_flight[partition] -= 1
                    if not self._writes_in_flight[partition]:
                        del self._writes_in_flight[partition]
                        for held in self._held.pop(partition, ()):
                            self._deliver(held)

        def settle(done: asyncio.Future[None]) -> None:
            if done.exception() is None:
                self._deliver(result)
                return
            for reply in result.replies:
                pending = self._pending.pop(reply.ref, None)
                if pending is not None:
                    pending.ctx.respond(pending.module.to_response(
                        error_outcome(pending.command, ErrorCode.coordinator_not_available),
                        pending.ctx.version))
            groups = {r.key.group for r in records}
            self.apply(self.manager.append_failed(groups, self.clock.now_ms()))

        durable.add_done_callback(persisted)

    def _apply_timers(self, result: Result) -> None:
        for op in result.timers:
            if op.deadline_ms is None:
                self.broker.cancel(op.key)
            else:
                self.broker.schedule(op.key, op.deadline_ms)

    def _deliver(self, result: Result) -> None:
        for reply in result.replies:
            pending = self._pending.pop(reply.ref, None)
            if pending is None:
                continue  # its connection closed; the core was told
            ctx = pending.ctx
            encode = getattr(pending.module, "encode", None)
            if encode is not None:
                ctx.respond_raw(encode(reply.outcome, ctx.version, ctx.header.correlation_id))
            else:
                ctx.respond(pending.module.to_response(reply.outcome, ctx.version))

    def _emit(self, result: Result) -> None:
        for event in result.events:
            self._event(event.as_dict())

    def _event(self, payload: dict[str, Any], quiet: bool = False) -> None:
        if not quiet:
            events_log.info(payload.get("event", "group event"),
                            **{k: v for k, v in payload.items() if k != "event"})
        if self._journal is not None:
            self._journal.write(json.dumps({"ts": self.clock.wall_ms(), **payload},
                                           default=str) + "\n")
            self._schedule_journal_flush()

    def _schedule_journal_flush(self) -> None:
        if not self._journal_flush_pending:
            # Batch journal writes: one flush per 100 ms instead of a syscall per event.
            self._journal_flush_pending = True
            asyncio.get_running_loop().call_later(0.1, self._flush_journal)

    def _flush_journal(self) -> None:
        self._journal_flush_pending = False
        if self._journal is not None and not self._journal.closed:
            self._journal.flush()

    def on_timer(self, key: tuple[Any, ...], now_ms: int) -> None:
        self.apply(self.manager.expire(key, self.clock.now_ms()))

    def connection_closed(self, connection_id: int) -> None:
        for ref in [r for r in self._pending if r.connection_id == connection_id]:
            del self._pending[ref]
        self.apply(self.manager.connection_closed(connection_id, self.clock.now_ms()))

    # offset expiry ----------------------------------------------------------------------------

    async def _expiry_loop(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")

    async def expire_offsets(self) -> None:
        if self.loading:
            return
        view: dict[str, GroupExpiryView] = {}
        for group_id, group in self.manager.groups.items():
            view[group_id] = GroupExpiryView(
                state_is_empty=group.state is GroupState.EMPTY,
                current_state_timestamp=group.state_timestamp_ms,
                subscribed_topics=self._subscriptions(group_id),
                protocol_type=group.protocol_type or "",
                state_is_stable=group.state is GroupState.STABLE,
            )
        expired = self.offsets.expire(self.clock.wall_ms(), view)
        records: list[CoordinatorRecord] = list(expired.tombstones)
        now = self.clock.now_ms()
        for group_id in expired.groups_without_offsets:
            error, result = self.manager.delete_group(group_id, now)
            if error is None:
                self._apply_timers(result)
                self._emit(result)
                records.extend(result.records)
        if not records:
            return
        await self.group_log.append(records, self.clock.wall_ms())
        for record in records:
            if isinstance(record, OffsetCommitRecord):
                self.offsets.apply(record)
        self._event({"event": "offsets_expired", "partitions": len(expired.tombstones),
                     "groups_deleted": len(expired.groups_without_offsets)})

    # compaction -------------------------------------------------------------------------------

    async def _cleaner_loop(self) -> None:
        """Compact the group log every `log.cleaner.backoff.ms` on a worker thread (SPEC §11)."""
        settings = self.broker.settings
        interval = settings["log.cleaner.backoff.ms"] / 1000
        retention_ms = settings["log.cleaner.delete.retention.ms"]
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            if self.loading:
                continue  # replay reads the segments the cleaner would swap
            try:
                await loop.run_in_executor(None, self.group_log.compact, self.clock.wall_ms(),
                                           retention_ms)
            except Exception:
                log.exception("group log compaction failed")

    # registration -----------------------------------------------------------------------------

    def register(self) -> None:
        broker = self.broker
        broker.register(10, self.find_coordinator)
        for api_key in _MEMBER_APIS:
            broker.register(api_key, self.member_request)
        broker.register(8, self.offset_commit)
        broker.register(9, self.offset_fetch)
        broker.register(47, self.offset_delete)
        broker.register(42, self.delete_groups)
