"""kafka-go 0.2.1, the seeds' Go client, as a group consumer: each consumer its own process
(`workers/kafkago`, built once per session, offline, against Debian's package).

kafka-go 0.2.1 opens a new connection to the coordinator for each JoinGroup, SyncGroup and
OffsetFetch and closes it right after; it heartbeats and commits on another connection, whose
first heartbeat comes one heartbeat interval after the SyncGroup. Every consumer keeps kafka-go's
default client id, so all of them look alike to the broker. Member removals are counted by
cause from the broker's journal: without a crash there must be no `disconnect` removal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.bench.kafkago_failover import (
    DEFAULTS,
    FAST,
    Timing,
    kafkago_consumers,
    removals_by_cause,
    run_scenario,
)
from tests.broker_process import BrokerProcess
from tests.integration.group_workers import (
    JOIN_TIMEOUT_S,
    ConsumerWorker,
    create_topic,
    exact_split,
    group_events,
    produce,
    settled,
    wait_until,
)
from tests.integration.kafkago import KafkaGoWorker, WorkerBuildError, build_worker

pytestmark = pytest.mark.integration

PARTITIONS = 4


@pytest.fixture(scope="session")
def kafkago_worker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return build_worker(tmp_path_factory.mktemp("kafkago"),
                            cache_dir=tmp_path_factory.getbasetemp() / "go-cache")
    except WorkerBuildError as exc:
        pytest.skip(f"kafka-go worker not built: {exc}")


@pytest.fixture
def spawn(broker: BrokerProcess, kafkago_worker: Path, tmp_path: Path,
          ) -> Iterator[Callable[..., KafkaGoWorker]]:
    """Start kafka-go workers against `broker`; every one still running at the end is killed."""
    started: list[KafkaGoWorker] = []

    def start(topic: str, group: str, name: str, **options: object) -> KafkaGoWorker:
        worker = KafkaGoWorker(kafkago_worker, broker.bootstrap, topic, group, name, tmp_path,
                               **options)
        started.append(worker)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.reap()


def _removals(broker: BrokerProcess, group: str) -> dict[str, int]:
    return removals_by_cause(group_events(broker, group, "member_removed"))


def _committed_everything(workers: list[KafkaGoWorker], per_partition: int) -> bool:
    offsets: dict[int, int] = {}
    for worker in workers:
        for partition, offset in worker.committed_offsets().items():
            offsets[partition] = max(offset, offsets.get(partition, 0))
    return offsets == {p: per_partition for p in range(PARTITIONS)}


def _broker_committed(broker: BrokerProcess, topic: str, group: str) -> dict[int, int]:
    """The group's committed offsets as the broker answers OffsetFetch (no member joins)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def _close_without_leave_group(broker: BrokerProcess, group: str,
                               workers: list[KafkaGoWorker]) -> None:
    """kafka-go 0.2.1's `Reader.Close` sends no LeaveGroup: it cancels the reader's context
    first, then dials the coordinator for the LeaveGroup with that cancelled context. To the
    broker a closed kafka-go consumer is one whose connections closed without LeaveGroup: it is
    removed for the disconnect, a grace after the close (Kafka: a session later). A member that
    was told to rejoin (the first removal started a rebalance) just before its close is, as
    kafka-go closes that connection on purpose to rejoin: its session expiry removes it."""
    for worker in workers:
        worker.close()
    wait_until(lambda: bool(group_events(broker, group, "group_empty")), 10,
               "the closed members to be removed", broker=broker)
    removed = [e["cause"] for e in group_events(broker, group, "member_removed")]
    assert len(removed) == len(workers) and removed[0] == "disconnect", removed
    assert set(removed) <= {"disconnect", "session_expiry"}, removed


