"""Applying the core's Results: timers, events, records made durable, then replies.

For every Result, in order: timer changes to the wheel, events to the journal and metrics,
records appended to the group log, and - only once those records are durable - the replies. A
reply may answer a request parked earlier (the last JoinGroup of a rebalance completes them
all). If the append or its fsync fails, no reply of that Result is delivered as success: each
gets COORDINATOR_NOT_AVAILABLE, the offsets stay unacknowledged, the core undoes what waited for
the write (`GroupCoordinatorService.records_failed`) and other affected groups rebalance; the
journal gets a `group_write_failed` line.

A group record larger than the group log takes in one message (`offsets.topic.max.message.bytes`,
Kafka's `message.max.bytes` of `__consumer_offsets`) is not written at all: the Result fails as
above, but with Kafka's UNKNOWN_SERVER_ERROR, and one warning names the group and the sizes.

Which request a reply answers is kept here (`park`), by `RequestRef`: the core never sees a
connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

from coordinator.api.context import ClientRequest, respond_in_slices
from coordinator.group.consumer.heartbeat import GROUP_TYPE as CONSUMER_GROUP_TYPE
from coordinator.group.events import RebalanceStarted
from coordinator.group.outcomes import error_outcome
from coordinator.group.result import APPEND_FAILED, RECORD_TOO_LARGE, RequestRef, Result
from coordinator.group.service import GroupCoordinatorService
from coordinator.grouplog.codec import encode_record
from coordinator.grouplog.log import GroupLog
from coordinator.grouplog.records import CoordinatorRecord, OffsetCommitRecord
from coordinator.runtime.clock import Clock
from coordinator.runtime.event_journal import EventJournal
from coordinator.runtime.heap import HeapTrimmer

if TYPE_CHECKING:
    from coordinator.ops.metrics import BrokerMetrics

log = structlog.get_logger("rebalanced.coordinator")

# Entries past which an emptied dict of parked requests is made anew (see `ResultApplier`).
_SHRINK_FROM = 1024


class Timers(Protocol):
    """The broker's timer wheel, as the group runtime uses it."""

    def schedule(self, key: tuple[Any, ...], deadline_ms: int) -> None: ...

    def cancel(self, key: tuple[Any, ...]) -> None: ...


class ParkedFetches(Protocol):
    """The data plane's parked Fetch long-polls, as a rebalance releases them."""

    def __len__(self) -> int: ...

    def release_clients(self, clients: set[tuple[str, str]]) -> None: ...


@dataclass(slots=True)
class _Pending:
    ctx: ClientRequest
    module: ModuleType
    command: Any


def succeeded(done: asyncio.Future[Any]) -> bool:
    return not done.cancelled() and done.exception() is None


def _error_of(done: asyncio.Future[None]) -> str:
    return "cancelled" if done.cancelled() else str(done.exception())


