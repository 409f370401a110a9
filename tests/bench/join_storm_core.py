"""A JoinGroup storm driven straight into `GroupCoordinatorService.handle`: broker CPU per phase.

No sockets and no asyncio: the same commands the wire layer would build, a `ManualClock`, the
real `TimerWheel`, and every reply encoded the way `GroupRuntime._deliver` encodes it (the api
module's `encode` fast path when it has one, else `to_response` + kio). So the numbers are the
coordinator's own cost of a storm, without the noise of thousands of client connections.

Phases, for `n` dynamic members joining one new group:

    join_unknown   n JoinGroup with an empty member id -> MEMBER_ID_REQUIRED (KIP-394)
    rejoin         n JoinGroup with the assigned ids -> parked during the initial delay
    complete_join  the wheel fires the join deadline(s) -> n JoinGroup answers (the leader's
                   carries every member's metadata)
    sync_followers n-1 SyncGroup -> parked
    sync_leader    the leader's SyncGroup -> snapshot record, n SyncGroup answers
    heartbeat      n Heartbeat at the new generation
    disconnect     every member's connection closes (`connection_closed`)

Each phase reports the core's CPU (handle/expire plus the timer wheel) and the reply encoding
CPU separately. Run:

    .venv/bin/python -m tests.bench.join_storm_core                # 500 and 5,000 members
    .venv/bin/python -m tests.bench.join_storm_core -n 5000 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from coordinator.api import heartbeat as heartbeat_api
from coordinator.api import join_group as join_api
from coordinator.api import sync_group as sync_api
from coordinator.group import commands as c
from coordinator.group.config import GroupConfig
from coordinator.group.result import RequestRef, Result
from coordinator.group.service import GroupCoordinatorService
from coordinator.group.timer import TimerWheel
from coordinator.runtime.clock import ManualClock
from protocol.codec import encode_response
from tests.bench.members import HEARTBEAT_V, JOIN_V, SYNC_V, assignment, subscription

GROUP = "storm"
TOPIC = "storm-topic"
INITIAL_DELAY_MS = 3_000
PHASES = (
    "join_unknown",
    "rejoin",
    "complete_join",
    "sync_followers",
    "sync_leader",
    "heartbeat",
    "disconnect",
)
STORM = PHASES[:5]


@dataclass(slots=True)
class PhaseCost:
    core_s: float = 0.0
    encode_s: float = 0.0
    requests: int = 0
    replies: int = 0
    reply_bytes: int = 0

    @property
    def total_s(self) -> float:
        return self.core_s + self.encode_s


@dataclass(slots=True)
class Storm:
    """One coordinator, its wheel and clock, and the requests still waiting for an answer."""

    members: int
    join_version: int = JOIN_V
    sync_version: int = SYNC_V
    clock: ManualClock = field(default_factory=lambda: ManualClock(1_000_000))
    wheel: TimerWheel = field(default_factory=lambda: TimerWheel(start_ms=1_000_000))
    service: GroupCoordinatorService = field(init=False)
    costs: dict[str, PhaseCost] = field(default_factory=dict)
    answers: dict[RequestRef, Any] = field(default_factory=dict)
    _pending: dict[RequestRef, ModuleType] = field(default_factory=dict)
    _sequence: itertools.count[int] = field(default_factory=itertools.count)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        config = GroupConfig(group_initial_rebalance_delay_ms=INITIAL_DELAY_MS)
        self.service = GroupCoordinatorService(config, lambda prefix: f"{prefix}-{next(self._ids)}")

    # -- driving ---------------------------------------------------------------------------

    def _ref(self, member: int) -> RequestRef:
        return RequestRef(member, next(self._sequence))

    def _apply(self, result: Result, phase: PhaseCost) -> None:
        """What the runtime does with a Result, minus the log append (durable at once): timers,
        replies, then what the core finishes once the records are durable."""
        for op in result.timers:
            if op.deadline_ms is None:
                self.wheel.cancel(op.key)
            else:
                self.wheel.schedule(op.key, op.deadline_ms)
        self._reply(result, phase)
        if result.records:
            self._apply(self.service.records_durable(result, self.clock.now_ms()), phase)

    def _reply(self, result: Result, phase: PhaseCost) -> None:
        if not result.replies:
            return
        started = time.process_time()
        for reply in result.replies:
            module = self._pending.pop(reply.ref)
            encode: Callable[[Any, int, int], bytes] | None = getattr(module, "encode", None)
            version = self._version(module)
            if encode is not None:
                data = encode(reply.outcome, version, reply.ref.sequence)
            else:
                data = encode_response(
                    module.API_KEY,
                    version,
                    reply.ref.sequence,
                    module.to_response(reply.outcome, version),
                )
            phase.reply_bytes += len(data)
            phase.replies += 1
            self.answers[reply.ref] = reply.outcome
        # Encoding is timed inside the core's window: move it to its own column.
        spent = time.process_time() - started
        phase.encode_s += spent
        phase.core_s -= spent

    def _version(self, module: ModuleType) -> int:
        if module is join_api:
            return self.join_version
        if module is sync_api:
            return self.sync_version
        return HEARTBEAT_V

    def send(self, cmd: c.Command, module: ModuleType, phase: PhaseCost) -> RequestRef:
        ref: RequestRef = cmd.ref
        self._pending[ref] = module
        self._apply(self.service.handle(cmd, self.clock.now_ms()), phase)
        return ref

    def advance_to(self, now_ms: int, phase: PhaseCost) -> None:
        """Move the clock, firing due timers in deadline order as the runtime's wheel does."""
        while True:
            deadline = self.wheel.next_deadline()
            if deadline is None or deadline > now_ms:
                break
            self.clock.set(max(deadline, self.clock.now_ms()))
            for key in self.wheel.poll(self.clock.now_ms()):
                self._apply(self.service.expire(key, self.clock.now_ms()), phase)
        self.clock.set(now_ms)

    def phase(self, name: str) -> PhaseCost:
        return self.costs.setdefault(name, PhaseCost())

    # -- the storm ---------------------------------------------------------------------------

    def join_command(self, member: int, member_id: str) -> c.JoinGroup:
        return c.JoinGroup(
            ref=self._ref(member),
            api_version=self.join_version,
            group_id=GROUP,
            member_id=member_id,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=60_000,
            protocol_type="consumer",
            protocols=(c.Protocol(name="range", metadata=subscription([TOPIC])),),
            client_id=f"consumer-{member}",
            client_host="/127.0.0.1",
        )

    def run(self) -> None:
        n = self.members
        first_joins = [self.join_command(i, "") for i in range(n)]
        self.send_all("join_unknown", first_joins, join_api)
        member_ids = [self.answers[cmd.ref].member_id for cmd in first_joins]

        rejoins = [self.join_command(i, member_id) for i, member_id in enumerate(member_ids)]
        self.send_all("rejoin", rejoins, join_api)
        assert not any(cmd.ref in self.answers for cmd in rejoins), "a rejoin was answered early"

        phase = self.phase("complete_join")
        started = time.process_time()
        # The initial delay restarts while new members keep arriving (Kafka
        # InitialDelayedJoin): step the clock by the delay until everyone is answered.
        while not all(cmd.ref in self.answers for cmd in rejoins):
            self.advance_to(self.clock.now_ms() + INITIAL_DELAY_MS, phase)
        phase.core_s += time.process_time() - started
        joined = [self.answers[cmd.ref] for cmd in rejoins]
        assert all(j.error.value == 0 for j in joined), joined[:3]
        leader = joined[0].leader
        generation = joined[0].generation_id

        follower_syncs = [
            self.sync_command(i, m, generation, ()) for i, m in enumerate(member_ids) if m != leader
        ]
        self.send_all("sync_followers", follower_syncs, sync_api)
        assignments = tuple((m, assignment(TOPIC, [i])) for i, m in enumerate(member_ids))
        leader_sync = self.sync_command(member_ids.index(leader), leader, generation, assignments)
        self.send_all("sync_leader", [leader_sync], sync_api)
        group = self.service.group(GROUP)
        assert group is not None and group.state.value == "Stable", group
        assert not self._pending, f"{len(self._pending)} requests never answered"

        heartbeats = [
            c.Heartbeat(
                ref=self._ref(i),
                api_version=HEARTBEAT_V,
                group_id=GROUP,
                generation_id=generation,
                member_id=member_id,
            )
            for i, member_id in enumerate(member_ids)
        ]
        self.send_all("heartbeat", heartbeats, heartbeat_api)

        phase = self.phase("disconnect")
        started = time.process_time()
        for i in range(n):
            self._apply(self.service.connection_closed(i, self.clock.now_ms()), phase)
        phase.core_s += time.process_time() - started

    def send_all(self, name: str, commands: Sequence[c.Command], module: ModuleType) -> None:
        """One phase: handle `commands` in order (built beforehand: decoding is not measured)."""
        phase = self.phase(name)
        phase.requests += len(commands)
        started = time.process_time()
        for cmd in commands:
            self.send(cmd, module, phase)
        phase.core_s += time.process_time() - started

    def sync_command(
        self,
        member: int,
        member_id: str,
        generation: int,
        assignments: tuple[tuple[str, bytes], ...],
    ) -> c.SyncGroup:
        return c.SyncGroup(
            ref=self._ref(member),
            api_version=self.sync_version,
            group_id=GROUP,
            generation_id=generation,
            member_id=member_id,
            assignments=assignments,
        )


