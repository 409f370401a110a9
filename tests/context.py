"""`GroupTestContext`: the group service, a real TimerWheel and a ManualClock, read as a timeline.

`send` gives a command a fresh `RequestRef`, handles it, applies the Result (timers to the
wheel, records to a log list, replies to a mailbox) and returns the immediate answer, or None
when the request was parked. `sleep(ms)` advances the clock and fires due timers through
`service.expire`, in deadline order, exactly like the runtime. Every reply is checked to answer
a request that was sent, once, on a connection that is still open.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from coordinator.group import commands as c
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.config import GroupConfig
from coordinator.group.consumer.commands import ConsumerGroupDescribe, ConsumerGroupHeartbeat
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.outcomes import error_outcome
from coordinator.group.result import APPEND_FAILED, RequestRef, Result
from coordinator.group.service import GroupCoordinatorService
from coordinator.group.timer import TimerWheel
from coordinator.grouplog.records import CoordinatorRecord
from coordinator.runtime.clock import ManualClock

DEFAULT_CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0)


class GroupTestContext:
    def __init__(self, config: GroupConfig = DEFAULT_CONFIG, *, start_ms: int = 0,
                 consumer_config: ConsumerGroupConfig | None = None) -> None:
        self.clock = ManualClock(start_ms)
        self.wheel = TimerWheel(tick_ms=10, wheel_size=64, start_ms=start_ms)
        self._ids = itertools.count(1)
        self.service = GroupCoordinatorService(config, self._new_member_id, consumer_config)
        self._sequence = itertools.count(1)
        self.sent: dict[RequestRef, c.Command] = {}
        self.replies: dict[RequestRef, Any] = {}
        self.closed: set[int] = set()
        self.records: list[CoordinatorRecord] = []  # durable, in log order
        self.failed_records: list[CoordinatorRecord] = []
        self.failing_writes = 0
        self.events: list[Any] = []

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    @property
    def now_ms(self) -> int:
        return self.clock.now_ms()

    # -- driving ---------------------------------------------------------------------------

    def send(self, cmd: c.Command | Any, connection: int = 1) -> Any:
        """Handle `cmd` (a command or a builder); the immediate answer, or None if parked."""
        if not isinstance(
            cmd,
            c.JoinGroup
            | c.SyncGroup
            | c.Heartbeat
            | c.LeaveGroup
            | c.DescribeGroups
            | c.ListGroups
            | ConsumerGroupHeartbeat
            | ConsumerGroupDescribe,
        ):
            cmd = cmd.build()
        ref = RequestRef(connection, next(self._sequence))
        command: Any = replace(cmd, ref=ref)
        self.sent[ref] = command
        self.apply(self.service.handle(command, self.now_ms))
        return self.replies.get(ref)

    def ref_of_last(self) -> RequestRef:
        return next(reversed(self.sent))

    def apply(self, result: Result) -> Result:
        """Apply `result` as the runtime does; its records are durable at once unless
        `fail_next_writes` says otherwise (then its replies are answered with the error)."""
        for op in result.timers:
            if op.deadline_ms is None:
                self.wheel.cancel(op.key)
            else:
                self.wheel.schedule(op.key, op.deadline_ms)
        self.events.extend(result.events)
        if result.records and self.failing_writes:
            self.failing_writes -= 1
            self.failed_records.extend(result.records)
            for reply in result.replies:
                cmd = self.sent[reply.ref]
                self._deliver(reply.ref, error_outcome(cmd, APPEND_FAILED))
            self.apply(self.service.records_failed(result, self.now_ms))
            return result
        self.records.extend(result.records)
        for reply in result.replies:
            self._deliver(reply.ref, reply.outcome)
        if result.records:
            self.apply(self.service.records_durable(result, self.now_ms))
        return result

    def fail_next_writes(self, count: int = 1) -> None:
        """The next `count` Results with records fail to be written."""
        self.failing_writes += count

    def _deliver(self, ref: RequestRef, outcome: Any) -> None:
        assert ref in self.sent, f"reply to a request never sent: {ref}"
        assert ref not in self.replies, f"second reply to {ref}"
        assert ref.connection_id not in self.closed, f"reply on closed {ref}"
        self.replies[ref] = outcome

    def sleep(self, ms: int) -> None:
        target = self.now_ms + ms
        while True:
            deadline = self.wheel.next_deadline()
            if deadline is None or deadline > target:
                break
            self.clock.set(max(deadline, self.now_ms))
            for key in self.wheel.poll(self.now_ms):
                self.apply(self.service.expire(key, self.now_ms))
        self.clock.set(target)
        for key in self.wheel.poll(self.now_ms):
            self.apply(self.service.expire(key, self.now_ms))

    def close(self, connection: int) -> None:
        self.closed.add(connection)
        self.apply(self.service.connection_closed(connection, self.now_ms))

    # -- reading ---------------------------------------------------------------------------

    def reply(self, ref: RequestRef) -> Any:
        return self.replies.get(ref)

    def group(self, group_id: str = "g") -> ClassicGroup:
        group = self.service.group(group_id)
        assert group is not None, f"no group {group_id}"
        return group

    def unanswered(self) -> list[RequestRef]:
        return [ref for ref in self.sent if ref not in self.replies]

    def connection_of(self, member_id: str, group_id: str = "g") -> int | None:
        """The connection of the member's latest request, as the core tracks it."""
        member = self.group(group_id).members.get(member_id)
        return None if member is None else member.connection_id

    def close_member_connection(self, member_id: str, group_id: str = "g") -> None:
        """Close the connection of the member's latest request."""
        connection = self.connection_of(member_id, group_id)
        assert connection is not None, f"{member_id} has no connection"
        self.close(connection)

    def events_named(self, name: str) -> list[Any]:
        return [e for e in self.events if e.event == name]

    # -- common scenarios ------------------------------------------------------------------

    def join_dynamic(self, builder: Any = None, connection: int = 1) -> str:
        """v4+ two-step join of a new dynamic member; returns its member id (maybe parked)."""
        from tests.builders import JoinGroupBuilder

        b = builder or JoinGroupBuilder()
        first = self.send(b, connection)
        assert first is not None and first.member_id, first
        self.send(b.member_id(first.member_id), connection)
        return str(first.member_id)

    def stable_group(self, n: int, group: str = "g", **kw: Any) -> list[str]:
        """A Stable group of n dynamic members (leader first) at generation 1; member i of
        the joining order talks on connection 100 + i (`connection_of`)."""
        from tests.builders import JoinGroupBuilder, heartbeat, sync

        ids = []
        refs = []
        for i in range(n):
            b = JoinGroupBuilder(group=group, client_id=f"c{i}", **kw)
            ids.append(self.join_dynamic(b, connection=100 + i))
            refs.append(self.ref_of_last())
        self.sleep(0)
        joined = [self.reply(r) for r in refs]
        assert all(j is not None and j.error.value == 0 for j in joined), joined
        leader = joined[0].leader
        generation = joined[0].generation_id
        ordered = [leader] + [m for m in ids if m != leader]
        for m in ordered:
            assignments = {x: x.encode() for x in ids} if m == leader else None
            # Each member syncs on its own connection, as a real client does.
            self.send(sync(m, generation, group=group, assignments=assignments),
                      100 + ids.index(m))
        # ... and heartbeats there, which makes the connection the member's own
        # (disconnect-fast failover, `classic/rebalance.py`).
        for m in ordered:
            self.send(heartbeat(m, generation, group=group), 100 + ids.index(m))
        assert self.group(group).state.value == "Stable"
        return ordered
