"""Deleting a topic deletes its committed offsets from every group, durably, as Kafka does: a
topic created again under the same name starts from the group's reset policy, also after the
broker restarts. Stock clients (confluent-kafka) against the real broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

TOPIC, KEPT = "orders", "kept"


def _create(admin: AdminClient, name: str) -> None:
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def _produce(bootstrap: str, topic: str, prefix: bytes, count: int = 10) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, prefix + b"-%d" % i, partition=0)
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     "session.timeout.ms": 6000})


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = _consumer(bootstrap, group)
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = _consumer(bootstrap, group)
    try:
        [found] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert found.error is None
        return int(found.offset)
    finally:
        consumer.close()


def _first_record(bootstrap: str, group: str, topic: str) -> tuple[int | None, bytes | None]:
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                return message.offset(), message.value()
        raise AssertionError("nothing consumed")
    finally:
        consumer.close()


def test_a_re_created_topic_starts_from_the_reset_policy_also_after_a_restart(
        tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        bootstrap = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for name in (TOPIC, KEPT):
            _create(admin, name)
            _produce(bootstrap, name, b"old")
        _commit(bootstrap, "billing", TOPIC, 5)
        _commit(bootstrap, "audit", TOPIC, 7)
        _commit(bootstrap, "billing", KEPT, 3)
        assert _committed(bootstrap, "billing", TOPIC) == 5

        admin.delete_topics([TOPIC])[TOPIC].result(30)
        _create(admin, TOPIC)
        _produce(bootstrap, TOPIC, b"new")

        # OffsetFetch answers -1 (librdkafka's OFFSET_INVALID) for every group ...
        assert _committed(bootstrap, "billing", TOPIC) == OFFSET_INVALID
        assert _committed(bootstrap, "audit", TOPIC) == OFFSET_INVALID
        # ... the other topic's offsets stay ...
        assert _committed(bootstrap, "billing", KEPT) == 3
        # ... and a member reads the new topic from the start (auto.offset.reset=earliest),
        # not from the deleted topic's offset 5.
        assert _first_record(bootstrap, "billing", TOPIC) == (0, b"new-0")

        # The tombstones were durable before DeleteTopics was answered: a crash keeps them.
        broker.kill()
        broker.start()
        assert _committed(bootstrap, "billing", TOPIC) == OFFSET_INVALID
        assert _committed(bootstrap, "audit", TOPIC) == OFFSET_INVALID
        assert _committed(bootstrap, "billing", KEPT) == 3
    finally:
        broker.stop()