class ResultApplier:
    def __init__(self, service: GroupCoordinatorService, clock: Clock,
                 timers: Timers, journal: EventJournal, fetches: ParkedFetches,
                 metrics: BrokerMetrics | None, *, max_record_bytes: int = 1_048_588) -> None:
        self.service = service
        self.clock = clock
        self.timers = timers
        self.journal = journal
        self.fetches = fetches
        self.metrics = metrics
        self.group_log: GroupLog  # set when the group log is opened
        # The largest group record the group log takes (offsets.topic.max.message.bytes).
        self.max_record_bytes = max_record_bytes
        self._pending: dict[RequestRef, _Pending] = {}
        # Refs of `_pending` by connection, so that a closed connection finds its own without
        # scanning everyone's (thousands of connections may close at once). A connection's
        # only ref is held bare (a member's usual case; a one-element list cost 80 bytes per
        # request parked, and a join storm parks one per member at once), a list when more.
        # The entry goes when its only ref is answered (no index held per idle connection);
        # other answered refs are pruned when a list grows.
        self._pending_by_connection: dict[int, RequestRef | list[RequestRef]] = {}
        # Groups with a metadata write not yet completed -> how many (see `apply`).
        self.group_writes: dict[str, int] = {}
        # A dict keeps the table of its largest size when emptied: after a join storm (every
        # member's JoinGroup parked at once) these three hold one to two MB of empty slots, so
        # they are made anew when they empty after having grown past `_SHRINK_FROM` entries.
        self._pending_grew = False
        self._group_writes_grew = False
        # When such a burst is over, its freed memory goes back to the system (see heap.py).
        self.heap = HeapTrimmer()

    # requests waiting for a reply -------------------------------------------------------------

    def park(self, ref: RequestRef, ctx: ClientRequest, module: ModuleType, command: Any
             ) -> None:
        """Remember whom a reply to `ref` answers, and how (the API's kio adapter)."""
        pending = self._pending
        pending[ref] = _Pending(ctx, module, command)
        if len(pending) > _SHRINK_FROM:
            self._pending_grew = True
        index = self._pending_by_connection
        held = index.get(ref.connection_id)
        if held is None:
            index[ref.connection_id] = ref
        elif type(held) is list:
            if len(held) >= 8:
                held[:] = [r for r in held if r in self._pending]
            held.append(ref)
        else:
            index[ref.connection_id] = [held, ref]  # type: ignore[list-item]

    def _answered(self, ref: RequestRef) -> _Pending | None:
        pending = self._pending.pop(ref, None)
        index = self._pending_by_connection
        held = index.get(ref.connection_id)
        if held is not None and (held == ref if type(held) is not list
                                 else len(held) == 1 and held[0] == ref):
            del index[ref.connection_id]
        if self._pending_grew and not self._pending:
            self._shrink_pending()
        return pending

    def _shrink_pending(self) -> None:
        # Refs still in the index by connection were all answered.
        self._pending, self._pending_by_connection = {}, {}
        self._pending_grew = False
        self.heap.after_burst()

    def forget_connection(self, connection_id: int) -> None:
        held = self._pending_by_connection.pop(connection_id, None)
        if held is None:
            return
        for ref in (held if isinstance(held, list) else (held,)):
            self._pending.pop(ref, None)
        if self._pending_grew and not self._pending:
            self._shrink_pending()

    # applying ---------------------------------------------------------------------------------

    def apply(self, result: Result, log_partition: int | None = None, *,
              then: Callable[[bool], None] | None = None, one_group: str | None = None,
              now_ms: int | None = None) -> None:
        """Apply a Result; `log_partition` is the group-log partition of the request's group,
        given while a write of that group's metadata is pending. `then(durable)` is called
        once the records are durable or failed (with none, at once), after the replies: the
        caller's own bookkeeping, never an answer. `one_group` when every record is that
        group's (an OffsetCommit's are), which saves the log looking at each; `now_ms` when
        the caller has just read the clock.

        A Result without records may then depend on that write (a heartbeat of a member whose
        new id is being written), so its replies wait until the group log has acknowledged
        everything written to the partition so far, as Kafka's coordinator runtime defers a
        read behind the last written offset. They wait for that offset only, not for the
        partition to fall quiet (other groups may keep writing), and fail if a write up to it
        fails.
        """
        if result.timers:
            self.apply_timers(result)
        if result.events:
            self.emit(result.events)
        if not result.records:
            if result.durable_events:
                self.emit(result.durable_events)
            waiting = (self.group_log.acknowledged(log_partition)
                       if log_partition is not None else None)
            if waiting is None:
                self._deliver(result)
            else:
                waiting.add_done_callback(lambda done: self._deliver(result)
                                          if succeeded(done) else self.fail(result))
            if then is not None:
                then(True)
            return
        self._write(result, then, one_group,
                    self.clock.now_ms() if now_ms is None else now_ms)

    def _write(self, result: Result, then: Callable[[bool], None] | None,
               one_group: str | None, now_ms: int) -> None:
        """Append `result.records`; once the append completed, deliver the replies (or fail
        them), hand the Result back to the core to apply its offsets and finish or undo what
        waited for the write, then call `then(durable)`. With an interval fsync the append is
        complete on return, and all of this happens before `_write` returns: no reader sees
        the records written but not applied."""
        records = result.records
        group_records = [r for r in records if type(r) is not OffsetCommitRecord]
        groups: list[str] = []
        if group_records:
            if self._refuse_oversized(result, group_records, then):
                return
            groups = [r.key.group for r in group_records]
            writes = self.group_writes
            for group_id in groups:
                writes[group_id] = writes.get(group_id, 0) + 1
            if len(writes) > _SHRINK_FROM:
                self._group_writes_grew = True
        try:
            durable = self.group_log.append(records, now_ms, group_id=one_group)
        except Exception as exc:
            # Whatever went wrong, the parked requests of this Result must still be answered.
            log.exception("group log append failed")
            durable = asyncio.get_running_loop().create_future()
            durable.set_exception(exc)

        def persisted(done: asyncio.Future[None], at_ms: int | None = None) -> None:
            now = self.clock.now_ms() if at_ms is None else at_ms
            for group_id in groups:
                left = self.group_writes[group_id] - 1
                if left:
                    self.group_writes[group_id] = left
                else:
                    del self.group_writes[group_id]
            if self._group_writes_grew and not self.group_writes:
                self.group_writes = {}
                self._group_writes_grew = False
                self.heap.after_burst()
            ok = not done.cancelled() and done.exception() is None  # `succeeded`
            if ok:
                self._deliver(result)
                follow = self.service.records_durable(result, now,
                                                      only_offsets=not group_records)
                if result.durable_events:
                    self.emit(result.durable_events)
            else:
                self.fail(result)
                follow = self.service.records_failed(result, now)
                self.journal.event({"event": "group_write_failed",
                                    "group_ids": sorted({r.key.group for r in records}),
                                    "records": len(records), "error": _error_of(done)})
            if follow.timers or follow.events or follow.records or follow.replies:
                self.apply(follow)  # it depends on this write only, durable or failed by now
            if then is not None:
                then(ok)

        if durable.done():
            persisted(durable, now_ms)
        else:
            durable.add_done_callback(persisted)

    def _refuse_oversized(self, result: Result, group_records: Sequence[CoordinatorRecord],
                          then: Callable[[bool], None] | None) -> bool:
        """Fail `result` without writing it if one of its group records is larger than the
        group log takes; True if it did. Offset records are bounded by
        `offset.metadata.max.bytes` and are not looked at (this runs on rebalances only)."""
        limit = self.max_record_bytes
        for record in group_records:
            key, value = encode_record(record)
            size = len(key) + (len(value) if value is not None else 0)
            if size > limit:
                break
        else:
            return False
        group_id = record.key.group
        log.warning("group record larger than the group log takes: not written",
                    group_id=group_id[:256], record_bytes=size,
                    offsets_topic_max_message_bytes=limit, error=RECORD_TOO_LARGE.name)
        self.journal.event({"event": "group_write_failed", "group_ids": [group_id],
                            "records": len(result.records),
                            "error": f"record of {size} bytes exceeds {limit}"}, quiet=True)
        self.fail(result, RECORD_TOO_LARGE)
        self.apply(self.service.records_failed(result, self.clock.now_ms(), RECORD_TOO_LARGE))
        if then is not None:
            then(False)
        return True

    def fail(self, result: Result, error: ErrorCode = APPEND_FAILED) -> None:
        """Answer every reply of `result` with the error of a failed group-log write."""
        for reply in result.replies:
            pending = self._answered(reply.ref)
            if pending is not None:
                pending.ctx.respond(pending.module.to_response(
                    error_outcome(pending.command, error, reply.outcome),
                    pending.ctx.version))

    def apply_timers(self, result: Result) -> None:
        for op in result.timers:
            if op.deadline_ms is None:
                self.timers.cancel(op.key)
            else:
                self.timers.schedule(op.key, op.deadline_ms)

    def _deliver(self, result: Result) -> None:
        for reply in result.replies:
            pending = self._answered(reply.ref)
            if pending is None:
                continue  # its connection closed; the core was told
            ctx = pending.ctx
            encode = getattr(pending.module, "encode", None)
            if encode is not None:
                ctx.respond_raw(encode(reply.outcome, ctx.version, ctx.header.correlation_id))
                continue
            values = getattr(pending.module, "to_values", None)
            if values is not None:  # answers that may be large: built a slice per loop turn
                respond_in_slices(ctx, values(reply.outcome, ctx.version))
            else:
                ctx.respond(pending.module.to_response(reply.outcome, ctx.version))

    def emit(self, events: list[Any]) -> None:
        consumer_groups = self.service.consumer.groups
        for event in events:
            payload = event.as_dict()
            if "group_type" not in payload and event.group_id in consumer_groups:
                # The events both group types share name the consumer groups' type too.
                payload["group_type"] = CONSUMER_GROUP_TYPE
            self.journal.event(payload)
            if self.metrics is not None:
                self.metrics.on_event(event)
            if isinstance(event, RebalanceStarted):
                self._release_member_fetches(event.group_id)

    def _release_member_fetches(self, group_id: str) -> None:
        """A rebalance started: answer the group's members' parked Fetch long-polls now, so a
        client blocked in a long fetch gets back to its poll loop and rejoins sooner. Fetches
        carry no member id: they are matched by client id and host (a few extra wake-ups of
        other clients sharing both are harmless: they are answered with what is there)."""
        group = self.service.group(group_id)
        if group is None or not len(self.fetches):
            return
        clients = {(m.client_id, m.client_host) for m in group.members.values()}
        if clients:
            self.fetches.release_clients(clients)
