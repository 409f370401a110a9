"""Random consumer group (KIP-848) histories against the reconciliation invariants.

Simulated clients behave as KIP-848 consumers: they join with epoch 0, heartbeat with the
epoch and the partitions of their last answer, give up what they are no longer assigned, leave
(dynamic or static), or go silent until their session expires; topics grow meanwhile.

Invariants after every step:
* no partition is held by two members (assigned or still being revoked), at the broker, and no
  two live clients believe they own the same partition;
* the group epoch never decreases, the target assignment epoch never passes it, and a
  member's epoch never decreases while it stays in the group;
* replaying every emitted record into a fresh coordinator rebuilds the live group;
* once every live member has heartbeaten a few times with nothing else happening, every
  partition of the subscribed topics is assigned and the group is Stable.
"""

from __future__ import annotations

import dataclasses
import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator.group.consumer.commands import ConsumerGroupHeartbeat
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.member import MemberState
from coordinator.group.consumer.reconciling_interval import reconciling_interval_ms
from coordinator.grouplog.records import ConsumerGroupRecord
from tests.consumer_helpers import beat, image, join
from tests.context import GroupTestContext

SLOTS = 5
TOPICS = ("a", "b")


class Client:
    def __init__(self, member_id: str, instance_id: str | None, topics: tuple[str, ...]) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.topics = topics
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}


class ConsumerGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = ConsumerGroupConfig(session_timeout_ms=10_000, max_size=4)
        self.ctx = GroupTestContext(consumer_config=self.config)
        self.partitions = {"a": 3, "b": 2}
        self.version = 1
        self.ctx.service.consumer.set_topic_image(image(self.partitions, self.version))
        self.clients: dict[int, Client] = {}
        self.ids = 0
        self.max_group_epoch = 0
        self.member_epochs: dict[str, int] = {}

    # -- helpers ----------------------------------------------------------------------------

    def group(self) -> ConsumerGroup | None:
        return self.ctx.service.consumer.group("g")

    def _answer(self, slot: int, reply: object) -> None:
        client = self.clients[slot]
        error = reply.error.value  # type: ignore[attr-defined]
        if error != 0:
            # Fenced, unknown, full...: the client drops everything and forgets its membership.
            del self.clients[slot]
            return
        client.epoch = reply.member_epoch  # type: ignore[attr-defined]
        # The interval: shorter exactly while the member waits for partitions others still own.
        group = self.group()
        member = None if group is None else group.members.get(client.member_id)
        waiting = member is not None and member.state is MemberState.UNRELEASED_PARTITIONS
        assert reply.heartbeat_interval_ms == (  # type: ignore[attr-defined]
            reconciling_interval_ms(self.config) if waiting else self.config.heartbeat_interval_ms)
        assignment = reply.assignment  # type: ignore[attr-defined]
        if assignment is not None:
            client.owned = dict(assignment)

    @staticmethod
    def _beat(client: Client) -> ConsumerGroupHeartbeat:
        return dataclasses.replace(beat(client.member_id, client.epoch,
                                        instance_id=client.instance_id),
                                   owned=dict(client.owned))

    # -- rules ------------------------------------------------------------------------------

    @precondition(lambda self: len(self.clients) < SLOTS)
    @rule(static=st.booleans(), topics=st.sampled_from([("a",), ("b",), ("a", "b")]),
          assignor=st.sampled_from([None, "uniform", "range"]))
    def join(self, static: bool, topics: tuple[str, ...], assignor: str | None) -> None:
        slot = next(s for s in range(SLOTS) if s not in self.clients)
        self.ids += 1
        member_id = f"m{self.ids}"
        instance = f"i{slot}" if static else None
        self.clients[slot] = Client(member_id, instance, topics)
        reply = self.ctx.send(join(member_id, topics, instance_id=instance,
                                   server_assignor=assignor))
        self._answer(slot, reply)

    @precondition(lambda self: bool(self.clients))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(sorted(self.clients)))
        client = self.clients[slot]
        self._answer(slot, self.ctx.send(self._beat(client)))

    @precondition(lambda self: bool(self.clients))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        slot = data.draw(st.sampled_from(sorted(self.clients)))
        client = self.clients.pop(slot)
        epoch = -2 if client.instance_id is not None and data.draw(st.booleans()) else -1
        self.ctx.send(beat(client.member_id, epoch, instance_id=client.instance_id))

    @precondition(lambda self: bool(self.clients))
    @rule(data=st.data())
    def go_silent(self, data: st.DataObject) -> None:
        """The client stops (a crash): its partitions are gone with it."""
        slot = data.draw(st.sampled_from(sorted(self.clients)))
        del self.clients[slot]

    @rule(ms=st.sampled_from([100, 3_000, 11_000]))
    def sleep(self, ms: int) -> None:
        self.ctx.sleep(ms)
        group = self.group()
        # Clients whose session the broker expired learn it on their next heartbeat.
        if group is not None:
            for slot, client in list(self.clients.items()):
                if client.member_id not in group.members:
                    del self.clients[slot]

    @rule(topic=st.sampled_from(TOPICS))
    def add_partition(self, topic: str) -> None:
        self.partitions[topic] += 1
        self.version += 1
        self.ctx.service.consumer.set_topic_image(image(self.partitions, self.version))

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def one_owner_per_partition(self) -> None:
        group = self.group()
        if group is None:
            return
        seen: set[tuple[uuid.UUID, int]] = set()
        for member in group.members.values():
            for held in (member.assigned, member.pending_revocation):
                for t, parts in held.items():
                    for p in parts:
                        assert (t, p) not in seen, f"{t}-{p} held twice"
                        seen.add((t, p))
        believed: set[tuple[uuid.UUID, int]] = set()
        for client in self.clients.values():
            for t, parts in client.owned.items():
                for p in parts:
                    assert (t, p) not in believed, f"two clients consume {t}-{p}"
                    believed.add((t, p))

    @invariant()
    def epochs_only_grow(self) -> None:
        group = self.group()
        if group is None:
            return
        assert group.group_epoch >= self.max_group_epoch
        assert group.assignment_epoch <= group.group_epoch
        self.max_group_epoch = group.group_epoch
        for member_id, member in group.members.items():
            if member.member_epoch >= 0:
                assert member.member_epoch >= self.member_epochs.get(member_id, 0)
                self.member_epochs[member_id] = member.member_epoch

    @invariant()
    def replay_rebuilds_the_group(self) -> None:
        live = self.group()
        if live is None:
            return
        fresh = GroupTestContext(consumer_config=self.config)
        for record in self.ctx.records:
            if isinstance(record, ConsumerGroupRecord):
                fresh.service.consumer.replay(record, 0)
        rebuilt = fresh.service.consumer.group("g")
        assert rebuilt is not None
        assert rebuilt.members == live.members
        assert rebuilt.target == live.target
        assert rebuilt.owners == live.owners
        assert rebuilt.group_epoch == live.group_epoch
        assert rebuilt.assignment_epoch == live.assignment_epoch
        assert rebuilt.subscription_metadata == live.subscription_metadata

    def teardown(self) -> None:
        """Every live member heartbeats until nothing changes: all assigned, Stable."""
        group = self.group()
        if group is None or not self.clients:
            return
        for _ in range(6):
            for slot in sorted(self.clients):
                if slot in self.clients:
                    client = self.clients[slot]
                    self._answer(slot, self.ctx.send(self._beat(client)))
        self.one_owner_per_partition()
        live = {c.member_id for c in self.clients.values()}
        if set(group.members) != live:
            return  # static members released with -2 still hold their partitions
        subscribed = {t for c in self.clients.values() for t in c.topics}
        wanted = {(group.subscription_metadata[t].topic_id, p)
                  for t in subscribed for p in range(self.partitions[t])}
        owned = {(t, p) for c in self.clients.values() for t, ps in c.owned.items() for p in ps}
        assert owned == wanted
        assert group.state.value == "Stable"


ConsumerGroupMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                                  deadline=None)
TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
