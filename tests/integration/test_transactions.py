"""Transactions with confluent-kafka against a real broker process: committed records reach a
read_committed consumer, aborted ones never do, and a restart keeps both true."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

TOPIC = "eos"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        yield process
    finally:
        process.stop()


def create_topic(bootstrap: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, num_partitions=partitions,
                                  replication_factor=1)])[TOPIC].result(10)


def transactional_producer(bootstrap: str, transactional_id: str = "app") -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 10_000})
    producer.init_transactions(15)
    return producer


def send_in_transaction(producer: Producer, values: list[str], commit: bool) -> None:
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value.encode(), partition=i % 2)
    producer.flush(10)
    if commit:
        producer.commit_transaction(15)
    else:
        producer.abort_transaction(15)


def consume_all(bootstrap: str, isolation: str, expect: int, idle_s: float = 2.0) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(2)])
    seen: list[str] = []
    deadline = time.monotonic() + 20
    quiet_until = None
    while time.monotonic() < deadline:
        messages = consumer.consume(100, timeout=0.5)
        for message in messages:
            assert message.error() is None, message.error()
            seen.append((message.value() or b"").decode())
        if len(seen) >= expect:
            quiet_until = quiet_until or time.monotonic() + idle_s
            if time.monotonic() >= quiet_until:
                break
    consumer.close()
    return sorted(seen)


def test_read_committed_sees_committed_records_and_never_aborted_ones(
        broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap)
    producer = transactional_producer(broker.bootstrap)
    send_in_transaction(producer, ["c1", "c2", "c3"], commit=True)
    send_in_transaction(producer, ["a1", "a2"], commit=False)
    send_in_transaction(producer, ["c4"], commit=True)
    committed = ["c1", "c2", "c3", "c4"]
    assert consume_all(broker.bootstrap, "read_committed", len(committed)) == committed
    # read_uncommitted is unchanged: it reads the aborted records too
    assert consume_all(broker.bootstrap, "read_uncommitted", 6) == sorted(
        [*committed, "a1", "a2"])


def test_an_open_transaction_holds_read_committed_at_its_start(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap)
    producer = transactional_producer(broker.bootstrap)
    send_in_transaction(producer, ["before"], commit=True)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"open", partition=0)
    producer.flush(10)
    assert consume_all(broker.bootstrap, "read_committed", 1) == ["before"]
    committed_reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso",
                                 "isolation.level": "read_committed"})
    uncommitted_reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "hw",
                                   "isolation.level": "read_uncommitted"})
    # ListOffsets: the last stable offset (the open transaction's first offset) vs the end
    assert committed_reader.get_watermark_offsets(TopicPartition(TOPIC, 0), 10)[1] == 2
    assert uncommitted_reader.get_watermark_offsets(TopicPartition(TOPIC, 0), 10)[1] == 3
    committed_reader.close()
    uncommitted_reader.close()
    producer.commit_transaction(15)
    assert consume_all(broker.bootstrap, "read_committed", 2) == ["before", "open"]


def test_a_new_producer_with_the_same_id_fences_the_old_and_aborts_its_transaction(
        broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap)
    old = transactional_producer(broker.bootstrap)
    old.begin_transaction()
    old.produce(TOPIC, value=b"zombie", partition=0)
    old.flush(10)
    new = transactional_producer(broker.bootstrap)
    with pytest.raises(KafkaException):
        old.commit_transaction(15)
    send_in_transaction(new, ["fresh"], commit=True)
    assert consume_all(broker.bootstrap, "read_committed", 1) == ["fresh"]


def test_a_restart_keeps_aborted_records_hidden_and_fences_by_epoch(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(process.bootstrap)
        producer = transactional_producer(process.bootstrap)
        send_in_transaction(producer, ["kept"], commit=True)
        send_in_transaction(producer, ["dropped"], commit=False)
    finally:
        process.stop()
    restarted = BrokerProcess(tmp_path / "data", port=process.port).start()
    try:
        assert consume_all(restarted.bootstrap, "read_committed", 1) == ["kept"]
        again = transactional_producer(restarted.bootstrap)
        send_in_transaction(again, ["after"], commit=True)
        assert consume_all(restarted.bootstrap, "read_committed", 2) == ["after", "kept"]
    finally:
        restarted.stop()


def test_a_transaction_past_its_timeout_is_aborted_by_the_broker(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap)
    stalled = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "stalled",
                        "transaction.timeout.ms": 1000})
    stalled.init_transactions(15)
    stalled.begin_transaction()
    stalled.produce(TOPIC, value=b"never", partition=0)
    stalled.flush(10)
    time.sleep(3)  # the broker aborts it: the last stable offset moves past its records
    later = transactional_producer(broker.bootstrap, "other")
    send_in_transaction(later, ["after"], commit=True)
    assert consume_all(broker.bootstrap, "read_committed", 1) == ["after"]
    with pytest.raises(KafkaException):
        stalled.commit_transaction(15)


def test_a_transaction_open_when_the_broker_is_killed_is_aborted_after_restart(
        tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(process.bootstrap)
        done = transactional_producer(process.bootstrap, "done")
        send_in_transaction(done, ["kept"], commit=True)
        stalled = Producer({"bootstrap.servers": process.bootstrap,
                            "transactional.id": "stalled", "transaction.timeout.ms": 2000})
        stalled.init_transactions(15)
        stalled.begin_transaction()
        stalled.produce(TOPIC, value=b"in-flight", partition=0)
        stalled.flush(10)
    finally:
        process.kill()
    restarted = BrokerProcess(tmp_path / "data", port=process.port).start()
    try:
        time.sleep(3)  # past the open transaction's timeout: the restarted broker aborts it
        later = transactional_producer(restarted.bootstrap, "later")
        send_in_transaction(later, ["after"], commit=True)
        assert consume_all(restarted.bootstrap, "read_committed", 2) == ["after", "kept"]
    finally:
        restarted.stop()
