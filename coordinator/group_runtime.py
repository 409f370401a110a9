"""The asyncio side of group coordination: feeds the pure core, persists, replies.

For every group request: kio request -> command (`coordinator/api/*`), `now_ms` from the clock,
`Result` from the core, then in order: timer changes to the wheel, records appended to the group
log, and - only once those records are durable - the replies. A reply may answer a request
parked earlier (the last JoinGroup of a rebalance completes them all). If the append or its
fsync fails, no reply of that Result is delivered as success: each gets
COORDINATOR_NOT_AVAILABLE, the offsets stay unacknowledged, the core undoes what waited for the
write (`coordinator/classic/writes.py`) and other affected groups rebalance; the journal gets a
`group_write_failed` line.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import structlog
from kio.schema.errors import ErrorCode

from coordinator import offset_commands as oc
from coordinator.api import (
    consumer_group_describe,
    consumer_group_heartbeat,
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
from coordinator.clock import SystemClock
from coordinator.config import GroupConfig
from coordinator.consumer.config import ConsumerGroupConfig
from coordinator.consumer.group import TopicImage, TopicInfo
from coordinator.consumer.heartbeat import GROUP_TYPE as CONSUMER_GROUP_TYPE
from coordinator.context import RequestContext
from coordinator.events import JOURNAL_SCHEMA_VERSION, RebalanceStarted, journal_record
from coordinator.group_offsets import GroupOffsets
from coordinator.journal import Journal
from coordinator.manager import GroupCoordinator
from coordinator.offsets import FetchedOffset, OffsetStore
from coordinator.outcomes import error_outcome
from coordinator.records import ConsumerGroupRecord, GroupMetadataRecord, OffsetCommitRecord
from coordinator.result import RequestRef, Result
from protocol.refusals import REFUSALS
from storage.fs import REAL_FS, FileSystem
from storage.log import LogConfig
from storage.offsets_topic import GroupLog, GroupLogLoadError

if TYPE_CHECKING:
    from coordinator.runtime import Broker

log = structlog.get_logger("rebalanced.coordinator")
events_log = structlog.get_logger("rebalanced.events")

_MEMBER_APIS: dict[int, ModuleType] = {
    11: join_group, 14: sync_group, 12: heartbeat, 13: leave_group,
    15: describe_groups, 16: list_groups,
    68: consumer_group_heartbeat, 69: consumer_group_describe,
}


# What `json.dumps(journal_record(...))` makes of the `offsets_committed` event (default
# separators, ASCII only), formatted directly as it is written once per commit.
_OFFSETS_COMMITTED_LINE = ('{"v": ' + str(JOURNAL_SCHEMA_VERSION) + ', "event_type": '
                           '"offsets_committed", "ts": %d, "group_id": %s, "member_id": %s, '
                           '"generation": %d, "partitions": %d}\n')
_json_string = encode_basestring_ascii


@dataclass(slots=True)
class _Pending:
    ctx: RequestContext
    module: ModuleType
    command: Any


def _succeeded(done: asyncio.Future[None]) -> bool:
    return not done.cancelled() and done.exception() is None


def _error_of(done: asyncio.Future[None]) -> str:
    return "cancelled" if done.cancelled() else str(done.exception())


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
            group_member_disconnect_grace_ms=settings["group.member.disconnect.grace.ms"],
            offsets_topic_num_partitions=settings["offsets.topic.num.partitions"],
            offset_metadata_max_bytes=settings["offset.metadata.max.bytes"],
            offsets_retention_minutes=settings["offsets.retention.minutes"],
            offsets_retention_check_interval_ms=settings["offsets.retention.check.interval.ms"],
        )
        self.manager = GroupCoordinator(self.config, new_member_id, ConsumerGroupConfig(
            session_timeout_ms=settings["group.consumer.session.timeout.ms"],
            heartbeat_interval_ms=settings["group.consumer.heartbeat.interval.ms"],
            max_size=settings["group.consumer.max.size"],
            assignors=settings["group.consumer.assignors"],
            migration_policy=settings["group.consumer.migration.policy"],
        ))
        if broker.metrics is not None:
            broker.metrics.consumer_groups = self.manager.consumer.groups  # a live view
        self._topic_image_version = 0
        self.offsets = OffsetStore(self.config)
        self.core = GroupOffsets(self.manager, self.offsets)  # the offset APIs' decisions
        self.group_log: GroupLog
        # Partitions not served yet: being replayed, or (also in `failed`) failed to replay.
        self.loading: set[int] = set(range(self.config.offsets_topic_num_partitions))
        self.failed: set[int] = set()
        self._pending: dict[RequestRef, _Pending] = {}
        # Refs of `_pending` by connection, so that a closed connection finds its own without
        # scanning everyone's (thousands of connections may close at once). Answered refs are
        # left in place and pruned when a connection's list grows.
        self._pending_by_connection: dict[int, list[RequestRef]] = {}
        self._sequence = itertools.count()
        self.journal: Journal | None = None
        self._journal_flush_pending = False
        # Groups with a metadata write not yet completed -> how many (see `apply`).
        self._group_writes: dict[str, int] = {}
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
        self.topics_changed()
        self.journal = Journal(Path(settings["journal.dir"] or data_dir / "events"),
                               segment_bytes=settings["journal.segment.bytes"],
                               segment_ms=settings["journal.segment.ms"],
                               retention_bytes=settings["journal.retention.bytes"],
                               wall_ms=self.clock.wall_ms)
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
            try:
                total += await self._load_partition(loop, partition)
            except Exception as exc:
                self._load_failed(partition, exc)
                continue
            self.loading.discard(partition)
        if self.failed:
            return
        log.info("group log loaded", records=total, groups=len(self.manager.groups),
                 duration_ms=self.clock.monotonic_ms() - started)

    async def _load_partition(self, loop: asyncio.AbstractEventLoop, partition: int) -> int:
        count = 0
        # Reading and decoding a partition runs in a worker thread so the loop keeps
        # accepting and serving loaded partitions; applying the records stays on the loop.
        records = await loop.run_in_executor(
            None, lambda: list(self.group_log.replay_partition_at(partition)))
        for offset, record in records:
            try:
                if isinstance(record, GroupMetadataRecord):
                    self._apply_timers(self.manager.replay(record, self.clock.now_ms()))
                elif isinstance(record, ConsumerGroupRecord):
                    self._apply_timers(self.manager.consumer.replay(record, self.clock.now_ms()))
                else:
                    self.offsets.apply(record)
            except Exception as exc:
                raise self.group_log.load_error(
                    partition, offset, f"replaying {type(record).__name__}: {exc!r}") from exc
            count += 1
            if count % 20_000 == 0:
                await asyncio.sleep(0)  # keep serving other partitions' requests
        self._apply_timers(self.manager.consumer.finish_replay(self.clock.now_ms()))
        self._restore_offset_only_groups(partition)
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
        self.broker.fail(exc)

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
        if self.journal is not None:
            self.journal.close()

    # requests ---------------------------------------------------------------------------------

    def _ref(self, ctx: RequestContext) -> RequestRef:
        return RequestRef(ctx.connection.id, next(self._sequence))

    def _is_loading(self, group_id: str) -> bool:
        return bool(self.loading) and self.group_log.partition_of(group_id) in self.loading

    def _is_still_loading(self, group_id: str) -> bool:
        return self._is_loading(group_id) and (
            not self.failed or self.group_log.partition_of(group_id) not in self.failed)

    def _unavailable(self, group_id: str | None) -> ErrorCode:
        """The answer for a group whose partition is not served (`_is_loading`)."""
        if self.failed and (group_id is None
                            or self.group_log.partition_of(group_id) in self.failed):
            return ErrorCode.not_coordinator
        return ErrorCode.coordinator_load_in_progress

    def find_coordinator(self, ctx: RequestContext, request: Any) -> None:
        host, port = self.broker.advertised
        ctx.respond(find_coordinator.handle(request, ctx.version,
                                            (self.broker.node_id, host, port),
                                            self._is_still_loading))

    def member_request(self, ctx: RequestContext, request: Any) -> None:
        module = _MEMBER_APIS[ctx.header.api_key]
        ref = self._ref(ctx)
        command = module.to_command(request, ctx.version, ref, ctx.client_id, ctx.client_host)
        group_id = getattr(command, "group_id", None)
        if self.loading and self._waits_for_loading(ctx, command, group_id):
            ctx.respond(module.to_response(
                error_outcome(command, self._unavailable(group_id)), ctx.version))
            return
        self._pending[ref] = _Pending(ctx, module, command)
        refs = self._pending_by_connection.get(ref.connection_id)
        if refs is None:
            self._pending_by_connection[ref.connection_id] = [ref]
        else:
            if len(refs) >= 8:
                refs[:] = [r for r in refs if r in self._pending]
            refs.append(ref)
        result = self.manager.handle(command, self.clock.now_ms())
        # The group's log partition matters to `apply` only while a write of the group's
        # metadata is pending; a heartbeat while none is should not hash the group id.
        self.apply(result, self.group_log.partition_of(group_id)
                   if self._group_writes and group_id in self._group_writes else None)

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
                command, self._unavailable(command.group_id)))
            return
        now = self.clock.now_ms()
        decision = self.core.commit(command, ctx.version, now, self._partition_exists)
        self._apply_timers(decision.result)
        self._emit(decision.result)
        if decision.error is not None:
            self._answer_commit(ctx, oc.OffsetCommitOutcome.failed(command, decision.error))
            return
        errors, records = decision.errors, decision.records
        if not records:
            self._answer_commit(ctx, oc.OffsetCommitOutcome.from_errors(errors))
            return
        durable = self.group_log.append(list(records), now)

        def committed(done: asyncio.Future[None]) -> None:
            if done.exception() is not None:
                self.offsets.abort(records)
                self._answer_commit(ctx, oc.OffsetCommitOutcome.failed(
                    command, ErrorCode.coordinator_not_available))
                return
            self.offsets.apply_all(records)
            if self.broker.metrics is not None:
                self.broker.metrics.offset_commits += len(records)
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
        if self.journal is None:
            return
        self.journal.append(_OFFSETS_COMMITTED_LINE % (
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
                    group, self._unavailable(group.group_id)))
                continue
            error = self.manager.consumer.validate_offset_fetch(
                group.group_id, group.member_id, group.member_epoch)
            if error is not None:
                results.append(oc.OffsetFetchGroupResult.failed(group, error))
                continue
            fetched = self.offsets.fetch(group.group_id, group.topics,
                                         require_stable=command.require_stable)
            results.append(oc.OffsetFetchGroupResult(group_id=group.group_id,
                                                     partitions=tuple(fetched)))
        ctx.respond(offset_fetch.to_response(oc.OffsetFetchOutcome(groups=tuple(results)),
                                             ctx.version))

    def offset_delete(self, ctx: RequestContext, request: Any) -> None:
        command = offset_delete.to_command(request, ctx.version, self._ref(ctx))
        if self._is_loading(command.group_id):
            outcome = oc.OffsetDeleteOutcome(error=self._unavailable(command.group_id))
            ctx.respond(offset_delete.to_response(outcome, ctx.version))
            return
        outcome, result = self.core.delete_offsets(command)
        if not result.records:
            ctx.respond(offset_delete.to_response(outcome, ctx.version))
            return
        if self.broker.metrics is not None:
            self.broker.metrics.offset_deletions += len(result.records)
        failed = oc.OffsetDeleteOutcome(error=ErrorCode.coordinator_not_available)
        self.write(result, lambda durable: ctx.respond(
            offset_delete.to_response(outcome if durable else failed, ctx.version)))

    def delete_groups(self, ctx: RequestContext, request: Any) -> None:
        command = delete_groups.to_command(request, ctx.version, self._ref(ctx))
        outcome, deleted = self.core.delete_groups(
            command.group_ids, self.clock.now_ms(),
            lambda g: self._unavailable(g) if self._is_loading(g) else None)
        if not deleted.records:
            ctx.respond(delete_groups.to_response(outcome, ctx.version))
            return
        self._apply_timers(deleted)
        failed = oc.DeleteGroupsOutcome(results=tuple(
            (g, ErrorCode.coordinator_not_available if e is ErrorCode.none else e)
            for g, e in outcome.results))

        def written(durable: bool) -> None:
            if durable:
                self._emit(deleted)
            ctx.respond(delete_groups.to_response(outcome if durable else failed, ctx.version))

        # The groups are gone from memory already; a failed write brings them back.
        self.write(deleted, written)

    # applying results -------------------------------------------------------------------------

    def apply(self, result: Result, log_partition: int | None = None) -> None:
        """Apply a Result; `log_partition` is the group-log partition of the request's group,
        given while a write of that group's metadata is pending.

        A Result without records may then depend on that write (a heartbeat of a member whose
        new id is being written), so its replies wait until the group log has acknowledged
        everything written to the partition so far, as Kafka's coordinator runtime defers a
        read behind the last written offset. They wait for that offset only, not for the
        partition to fall quiet (other groups may keep writing), and fail if a write up to it
        fails.
        """
        self._apply_timers(result)
        self._emit(result)
        if not result.records:
            waiting = (self.group_log.acknowledged(log_partition)
                       if log_partition is not None else None)
            if waiting is None:
                self._deliver(result)
            else:
                waiting.add_done_callback(lambda done: self._deliver(result)
                                          if _succeeded(done) else self._fail(result))
            return
        self.write(result)

    def write(self, result: Result, then: Callable[[bool], None] | None = None) -> None:
        """Append `result.records`; once the append completed, deliver the replies (or fail
        them), apply its offset records, hand the Result back to the core to finish or undo
        what waited for the write, then call `then(durable)`."""
        records = result.records
        groups = [r.key.group for r in records
                  if type(r) is GroupMetadataRecord or type(r) is ConsumerGroupRecord]
        for group_id in groups:
            self._group_writes[group_id] = self._group_writes.get(group_id, 0) + 1
        try:
            durable = self.group_log.append(records, self.clock.now_ms())
        except Exception as exc:
            # Whatever went wrong, the parked requests of this Result must still be answered.
            log.exception("group log append failed")
            durable = asyncio.get_running_loop().create_future()
            durable.set_exception(exc)

        def persisted(done: asyncio.Future[None]) -> None:
            for group_id in groups:
                left = self._group_writes[group_id] - 1
                if left:
                    self._group_writes[group_id] = left
                else:
                    del self._group_writes[group_id]
            ok = _succeeded(done)
            if ok:
                self._deliver(result)
                self.offsets.apply_all(r for r in records if isinstance(r, OffsetCommitRecord))
                follow = self.manager.records_durable(result, self.clock.now_ms())
            else:
                self._fail(result)
                self._reload_consumer_groups({r.key.group for r in records
                                              if isinstance(r, ConsumerGroupRecord)})
                follow = self.manager.records_failed(result, self.clock.now_ms())
                self._event({"event": "group_write_failed",
                             "group_ids": sorted({r.key.group for r in records}),
                             "records": len(records), "error": _error_of(done)})
            self.apply(follow)  # it depends on this write only, durable or failed by now
            if then is not None:
                then(ok)

        durable.add_done_callback(persisted)

    def _reload_consumer_groups(self, group_ids: set[str]) -> None:
        """A consumer group's records did not become durable: its in-memory state ran ahead of
        the log, so it is rebuilt from the log (cut back to its last durable point). Members
        whose changes were lost get FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID and rejoin."""
        consumer = self.manager.consumer
        now = self.clock.now_ms()
        for partition in sorted({self.group_log.partition_of(g) for g in group_ids}):
            wanted = {g for g in group_ids if self.group_log.partition_of(g) == partition}
            for group_id in wanted:
                self._apply_timers(consumer.forget(group_id))
            try:
                records = list(self.group_log.replay_partition(partition))
            except Exception:
                log.exception("group log reload failed", partition=partition)
                continue
            for record in records:
                if isinstance(record, ConsumerGroupRecord) and record.key.group in wanted:
                    self._apply_timers(consumer.replay(record, now))
            self._apply_timers(consumer.finish_replay(now))
            log.warning("consumer groups reloaded after a failed write", groups=sorted(wanted))

    def _fail(self, result: Result) -> None:
        """Answer every reply of `result` with the error of a failed group-log write."""
        for reply in result.replies:
            pending = self._pending.pop(reply.ref, None)
            if pending is not None:
                pending.ctx.respond(pending.module.to_response(
                    error_outcome(pending.command, ErrorCode.coordinator_not_available),
                    pending.ctx.version))

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
        if not result.events:
            return
        consumer_groups = self.manager.consumer.groups
        for event in result.events:
            payload = event.as_dict()
            if "group_type" not in payload and event.group_id in consumer_groups:
                # The events both group types share name the consumer groups' type too.
                payload["group_type"] = CONSUMER_GROUP_TYPE
            self._event(payload)
            if self.broker.metrics is not None:
                self.broker.metrics.on_event(event)
            if isinstance(event, RebalanceStarted):
                self._release_member_fetches(event.group_id)

    def _release_member_fetches(self, group_id: str) -> None:
        """A rebalance started: answer the group's members' parked Fetch long-polls now, so a
        client blocked in a long fetch gets back to its poll loop and rejoins sooner. Fetches
        carry no member id: they are matched by client id and host (a few extra wake-ups of
        other clients sharing both are harmless: they are answered with what is there)."""
        group = self.manager.group(group_id)
        if group is None or not len(self.broker.fetches):
            return
        clients = {(m.client_id, m.client_host) for m in group.members.values()}
        if clients:
            self.broker.fetches.release_clients(clients)

    def _event(self, payload: dict[str, Any], quiet: bool = False) -> None:
        if not quiet:
            events_log.info(payload.get("event", "group event"),
                            **{k: v for k, v in payload.items() if k != "event"})
        if self.journal is not None:
            self.journal.append(json.dumps(journal_record(payload, self.clock.wall_ms()),
                                           default=str) + "\n")
            self._schedule_journal_flush()

    def _schedule_journal_flush(self) -> None:
        if not self._journal_flush_pending:
            # Batch journal writes: one write per 100 ms instead of a syscall per event.
            self._journal_flush_pending = True
            asyncio.get_running_loop().call_later(0.1, self._flush_journal)

    def _flush_journal(self) -> None:
        self._journal_flush_pending = False
        if self.journal is not None:
            self.journal.flush()
            if self.journal.pending or self.journal.active_size:
                # Keep ticking while the active file holds lines, so it rotates on time.
                self._schedule_journal_flush()

    def on_timer(self, key: tuple[Any, ...], now_ms: int) -> None:
        self.apply(self.manager.expire(key, self.clock.now_ms()))

    def connection_closed(self, connection_id: int) -> None:
        for ref in self._pending_by_connection.pop(connection_id, ()):
            self._pending.pop(ref, None)
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
        expired = self.core.expire(self.clock.now_ms())
        removed = expired.result
        if not removed.records:
            return
        self._apply_timers(removed)
        written: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        # Tombstones are applied and deleted groups stay gone only once durable (`write`).
        self.write(removed, written.set_result)
        if not await written:
            raise OSError("the group log did not take the expired offsets")
        self._emit(removed)
        if self.broker.metrics is not None:
            self.broker.metrics.offset_expirations += expired.expired_offsets
        self._event({"event": "offsets_expired", "partitions": expired.expired_offsets,
                     "groups_deleted": expired.groups_deleted})

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
                await loop.run_in_executor(None, self.group_log.compact, self.clock.now_ms(),
                                           retention_ms)
            except Exception:
                log.exception("group log compaction failed")

    # topics -----------------------------------------------------------------------------------

    def topics_changed(self) -> None:
        """Hand the consumer groups a new image of the topics (they check it on heartbeats)."""
        self._topic_image_version += 1
        self.manager.consumer.set_topic_image(TopicImage(
            version=self._topic_image_version,
            by_name={t.name: TopicInfo(t.topic_id, t.name, len(t.partitions))
                     for t in self.broker.topics.topics()}))

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
