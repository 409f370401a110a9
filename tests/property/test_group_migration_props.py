"""Random histories of a group whose members speak both protocols, converted back and forth.

Classic clients behave as eager librdkafka/kafka-python consumers: they heartbeat, and when told
to rejoin (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) they give up every
partition, send JoinGroup (asking for a member id first) and SyncGroup (the leader of a classic
group assigns ranges), and own what the SyncGroup answer gives. Consumer-protocol clients
heartbeat with their epoch and the partitions of their last answer. Either kind may join or
leave at any time; the group is upgraded when a consumer-protocol member joins a classic group,
and downgraded when the last one leaves.

Invariants after every step:
* no two clients that are members of the live group believe they own the same partition, and
  a consumer group never has a partition with two owners;
* replaying every record written so far (through the group log's codec) into a fresh
  coordinator rebuilds the live group, whichever type it has now.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from kio.schema.errors import ErrorCode

from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.embedded_protocol import encode_assignment, parse_assignment
from coordinator.group.result import RequestRef
from coordinator.grouplog.codec import decode_record, encode_record
from coordinator.grouplog.records import ConsumerGroupRecord, GroupMetadataRecord
from tests.builders import heartbeat, leave, sync
from tests.consumer_helpers import beat, image, join, topic_id
from tests.context import GroupTestContext
from tests.migration_helpers import classic_join, stable_classic_group

PARTITIONS = 6
T = topic_id("t")
CLASSIC_SLOTS = 3
MODERN_SLOTS = 2
REJOIN = {ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation,
          ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id,
          ErrorCode.coordinator_not_available}


@dataclass
class ClassicClient:
    connection: int
    member_id: str = ""
    generation: int = -1
    held: set[int] = field(default_factory=set)
    needs_join: bool = True
    pending_join: RequestRef | None = None
    pending_sync: RequestRef | None = None


@dataclass
class ModernClient:
    member_id: str
    epoch: int = 0
    held: set[int] = field(default_factory=set)


class MigrationMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = ConsumerGroupConfig(session_timeout_ms=10_000)
        self.ctx = GroupTestContext(consumer_config=self.config)
        self.ctx.service.consumer.set_topic_image(image({"t": PARTITIONS}))
        self.classic: dict[int, ClassicClient] = {}
        self.modern: dict[int, ModernClient] = {}
        self.ids = 0

    @initialize(members=st.integers(0, CLASSIC_SLOTS))
    def a_classic_group(self, members: int) -> None:
        """Most histories start from a Stable classic group of eager consumers."""
        if not members:
            return
        share = stable_classic_group(self.ctx, members, PARTITIONS)
        generation = self.ctx.group("g").generation_id
        by_connection = sorted(share, key=lambda m: self.ctx.connection_of(m) or 0)
        for slot, member_id in enumerate(by_connection):
            self.classic[slot] = ClassicClient(
                connection=100 + slot, member_id=member_id, generation=generation,
                held=set(share[member_id]), needs_join=False)
        self.ids = members

    # -- classic clients ---------------------------------------------------------------------

    def _rejoin(self, client: ClassicClient, error: ErrorCode) -> None:
        client.held = set()  # eager: everything is given up before rejoining
        client.needs_join = True
        client.pending_join = client.pending_sync = None
        if error is ErrorCode.unknown_member_id:
            client.member_id, client.generation = "", -1

    def _step(self, client: ClassicClient) -> None:
        ctx = self.ctx
        if client.pending_join is not None:
            joined = ctx.reply(client.pending_join)
            if joined is None:
                return  # parked in a classic rebalance
            client.pending_join = None
            if joined.error is ErrorCode.member_id_required:
                client.member_id = joined.member_id
                return
            if joined.error is not ErrorCode.none:
                self._rejoin(client, joined.error)
                return
            client.member_id, client.generation = joined.member_id, joined.generation_id
            assignments = None
            if joined.leader == client.member_id:
                members = sorted(m.member_id for m in joined.members)
                assignments = {m: encode_assignment(
                    {"t": frozenset(range(i, PARTITIONS, len(members)))}, 0)
                    for i, m in enumerate(members)}
            ctx.send(sync(client.member_id, client.generation, assignments=assignments),
                     client.connection)
            client.pending_sync = ctx.ref_of_last()
            return
        if client.pending_sync is not None:
            synced = ctx.reply(client.pending_sync)
            if synced is None:
                return
            client.pending_sync = None
            if synced.error is not ErrorCode.none:
                self._rejoin(client, synced.error)
                return
            client.held = set(parse_assignment(synced.assignment).get("t", frozenset()))
            client.needs_join = False
            return
        if client.needs_join:
            client.held = set()
            ctx.send(classic_join(member=client.member_id, rebalance_ms=5_000),
                     client.connection)
            client.pending_join = ctx.ref_of_last()
            return
        answer = ctx.send(heartbeat(client.member_id, client.generation), client.connection)
        if answer.error in REJOIN:
            self._rejoin(client, answer.error)

    @precondition(lambda self: len(self.classic) < CLASSIC_SLOTS)
    @rule()
    def classic_starts(self) -> None:
        slot = next(s for s in range(CLASSIC_SLOTS) if s not in self.classic)
        self.classic[slot] = ClassicClient(connection=200 + self.ids)
        self.ids += 1
        self._step(self.classic[slot])

    @precondition(lambda self: bool(self.classic))
    @rule(data=st.data(), times=st.integers(1, 4))
    def classic_steps(self, data: st.DataObject, times: int) -> None:
        slot = data.draw(st.sampled_from(sorted(self.classic)))
        for _ in range(times):
            self._step(self.classic[slot])

    @precondition(lambda self: bool(self.classic))
    @rule(data=st.data())
    def classic_leaves(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(sorted(self.classic)))
        client = self.classic.pop(slot)
        if client.member_id:
            self.ctx.send(leave(client.member_id), client.connection)

    # -- consumer-protocol clients -------------------------------------------------------------

    def _answer(self, slot: int, reply: object) -> None:
        client = self.modern[slot]
        if reply.error is not ErrorCode.none:  # type: ignore[attr-defined]
            del self.modern[slot]  # fenced, unknown, refused: it starts over later
            return
        client.member_id = reply.member_id or client.member_id  # type: ignore[attr-defined]
        client.epoch = reply.member_epoch  # type: ignore[attr-defined]
        if reply.assignment is not None:  # type: ignore[attr-defined]
            client.held = set(reply.assignment.get(T, frozenset()))  # type: ignore[attr-defined]

    @precondition(lambda self: len(self.modern) < MODERN_SLOTS)
    @rule()
    def modern_joins(self) -> None:
        slot = next(s for s in range(MODERN_SLOTS) if s not in self.modern)
        self.ids += 1
        member_id = f"n{self.ids}"
        self.modern[slot] = ModernClient(member_id)
        self._answer(slot, self.ctx.send(join(member_id)))

    @precondition(lambda self: bool(self.modern))
    @rule(data=st.data())
    def modern_beats(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(sorted(self.modern)))
        client = self.modern[slot]
        self._answer(slot, self.ctx.send(beat(client.member_id, client.epoch,
                                              {"t": client.held})))

    @precondition(lambda self: bool(self.modern))
    @rule(data=st.data())
    def modern_leaves(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(sorted(self.modern)))
        client = self.modern.pop(slot)
        self.ctx.send(beat(client.member_id, -1))

    @rule(ms=st.sampled_from([500, 2_000, 6_000]))
    def sleep(self, ms: int) -> None:
        self.ctx.sleep(ms)

    # -- invariants ---------------------------------------------------------------------------

    def _members(self) -> set[str]:
        consumer = self.ctx.service.consumer.group("g")
        if consumer is not None:
            return set(consumer.members)
        classic = self.ctx.service.group("g")
        return set(classic.members) if classic is not None else set()

    @invariant()
    def one_owner_per_partition(self) -> None:
        members = self._members()
        believed: dict[int, str] = {}
        clients: list[ClassicClient | ModernClient] = [*self.classic.values(),
                                                       *self.modern.values()]
        for client in clients:
            if client.member_id not in members:
                continue  # removed by the broker: it learns so on its next request
            for p in client.held:
                assert p not in believed, f"{client.member_id} and {believed[p]} both own {p}"
                believed[p] = client.member_id
        consumer = self.ctx.service.consumer.group("g")
        if consumer is not None:
            seen: set[tuple[uuid.UUID, int]] = set()
            for m in consumer.members.values():
                for held in (m.assigned, m.pending_revocation):
                    for t, parts in held.items():
                        for p in parts:
                            assert (t, p) not in seen, f"{t}-{p} owned twice"
                            seen.add((t, p))

    @invariant()
    def replay_rebuilds_the_group(self) -> None:
        fresh = GroupTestContext(consumer_config=self.config)
        fresh.service.consumer.set_topic_image(image({"t": PARTITIONS}))
        for record in self.ctx.records:
            decoded = decode_record(*encode_record(record))
            if isinstance(decoded, GroupMetadataRecord):
                fresh.service.replay(decoded, 0)
            elif isinstance(decoded, ConsumerGroupRecord):
                fresh.service.consumer.replay(decoded, 0)
        fresh.service.consumer.finish_replay(0)
        live_consumer = self.ctx.service.consumer.group("g")
        rebuilt_consumer = fresh.service.consumer.group("g")
        if live_consumer is not None and live_consumer.exists:
            assert rebuilt_consumer is not None
            assert rebuilt_consumer.members == live_consumer.members
            assert rebuilt_consumer.target == live_consumer.target
            assert rebuilt_consumer.group_epoch == live_consumer.group_epoch
            assert rebuilt_consumer.assignment_epoch == live_consumer.assignment_epoch
            assert fresh.service.group("g") is None
        if self.ctx.service.group("g") is not None:
            # A classic group is persisted at the end of each rebalance: the log has the last
            # durable one.
            durable = self.ctx.service.durable_view().get("g")
            rebuilt = fresh.service.group("g")
            assert (rebuilt is None) == (durable is None)
            if rebuilt is not None and durable is not None:
                assert rebuilt.generation_id == durable.generation
                assert set(rebuilt.members) == {m.member_id for m in durable.members}
                assert rebuilt_consumer is None


TestMigration = MigrationMachine.TestCase
TestMigration.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
