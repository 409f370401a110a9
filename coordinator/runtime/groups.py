"""The asyncio side of group coordination: one entry point per group API, wired to the core.

For every group request: kio request -> command (`coordinator/api/*`), `now_ms` from the clock,
`Result` from the core, which `ResultApplier` (`apply.py`) applies: timers, events, records made
durable, then replies. The other jobs sit beside it: loading the group log at start-up
(`loading.py`), offset expiry and compaction (`maintenance.py`), the journal lines
(`event_journal.py`). What this needs of the broker is `GroupHost`, not the broker itself.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

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
from coordinator.api.context import (
    ApiVersionRange,
    ClientRequest,
    ConnectionView,
    respond_in_slices,
)
from coordinator.group import offset_commands as oc
from coordinator.group.config import GroupConfig
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.group import TopicImage, TopicInfo
from coordinator.group.offset_decisions import partition_errors
from coordinator.group.offsets import OffsetStore
from coordinator.group.outcomes import refused_outcome
from coordinator.group.result import RequestRef
from coordinator.group.service import GroupCoordinatorService
from coordinator.grouplog.log import GroupLog
from coordinator.runtime import txn_offsets
from coordinator.runtime.apply import ParkedFetches, ResultApplier, Timers
from coordinator.runtime.clock import Clock
from coordinator.runtime.event_journal import EventJournal
from coordinator.runtime.journal_files import Journal
from coordinator.runtime.loading import GroupLogLoader
from coordinator.runtime.maintenance import GroupLogMaintenance
from coordinator.runtime.txn_offsets import TransactionalOffsets
from coordinator.settings import BrokerSettings
from protocol.codec import plain_body
from protocol.refusals import RefusalLog
from storage.fs import REAL_FS, FileSystem
from storage.log import LogConfig
from storage.topics import TopicStore

if TYPE_CHECKING:
    from coordinator.ops.metrics import BrokerMetrics

_MEMBER_APIS: dict[int, ModuleType] = {
    11: join_group, 14: sync_group, 12: heartbeat, 13: leave_group,
    15: describe_groups, 16: list_groups,
    68: consumer_group_heartbeat, 69: consumer_group_describe,
}

Handler = Callable[[ClientRequest, Any], None]

_NONE = int(ErrorCode.none)


class GroupHost(Timers, Protocol):
    """What the group runtime uses of the broker that hosts it."""

    @property
    def settings(self) -> BrokerSettings: ...

    @property
    def node_id(self) -> int: ...

    @property
    def clock(self) -> Clock:
        """The broker's clock: the runtime reads no other."""
        ...

    @property
    def refusals(self) -> RefusalLog: ...

    def advertised_to(self, listener: str) -> tuple[str, int]:
        """The address a client that came in on `listener` is told to use."""
        ...

    @property
    def metrics(self) -> BrokerMetrics | None: ...

    @property
    def topics(self) -> TopicStore: ...

    @property
    def fetches(self) -> ParkedFetches: ...

    def fail(self, error: BaseException) -> None: ...

    def register(self, versions: ApiVersionRange, handler: Handler) -> None: ...


