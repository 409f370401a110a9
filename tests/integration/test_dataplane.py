"""The data plane with stock clients: produce, consume in assign() mode, long-poll, bad input."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

MESSAGES = 10_000


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)])
    futures[name].result(10)


def produce_numbered(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), key=str(i).encode(),
                         partition=i % partitions)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def expected_per_partition(count: int, partitions: int) -> dict[int, list[int]]:
    expected: dict[int, list[int]] = defaultdict(list)
    for i in range(count):
        expected[i % partitions].append(i)
    return expected


def consume_confluent(bootstrap: str, topic: str, partitions: int, count: int
                      ) -> dict[int, list[int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "assign-only",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[int, list[int]] = defaultdict(list)
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=1.0):
            assert message.error() is None, message.error()
            partition = message.partition()
            assert partition is not None
            seen[partition].append(int(message.value() or b""))
            got += 1
    consumer.close()
    return seen


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, count: int
                         ) -> dict[int, list[int]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    consumer.assign([KTP(topic, p) for p in range(partitions)])
    for p in range(partitions):
        consumer.seek(KTP(topic, p), 0)
    seen: dict[int, list[int]] = defaultdict(list)
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            for record in records:
                seen[tp.partition].append(int(record.value))
                got += 1
    consumer.close()
    return seen


def consume_aiokafka(bootstrap: str, topic: str, partitions: int, count: int
                     ) -> dict[int, list[int]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    async def run() -> dict[int, list[int]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([ATP(topic, p) for p in range(partitions)])
            for p in range(partitions):
                consumer.seek(ATP(topic, p), 0)
            seen: dict[int, list[int]] = defaultdict(list)
            got = 0
            deadline = time.monotonic() + 60
            while got < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=1000)
                for tp, records in batches.items():
                    for record in records:
                        seen[tp.partition].append(int(record.value))
                        got += 1
            return seen
        finally:
            await consumer.stop()

    return asyncio.run(run())


@pytest.mark.integration
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_ten_thousand_messages_round_trip_exactly_once_in_order(
        broker: BrokerProcess, client: str) -> None:
    create_topic(broker.bootstrap, "numbers", 3)
    produce_numbered(broker.bootstrap, "numbers", MESSAGES, 3)
    consume = {"confluent": consume_confluent, "kafka-python": consume_kafka_python,
               "aiokafka": consume_aiokafka}[client]
    seen = consume(broker.bootstrap, "numbers", 3, MESSAGES)
    assert dict(seen) == expected_per_partition(MESSAGES, 3)


@pytest.mark.integration
def test_waiting_consumer_is_woken_by_produce(broker: BrokerProcess) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    create_topic(broker.bootstrap, "wake", 1)
    # A 20 s max wait: if Produce did not wake the parked fetch, delivery would take ~20 s.
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_wait_ms=20_000,
                             enable_auto_commit=False)
    consumer.assign([KTP("wake", 0)])
    consumer.seek(KTP("wake", 0), 0)
    consumer.poll(timeout_ms=500)  # connect and park a fetch on the empty partition
    sent_at: list[float] = []

    def produce_later() -> None:
        time.sleep(1.0)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        sent_at.append(time.monotonic())
        producer.produce("wake", b"hello", partition=0)
        producer.flush(10)

    thread = threading.Thread(target=produce_later)
    thread.start()
    received_at = None
    deadline = time.monotonic() + 15
    while received_at is None and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=100).values():
            if records:
                received_at = time.monotonic()
    thread.join()
    consumer.close()
    assert received_at is not None and sent_at
    assert received_at - sent_at[0] < 5.0


def _raw(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.integration
@pytest.mark.parametrize("payload", [
    pytest.param(bytes(range(256)) * 4, id="random-bytes"),
    pytest.param(struct.pack(">i", 100) + b"\x00\x12\x00\x00", id="truncated-frame"),
    pytest.param(struct.pack(">i", -5) + b"abcd", id="negative-size"),
    pytest.param(struct.pack(">i", 2**31 - 1) + b"abcd", id="huge-size"),
    pytest.param(struct.pack(">i", 10) + struct.pack(">hhi", 999, 0, 1) + b"\x00\x00",
                 id="unknown-api-key"),
    pytest.param(struct.pack(">i", 10) + struct.pack(">hhi", 3, 99, 1) + b"\x00\x00",
                 id="unknown-version"),
    pytest.param(struct.pack(">i", 12) + struct.pack(">hhi", 3, 12, 1) + b"\x00\x00\xff\xff",
                 id="garbage-body"),
])
def test_malformed_input_closes_only_that_connection(broker: BrokerProcess,
                                                     payload: bytes) -> None:
    create_topic(broker.bootstrap, "alive", 1)
    assert _raw(broker.port, payload) == b""
    produce_numbered(broker.bootstrap, "alive", 10, 1)
    assert broker.proc is not None and broker.proc.poll() is None
    assert "connection closed on bad input" in broker.log_text()


@pytest.mark.integration
def test_api_versions_above_our_max_is_answered_in_v0_layout(broker: BrokerProcess) -> None:
    # ApiVersions v9 with header v2: we answer UNSUPPORTED_VERSION with our ranges, header v0.
    body = struct.pack(">hhi", 18, 9, 42) + b"\x00\x03cid\x00" + b"\x00\x00\x00"
    reply = _raw(broker.port, struct.pack(">i", len(body)) + body)
    size, correlation_id, error = struct.unpack_from(">iih", reply)
    assert (size, correlation_id, error) == (len(reply) - 4, 42, 35)


@pytest.mark.integration
def test_restart_keeps_acknowledged_messages(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data").start()
    try:
        create_topic(process.bootstrap, "durable", 2)
        produce_numbered(process.bootstrap, "durable", 2000, 2)
    finally:
        process.kill()
    restarted = BrokerProcess(tmp_path / "data", port=process.port).start()
    try:
        seen = consume_confluent(restarted.bootstrap, "durable", 2, 2000)
        assert dict(seen) == expected_per_partition(2000, 2)
    finally:
        restarted.stop()


@pytest.mark.integration
def test_idempotent_producers_work(broker: BrokerProcess) -> None:
    from kafka import KafkaProducer

    errors: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(3000):
        producer.produce("idem", str(i).encode(), partition=0, on_delivery=delivered)
    assert producer.flush(15) == 0 and errors == []
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
    futures = [kp.send("idem", str(i).encode(), partition=0) for i in range(3000, 4000)]
    kp.flush()
    kp.close()
    assert all(f.succeeded() for f in futures)
    seen = consume_confluent(broker.bootstrap, "idem", 1, 4000)
    assert seen[0] == list(range(4000))


@pytest.mark.integration
def test_latest_offset_is_the_log_end_after_multi_record_batches(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "ends", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(25):
        producer.produce("ends", str(i).encode(), partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    low, high = consumer.get_watermark_offsets(TopicPartition("ends", 0), timeout=10)
    consumer.close()
    assert (low, high) == (0, 25)


@pytest.mark.integration
def test_admin_client_lists_topics_and_brokers(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "listed", 4)
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert [b.id for b in metadata.brokers.values()] == [1]
    assert len(metadata.topics["listed"].partitions) == 4
