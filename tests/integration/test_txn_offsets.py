"""Offsets committed inside transactions (KIP-447) with confluent-kafka against a real broker
process: a consume-transform-produce loop's group offsets advance on commit, stay on abort, and
a restart (clean or killed) keeps exactly the committed ones."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

INPUT = "in"
OUTPUT = "out"
GROUP = "ctp"


def journal_records(process: BrokerProcess) -> list[dict[str, Any]]:
    journal = process.data_dir / "events"
    paths = [*sorted(journal.glob("events-*.jsonl")), journal / ".events-active.jsonl"]
    return [json.loads(line) for path in paths if path.exists()
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        yield process
    finally:
        process.stop()


def prepare(bootstrap: str, records: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
            [NewTopic(t, num_partitions=1, replication_factor=1) for t in (INPUT, OUTPUT)]
    ).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(INPUT, value=f"r{i}".encode(), partition=0)
    producer.flush(10)


def app_consumer(bootstrap: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([INPUT])
    return consumer


def app_producer(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ctp-app",
                         "transaction.timeout.ms": 10_000})
    producer.init_transactions(15)
    return producer


def transform(consumer: Consumer, producer: Producer, count: int, commit: bool) -> None:
    """Read `count` input records, write one output each and the consumer's position, all in
    one transaction; commit or abort it."""
    read: list[Message] = []
    while len(read) < count:
        message = consumer.poll(1.0)
        if message is None:
            continue
        assert message.error() is None, message.error()
        read.append(message)
    producer.begin_transaction()
    for message in read:
        producer.produce(OUTPUT, value=message.value(), partition=0)
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 15)
    if commit:
        producer.commit_transaction(15)
    else:
        producer.abort_transaction(15)


def committed_offset(bootstrap: str) -> int:
    """The group's committed offset of the input, as a stable read (require_stable) sees it."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                       "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        [tp] = reader.committed([TopicPartition(INPUT, 0)], timeout=15)
        return tp.offset
    finally:
        reader.close()


def test_committed_transactions_advance_the_group_offsets_aborted_ones_do_not(
        broker: BrokerProcess) -> None:
    prepare(broker.bootstrap, 6)
    consumer = app_consumer(broker.bootstrap)
    producer = app_producer(broker.bootstrap)
    try:
        transform(consumer, producer, 2, commit=True)
        assert committed_offset(broker.bootstrap) == 2
        transform(consumer, producer, 2, commit=False)
        assert committed_offset(broker.bootstrap) == 2
    finally:
        consumer.close()


def test_an_open_transaction_s_offsets_are_unstable_until_it_commits(
        broker: BrokerProcess) -> None:
    prepare(broker.bootstrap, 4)
    consumer = app_consumer(broker.bootstrap)
    producer = app_producer(broker.bootstrap)
    try:
        while consumer.poll(1.0) is None or not consumer.assignment():
            pass
        producer.begin_transaction()
        producer.produce(OUTPUT, value=b"x", partition=0)
        producer.send_offsets_to_transaction([TopicPartition(INPUT, 0, 1)],
                                             consumer.consumer_group_metadata(), 15)
        # librdkafka retries UNSTABLE_OFFSET_COMMIT until its timeout, then fails.
        reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                           "isolation.level": "read_committed"})
        try:
            with pytest.raises(KafkaException):
                reader.committed([TopicPartition(INPUT, 0)], timeout=2)
        finally:
            reader.close()
        producer.commit_transaction(15)
        assert committed_offset(broker.bootstrap) == 1
    finally:
        consumer.close()


@pytest.mark.parametrize("killed", [False, True])
def test_a_restart_keeps_exactly_the_committed_offsets(tmp_path: Path, killed: bool) -> None:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        prepare(process.bootstrap, 6)
        consumer = app_consumer(process.bootstrap)
        producer = app_producer(process.bootstrap)
        transform(consumer, producer, 3, commit=True)
        transform(consumer, producer, 2, commit=False)
        consumer.close()
    finally:
        if killed:
            process.kill()
        else:
            process.stop()
    restarted = BrokerProcess(tmp_path / "data", port=process.port).start()
    try:
        assert committed_offset(restarted.bootstrap) == 3
        consumer = app_consumer(restarted.bootstrap)
        producer = app_producer(restarted.bootstrap)
        try:
            transform(consumer, producer, 3, commit=True)  # resumes at 3: records 3, 4, 5
        finally:
            consumer.close()
        assert committed_offset(restarted.bootstrap) == 6
    finally:
        restarted.stop()