def new_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupRuntime:
    def __init__(self, host: GroupHost) -> None:
        self.host = host
        settings = host.settings
        self.clock = host.clock
        self.config = GroupConfig.from_settings(settings.values)
        self.service = GroupCoordinatorService(
            self.config, new_member_id, ConsumerGroupConfig.from_settings(settings.values),
            OffsetStore(self.config))
        self._topic_image_version = 0
        self.offsets = self.service.offset_store
        self.group_log: GroupLog
        self.journal = EventJournal(self.clock.wall_ms)
        self.applier = ResultApplier(
            self.service, self.clock, host, self.journal, host.fetches,
            host.metrics, max_record_bytes=settings["offsets.topic.max.message.bytes"])
        self.loader = GroupLogLoader(self.service, self.offsets, self.applier, self.clock,
                                     self.config.offsets_topic_num_partitions, host.fail)
        self.maintenance = GroupLogMaintenance(
            self.service, self.applier, self.loader, self.clock, self.journal, host.metrics,
            retention_check_interval_ms=self.config.offsets_retention_check_interval_ms,
            cleaner_backoff_ms=settings["log.cleaner.backoff.ms"],
            delete_retention_ms=settings["log.cleaner.delete.retention.ms"])
        self.txn_offsets = TransactionalOffsets(
            self.offsets, self.service.offsets, self.clock, self.loader.is_loading,
            self.loader.unavailable, self._partition_exists)
        self.txn_offsets.loading_partitions = lambda: self.loader.loading
        self.loader.on_open_transactions = self.txn_offsets.loaded
        self._sequence = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        # Topics whose offsets' tombstones are being written (DeleteTopics), by how many
        # deletions wait: commits to them are refused meanwhile, so none outlives the topic.
        self._topics_being_deleted: dict[str, int] = {}
        self.fs: FileSystem = REAL_FS  # the group log's filesystem; tests inject faults here

    @property
    def loading(self) -> set[int]:
        """Group-log partitions not served yet (being replayed, or failed to)."""
        return self.loader.loading

    @property
    def failed(self) -> set[int]:
        return self.loader.failed

    # lifecycle --------------------------------------------------------------------------------

    def open(self, data_dir: Path, repair: bool) -> None:
        settings = self.host.settings
        # New group records are capped by the applier (offsets.topic.max.message.bytes); the
        # storage takes any size, so that a log written before the cap (or with a larger one)
        # still loads.
        config = LogConfig(segment_bytes=settings["offsets.topic.segment.bytes"],
                           retention_ms=-1, retention_bytes=-1, max_message_bytes=2**31 - 1)
        self.group_log = GroupLog.open(data_dir, self.config.offsets_topic_num_partitions,
                                       config, settings["offsets.commit.fsync"], self.fs,
                                       repair=repair)
        self.group_log.on_failure = self.host.fail  # fail-stop on a failed fsync
        self.group_log.on_segments_lost = self.maintenance.rewrite_lost
        for part in (self.applier, self.loader, self.maintenance, self.txn_offsets):
            part.group_log = self.group_log
        self.topics_changed()
        self.journal.open(Journal(Path(settings["journal.dir"] or data_dir / "events"),
                                  segment_bytes=settings["journal.segment.bytes"],
                                  segment_ms=settings["journal.segment.ms"],
                                  retention_bytes=settings["journal.retention.bytes"],
                                  wall_ms=self.clock.wall_ms))
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.loader.load()))
        self._tasks.append(loop.create_task(self.maintenance.expiry_loop()))
        self._tasks.append(loop.create_task(self.maintenance.cleaner_loop()))

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.applier.heap.close()
        self.group_log.close()
        self.journal.close()

    async def expire_offsets(self) -> None:
        await self.maintenance.expire_offsets()

    # requests ---------------------------------------------------------------------------------

    def _ref(self, ctx: ClientRequest) -> RequestRef:
        return RequestRef(ctx.connection.id, next(self._sequence))

    def find_coordinator(self, ctx: ClientRequest, request: Any) -> None:
        host, port = self.host.advertised_to(ctx.connection.listener)
        ctx.respond(find_coordinator.handle(request, ctx.version,
                                            (self.host.node_id, host, port),
                                            self.loader.is_still_loading))

    def member_request(self, ctx: ClientRequest, request: Any) -> None:
        module = _MEMBER_APIS[ctx.header.api_key]
        ref = self._ref(ctx)
        command = module.to_command(request, ctx.version, ref, ctx.client_id, ctx.client_host)
        group_id = getattr(command, "group_id", None)
        if self.loader.loading:  # some group-log partition is not served (yet)
            refused = refused_outcome(command, self.loader.refusal,
                                      self.loader.unavailable(None))
            if refused is not None:
                ctx.respond(module.to_response(refused, ctx.version))
                return
        self.applier.park(ref, ctx, module, command)
        result = self.service.handle(command, self.clock.now_ms())
        # The group's log partition matters to `apply` only while a write of the group's
        # metadata is pending; a heartbeat while none is should not hash the group id.
        group_writes = self.applier.group_writes
        self.applier.apply(result, self.group_log.partition_of(group_id)
                           if group_writes and group_id in group_writes else None)

    def heartbeat(self, ctx: ClientRequest, request: Any) -> None:
        """A classic Heartbeat: in the steady state the core moves the member's session in
        place and the answer is NONE (`_steady_heartbeat`); anything else goes the way of every
        member request."""
        if self._steady_heartbeat(request, ctx.connection.id):
            header = ctx.header
            ctx.respond_raw(heartbeat.encode_error(_NONE, header.api_version,
                                                   header.correlation_id))
            return
        self.member_request(ctx, request)

    def heartbeat_now(self, connection: ConnectionView, frame: bytes, api_version: int,
                      correlation_id: int) -> bytes | None:
        """`heartbeat`'s steady state answered from the frame, before any request object,
        response slot or context is made (the connection's immediate answers): the same
        conditions and the same move of the session; None, with nothing changed, for anything
        else, which the connection then decodes and hands to `heartbeat`."""
        request = plain_body(frame, heartbeat.API_KEY, api_version)
        if request is None or not self._steady_heartbeat(request, connection.id):
            return None
        return heartbeat.encode_error(_NONE, api_version, correlation_id)

    def _steady_heartbeat(self, request: Any, connection_id: int) -> bool:
        """The member's session moved in place (`GroupCoordinatorService.steady_heartbeat`):
        never while the group log loads or the group's metadata write is pending (the answer
        must then wait for it)."""
        group_id = request.group_id
        return (not self.loader.loading and group_id not in self.applier.group_writes
                and self.service.steady_heartbeat(
                    group_id, request.member_id, request.generation_id,
                    getattr(request, "group_instance_id", None), connection_id,
                    self.clock.now_ms()))

    def offset_commit(self, ctx: ClientRequest, request: Any) -> None:
        command = offset_commit.to_command(request, ctx.version, self._ref(ctx))
        if ctx.version == offset_commit.ZOOKEEPER_ONLY_VERSION:
            self._refuse_zookeeper_version(ctx, "OffsetCommit")
            self._answer_commit(ctx, oc.OffsetCommitOutcome.failed(
                command, ErrorCode.unsupported_version))
            return
        if self.loader.is_loading(command.group_id):
            # Unknown partitions keep their own answer, given before the coordinator's.
            self._answer_commit(ctx, oc.OffsetCommitOutcome.from_errors(partition_errors(
                command.topics, self._partition_exists,
                self.loader.unavailable(command.group_id))))
            return
        # When the append is acknowledged as soon as it is written, the records are applied
        # (or aborted) by `apply` before anything else runs: no reader can see them pending.
        now = self.clock.now_ms()
        result = self.service.offset_commit(command, ctx.version, now,
                                            self._partition_exists,
                                            pending=not self.group_log.acknowledges_on_write)
        self.applier.park(command.ref, ctx, offset_commit, command)
        if not result.records:
            self.applier.apply(result)
            return
        count = len(result.records)

        def committed(durable: bool) -> None:
            if not durable:
                return
            if self.host.metrics is not None:
                self.host.metrics.offset_commits += count
            self.journal.offsets_committed(command.group_id, command.member_id,
                                           command.generation_id, count)

        self.applier.apply(result, then=committed, one_group=command.group_id, now_ms=now)

    def _answer_commit(self, ctx: ClientRequest, outcome: oc.OffsetCommitOutcome) -> None:
        ctx.respond_raw(offset_commit.encode(outcome, ctx.version, ctx.header.correlation_id))

    def _partition_exists(self, topic: str, partition: int) -> bool:
        found = self.host.topics.get(topic)
        return (found is not None and 0 <= partition < len(found.partitions)
                and not (self._topics_being_deleted and topic in self._topics_being_deleted))

    def _refuse_zookeeper_version(self, ctx: ClientRequest, api: str) -> None:
        self.host.refusals.refused(
            "request version answered UNSUPPORTED_VERSION", client_id=ctx.client_id,
            api_key=ctx.header.api_key, api_version=ctx.version, problem="zookeeper offsets",
            advice=(f"{api} v0 keeps offsets in ZooKeeper, which this broker (like Kafka 3.x "
                    f"without ZooKeeper) does not have: use {api} v1 or later (kafka-python "
                    "api_version >= (0, 8, 2), librdkafka broker.version.fallback >= 0.8.2)"),
            client_host=ctx.client_host)

    def offset_fetch(self, ctx: ClientRequest, request: Any) -> None:
        command = offset_fetch.to_command(request, ctx.version, self._ref(ctx))
        if ctx.version == offset_fetch.ZOOKEEPER_ONLY_VERSION:
            self._refuse_zookeeper_version(ctx, "OffsetFetch")
        outcome = self.service.offsets.fetch(command, ctx.version, self.loader.refusal)
        respond_in_slices(ctx, offset_fetch.to_values(outcome, ctx.version))

    def offset_delete(self, ctx: ClientRequest, request: Any) -> None:
        command = offset_delete.to_command(request, ctx.version, self._ref(ctx))
        result = self.service.offset_delete(command, self.loader.refusal,
                                            self._partition_exists)
        if result.records and self.host.metrics is not None:
            self.host.metrics.offset_deletions += len(result.records)
        self.applier.park(command.ref, ctx, offset_delete, command)
        self.applier.apply(result)

    def delete_groups(self, ctx: ClientRequest, request: Any) -> None:
        command = delete_groups.to_command(request, ctx.version, self._ref(ctx))
        # The groups are gone from memory already; a failed write brings them back.
        result = self.service.delete_groups(command, self.clock.now_ms(), self.loader.refusal)
        self.applier.park(command.ref, ctx, delete_groups, command)
        self.applier.apply(result)

    def delete_topic_offsets(self, topics: Sequence[str],
                             then: Callable[[ErrorCode | None], None]) -> None:
        """Before DeleteTopics deletes `topics`: write the tombstones of every group's offsets
        of them, then `then(None)` once durable, or `then(error)` when they could not be
        written (the offsets stay, and the topics should too). Until then commits to the
        topics answer UNKNOWN_TOPIC_OR_PARTITION.

        Refused while the group log loads: offsets of a partition not loaded yet could not be
        found, and would outlive the topic."""
        if self.loader.loading:
            then(self.loader.unavailable(None))
            return
        tombstones = self.service.offsets.delete_topics(set(topics))
        if not tombstones.records:
            then(None)
            return
        being_deleted = self._topics_being_deleted
        for topic in topics:
            being_deleted[topic] = being_deleted.get(topic, 0) + 1
        if self.host.metrics is not None:
            self.host.metrics.offset_deletions += len(tombstones.records)

        def written(durable: bool) -> None:
            for topic in topics:
                left = being_deleted[topic] - 1
                if left:
                    being_deleted[topic] = left
                else:
                    del being_deleted[topic]
            # A disk error, retriable: the topics are kept, so a retry starts over.
            then(None if durable else ErrorCode.kafka_storage_error)

        # Applied to the offsets only once durable (`GroupCoordinatorService.records_durable`).
        self.applier.apply(tombstones, then=written)

    def on_timer(self, key: tuple[Any, ...], now_ms: int) -> None:
        now = self.clock.now_ms()
        # Nearly every session check fires early (heartbeats move the deadline, not the wheel
        # entry): re-arm it directly, once per member per session timeout.
        rearm_at = self.service.early_heartbeat_wakeup(key, now)
        if rearm_at is not None:
            self.applier.timers.schedule(key, rearm_at)
            return
        self.applier.apply(self.service.expire(key, now))
        if key[0] == "heartbeat":
            # A pending member that never came back may leave a group with nothing in it.
            self.service.offsets.forget_if_unused(str(key[1]))

    def connection_closed(self, connection_id: int) -> None:
        self.applier.forget_connection(connection_id)
        self.applier.apply(self.service.connection_closed(connection_id, self.clock.now_ms()))

    # topics -----------------------------------------------------------------------------------

    def topics_changed(self) -> None:
        """Hand the consumer groups a new image of the topics (they check it on heartbeats).
        The entries of unchanged topics are reused: making one is what costs, and with
        thousands of topics a new image per creation must not hold the loop."""
        self._topic_image_version += 1
        previous = self.service.consumer.image.by_name
        by_name: dict[str, TopicInfo] = {}
        for topic in self.host.topics.topics():
            info = previous.get(topic.name)
            if (info is None or info.topic_id != topic.topic_id
                    or info.partitions != len(topic.partitions)):
                info = TopicInfo(topic.topic_id, topic.name, len(topic.partitions))
            by_name[topic.name] = info
        self.service.consumer.set_topic_image(TopicImage(
            version=self._topic_image_version, by_name=by_name))

    # registration -----------------------------------------------------------------------------

    def register(self) -> None:
        host = self.host
        host.register(find_coordinator.VERSIONS, self.find_coordinator)
        for module in _MEMBER_APIS.values():
            host.register(module.VERSIONS, self.member_request)
        host.register(heartbeat.VERSIONS, self.heartbeat)
        host.register(offset_commit.VERSIONS, self.offset_commit)
        host.register(offset_fetch.VERSIONS, self.offset_fetch)
        host.register(txn_offsets.VERSIONS, self.txn_offsets.txn_offset_commit)
        host.register(offset_delete.VERSIONS, self.offset_delete)
        host.register(delete_groups.VERSIONS, self.delete_groups)