def best_costs(runs: Sequence[Storm]) -> dict[str, PhaseCost]:
    """Per phase, the run where it was cheapest: CPU time on a shared machine only grows."""
    return {name: min((r.costs[name] for r in runs), key=lambda c: c.total_s) for name in PHASES}


def report(runs: Sequence[Storm]) -> str:
    first = runs[0]
    n = first.members
    costs = best_costs(runs)
    lines = [
        f"{n} members (JoinGroup v{first.join_version}, SyncGroup v{first.sync_version}), "
        f"best phase of {len(runs)} run(s)",
        f"  {'phase':<15}{'requests':>9}{'core ms':>9}{'encode ms':>11}{'total ms':>10}"
        f"{'us/member':>11}{'replies':>9}{'reply KiB':>11}",
    ]
    totals = PhaseCost()
    for name in PHASES:
        cost = costs[name]
        lines.append(
            f"  {name:<15}{cost.requests:>9}{cost.core_s * 1e3:>9.1f}{cost.encode_s * 1e3:>11.1f}"
            f"{cost.total_s * 1e3:>10.1f}{cost.total_s / n * 1e6:>11.1f}"
            f"{cost.replies:>9}{cost.reply_bytes / 1024:>11.1f}"
        )
        if name in STORM:
            totals.core_s += cost.core_s
            totals.encode_s += cost.encode_s
    lines.append(
        f"  {'join + sync':<24}{totals.core_s * 1e3:>9.1f}{totals.encode_s * 1e3:>11.1f}"
        f"{totals.total_s * 1e3:>10.1f}{totals.total_s / n * 1e6:>11.1f}"
    )
    storms = sorted(sum(r.costs[p].total_s for p in STORM) for r in runs)
    lines.append("  join + sync per run (ms): " + ", ".join(f"{t * 1e3:.1f}" for t in storms))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-n", "--members", type=int, nargs="+", default=[500, 5_000])
    parser.add_argument("--join-version", type=int, default=JOIN_V)
    parser.add_argument("--sync-version", type=int, default=SYNC_V)
    parser.add_argument("--repeat", type=int, default=5, help="runs per size")
    parser.add_argument("--profile", action="store_true", help="cProfile one run per size")
    args = parser.parse_args()
    for n in args.members:
        if args.profile:
            storm = Storm(n, args.join_version, args.sync_version)
            profiler = cProfile.Profile()
            profiler.runcall(storm.run)
            print(report([storm]))
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
            continue
        runs = []
        for _ in range(args.repeat):
            storm = Storm(n, args.join_version, args.sync_version)
            storm.run()
            runs.append(storm)
        print(report(runs))
        print()


if __name__ == "__main__":
    main()