def stalled_offsets(bootstrap: str, consumer: Consumer, offset: int) -> Producer:
    """A producer that sends offsets in a transaction and never ends it (timeout 1 s)."""
    stalled = Producer({"bootstrap.servers": bootstrap, "transactional.id": "stalled",
                        "transaction.timeout.ms": 1000})
    stalled.init_transactions(15)
    stalled.begin_transaction()
    stalled.produce(OUTPUT, value=b"never", partition=0)
    stalled.send_offsets_to_transaction([TopicPartition(INPUT, 0, offset)],
                                        consumer.consumer_group_metadata(), 15)
    return stalled


def test_a_timed_out_transaction_s_offsets_are_dropped(broker: BrokerProcess) -> None:
    prepare(broker.bootstrap, 4)
    consumer = app_consumer(broker.bootstrap)
    try:
        transform(consumer, app_producer(broker.bootstrap), 1, commit=True)
        stalled = stalled_offsets(broker.bootstrap, consumer, 4)
        time.sleep(3)  # the broker aborts it: the group is not left unstable
        assert committed_offset(broker.bootstrap) == 1
        with pytest.raises(KafkaException):
            stalled.commit_transaction(15)
    finally:
        consumer.close()


def test_offsets_of_a_transaction_open_at_a_kill_stay_pending_then_are_aborted(
        tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        prepare(process.bootstrap, 4)
        consumer = app_consumer(process.bootstrap)
        transform(consumer, app_producer(process.bootstrap), 2, commit=True)
        stalled_offsets(process.bootstrap, consumer, 4)
    finally:
        process.kill()
    restarted = BrokerProcess(tmp_path / "data", port=process.port).start()
    try:
        time.sleep(3)  # past the open transaction's timeout: the restarted broker aborts it
        assert committed_offset(restarted.bootstrap) == 2
    finally:
        restarted.stop()
    # The transaction log names partitions, not groups: the end event of a transaction that
    # spanned the restart names its group from the offsets the group log replayed.
    aborted = [e for e in journal_records(restarted)
               if e.get("event_type") == "transaction_aborted"]
    assert [(e["reason"], e["group_ids"]) for e in aborted] == [("timeout", [GROUP])]


def test_a_kill_right_after_the_commit_is_answered_keeps_its_offsets_and_records(
        tmp_path: Path) -> None:
    """EndTxn is answered once the prepare record is durable; the markers and the completion
    come after it. A broker killed at once still has the transaction committed after restart:
    its offsets are the group's, and a read_committed consumer sees its records."""
    process = BrokerProcess(tmp_path / "data").start()
    try:
        prepare(process.bootstrap, 4)
        consumer = app_consumer(process.bootstrap)
        producer = app_producer(process.bootstrap)
        transform(consumer, producer, 3, commit=True)
    finally:
        process.kill()
    consumer.close()
    restarted = BrokerProcess(tmp_path / "data", port=process.port).start()
    try:
        assert committed_offset(restarted.bootstrap) == 3
        reader = Consumer({"bootstrap.servers": restarted.bootstrap, "group.id": "reader",
                           "enable.auto.commit": False, "auto.offset.reset": "earliest",
                           "isolation.level": "read_committed"})
        reader.assign([TopicPartition(OUTPUT, 0)])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 15
        try:
            while len(values) < 3 and time.monotonic() < deadline:
                message = reader.poll(0.5)
                if message is not None and message.error() is None:
                    values.append(message.value())
        finally:
            reader.close()
        assert values == [b"r0", b"r1", b"r2"]
    finally:
        restarted.stop()
