"""What the pure coordinator core returns for every command: replies, records, timer changes.

The runtime applies a `Result` in a fixed order: timer changes to the wheel, records appended to
the group log (and made durable), then replies delivered. A reply addresses a request by its
`RequestRef`; it may answer a request other than the one being handled (the last JoinGroup of a
rebalance completes every parked JoinGroup).

State follows the log: a change that must not be seen before its records are durable (the
leader's assignment, a static member's new id, a deleted group) is carried in `writes` instead
of being made at once. The runtime hands a Result with records back to the core when the append
completes, `GroupCoordinatorService.records_durable` or `records_failed`, which finishes those
changes or undoes them and returns the follow-up Result (for example the SyncGroup answers).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from coordinator.grouplog.records import CoordinatorRecord

TimerKey = tuple[Hashable, ...]

# What a request is answered when the records it depends on could not be made durable. Kafka
# maps a log that did not take its records (not enough replicas, a timeout) to this one, for
# group metadata (`appendGroupMetadataErrorToResponseError`) and offsets alike; this broker's
# one log has no finer cause to report. Retriable: the client finds the coordinator again.
APPEND_FAILED = ErrorCode.coordinator_not_available

# What a request is answered when a record it writes is larger than the group log takes in one
# message (`offsets.topic.max.message.bytes`): Kafka's runtime refuses such a batch with
# RecordTooLargeException, which its group coordinator maps to UNKNOWN_SERVER_ERROR for group
# metadata (`appendGroupMetadataErrorToResponseError`) and for offsets
# (`handleOperationException`). Not retriable: the same request would not fit next time.
RECORD_TOO_LARGE = ErrorCode.unknown_server_error

Refusal = Callable[[str], ErrorCode | None]
"""The runtime's answer for a group whose log partition it does not serve now (still loading,
or failed to load), None when it serves it."""


class RequestRef(NamedTuple):
    """Identifies one request on one connection; opaque to the core. A tuple: the runtime
    files every parked request under it, and a tuple's hash is the cheapest there is."""

    connection_id: int
    sequence: int


@dataclass(frozen=True, slots=True)
class Reply:
    ref: RequestRef
    outcome: Any  # a typed outcome dataclass of the API that `ref` belongs to


@dataclass(frozen=True, slots=True)
class TimerOp:
    """Schedule `key` at `deadline_ms`, replacing any earlier deadline; None cancels it."""

    key: TimerKey
    deadline_ms: int | None


@dataclass(slots=True)
class Result:
    replies: list[Reply] = field(default_factory=list)
    records: list[CoordinatorRecord] = field(default_factory=list)
    timers: list[TimerOp] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)  # coordinator.group.events dataclasses
    # Events of changes made only once `records` are durable (a deleted group): emitted then,
    # dropped if the write fails.
    durable_events: list[Any] = field(default_factory=list)
    # Changes waiting for `records` to be durable (`classic/writes.py`); opaque here.
    writes: list[Any] = field(default_factory=list)

    @classmethod
    def reply(cls, ref: RequestRef, outcome: Any) -> Result:
        return cls(replies=[Reply(ref, outcome)])

    def merge(self, other: Result) -> Result:
        self.replies.extend(other.replies)
        self.records.extend(other.records)
        self.timers.extend(other.timers)
        self.events.extend(other.events)
        if other.durable_events:
            self.durable_events.extend(other.durable_events)
        self.writes.extend(other.writes)
        return self

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        self.timers.append(TimerOp(key, deadline_ms))

    def cancel(self, key: TimerKey) -> None:
        self.timers.append(TimerOp(key, None))
