"""Stock-client checks against an already running broker named by REBALANCED_BOOTSTRAP.

This is what the docker compose file runs; without the variable the tests are skipped (the rest
of the integration suite starts its own broker).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

BOOTSTRAP = os.environ.get("REBALANCED_BOOTSTRAP")
pytestmark = pytest.mark.skipif(not BOOTSTRAP, reason="REBALANCED_BOOTSTRAP is not set")


def _topic() -> str:
    return f"compose-{uuid.uuid4().hex[:8]}"


def test_confluent_group_consumes_what_was_produced() -> None:
    from confluent_kafka import Consumer, Producer

    topic = _topic()
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    for i in range(100):
        producer.produce(topic, str(i).encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < 100 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            got.append(int(message.value() or b""))
    consumer.close()
    assert sorted(got) == list(range(100))


def test_kafka_python_group_consumes() -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = _topic()
    producer = KafkaProducer(bootstrap_servers=BOOTSTRAP)
    for i in range(50):
        producer.send(topic, str(i).encode())
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, group_id=topic,
                             auto_offset_reset="earliest")
    deadline = time.monotonic() + 60
    # Know the topic's partitions before the first join: kafka-python 3.0.12 can otherwise
    # abandon the rejoin it starts when they arrive (see workers/group_consumer.py).
    while topic not in consumer.topics():
        assert time.monotonic() < deadline, f"no metadata for {topic}"
        time.sleep(0.1)
    got = 0
    while got < 50 and time.monotonic() < deadline:
        got += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
    consumer.close()
    assert got == 50


def test_aiokafka_group_consumes() -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic()

    async def run() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP)
        await producer.start()
        for i in range(50):
            await producer.send_and_wait(topic, str(i).encode())
        await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, group_id=topic,
                                    auto_offset_reset="earliest")
        await consumer.start()
        got = 0
        deadline = time.monotonic() + 60
        try:
            while got < 50 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got += sum(len(r) for r in batches.values())
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == 50
