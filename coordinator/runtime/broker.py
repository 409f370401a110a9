"""The asyncio runtime: routes decoded requests to the data plane and the coordinator core.

This is the only place that reads the clock, owns the timer wheel's single loop timer, writes to
storage and sends replies. The coordinator core stays pure: it gets commands and `now_ms`, and
returns a `Result` that is applied here in order: timers, records (made durable), replies.
"""

from __future__ import annotations

import asyncio
import fcntl
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import structlog
from kio.schema.errors import ErrorCode

from coordinator.api.context import ClientRequest, RequestContext
from coordinator.dataplane import api_versions, fetch, list_offsets, produce, topics_admin
from coordinator.dataplane.producers import ProducerTable
from coordinator.group.timer import TimerWheel
from coordinator.grouplog.log import GroupLog
from coordinator.ops.metrics import BrokerMetrics
from coordinator.runtime.clock import SystemClock
from coordinator.runtime.groups import GroupRuntime
from coordinator.settings import BrokerSettings
from protocol.build import build
from protocol.codec import RequestHeader, response_type
from protocol.connection import Connection, ResponseSlot
from protocol.refusals import REFUSALS
from storage.fs import REAL_FS, FileSystem, filesystem_from_env
from storage.log import LogConfig
from storage.topics import Topic, TopicStore

log = structlog.get_logger("rebalanced.broker")

Handler = Callable[[ClientRequest, Any], None]


class Broker:
    def __init__(self, settings: BrokerSettings, *, repair: bool = False) -> None:
        self.settings = settings
        self.node_id: int = settings["node.id"]
        self.advertised = settings.advertised
        self.repair = repair
        self.data_dir: Path = settings.data_dir
        self.cluster_id = "rebalanced"
        self.clock = SystemClock()
        self.topics: TopicStore
        self.topics_fs: FileSystem = REAL_FS  # the topics' filesystem; tests slow it down here
        self.producers = ProducerTable()
        self.wheel = TimerWheel(tick_ms=5, wheel_size=4096, start_ms=self.clock.now_ms())
        self.fetches = fetch.FetchPurgatory(self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._armed: asyncio.TimerHandle | None = None
        self._armed_at: int | None = None
        self._timer_handlers: dict[str, Callable[[tuple[Any, ...], int], None]] = {
            "fetch": lambda key, now: self.fetches.expire(key),
        }
        self._handlers: dict[int, Handler] = {
            0: lambda ctx, req: produce.handle(self, ctx, req),
            1: lambda ctx, req: fetch.handle(self, ctx, req),
            2: lambda ctx, req: list_offsets.handle(self, ctx, req),
            3: lambda ctx, req: topics_admin.metadata(self, ctx, req),
            18: lambda ctx, req: api_versions.handle(ctx, self.implemented),
            19: lambda ctx, req: topics_admin.create_topics(self, ctx, req),
            20: lambda ctx, req: topics_admin.delete_topics(self, ctx, req),
            22: self._init_producer_id,
            37: lambda ctx, req: topics_admin.create_partitions(self, ctx, req),
        }
        self.implemented: set[int] = set(self._handlers)
        # Request and group counters for /metrics; None (no cost) unless metrics.listener is set.
        self.metrics: BrokerMetrics | None = (
            BrokerMetrics(settings["metrics.max.groups"]) if settings["metrics.listener"]
            else None)
        self.groups = GroupRuntime(self)
        self.groups.register()
        planned = filesystem_from_env()  # a test's fault plan; None in production
        if planned is not None:
            log.warning("disk fault plan active", rules=len(planned.rules))
            self.topics_fs = self.groups.fs = planned
        # Set to stop the broker: by a signal, or by `fail` with `failure` saying why.
        self.stop_requested = asyncio.Event()
        self.failure: BaseException | None = None
        REFUSALS.supported = self.served_versions()

    def served_versions(self) -> dict[int, tuple[int, int]]:
        """The (min, max) versions ApiVersions advertises, by API key."""
        return {key: api_versions.SUPPORTED[key] for key in self.implemented
                if key in api_versions.SUPPORTED}

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
        self.topics = TopicStore.open(self.data_dir, self.log_config(), self.topics_fs,
                                      repair=self.repair)
        self.groups.open(self.data_dir, self.repair)
        self._retention_task = self._loop.create_task(self._retention_loop())

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
        try:
            self.topics.flush_all()
            self.topics.close()
        except OSError as exc:
            if self.failure is None:
                raise
            log.warning("topic logs not closed cleanly", error=str(exc))
        self.groups.close()
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
        now = self.wall_ms()
        for key in self.wheel.poll(now):
            handler = self._timer_handlers.get(str(key[0]))
            try:
                if handler is not None:
                    handler(key, now)
                else:
                    self.on_timer(key, now)
            except Exception:
                log.exception("timer handler failed", key=repr(key))
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

    def delete_topic(self, name: str) -> None:
        self.topics.delete(name)
        self.groups.topics_changed()
        log.info("topic deleted", topic=name)

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
        handler = self._handlers.get(header.api_key)
        supported = api_versions.SUPPORTED.get(header.api_key)
        if supported is not None and not supported[0] <= header.api_version <= supported[1]:
            # kio knows versions we do not advertise; Kafka closes on a disabled version.
            handler = None
        if handler is None:
            REFUSALS.supported = self.served_versions()
            REFUSALS.refuse_version(client_id=header.client_id or "", api_key=header.api_key,
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

    def unsupported(self, connection: Connection, slot: ResponseSlot, api_key: int,
                    api_version: int, correlation_id: int) -> bool:
        if api_key == api_versions.API_VERSIONS:
            connection.complete(
                slot, api_versions.unsupported_version_response(correlation_id, self.implemented)
            )
            return True
        return False

    def connection_closed(self, connection: Connection) -> None:
        self.fetches.connection_closed(connection.id)
        self.groups.connection_closed(connection.id)

    def register(self, api_key: int, handler: Handler) -> None:
        self._handlers[api_key] = handler
        self.implemented.add(api_key)

    def _init_producer_id(self, ctx: ClientRequest, request: Any) -> None:
        cls = response_type(22, ctx.version)
        if request.transactional_id is not None:
            ctx.respond(build(cls, throttle_time=0,
                              error_code=ErrorCode.transactional_id_authorization_failed,
                              producer_id=-1, producer_epoch=-1))
            return
        ctx.respond(build(cls, throttle_time=0, error_code=ErrorCode.none,
                          producer_id=self.producers.new_producer_id(), producer_epoch=0))


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
