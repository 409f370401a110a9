"""Random join/sync/heartbeat/leave/commit/sleep/close sequences against the invariants.

Invariants: only valid state transitions (asserted inside `transition_to`), the generation
never decreases, the leader is a member, parked requests exist only in the state that parks
them and every request is answered exactly once unless it is still parked or its connection
closed, no reply reaches a closed connection (asserted by the context), the group's tallies
equal a recount from its members, and replaying the group records written rebuilds
`durable_view()`, which matches a Stable group's live snapshot, also when writes fail; every
assignment a SyncGroup hands out was written first. Disconnect-fast failover: a dynamic member
is never past its disconnect grace, and one within it has no open connection of its own.
"""

from __future__ import annotations

import dataclasses

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group.classic.state import GroupState
from coordinator.group.config import GroupConfig
from coordinator.group.result import RequestRef
from coordinator.grouplog.records import GroupMetadataRecord
from tests.builders import JoinGroupBuilder, heartbeat, leave, protocols, sync
from tests.context import GroupTestContext
from tests.property.test_group_tallies import check_tallies

SLOTS = 4
PROTOCOL_SETS = [("range",), ("range", "roundrobin"), ("roundrobin", "range")]


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ctx = GroupTestContext(
            GroupConfig(group_initial_rebalance_delay_ms=100, group_max_size=3)
        )
        self.member_of: dict[int, str] = {}  # slot -> member id it believes it has
        self.generation_of: dict[int, int] = {}
        self.connection_of = {slot: slot + 1 for slot in range(SLOTS)}
        self.next_connection = SLOTS + 1
        self.max_generation = 0
        self._join_refs: set[RequestRef] = set()  # parked JoinGroups whose answer we learn from

    def _learn(self, slot: int, outcome: object) -> None:
        if outcome is None:
            return
        member_id = getattr(outcome, "member_id", "")
        if member_id:
            self.member_of[slot] = member_id
        generation = getattr(outcome, "generation_id", -1)
        if generation >= 0:
            self.generation_of[slot] = generation

    def _absorb_replies(self) -> None:
        for ref, outcome in self.ctx.replies.items():
            slot = next((s for s, c in self.connection_of.items() if c == ref.connection_id), None)
            if slot is not None and ref in self._join_refs:
                self._learn(slot, outcome)
        self._join_refs -= set(self.ctx.replies)

    @rule(
        slot=st.integers(0, SLOTS - 1),
        fresh=st.sampled_from([False, False, False, True]),
        static=st.sampled_from([False, False, True]),
        version=st.sampled_from([3, 5, 9]),
        protos=st.sampled_from(PROTOCOL_SETS),
        metadata=st.sampled_from([b"a", b"b"]),
    )
    def join(
        self,
        slot: int,
        fresh: bool,
        static: bool,
        version: int,
        protos: tuple[str, ...],
        metadata: bytes,
    ) -> None:
        member_id = "" if fresh else self.member_of.get(slot, "")
        builder = JoinGroupBuilder(
            client_id=f"c{slot}", version=version, session_ms=6_000, rebalance_ms=8_000
        ).with_protocols(*protocols(*protos, metadata=metadata))
        if static:
            builder = builder.group_instance_id(f"i{slot}")
        builder = builder.member_id(member_id)
        out = self.ctx.send(builder, self.connection_of[slot])
        if out is None:
            self._join_refs = self._join_refs | {self.ctx.ref_of_last()}
        self._learn(slot, out)

    @rule(slot=st.integers(0, SLOTS - 1), stale=st.booleans())
    def sync(self, slot: int, stale: bool) -> None:
        member_id = self.member_of.get(slot)
        if member_id is None:
            return
        generation = self.generation_of.get(slot, 0) - (1 if stale else 0)
        group = self.ctx.service.group("g")
        assignments = None
        if group is not None and group.leader_id == member_id:
            assignments = {m: m.encode() for m in group.members}
        cmd = sync(member_id, generation, assignments=assignments)
        self.ctx.send(cmd, self.connection_of[slot])

    @rule(slot=st.integers(0, SLOTS - 1))
    def sync_current(self, slot: int) -> None:
        """A well-behaved member: syncs with the generation the group is at."""
        group = self.ctx.service.group("g")
        if group is not None:
            self.generation_of[slot] = group.generation_id
            self.sync(slot, stale=False)

    @rule()
    def settle(self) -> None:
        """Everyone known rejoins, the join phase ends, everyone syncs: usually Stable."""
        for slot in sorted(self.member_of):
            self.join(slot, False, False, 5, ("range",), b"a")
        self.sleep(100)
        for slot in sorted(self.member_of):
            self.sync_current(slot)

    @rule(slot=st.integers(0, SLOTS - 1))
    def heartbeat(self, slot: int) -> None:
        member_id = self.member_of.get(slot)
        if member_id is not None:
            self.ctx.send(
                heartbeat(member_id, self.generation_of.get(slot, 0)), self.connection_of[slot]
            )

    @rule(slot=st.integers(0, SLOTS - 1), by_instance=st.booleans())
    def leave(self, slot: int, by_instance: bool) -> None:
        if by_instance:
            self.ctx.send(leave(("", f"i{slot}")), self.connection_of[slot])
        elif slot in self.member_of:
            self.ctx.send(leave(self.member_of[slot]), self.connection_of[slot])

    @rule(slot=st.integers(0, SLOTS - 1))
    def commit(self, slot: int) -> None:
        member_id = self.member_of.get(slot, "")
        generation = self.generation_of.get(slot, -1) if member_id else -1
        _, result = self.ctx.service.validate_offset_commit(
            "g", member_id, generation, None, self.ctx.now_ms
        )
        self.ctx.apply(result)

    @rule()
    def fail_next_write(self) -> None:
        """The next group-log write fails (a full disk, a failed fsync)."""
        self.ctx.fail_next_writes()

    @rule()
    def delete_group(self) -> None:
        _, result = self.ctx.service.delete_group("g", self.ctx.now_ms)
        self.ctx.apply(result)
        if self.ctx.service.group("g") is None:
            self.max_generation = 0  # a group created under the same id starts over

    @rule(ms=st.sampled_from([0, 50, 100, 1_000, 3_000, 6_000, 8_000]))
    def sleep(self, ms: int) -> None:
        self.ctx.sleep(ms)
        self._absorb_replies()

    @rule(slot=st.integers(0, SLOTS - 1))
    def close(self, slot: int) -> None:
        self.ctx.close(self.connection_of[slot])
        self.connection_of[slot] = self.next_connection
        self.next_connection += 1

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def generation_never_decreases(self) -> None:
        group = self.ctx.service.group("g")
        if group is not None:
            assert group.generation_id >= self.max_generation
            self.max_generation = group.generation_id

    @invariant()
    def leader_is_a_member(self) -> None:
        group = self.ctx.service.group("g")
        if group is None:
            return
        if group.members:
            assert group.leader_id in group.members
        else:
            assert group.leader_id is None or group.state is GroupState.PREPARING_REBALANCE

    @invariant()
    def empty_means_no_members(self) -> None:
        group = self.ctx.service.group("g")
        if group is not None and group.state is GroupState.EMPTY:
            assert not group.members

    @invariant()
    def parked_requests_are_consistent(self) -> None:
        self._absorb_replies()
        group = self.ctx.service.group("g")
        parked = set()
        if group is not None:
            for m in group.members.values():
                if m.awaiting_join is not None:
                    assert group.state is GroupState.PREPARING_REBALANCE
                    if m.awaiting_join.ref is not None:
                        parked.add(m.awaiting_join.ref)
                if m.awaiting_sync is not None:
                    assert group.state is GroupState.COMPLETING_REBALANCE
                    if m.awaiting_sync.ref is not None:
                        parked.add(m.awaiting_sync.ref)
        for ref in parked:
            assert ref not in self.ctx.replies
        for ref in self.ctx.unanswered():
            assert ref in parked or ref.connection_id in self.ctx.closed, ref

    @invariant()
    def a_member_in_its_grace_has_no_open_connection_of_its_own(self) -> None:
        group = self.ctx.service.group("g")
        if group is None:
            return
        for member in group.members.values():
            own = {member.connection_id, *(member.other_connections or ())} - {None}
            assert not own & self.ctx.closed, (own, self.ctx.closed)
            assert member.other_connections is None or member.other_connections
            if member.is_static:
                assert member.disconnect_deadline_ms is None and not own
            elif member.disconnect_deadline_ms is not None:
                assert not own
                assert self.ctx.now_ms < member.disconnect_deadline_ms

    @invariant()
    def sync_answers_were_durable(self) -> None:
        """Every assignment handed out was in a group record that reached the log first."""
        written = {
            (r.value.generation, m.member_id, m.assignment)
            for r in self.ctx.records
            if isinstance(r, GroupMetadataRecord) and r.value is not None
            for m in r.value.members
        }
        for ref, outcome in self.ctx.replies.items():
            cmd = self.ctx.sent[ref]
            if isinstance(cmd, c.SyncGroup) and outcome.error is ErrorCode.none:
                assert (cmd.generation_id, cmd.member_id, outcome.assignment) in written

    @invariant()
    def tallies_match_a_recount(self) -> None:
        group = self.ctx.service.group("g")
        if group is not None:
            check_tallies(group)

    @invariant()
    def replay_equals_durable_view(self) -> None:
        fresh = GroupTestContext()
        for record in self.ctx.records:
            if isinstance(record, GroupMetadataRecord):
                fresh.service.replay(record, 0)
        durable = self.ctx.service.durable_view()
        assert fresh.service.durable_view() == durable
        group = self.ctx.service.group("g")
        if group is not None and group.state is GroupState.STABLE:
            live = dataclasses.replace(group.snapshot(), current_state_timestamp=0)
            assert dataclasses.replace(durable["g"], current_state_timestamp=0) == live


GroupMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
TestGroupStateMachine = GroupMachine.TestCase
