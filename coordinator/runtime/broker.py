"""The asyncio runtime: routes decoded requests to the data plane and the coordinator core.

This is the only place that reads the clock, owns the timer wheel's single loop timer, writes to
storage and sends replies. The coordinator core stays pure: it gets commands and `now_ms`, and
returns a `Result` that is applied here in order: timers, records (made durable), replies.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import fcntl
import resource
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import structlog
from kio.schema.errors import ErrorCode

from coordinator.api import (
    consumer_group_describe,
    delete_groups,
    describe_groups,
    heartbeat,
    offset_fetch,
)
from coordinator.api.context import (
    ApiVersionRange,
    ClientRequest,
    RequestContext,
    respond_in_slices,
)
from coordinator.dataplane import (
    api_versions,
    fetch,
    list_offsets,
    produce,
    producers,
    topics_admin,
    transactions,
)
from coordinator.dataplane.mutation_quota import MutationQuota
from coordinator.dataplane.producers import ProducerTable
from coordinator.dataplane.topics_admin import PartitionLimitError
from coordinator.dataplane.transactions import TransactionService
from coordinator.group.timer import TimerWheel
from coordinator.grouplog.log import GroupLog
from coordinator.ops.metrics import BrokerMetrics
from coordinator.runtime.clock import Clock, SystemClock
from coordinator.runtime.groups import GroupRuntime
from coordinator.runtime.ops_view import BrokerOpsView
from coordinator.security import authorization, sasl
from coordinator.security.scram_store import ScramStore
from coordinator.settings import BrokerSettings
from coordinator.txn.coordinator import TxnConfig
from protocol.codec import RequestHeader
from protocol.connection import Connection, ImmediateAnswer, ResponseSlot
from protocol.refusals import RefusalLog
from storage.descriptors import DescriptorBudget
from storage.fs import REAL_FS, FileSystem, filesystem_from_env
from storage.log import LogConfig
from storage.topics import Topic, TopicStore

log = structlog.get_logger("rebalanced.broker")

# Due timers handled per event-loop turn (each costs tens of microseconds).
_TIMERS_PER_TURN = 500


# File descriptors kept for everything but topic partitions and Kafka connections: the
# listening sockets, the journal, the ops port, worker threads' files, a roll's new segment.
_RESERVED_DESCRIPTORS = 64


def descriptor_share(group_log_partitions: int, soft_limit: int | None = None) -> int:
    """The file descriptors topic partitions may take, and as many Kafka connections may:
    half each of the open-file limit, once the group log (two per partition: its active
    segment, and the next one while it rolls) and `_RESERVED_DESCRIPTORS` are set aside, so
    that neither topics nor a connection flood can make a group-log roll fail with EMFILE."""
    if soft_limit is None:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft_limit == resource.RLIM_INFINITY or soft_limit > 2**31:
        return 1_000_000
    reserved = 2 * group_log_partitions + _RESERVED_DESCRIPTORS
    return max((soft_limit - reserved) // 2, 0)


def partition_limit(configured: int) -> int:
    """`max.broker.partitions`, or with -1 no limit (Kafka's default). Partitions no longer
    hold descriptors of their own (`open_segments_limit` bounds those), so what bounds them is
    memory and disk."""
    return configured if configured >= 0 else 2**31 - 1


def open_segments_limit(configured: int, group_log_partitions: int, max_connections: int,
                        ops_connections: int, soft_limit: int | None = None) -> int:
    """`log.open.segments.max`, or with -1 what is left of the open-file limit once the group
    log (two per partition), `_RESERVED_DESCRIPTORS`, the Kafka connections' share
    (`connection_limit`) and the ops port's connections are set aside."""
    if configured >= 0:
        return configured
    if soft_limit is None:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft_limit == resource.RLIM_INFINITY or soft_limit > 2**31:
        return 1_000_000
    connections = connection_limit(max_connections, group_log_partitions, soft_limit)
    reserved = 2 * group_log_partitions + _RESERVED_DESCRIPTORS + connections + ops_connections
    return max(soft_limit - reserved, 0)


def connection_limit(configured: int, group_log_partitions: int,
                     soft_limit: int | None = None) -> int:
    """`max.connections`, but no more than the connections' share of the open-file limit."""
    return min(configured, max(descriptor_share(group_log_partitions, soft_limit), 1))

Handler = Callable[[ClientRequest, Any], None]


class Broker:
    def __init__(self, settings: BrokerSettings, *, repair: bool = False,
                 clock: Clock | None = None) -> None:
        self.settings = settings
        self.node_id: int = settings["node.id"]
        self.advertised = settings.advertised
        self._advertised_by_listener = settings.advertised_by_listener()
        self.repair = repair
        self.data_dir: Path = settings.data_dir
        self.cluster_id = "rebalanced"
        # The one clock of the broker and its group runtime: deadlines and the wheel that
        # fires them read the same time. Tests pass a ManualClock.
        self.clock: Clock = clock if clock is not None else SystemClock()
        # Refused requests, logged once a minute per client: shared by the connections (the
        # server is given it) and the handlers.
        self.refusals = RefusalLog(clock_ms=self.clock.monotonic_ms)
        self.topics: TopicStore
        self.segment_budget: DescriptorBudget  # the topics' open segment files (`start`)
        self.topics_fs: FileSystem = REAL_FS  # the topics' filesystem; tests slow it down here
        self.producers = ProducerTable()
        self.transactions = TransactionService(
            self, self.producers,
            TxnConfig(settings["transaction.max.timeout.ms"],
                      settings["transactional.id.expiration.ms"]),
            settings["offsets.topic.num.partitions"])
        self.wheel = TimerWheel(tick_ms=5, wheel_size=4096, start_ms=self.clock.now_ms())
        self.fetches = fetch.FetchPurgatory(self)
        # Topic creation's disk work (directories, logs, fsyncs) runs on its own thread, one
        # topic after another, not on the loop and not in the group log's fsync pool.
        self._topic_admin: concurrent.futures.ThreadPoolExecutor | None = None
        self._builds: collections.deque[tuple[Callable[[], Any],
                                              Callable[[Any, BaseException | None], None]]]
        self._builds = collections.deque()
        self._draining = False
        self._stopping = False
        self._topics_changed_pending = False
        self.max_partitions = partition_limit(settings["max.broker.partitions"])
        self.mutation_quota = MutationQuota(settings["controller.mutation.rate"])
        self._loop: asyncio.AbstractEventLoop | None = None
        self._armed: asyncio.TimerHandle | None = None
        self._armed_at: int | None = None
        self._timer_handlers: dict[str, Callable[[tuple[Any, ...], int], None]] = {
            "fetch": lambda key, now: self.fetches.expire(key),
            "txn": lambda key, now: self.transactions.expire(),
        }
        # Each API is registered with the versions its module declares: one table that
        # routes requests, refuses other versions and is what ApiVersions advertises.
        self._handlers: dict[int, Handler] = {}
        self._served: dict[int, tuple[int, int]] = {}
        # (api key, version) -> handler, for every version served: one lookup per request.
        self._routes: dict[tuple[int, int], Handler] = {}
        self.register(produce.VERSIONS, lambda ctx, req: produce.handle(self, ctx, req))
        self.register(fetch.VERSIONS, lambda ctx, req: fetch.handle(self, ctx, req))
        self.register(list_offsets.VERSIONS,
                      lambda ctx, req: list_offsets.handle(self, ctx, req))
        self.register(topics_admin.METADATA_VERSIONS,
                      lambda ctx, req: topics_admin.metadata(self, ctx, req))
        self.register(api_versions.VERSIONS,
                      lambda ctx, req: api_versions.handle(ctx, self._served))
        self.register(topics_admin.CREATE_TOPICS_VERSIONS,
                      lambda ctx, req: topics_admin.create_topics(self, ctx, req))
        self.register(topics_admin.DELETE_TOPICS_VERSIONS,
                      lambda ctx, req: topics_admin.delete_topics(self, ctx, req))
        self.register(producers.VERSIONS,
                      lambda ctx, req: producers.init_producer_id(self, ctx, req))
        self.register(transactions.ADD_PARTITIONS_VERSIONS, self.transactions.add_partitions)
        self.register(transactions.ADD_OFFSETS_VERSIONS, self.transactions.add_offsets)
        self.register(transactions.END_TXN_VERSIONS, self.transactions.end_txn)
        self.register(transactions.DESCRIBE_TRANSACTIONS_VERSIONS,
                      self.transactions.describe_transactions)
        self.register(transactions.LIST_TRANSACTIONS_VERSIONS,
                      self.transactions.list_transactions)
        self.register(topics_admin.CREATE_PARTITIONS_VERSIONS,
                      lambda ctx, req: topics_admin.create_partitions(self, ctx, req))
        sasl.register(self, ScramStore(self.data_dir))
        # Kafka's error answer of each API with an element limit (`protocol.guard`): a request
        # over it is answered INVALID_REQUEST for each element.
        self._error_answers: dict[int, Callable[[ClientRequest, Any, ErrorCode],
                                                dict[str, Any]]] = {
            list_offsets.LIST_OFFSETS: lambda ctx, req, error: list_offsets.error_values(
                req, ctx.version, error),
            topics_admin.METADATA_VERSIONS.api_key: lambda ctx, req, error: (
                topics_admin.metadata_error_values(self, ctx, req, error)),
            offset_fetch.API_KEY: lambda ctx, req, error: offset_fetch.error_values(
                req, ctx.version, error),
            describe_groups.API_KEY: lambda ctx, req, error: describe_groups.error_values(
                req, ctx.version, error),
            delete_groups.API_KEY: lambda ctx, req, error: delete_groups.error_values(
                req, ctx.version, error),
            consumer_group_describe.API_KEY: lambda ctx, req, error: (
                consumer_group_describe.error_values(req, ctx.version, error)),
        }
        # Request and group counters for /metrics; None (no cost) unless metrics.listener is set.
        self.metrics: BrokerMetrics | None = (
            BrokerMetrics(settings["metrics.max.groups"]) if settings["metrics.listener"]
            else None)
        self.groups = GroupRuntime(self)
        self.groups.register()
        self.groups.txn_offsets.producers = self.transactions
        # What /metrics and the group page read of the broker (coordinator/ops/view.py).
        self.ops_view = BrokerOpsView(self)
        if self.metrics is not None:
            self.metrics.rebalances.consumer_groups = self.ops_view
            self.metrics.open_transactions = self.transactions.coordinator.open_count
        # Last: the authorizer wraps the group APIs' handlers registered above.
        self.authorizer = authorization.install(self, settings)
        if self.authorizer is not None:
            self.authorizer.on_denial = self._authorization_denied
        # What connections may answer from the frame before decoding it (see `_heartbeat_now`);
        # none where every request must pass the authorizer.
        self.immediate_answers: dict[int, ImmediateAnswer] = (
            {heartbeat.API_KEY: self._heartbeat_now} if self.authorizer is None else {})
        planned = filesystem_from_env()  # a test's fault plan; None in production
        if planned is not None:
            log.warning("disk fault plan active", rules=len(planned.rules))
            self.topics_fs = self.groups.fs = planned
        # The test control endpoint's fault table while it holds a rule (`test_control.py`);
        # None otherwise, and always without `test.control.listener`.
        self.faults: Any = None
        # Set to stop the broker: by a signal, or by `fail` with `failure` saying why.
        self.stop_requested = asyncio.Event()
        self.failure: BaseException | None = None
        self.refusals.supported = self.served_versions()

    def _authorization_denied(self, event: dict[str, object]) -> None:
        # Journal only: the refusal log already writes the (rate-limited) line.
        self.groups.journal.event(event, quiet=True)
        if self.metrics is not None:
            self.metrics.authorization_denied(str(event["resource_type"]),
                                              str(event["operation"]))

    def transaction_event(self, payload: dict[str, object]) -> None:
        event_type = payload["event"]
        # Journal only for the two events of every transaction (as `offsets_committed` for
        # every commit): a log line each would cost a transaction more than its own work.
        # An abort, which an operator looks for, is logged too.
        self.groups.journal.event(payload, quiet=event_type != "transaction_aborted")
        if self.metrics is not None:
            if event_type == "transaction_committed":
                self.metrics.transaction_ended("committed", str(payload["reason"]))
            elif event_type == "transaction_aborted":
                self.metrics.transaction_ended("aborted", str(payload["reason"]))

    def group_markers_durable(self) -> None:
        group_log = self.group_log
        if group_log is not None:
            group_log.flush_transactional()

    def group_transaction_ended(self, partition: int, producer_id: int, producer_epoch: int,
                                committed: bool) -> None:
        self.groups.txn_offsets.transaction_ended(partition, producer_id, producer_epoch,
                                                  committed)

    def advertised_to(self, listener: str) -> tuple[str, int]:
        return self._advertised_by_listener.get(listener, self.advertised)

    def served_versions(self) -> dict[int, tuple[int, int]]:
        """The (min, max) versions ApiVersions advertises, by API key."""
        return dict(self._served)

    # lifecycle --------------------------------------------------------------------------------

    def log_config(self) -> LogConfig:
        return LogConfig(
            segment_bytes=self.settings["log.segment.bytes"],
            retention_ms=self.settings["log.retention.ms"],
            retention_bytes=self.settings["log.retention.bytes"],
        )

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _lock_data_dir(self.data_dir)
        self.cluster_id = _cluster_id(self.data_dir)
        # Made on the loop, which alone opens and closes topic segment files (the process
        # may have raised its open-files limit since `__init__`).
        self.segment_budget = DescriptorBudget(self._open_segments_limit())
        self.topics = TopicStore.open(self.data_dir, self.log_config(), self.topics_fs,
                                      repair=self.repair, budget=self.segment_budget)
        self._topic_admin = concurrent.futures.ThreadPoolExecutor(1, "topic-admin")
        self.groups.open(self.data_dir, self.repair)
        self.transactions.open(self.data_dir, self.log_config(), repair=self.repair)
        self._retention_task = self._loop.create_task(self._retention_loop())

    def _open_segments_limit(self) -> int:
        settings = self.settings
        ops = 0
        if settings["metrics.listener"]:  # the HTTP server's module only when it is served
            from coordinator.ops.http import connection_limit as ops_connection_limit

            ops = ops_connection_limit(settings["metrics.max.connections"])
        return open_segments_limit(settings["log.open.segments.max"],
                                   settings["offsets.topic.num.partitions"],
                                   settings["max.connections"], ops)

    def fail(self, error: BaseException) -> None:
        """Something the broker cannot serve without (a group-log partition that does not
        load, a group-log fsync that failed): stop, and let the process exit non-zero with
        `error` (a supervisor restarts it; recovery keeps the durable prefix)."""
        if self.failure is None:
            self.failure = error
        self.stop_requested.set()

    async def stop(self) -> None:
        self.fetches.release_all()
        if self._armed is not None:
            self._armed.cancel()
        task = getattr(self, "_retention_task", None)
        if task is not None:
            task.cancel()
        if self._topic_admin is not None:
            # The creation under way finishes (its metadata file is the commit point on disk);
            # those still queued are not started.
            self._stopping = True
            self._topic_admin.shutdown(wait=True, cancel_futures=True)
        try:
            self.topics.flush_all()
            self.topics.close()
        except OSError as exc:
            if self.failure is None:
                raise
            log.warning("topic logs not closed cleanly", error=str(exc))
        self.groups.close()
        self.transactions.close()
        self._lock.close()  # releases the data-directory lock

    async def _retention_loop(self) -> None:
        interval = self.settings["log.retention.check.interval.ms"] / 1000
        while True:
            await asyncio.sleep(interval)
            now = self.wall_ms()
            for topic in self.topics.topics():
                for partition_log in topic.partitions:
                    try:
                        partition_log.apply_retention(now)
                    except OSError as exc:
                        log.error("retention failed", topic=topic.name, error=str(exc))
            try:
                # fsyncs of every partition: a worker thread's wait, not the event loop's.
                await asyncio.get_running_loop().run_in_executor(None, self.topics.flush_all)
            except OSError as exc:
                log.error("log flush failed", error=str(exc))

    # clock and timers -------------------------------------------------------------------------

    def wall_ms(self) -> int:
        """Epoch-aligned and never going backwards: timer deadlines and timestamps alike."""
        return self.clock.now_ms()

    def schedule(self, key: tuple[Any, ...], deadline_ms: int) -> None:
        self.wheel.schedule(key, deadline_ms)
        self._arm()

    def cancel(self, key: tuple[Any, ...]) -> None:
        self.wheel.cancel(key)

    def _arm(self) -> None:
        deadline = self.wheel.next_deadline()
        if deadline is None or self._loop is None:
            return
        if self._armed is not None and self._armed_at is not None and self._armed_at <= deadline:
            return
        if self._armed is not None:
            self._armed.cancel()
        delay = max(deadline - self.wall_ms(), 0) / 1000
        self._armed_at = deadline
        self._armed = self._loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._armed = None
        self._armed_at = None
        self._run_due(self.wheel.poll(self.wall_ms()))

    def run_due_timers(self) -> None:
        """Fire what is due now: after the clock jumped ahead (a test's virtual time)."""
        if self._armed is not None:
            self._armed.cancel()
        self._fire()

    def _run_due(self, due: list[tuple[Any, ...]]) -> None:
        """Handle due timers, at most `_TIMERS_PER_TURN` per event-loop turn: a burst (100,000
        pending members of one client expiring together) must not hold every other group's
        requests. A key rescheduled while it waits here fires again later; the handlers
        ignore stale wake-ups."""
        now = self.wall_ms()
        batch, rest = due[:_TIMERS_PER_TURN], due[_TIMERS_PER_TURN:]
        for key in batch:
            handler = self._timer_handlers.get(str(key[0]))
            try:
                if handler is not None:
                    handler(key, now)
                else:
                    self.on_timer(key, now)
            except Exception:
                log.exception("timer handler failed", key=repr(key))
        if rest and self._loop is not None:
            self._loop.call_soon(self._run_due, rest)
        self._arm()

    def on_timer(self, key: tuple[Any, ...], now_ms: int) -> None:
        """Timer keys not owned by the data plane belong to the coordinator."""
        self.groups.on_timer(key, now_ms)

    # topics -----------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, configs: dict[str, str], *,
                     reason: str) -> Topic:
        topic = self.topics.create(name, partitions, configs)
        self.groups.topics_changed()
        log.info("topic created", topic=name, partitions=partitions, topic_id=str(topic.topic_id),
                 reason=reason)
        return topic

    def begin_create_topic(self, name: str, partitions: int, configs: dict[str, str], *,
                           reason: str) -> asyncio.Future[Topic]:
        """Create a topic off the loop: checked and its name held now (raises what
        `TopicStore.reserve` raises, or `PartitionLimitError`), built on the topic-admin
        thread, visible once the returned future is done (it fails with the build's
        `OSError`, the topic then not created)."""
        if self.topics.partition_count() + partitions > self.max_partitions:
            raise PartitionLimitError(
                f"creating {partitions} partitions would exceed the broker's limit of "
                f"{self.max_partitions} (max.broker.partitions)")
        pending = self.topics.reserve(name, partitions, configs)
        created: asyncio.Future[Topic] = asyncio.get_running_loop().create_future()

        def done(topic: Any, error: BaseException | None) -> None:
            if error is not None:
                self.topics.release(pending)
                log.error("topic not created", topic=name, partitions=partitions,
                          error=str(error), reason=reason)
                created.set_exception(error)
                return
            self.topics.commit(topic)
            self._topics_changed_soon()
            log.info("topic created", topic=name, partitions=partitions,
                     topic_id=str(topic.topic_id), reason=reason)
            created.set_result(topic)

        self._queue_build(lambda: self.topics.build(pending), done)
        return created

    def begin_add_partitions(self, name: str, total: int) -> asyncio.Future[None]:
        """Add partitions off the loop (as `begin_create_topic`); raises what
        `TopicStore.reserve_partitions` raises, or `PartitionLimitError`."""
        topic = self.topics.get(name)
        if topic is not None and (self.topics.partition_count() + total - len(topic.partitions)
                                  > self.max_partitions):
            raise PartitionLimitError(
                f"growing {name} to {total} partitions would exceed the broker's limit of "
                f"{self.max_partitions} (max.broker.partitions)")
        topic = self.topics.reserve_partitions(name, total)
        added: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(logs: Any, error: BaseException | None) -> None:
            if error is not None:
                self.topics.release_partitions(name)
                log.error("partitions not added", topic=name, partitions=total,
                          error=str(error))
                added.set_exception(error)
                return
            self.topics.commit_partitions(topic, logs)
            self._topics_changed_soon()
            log.info("partitions added", topic=name, partitions=total)
            added.set_result(None)

        self._queue_build(lambda: self.topics.build_partitions(topic, total), done)
        return added

    def _queue_build(self, build: Callable[[], Any],
                     done: Callable[[Any, BaseException | None], None]) -> None:
        """Run `build` on the topic-admin thread after those queued before it; `done(result,
        error)` then runs on the loop. One job drains the queue, so that a burst of thousands
        of creations costs the loop an append each, not an executor submission each."""
        self._builds.append((build, done))
        if not self._draining and self._topic_admin is not None:
            self._draining = True
            self._topic_admin.submit(self._drain_builds, asyncio.get_running_loop())

    def _drain_builds(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the topic-admin thread: build what is queued, handing each outcome back."""
        try:
            while not self._stopping:
                try:
                    build, done = self._builds.popleft()
                except IndexError:
                    return
                try:
                    result, error = build(), None
                except Exception as exc:
                    result, error = None, exc
                loop.call_soon_threadsafe(done, result, error)
        finally:
            loop.call_soon_threadsafe(self._drained_builds)

    def _drained_builds(self) -> None:
        self._draining = False
        if self._builds and self._topic_admin is not None and not self._stopping:
            self._draining = True
            self._topic_admin.submit(self._drain_builds, asyncio.get_running_loop())

    def _topics_changed_soon(self) -> None:
        """Tell the groups about new topics once per loop turn: creations finishing together
        (a burst of auto-creates) rebuild the consumer groups' topic image once."""
        if self._topics_changed_pending or self._loop is None:
            return
        self._topics_changed_pending = True

        def changed() -> None:
            self._topics_changed_pending = False
            self.groups.topics_changed()

        self._loop.call_soon(changed)

    def delete_topics(self, names: Sequence[str],
                      done: Callable[[dict[str, ErrorCode]], None]) -> None:
        """Delete topics with every group's committed offsets of them, as Kafka does, so that
        a topic created again under the same name starts from each group's reset policy.

        The offsets go first, as tombstones in the group log; the topics are deleted once
        those are durable, then `done` gets each topic's error code. A failed write deletes
        nothing and answers each topic KAFKA_STORAGE_ERROR; no topic is answered deleted
        before its offsets' tombstones are durable.
        """
        def offsets_deleted(error: ErrorCode | None) -> None:
            results: dict[str, ErrorCode] = {}
            for name in names:
                if error is not None:
                    results[name] = error
                elif self.topics.get(name) is None:  # another request deleted it meanwhile
                    results[name] = ErrorCode.unknown_topic_or_partition
                else:
                    results[name] = self._delete_topic(name)
            done(results)

        self.groups.delete_topic_offsets(names, offsets_deleted)

    def _delete_topic(self, name: str) -> ErrorCode:
        try:
            self.topics.delete(name)
        except OSError as exc:
            log.error("topic deletion failed", topic=name, error=str(exc))
            return ErrorCode.kafka_storage_error
        self.groups.topics_changed()
        self.transactions.forget_topic(name)
        log.info("topic deleted", topic=name)
        return ErrorCode.none

    def add_partitions(self, name: str, total: int) -> None:
        self.topics.add_partitions(name, total)
        self.groups.topics_changed()
        log.info("partitions added", topic=name, partitions=total)

    def partition_appended(self, topic: str, partition: int) -> None:
        self.fetches.appended(topic, partition)

    @property
    def group_log(self) -> GroupLog | None:
        """The group log, read by the data plane as `__consumer_offsets` (None until opened)."""
        return getattr(self.groups, "group_log", None)

    # requests ---------------------------------------------------------------------------------

    def handle(self, connection: Connection, slot: ResponseSlot, header: RequestHeader,
               request: Any) -> None:
        faults = self.faults
        if faults is not None and faults.intercept(connection, slot, header, request):
            return
        # None also for a version kio knows but we do not advertise: Kafka closes on a
        # disabled version.
        handler = self._routes.get(header[:2])  # (api key, api version)
        if handler is None:
            self.refusals.supported = self.served_versions()
            self.refusals.refuse_version(
                client_id=header.client_id or "", api_key=header.api_key,
                api_version=header.api_version, connection=connection.id,
                client_host=connection.client_host)
            connection.close()
            return
        metrics = self.metrics
        # Counted once known to be served: the metrics' slot table covers every served version.
        ctx = (RequestContext(connection, slot, header) if metrics is None
               else metrics.context(connection, slot, header))
        try:
            handler(ctx, request)
        except Exception:
            log.exception("request failed", api_key=header.api_key, version=header.api_version,
                          client_id=header.client_id)
            connection.close()

    def _heartbeat_now(self, connection: Connection, frame: bytes, api_version: int,
                       correlation_id: int) -> bytes | None:
        """A steady Heartbeat answered from its frame (`GroupRuntime.heartbeat_now`), counted
        in the metrics as `handle` counts it; None while the test kit's faults are installed,
        for a request the metrics would time (it goes through `handle`, which times it), and
        for anything the runtime declines."""
        if self.faults is not None or not (
                heartbeat.MIN_VERSION <= api_version <= heartbeat.MAX_VERSION):
            return None
        metrics = self.metrics
        if metrics is not None and metrics.timed_next(heartbeat.API_KEY, api_version):
            return None
        answer = self.groups.heartbeat_now(connection, frame, api_version, correlation_id)
        if answer is not None and metrics is not None:
            metrics.count(heartbeat.API_KEY, api_version)
        return answer

    def unsupported(self, connection: Connection, slot: ResponseSlot, api_key: int,
                    api_version: int, correlation_id: int) -> bool:
        if api_key == api_versions.API_VERSIONS:
            connection.complete(
                slot, api_versions.unsupported_version_response(correlation_id, self._served)
            )
            return True
        return False

    def over_limits(self, connection: Connection, slot: ResponseSlot, header: RequestHeader,
                    request: Any, reason: str) -> None:
        answer = self._error_answers.get(header.api_key)
        served = self._served.get(header.api_key)
        if answer is None or served is None or not served[0] <= header.api_version <= served[1]:
            self.refusals.refused(
                "connection closed on bad input", client_id=header.client_id or "",
                api_key=header.api_key, api_version=header.api_version,
                problem="request over limits", advice=_OVER_LIMITS_ADVICE,
                connection=connection.id, client_host=connection.client_host, reason=reason)
            connection.close()
            return
        self.refusals.refused(
            "request answered INVALID_REQUEST", client_id=header.client_id or "",
            api_key=header.api_key, api_version=header.api_version,
            problem="request over limits", advice=_OVER_LIMITS_ADVICE,
            connection=connection.id, client_host=connection.client_host, reason=reason)
        metrics = self.metrics
        ctx = (RequestContext(connection, slot, header) if metrics is None
               else metrics.context(connection, slot, header))
        try:
            respond_in_slices(ctx, answer(ctx, request, ErrorCode.invalid_request))
        except Exception:
            log.exception("request failed", api_key=header.api_key, version=header.api_version,
                          client_id=header.client_id)
            connection.close()

    def connection_closed(self, connection: Connection) -> None:
        self.fetches.connection_closed(connection.id)
        self.groups.connection_closed(connection.id)

    def handler_of(self, api_key: int) -> Handler | None:
        return self._handlers.get(api_key)

    def register(self, versions: ApiVersionRange, handler: Handler) -> None:
        """Serve `versions` of an API with `handler`: from now on ApiVersions advertises them."""
        api_key = versions.api_key
        previous = self._served.get(api_key)
        if previous is not None:
            for version in range(previous[0], previous[1] + 1):
                del self._routes[(api_key, version)]
        self._handlers[api_key] = handler
        self._served[api_key] = (versions.min_version, versions.max_version)
        for version in range(versions.min_version, versions.max_version + 1):
            self._routes[(api_key, version)] = handler


_OVER_LIMITS_ADVICE = "send fewer elements in one request (README: Hostile input)"


class DataDirInUse(RuntimeError):
    pass


def _lock_data_dir(data_dir: Path) -> IO[str]:
    """Hold an exclusive lock on the data directory for the broker's lifetime: two brokers
    appending to the same logs would corrupt them."""
    handle = open(data_dir / ".lock", "a+", encoding="utf-8")  # noqa: SIM115 - held open
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise DataDirInUse(f"{data_dir} is in use by another broker (log.dirs)") from None
    return handle


def _cluster_id(data_dir: Path) -> str:
    """A stable cluster id per data directory, like Kafka's meta.properties."""
    path = data_dir / "meta.properties"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    cluster_id = uuid.uuid4().hex[:22]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"version=1\ncluster.id={cluster_id}\n", encoding="utf-8")
    tmp.replace(path)
    return cluster_id
