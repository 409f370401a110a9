"""The consumer group protocol (KIP-848) with confluent-kafka `group.protocol=consumer`.

Each consumer runs in its own process (`workers/group_consumer.py`). The broker hands out a 6 s
session timeout and a 500 ms heartbeat interval (its `group.consumer.*` bounds lowered for
that). Outcomes are checked in what the consumers report from their callbacks and in the
broker's event journal.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.integration.group_workers import (
    ConsumerWorker,
    exact_split,
    group_events,
    produce,
    wait_until,
    worker_pool,
)
from tests.integration.group_workers import create_topic as make_topic

PARTITIONS = 6
TOPIC = "events"
GROUP = "modern"
TIMEOUT_S = 45.0  # hang detector only

CONSUMER_GROUP_SETTINGS = {
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "100",
}

pytestmark = pytest.mark.integration


@pytest.fixture
def modern_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", settings=CONSUMER_GROUP_SETTINGS).start()
    try:
        make_topic(process, TOPIC, PARTITIONS)
        yield process
    finally:
        process.stop()


def spawn_modern(spawn: object, name: str, **options: object) -> ConsumerWorker:
    return spawn("confluent", options.pop("topic", TOPIC), GROUP, name,  # type: ignore[operator]
                 group_protocol="consumer", **options)


def split(workers: list[ConsumerWorker]) -> object:
    return lambda: exact_split(workers, PARTITIONS)


def test_two_then_three_members_split_and_a_sigkilled_one_is_taken_over(
        modern_broker: BrokerProcess, tmp_path: Path) -> None:
    broker = modern_broker
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn_modern(spawn, f"m{i}") for i in range(2)]
        wait_until(split(workers), TIMEOUT_S, "two members to split", workers, broker)  # type: ignore[arg-type]
        first_shares = {w.name: w.assignment for w in workers}

        workers.append(spawn_modern(spawn, "m2"))
        wait_until(split(workers), TIMEOUT_S, "three members to split", workers, broker)  # type: ignore[arg-type]
        # Incremental, no stop-the-world: the first two members only gave up what moved to the
        # newcomer; the partitions they kept were never revoked, so they never stopped.
        for w in workers[:2]:
            kept = w.assignment
            assert kept is not None and kept <= first_shares[w.name]  # type: ignore[operator]
            revoked = {p for r in w.of("revoked") for p in r["partitions"]}
            assert not revoked & kept, (w.name, revoked, kept)
            assert not w.of("lost")

        victim = workers.pop(1)
        victim.kill()
        wait_until(split(workers), TIMEOUT_S, "the survivors to take over", workers, broker)  # type: ignore[arg-type]
    # The journal is flushed every 100 ms.
    wait_until(lambda: bool(group_events(broker, GROUP, "member_removed")), 10, "the journal")
    removed = group_events(broker, GROUP, "member_removed")
    # The killed process's connection closed: fenced after the disconnect grace.
    assert [e["cause"] for e in removed] == ["disconnect"]
    assert group_events(broker, GROUP, "target_assignment_computed")
    assert all(e.get("group_type") == "consumer"
               for e in group_events(broker, GROUP, "member_reconciled"))


def test_graceful_close_leaves_at_once(modern_broker: BrokerProcess, tmp_path: Path) -> None:
    broker = modern_broker
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn_modern(spawn, f"m{i}") for i in range(2)]
        wait_until(split(workers), TIMEOUT_S, "two members to split", workers, broker)  # type: ignore[arg-type]
        workers.pop().close()
        wait_until(split(workers), TIMEOUT_S, "the survivor to own everything", workers, broker)  # type: ignore[arg-type]
    wait_until(lambda: bool(group_events(broker, GROUP, "member_removed")), 10, "the journal")
    assert [e["cause"] for e in group_events(broker, GROUP, "member_removed")] == ["leave"]


def test_static_member_restarts_into_its_own_partitions(
        modern_broker: BrokerProcess, tmp_path: Path) -> None:
    broker = modern_broker
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn_modern(spawn, f"s{i}", instance_id=f"instance-{i}") for i in range(2)]
        wait_until(split(workers), TIMEOUT_S, "two static members to split", workers, broker)  # type: ignore[arg-type]
        before = workers[1].assignment
        epochs = len(group_events(broker, GROUP, "target_assignment_computed"))
        workers.pop().close()  # a static member leaves with epoch -2: its partitions wait
        again = spawn_modern(spawn, "s1-again", instance_id="instance-1")
        workers.append(again)
        wait_until(split(workers), TIMEOUT_S, "the static member to come back", workers, broker)  # type: ignore[arg-type]
        assert again.assignment == before
    wait_until(lambda: bool(group_events(broker, GROUP, "static_member_replaced")), 10,
               "the journal")
    replaced = group_events(broker, GROUP, "static_member_replaced")
    assert [r["rebalance"] for r in replaced] == [False]
    assert len(group_events(broker, GROUP, "target_assignment_computed")) == epochs
    assert not group_events(broker, GROUP, "member_removed")


def test_commits_and_the_group_survive_a_broker_restart(
        modern_broker: BrokerProcess, tmp_path: Path) -> None:
    broker = modern_broker
    produce(broker, TOPIC, [f"a{i}" for i in range(30)], PARTITIONS)
    with worker_pool(broker, tmp_path) as spawn:
        workers = [spawn_modern(spawn, f"m{i}") for i in range(2)]
        wait_until(split(workers), TIMEOUT_S, "two members to split", workers, broker)  # type: ignore[arg-type]
        # At least once: a partition handed over before a commit is read again by its new owner.
        def seen() -> set[str]:
            return {v for w in workers for v in w.values()}

        def read_own_partitions() -> bool:
            # A commit needs a position: each member must have read from what it now owns.
            return all(w.assignment is not None and w.assignment <= {
                m["partition"] for m in w.of("message")} for w in workers)

        wait_until(lambda: len(seen()) == 30 and read_own_partitions(), TIMEOUT_S,
                   "every record consumed", workers, broker)
        for w in workers:
            w.commit()
        shares = [w.assignment for w in workers]
        broker.stop()
        broker.start()
        # The members carry on: same epochs, same partitions, no rejoin.
        produce(broker, TOPIC, [f"b{i}" for i in range(12)], PARTITIONS)
        wait_until(lambda: len(seen()) == 42, TIMEOUT_S,
                   "the new records consumed after the restart", workers, broker)
        assert [w.assignment for w in workers] == shares
        assert not any(w.of("lost") for w in workers)
        # Every member commits before any leaves: a leave bumps the others' epochs, and a commit
        # sent with the epoch from before that heartbeat is STALE_MEMBER_EPOCH, as on Kafka.
        for w in workers:
            w.commit()
        for w in workers:
            w.close()
        # A fresh member resumes from the commits: it sees nothing already consumed.
        fresh = spawn_modern(spawn, "fresh")
        wait_until(split([fresh]), TIMEOUT_S, "a fresh member to own everything", [fresh], broker)  # type: ignore[arg-type]
        produce(broker, TOPIC, ["c0"], PARTITIONS)
        wait_until(lambda: fresh.values() == ["c0"], TIMEOUT_S, "only the new record", [fresh],
                   broker)
    assert not [e for e in group_events(broker, GROUP, "member_removed")
                if e["cause"] != "leave"]


def test_a_regex_subscription_picks_up_a_new_topic(
        modern_broker: BrokerProcess, tmp_path: Path) -> None:
    broker = modern_broker
    with worker_pool(broker, tmp_path) as spawn:
        worker = spawn_modern(spawn, "regex", topic="^ev.*")
        wait_until(split([worker]), TIMEOUT_S, "the regex member to own events", [worker], broker)  # type: ignore[arg-type]
        make_topic(broker, "evolved", 1)
        produce(broker, "evolved", ["new"], 1)
        wait_until(lambda: "new" in worker.values(), TIMEOUT_S,
                   "a record of the newly created topic", [worker], broker)