def test_one_member_consumes_and_commits_everything(
        broker: BrokerProcess, spawn: Callable[..., KafkaGoWorker]) -> None:
    topic, group = "kg-one", "kg-one"
    create_topic(broker, topic, PARTITIONS)
    produce(broker, topic, [f"a{i}" for i in range(100)], PARTITIONS)
    # kafka-go's defaults: the first heartbeat comes 3 s after the SyncGroup, on a connection
    # opened after the join's and sync's were closed.
    worker = spawn(topic, group, "one")
    wait_until(lambda: len(set(worker.values())) == 100 and _committed_everything([worker], 25),
               JOIN_TIMEOUT_S, "the member to consume and commit the first 100", [worker],
               broker)
    # Two heartbeat intervals on: still the same member, in its first generation.
    time.sleep(2 * DEFAULTS.heartbeat_s + 1)
    produce(broker, topic, [f"b{i}" for i in range(100)], PARTITIONS)
    wait_until(lambda: len(set(worker.values())) == 200 and _committed_everything([worker], 50),
               JOIN_TIMEOUT_S, "the member to consume and commit the next 100", [worker],
               broker)
    assert _broker_committed(broker, topic, group) == {p: 50 for p in range(PARTITIONS)}
    assert _removals(broker, group) == {}, group_events(broker, group, "member_removed")
    assert len(worker.member_ids()) == 1, worker.of("joined")
    assert len(group_events(broker, group, "rebalance_started")) == 1
    _close_without_leave_group(broker, group, [worker])


def test_two_members_split_the_partitions_and_both_commit(
        broker: BrokerProcess, spawn: Callable[..., KafkaGoWorker]) -> None:
    topic, group = "kg-two", "kg-two"
    create_topic(broker, topic, PARTITIONS)
    timing = {"session_ms": FAST.session_ms, "heartbeat_ms": FAST.heartbeat_ms}
    workers = [spawn(topic, group, "first", **timing), spawn(topic, group, "second", **timing)]
    members: list[ConsumerWorker] = list(workers)
    wait_until(settled(broker, group, members, PARTITIONS), JOIN_TIMEOUT_S,
               "the two members to split the topic", workers, broker)
    produce(broker, topic, [f"v{i}" for i in range(200)], PARTITIONS)
    wait_until(lambda: len({v for w in workers for v in w.values()}) == 200
               and _committed_everything(workers, 50), JOIN_TIMEOUT_S,
               "both members to consume and commit everything", workers, broker)
    assert exact_split(workers, PARTITIONS)
    for worker in workers:
        owned = worker.assignment
        assert owned and set(worker.committed_offsets()) >= owned, worker.describe()
    # A few heartbeats later the group has not moved.
    time.sleep(3 * FAST.heartbeat_s)
    assert _broker_committed(broker, topic, group) == {p: 50 for p in range(PARTITIONS)}
    assert _removals(broker, group) == {}, group_events(broker, group, "member_removed")
    _close_without_leave_group(broker, group, workers)


@pytest.mark.parametrize("timing", [DEFAULTS, FAST], ids=["defaults", "6s-1s"])
def test_the_seeds_scenario_sigkill_one_of_two_and_start_a_replacement(
        broker: BrokerProcess, kafkago_worker: Path, tmp_path: Path, timing: Timing) -> None:
    """20 partitions, 100 records/s, two consumers; one is SIGKILLed and replaced."""
    # Before the kill: two heartbeat intervals and more of steady consumption.
    outcome = run_scenario(broker, kafkago_consumers(broker, kafkago_worker, tmp_path, timing),
                           timing, steady_s=2 * timing.heartbeat_s + 1, min_window_s=6.0)
    assert not outcome.error, outcome.error
    assert outcome.removals_before_kill.get("disconnect", 0) == 0, outcome
    assert outcome.live_member_disconnects == 0, outcome
    assert outcome.lost == 0, outcome
    # The killed member goes for its closed connection, not a session later.
    assert outcome.victim_removed_by == "disconnect", outcome
    assert outcome.removals_after_kill == {"disconnect": 1}, outcome
    assert outcome.delay_s is not None and outcome.delay_s < timing.session_s, outcome
