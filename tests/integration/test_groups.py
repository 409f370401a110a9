"""The classic group protocol with the stock clients, each consumer in its own process.

Every test uses its own broker (`group.initial.rebalance.delay.ms` 0), a 6-partition topic and
consumers with a 6 s session timeout (the broker minimum) and sub-second heartbeats. Outcomes
are checked twice: what the consumers report from their rebalance callbacks, and what the
broker wrote to its event journal.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator.testkit.process import RebalancedBroker
from tests.broker_process import BrokerProcess
from tests.integration.group_workers import (
    CLIENTS,
    JOIN_TIMEOUT_S,
    AnyBroker,
    ConsumerWorker,
    group_events,
    produce,
    settled,
    stable_with,
    wait_until,
    worker_pool,
)
from tests.integration.group_workers import create_topic as make_topic

PARTITIONS = 6
TOPIC = "events"
GROUP = "workers"

# The assignment each eager strategy computes for one 6-partition topic, as a set of shares.
EXPECTED_SHARES = {
    ("range", 2): {frozenset({0, 1, 2}), frozenset({3, 4, 5})},
    ("range", 3): {frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 5})},
    ("roundrobin", 2): {frozenset({0, 2, 4}), frozenset({1, 3, 5})},
    ("roundrobin", 3): {frozenset({0, 3}), frozenset({1, 4}), frozenset({2, 5})},
}

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(broker: BrokerProcess) -> str:
    make_topic(broker, TOPIC, PARTITIONS)
    return TOPIC


def last_generation(broker: AnyBroker, group: str) -> int:
    joins = group_events(broker, group, "join_completed")
    assert joins, "the group never completed a join"
    return int(joins[-1]["generation"])


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
@pytest.mark.parametrize("client", CLIENTS)
def test_two_then_three_consumers_split_the_partitions(
        broker: BrokerProcess, topic: str, tmp_path: Path, client: str, strategy: str) -> None:
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn(client, topic, GROUP, f"{client}-{i}", strategy=strategy)
                   for i in range(2)]
        wait_until(settled(broker, GROUP, workers, PARTITIONS), JOIN_TIMEOUT_S,
                   "two consumers to split the topic", workers, broker)
        assert {w.assignment for w in workers} == EXPECTED_SHARES[(strategy, 2)]

        workers.append(spawn(client, topic, GROUP, f"{client}-2", strategy=strategy))
        wait_until(settled(broker, GROUP, workers, PARTITIONS), JOIN_TIMEOUT_S,
                   "three consumers to split the topic", workers, broker)
        assert {w.assignment for w in workers} == EXPECTED_SHARES[(strategy, 3)]

    joins = group_events(broker, GROUP, "join_completed")
    assert {j["protocol_name"] for j in joins} == {strategy}


def test_three_client_libraries_share_one_group(
        broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn(client, topic, GROUP, client, strategy="range") for client in CLIENTS]
        wait_until(settled(broker, GROUP, workers, PARTITIONS), JOIN_TIMEOUT_S,
                   "three client libraries to split the topic", workers, broker)
        assert {w.assignment for w in workers} == EXPECTED_SHARES[("range", 3)]


def leader_of(broker: BrokerProcess, group: str, workers: list[ConsumerWorker]
              ) -> ConsumerWorker:
    """The worker leading the current generation.

    Member ids start with the group.instance.id of a static member, else with the client.id.
    """
    leader_id = group_events(broker, group, "join_completed")[-1]["leader_id"]
    found = [w for w in workers if leader_id.startswith(f"{w.instance_id or w.name}-")]
    assert len(found) == 1, (leader_id, [w.name for w in workers])
    return found[0]


# A session timeout far longer than the take-over wait: only the disconnect rule can be that
# quick (group.member.disconnect.grace.ms, 1 s by default).
KILLED_SESSION_MS = 30_000
TAKE_OVER_WAIT_S = 20.0


@pytest.mark.parametrize("client", CLIENTS)
def test_killed_leader_is_removed_on_disconnect_and_survivors_take_over(
        broker: BrokerProcess, topic: str, tmp_path: Path, client: str) -> None:
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn(client, topic, GROUP, f"{client}-{i}", session_ms=KILLED_SESSION_MS)
                   for i in range(3)]
        wait_until(settled(broker, GROUP, workers, PARTITIONS), JOIN_TIMEOUT_S,
                   "three consumers to split the topic", workers, broker)
        victim = leader_of(broker, GROUP, workers)
        generation = last_generation(broker, GROUP)
        victim.kill()
        survivors = [w for w in workers if w is not victim]
        wait_until(settled(broker, GROUP, survivors, PARTITIONS), TAKE_OVER_WAIT_S,
                   "the survivors to take over the killed leader's partitions well before "
                   "the session timeout", survivors, broker)

    removed = group_events(broker, GROUP, "member_removed")
    assert [(e["client_id"], e["cause"], e["generation"]) for e in removed] == [
        (victim.name, "disconnect", generation)]
    new_leader = group_events(broker, GROUP, "join_completed")[-1]["leader_id"]
    assert not new_leader.startswith(f"{victim.name}-")


# A member that goes away has its session ended by the broker's virtual time (the test kit's
# `advance`); the member that stays has a far longer session, so its real heartbeats keep it in
# the group across the jump. The take-over wait is shorter than the ended session: only the
# jump can be that quick.
CLOSED_SESSION_MS = 20_000
STAYING_SESSION_MS = 300_000
SESSION_TAKE_OVER_WAIT_S = 15.0


def test_with_the_grace_off_a_killed_member_waits_for_its_session(tmp_path: Path) -> None:
    with RebalancedBroker(tmp_path / "kit",
                          settings={"group.member.disconnect.grace.ms": "-1"}) as broker, \
            worker_pool(broker, tmp_path) as spawn:
        make_topic(broker, TOPIC, PARTITIONS)
        workers = [spawn("confluent", TOPIC, GROUP, f"c-{i}", session_ms=session_ms)
                   for i, session_ms in enumerate((STAYING_SESSION_MS, CLOSED_SESSION_MS))]
        wait_until(settled(broker, GROUP, workers, PARTITIONS), JOIN_TIMEOUT_S,
                   "two consumers to split the topic", workers, broker)
        workers[1].kill()
        broker.control.advance(CLOSED_SESSION_MS)
        wait_until(settled(broker, GROUP, workers[:1], PARTITIONS), SESSION_TAKE_OVER_WAIT_S,
                   "the survivor to take over", workers[:1], broker)
        removed = group_events(broker, GROUP, "member_removed")
    assert [(e["client_id"], e["cause"]) for e in removed] == [("c-1", "session_expiry")]


# A session timeout far longer than the wait below: only the LeaveGroup path can be that quick.
LONG_SESSION_MS = 30_000
LEAVE_WAIT_S = 15.0


@pytest.mark.parametrize("client", CLIENTS)
def test_closed_consumer_leaves_and_survivors_rebalance_at_once(
        broker: BrokerProcess, topic: str, tmp_path: Path, client: str) -> None:
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn(client, topic, GROUP, f"{client}-{i}", session_ms=LONG_SESSION_MS)
                   for i in range(3)]
        wait_until(settled(broker, GROUP, workers, PARTITIONS), JOIN_TIMEOUT_S,
                   "three consumers to split the topic", workers, broker)
        leader = leader_of(broker, GROUP, workers)
        leaving = next(w for w in workers if w is not leader)
        leaving.close()
        survivors = [w for w in workers if w is not leaving]
        wait_until(settled(broker, GROUP, survivors, PARTITIONS), LEAVE_WAIT_S,
                   "the survivors to rebalance after a LeaveGroup", survivors, broker)

    removed = group_events(broker, GROUP, "member_removed")
    assert [(e["client_id"], e["cause"]) for e in removed] == [(leaving.name, "leave")]


@pytest.mark.parametrize("client", CLIENTS)
def test_static_leader_restarted_within_session_keeps_generation_and_partitions(
        broker: BrokerProcess, topic: str, tmp_path: Path, client: str) -> None:
    session_ms = 6000
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn(client, topic, GROUP, f"{client}-{i}", instance_id=f"instance-{i}",
                         session_ms=session_ms) for i in range(2)]
        wait_until(settled(broker, GROUP, workers, PARTITIONS), JOIN_TIMEOUT_S,
                   "two static members to split the topic", workers, broker)
        # The leader is the harder case: its replacement must not trigger a new assignment.
        leader = leader_of(broker, GROUP, workers)
        other = next(w for w in workers if w is not leader)
        leader_share, other_share = leader.assignment, other.assignment
        generation = last_generation(broker, GROUP)
        events_before = len(group_events(broker, GROUP))
        other_changes = len(other.of("assignment"))

        leader.kill()
        killed_at = time.monotonic()
        restarted = spawn(client, topic, GROUP, f"{leader.name}-restarted",
                          instance_id=leader.instance_id, session_ms=session_ms)
        wait_until(lambda: restarted.assignment is not None, JOIN_TIMEOUT_S,
                   "the restarted static member to get its assignment", [restarted], broker)
        # Outlive the old session: a stale session timer would rebalance the group now.
        time.sleep(max(0.0, killed_at + session_ms / 1000 + 1.0 - time.monotonic()))

        assert restarted.assignment == leader_share
        assert other.assignment == other_share
        assert len(other.of("assignment")) == other_changes, "the other was rebalanced"

    # The old member id is fenced and replaced in place; nothing else happens to the group.
    after = group_events(broker, GROUP)[events_before:]
    assert [(e["event_type"], e.get("cause"), e.get("rebalance")) for e in after] == [
        ("member_removed", "fenced", None), ("static_member_replaced", None, False)], after
    assert after[1]["group_instance_id"] == leader.instance_id
    assert after[1]["old_member_id"] == after[0]["member_id"]
    assert last_generation(broker, GROUP) == generation


@pytest.mark.parametrize("client", CLIENTS)
def test_closed_static_member_stays_until_its_session_expires(
        tmp_path: Path, client: str) -> None:
    # Static members do not send LeaveGroup on close (KIP-345): only the session ends them.
    with RebalancedBroker(tmp_path / "kit") as broker, \
            worker_pool(broker, tmp_path) as spawn:
        make_topic(broker, TOPIC, PARTITIONS)
        workers = [spawn(client, TOPIC, GROUP, f"{client}-{i}", instance_id=f"instance-{i}",
                         session_ms=session_ms)
                   for i, session_ms in enumerate((CLOSED_SESSION_MS, STAYING_SESSION_MS))]
        wait_until(settled(broker, GROUP, workers, PARTITIONS), JOIN_TIMEOUT_S,
                   "two static members to split the topic", workers, broker)
        generation = last_generation(broker, GROUP)
        workers[0].close()
        group = broker.control.group(GROUP)
        assert group is not None and len(group["members"]) == 2, group
        assert not group_events(broker, GROUP, "member_removed")

        broker.control.advance(CLOSED_SESSION_MS)
        wait_until(settled(broker, GROUP, workers[1:], PARTITIONS), SESSION_TAKE_OVER_WAIT_S,
                   "the other member to take over after the session expired", workers, broker)
        removed = group_events(broker, GROUP, "member_removed")

    assert [(e["group_instance_id"], e["cause"], e["generation"]) for e in removed] == [
        ("instance-0", "session_expiry", generation)]


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])  # aiokafka: eager only
def test_cooperative_sticky_revokes_only_the_moved_partitions(
        broker: BrokerProcess, topic: str, tmp_path: Path, client: str) -> None:
    strategy = "cooperative-sticky"
    with worker_pool(broker, tmp_path) as spawn:
        first = spawn(client, topic, GROUP, "first", strategy=strategy)
        wait_until(settled(broker, GROUP, [first], PARTITIONS), JOIN_TIMEOUT_S,
                   "the first consumer to own every partition", [first], broker)
        second = spawn(client, topic, GROUP, "second", strategy=strategy)
        wait_until(settled(broker, GROUP, [first, second], PARTITIONS), JOIN_TIMEOUT_S,
                   "two cooperative consumers to split the topic", [first, second], broker)

        kept, moved = first.assignment, second.assignment
        assert kept is not None and moved is not None and len(kept) == len(moved) == 3
        revoked = [p for r in first.of("revoked") for p in r["partitions"]]
        assert sorted(revoked) == sorted(moved), "only the moved partitions are revoked"
        assert len(first.of("assignment")) >= 2, "the first consumer was never told"
        # librdkafka calls on_assign after every rebalance, also with nothing added.
        added = [r["partitions"] for r in first.of("assigned") if r["partitions"]]
        assert added == [list(range(PARTITIONS))]
        assert not first.of("lost")
        assert not [p for r in second.of("revoked") for p in r["partitions"]]

        # The second leaves: its partitions come back to the first without any revocation.
        second.close()
        wait_until(settled(broker, GROUP, [first], PARTITIONS), LEAVE_WAIT_S,
                   "the first consumer to get the partitions back", [first], broker)
        assert [p for r in first.of("revoked") for p in r["partitions"]] == revoked
        added = [r["partitions"] for r in first.of("assigned") if r["partitions"]]
        assert added == [list(range(PARTITIONS)), sorted(moved)]

    joins = group_events(broker, GROUP, "join_completed")
    assert {j["protocol_name"] for j in joins} == {strategy}


def test_kafka_python_alone_converges_and_consumes(
        broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    # kafka-python joins before it has the topic's metadata: the first assignment is empty,
    # the leader then sees the partitions and rejoins.
    first_batch = [f"a{i}" for i in range(60)]
    produce(broker, topic, first_batch, PARTITIONS)
    with worker_pool(broker, tmp_path) as spawn:
        worker = spawn("kafka-python", topic, GROUP, "solo", cold_metadata=True)
        wait_until(lambda: settled(broker, GROUP, [worker], PARTITIONS)()
                   and len(worker.values()) >= len(first_batch), JOIN_TIMEOUT_S,
                   "the consumer to own every partition and read the backlog", [worker], broker)
        second_batch = [f"b{i}" for i in range(60)]
        produce(broker, topic, second_batch, PARTITIONS)
        wait_until(lambda: len(worker.values()) >= len(first_batch) + len(second_batch),
                   JOIN_TIMEOUT_S, "the consumer to read new messages", [worker], broker)
        assert sorted(worker.values()) == sorted(first_batch + second_batch)
        assert worker.assignment == frozenset(range(PARTITIONS))

    assert stable_with(broker, GROUP, 1)
    # At most the one extra rebalance, not a loop of them.
    assert 1 <= len(group_events(broker, GROUP, "join_completed")) <= 2


@pytest.mark.parametrize("client", CLIENTS)
def test_restarted_group_resumes_from_committed_offsets(
        broker: BrokerProcess, topic: str, tmp_path: Path, client: str) -> None:
    committed = [f"a{i}" for i in range(30)]
    uncommitted = [f"b{i}" for i in range(30)]
    produce(broker, topic, committed, PARTITIONS)
    with worker_pool(broker, tmp_path) as spawn:
        before = spawn(client, topic, GROUP, f"{client}-before")
        wait_until(lambda: len(before.values()) >= len(committed), JOIN_TIMEOUT_S,
                   "the first consumer to read the first batch", [before], broker)
        before.commit()
        produce(broker, topic, uncommitted, PARTITIONS)
        wait_until(lambda: len(before.values()) >= len(committed) + len(uncommitted),
                   JOIN_TIMEOUT_S, "the first consumer to read the second batch", [before],
                   broker)
        before.close()
        assert sorted(before.values()) == sorted(committed + uncommitted)

        after = spawn(client, topic, GROUP, f"{client}-after")
        wait_until(lambda: len(after.values()) >= len(uncommitted), JOIN_TIMEOUT_S,
                   "the restarted group to read past the commit", [after], broker)
        assert sorted(after.values()) == sorted(uncommitted)
        # Per partition, delivery starts exactly at the committed offset: 5 per partition.
        first_offsets: dict[int, int] = {}
        for m in after.of("message"):
            first_offsets.setdefault(m["partition"], m["offset"])
        assert first_offsets == dict.fromkeys(range(PARTITIONS), len(committed) // PARTITIONS)


def test_admin_client_lists_describes_and_deletes_groups(
        broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn(client, topic, GROUP, client) for client in CLIENTS]
        wait_until(settled(broker, GROUP, workers, PARTITIONS), JOIN_TIMEOUT_S,
                   "three consumers to split the topic", workers, broker)

        listed = admin.list_consumer_groups().result(10)
        assert not listed.errors
        by_id = {g.group_id: g for g in listed.valid}
        assert by_id[GROUP].state is ConsumerGroupState.STABLE
        assert not by_id[GROUP].is_simple_consumer_group
        only_empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(10)
        assert GROUP not in {g.group_id for g in only_empty.valid}

        described = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
        assert described.state is ConsumerGroupState.STABLE
        assert described.partition_assignor == "range"
        shares = {m.client_id: frozenset(tp.partition for tp in m.assignment.topic_partitions)
                  for m in described.members}
        assert {m.assignment.topic_partitions[0].topic for m in described.members} == {topic}
        assert shares == {w.name: w.assignment for w in workers}

        with pytest.raises(KafkaException) as refused:
            admin.delete_consumer_groups([GROUP])[GROUP].result(10)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

        for worker in workers:
            worker.close()

    wait_until(lambda: bool(group_events(broker, GROUP, "group_empty")), JOIN_TIMEOUT_S,
               "the group to become empty", broker=broker)
    described = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
    assert described.state is ConsumerGroupState.EMPTY and not described.members
    assert admin.delete_consumer_groups([GROUP])[GROUP].result(10) is None

    assert GROUP not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    try:
        gone = admin.describe_consumer_groups([GROUP])[GROUP].result(10)
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    else:
        assert gone.state is ConsumerGroupState.DEAD and not gone.members
    # The journal is flushed in batches, shortly after the replies.
    wait_until(lambda: bool(group_events(broker, GROUP, "group_dead")), JOIN_TIMEOUT_S,
               "the deletion in the event journal", broker=broker)
