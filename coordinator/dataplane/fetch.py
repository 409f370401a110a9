"""Fetch: read batches from partition logs; park until data arrives or `max_wait` passes.

A parked fetch is woken by the Produce that appends to any partition it asked for, so a
consumer at the log end sees new data within the same event-loop turn, never after `max_wait`.
It is also answered early when its client's group starts a rebalance (`release_clients`).
Fetch sessions (KIP-227) are answered sessionless (session id 0), which every client accepts.
Fetch v0-v3 clients read legacy message sets: the batches read are down-converted
(`storage.legacy_convert.down_convert`) to magic 0 (v0-v1) or magic 1 (v2-v3) within the same
byte limits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from coordinator.dataplane.internal_topic import TopicDirectory, topic_by_id, topic_by_name
from protocol.build import build
from protocol.codec import response_type
from storage.batch import CorruptRecordError
from storage.legacy import UnsupportedCompressionError
from storage.legacy_convert import down_convert
from storage.log import OffsetOutOfRange
from storage.transactions import PartitionTransactions

FETCH = 1
VERSIONS = ApiVersionRange(FETCH, 0, 16)  # v0-v3: down-converted to magic 0/1
LEGACY_MAX_VERSION = 3  # v0-v3 read legacy message sets: magic 0 up to v1, magic 1 from v2


class Observer(Protocol):
    def observe(self, value: float) -> None: ...


class FetchMetrics(Protocol):
    @property
    def fetch_wakeup(self) -> Observer: ...


class PartitionTransactionsLookup(Protocol):
    def partition(self, topic: str, partition: int) -> PartitionTransactions | None: ...


class FetchHost(TopicDirectory, Protocol):
    """What Fetch and its purgatory use of the broker."""

    @property
    def metrics(self) -> FetchMetrics | None: ...

    @property
    def fetches(self) -> FetchPurgatory: ...

    @property
    def transactions(self) -> PartitionTransactionsLookup: ...

    def wall_ms(self) -> int: ...

    def schedule(self, key: tuple[Any, ...], deadline_ms: int) -> None: ...

    def cancel(self, key: tuple[Any, ...]) -> None: ...


@dataclass(slots=True, eq=False)
class ParkedFetch:
    ctx: ClientRequest
    request: Any
    key: tuple[Any, ...]
    partitions: list[tuple[str, int]] = field(default_factory=list)


def _topic_wanted(broker: FetchHost, version: int, fetch_topic: Any) -> tuple[Any, Any]:
    """(topic or None, the request's identifier for it) by id from v13, by name before."""
    if version >= 13:
        return topic_by_id(broker, fetch_topic.topic_id), fetch_topic.topic_id
    return topic_by_name(broker, fetch_topic.topic), fetch_topic.topic


def _read(broker: FetchHost, ctx: ClientRequest, request: Any) -> tuple[list[dict[str, Any]], int,
                                                                       bool]:
    """Build the per-topic answer; returns (topics, bytes of records, any partition errored)."""
    version = ctx.version
    remaining = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    errored = False
    topics_out: list[dict[str, Any]] = []
    read_committed = version >= 4 and request.isolation_level == 1
    for fetch_topic in request.topics:
        topic, ident = _topic_wanted(broker, version, fetch_topic)
        partitions_out = []
        for wanted in fetch_topic.partitions:
            entry: dict[str, Any] = {
                "partition_index": wanted.partition, "error_code": ErrorCode.none,
                "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                "aborted_transactions": None, "preferred_read_replica": -1, "records": b"",
            }
            if topic is None or not 0 <= wanted.partition < len(topic.partitions):
                entry["error_code"] = (ErrorCode.unknown_topic_id if version >= 13
                                       else ErrorCode.unknown_topic_or_partition)
                errored = True
                partitions_out.append(entry)
                continue
            partition_log = topic.partitions[wanted.partition]
            end = partition_log.log_end_offset
            entry["high_watermark"] = end
            entry["last_stable_offset"] = end
            entry["log_start_offset"] = partition_log.log_start_offset
            limit = min(wanted.partition_max_bytes, remaining)
            txns = broker.transactions.partition(topic.name, wanted.partition)
            stable = end
            if txns is not None:
                stable = txns.last_stable_offset(end)
                entry["last_stable_offset"] = stable
            upto = stable if read_committed else end
            try:
                if wanted.fetch_offset == end or (
                        read_committed and end > wanted.fetch_offset >= upto):
                    data = b""
                else:
                    # The first batch goes out even when larger than the limits (as Kafka does),
                    # so a consumer is never stuck behind one big batch.
                    data = partition_log.read(wanted.fetch_offset, max(limit, 1) if total == 0
                                              else limit)
                    if version <= LEGACY_MAX_VERSION and data:
                        data = down_convert(data, 0 if version <= 1 else 1, wanted.fetch_offset,
                                            limit, at_least_one=total == 0)
                    if total and len(data) > limit:
                        data = b""
                    if read_committed and data:
                        # A read_committed reader stops at the last stable offset and is told
                        # which transactions in what it reads were aborted.
                        if upto < end:
                            data = _batches_below(data, upto)
                        if txns is not None and txns.aborted:
                            entry["aborted_transactions"] = [
                                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                                for a in txns.aborted_in(wanted.fetch_offset, upto)]
            except OffsetOutOfRange:
                entry["error_code"] = ErrorCode.offset_out_of_range
                errored = True
                data = b""
            except UnsupportedCompressionError:
                # Kafka's answer to a pre-v10 fetch of zstd data; here also snappy and lz4,
                # which this broker cannot recompress into a legacy wrapper.
                entry["error_code"] = ErrorCode.unsupported_compression_type
                errored = True
                data = b""
            except CorruptRecordError:
                entry["error_code"] = ErrorCode.corrupt_message
                errored = True
                data = b""
            except OSError:
                # Offline after a disk error, or a segment file gone (logged by the log).
                entry["error_code"] = ErrorCode.kafka_storage_error
                errored = True
                data = b""
            entry["records"] = data
            total += len(data)
            remaining = max(remaining - len(data), 0)
            partitions_out.append(entry)
        key = "topic_id" if version >= 13 else "topic"
        topics_out.append({key: ident, "partitions": partitions_out})
    return topics_out, total, errored


def _batches_below(data: bytes, offset_limit: int) -> bytes:
    """The whole magic-2 batches of `data` that start before `offset_limit`."""
    pos = 0
    while pos + 61 <= len(data):
        if int.from_bytes(data[pos:pos + 8], "big", signed=True) >= offset_limit:
            break
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
    return data[:pos]


def _respond(ctx: ClientRequest, topics: list[dict[str, Any]]) -> None:
    ctx.respond(build(response_type(FETCH, ctx.version), throttle_time=0,
                      error_code=ErrorCode.none, session_id=0, responses=topics))


def handle(broker: FetchHost, ctx: ClientRequest, request: Any) -> None:
    topics, total, errored = _read(broker, ctx, request)
    max_wait = int(request.max_wait.total_seconds() * 1000)
    # Kafka answers at once when the data reaches min_bytes (so min_bytes 0 never waits),
    # when nothing was asked for, or on an error.
    if errored or total >= request.min_bytes or max_wait <= 0 or not topics:
        _respond(ctx, topics)
        return
    parked = ParkedFetch(ctx, request, ("fetch", ctx.connection.id, id(ctx.slot)))
    for fetch_topic in request.topics:
        topic, _ = _topic_wanted(broker, ctx.version, fetch_topic)
        if topic is not None:
            parked.partitions.extend((topic.name, p.partition) for p in fetch_topic.partitions)
    broker.fetches.park(parked, broker.wall_ms() + max_wait)


class FetchPurgatory:
    """Parked fetches by partition, released by appends, deadlines or a closed connection.

    They are also indexed by connection: when thousands of connections close at once, each
    close forgets its own fetches without scanning everyone else's.
    """

    def __init__(self, broker: FetchHost) -> None:
        self._broker = broker
        self._by_partition: dict[tuple[str, int], set[ParkedFetch]] = {}
        self._by_key: dict[tuple[Any, ...], ParkedFetch] = {}
        self._by_connection: dict[int, set[ParkedFetch]] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def park(self, parked: ParkedFetch, deadline_ms: int) -> None:
        self._by_key[parked.key] = parked
        self._by_connection.setdefault(parked.ctx.connection.id, set()).add(parked)
        for tp in parked.partitions:
            self._by_partition.setdefault(tp, set()).add(parked)
        self._broker.schedule(parked.key, deadline_ms)

    def _release(self, parked: ParkedFetch) -> None:
        self._by_key.pop(parked.key, None)
        mine = self._by_connection.get(parked.ctx.connection.id)
        if mine is not None:
            mine.discard(parked)
            if not mine:
                del self._by_connection[parked.ctx.connection.id]
        for tp in parked.partitions:
            waiting = self._by_partition.get(tp)
            if waiting is not None:
                waiting.discard(parked)
                if not waiting:
                    del self._by_partition[tp]
        self._broker.cancel(parked.key)

    def appended(self, topic: str, partition: int) -> None:
        waiting = self._by_partition.get((topic, partition))
        if not waiting:
            return
        metrics = self._broker.metrics
        started = time.perf_counter() if metrics is not None else 0.0
        for parked in list(waiting):
            if not parked.ctx.open:
                self._release(parked)
                continue
            topics, total, errored = _read(self._broker, parked.ctx, parked.request)
            if errored or total >= max(parked.request.min_bytes, 1):
                self._release(parked)
                _respond(parked.ctx, topics)
                if metrics is not None:
                    metrics.fetch_wakeup.observe(time.perf_counter() - started)

    def expire(self, key: tuple[Any, ...]) -> None:
        parked = self._by_key.get(key)
        if parked is None:
            return
        self._release(parked)
        if parked.ctx.open:
            topics, _, _ = _read(self._broker, parked.ctx, parked.request)
            _respond(parked.ctx, topics)

    def release_clients(self, clients: set[tuple[str, str]]) -> None:
        """Answer now, with what is available, the parked fetches of these (client id, host)
        pairs: their group started a rebalance and they should get back to rejoining."""
        for parked in [p for p in self._by_key.values()
                       if (p.ctx.client_id, p.ctx.client_host) in clients]:
            self.expire(parked.key)

    def release_all(self) -> None:
        """Answer every parked fetch now with what it has (shutdown)."""
        for parked in list(self._by_key.values()):
            self.expire(parked.key)

    def connection_closed(self, connection_id: int) -> None:
        for parked in list(self._by_connection.get(connection_id, ())):
            self._release(parked)
