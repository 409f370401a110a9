"""Data-plane scenario: produce and consume throughput, produce-to-fetch wake-up latency.

Driven by one confluent-kafka (librdkafka) producer and one consumer in assign() mode, in the
benchmark's own process; broker CPU is sampled around each phase.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, NewTopic

from tests.bench.brokers import Broker
from tests.bench.stats import percentile


@dataclass(frozen=True, slots=True)
class DataPlaneParams:
    messages: int = 1_000_000
    max_seconds: float = 10.0
    message_bytes: int = 100
    latency_samples: int = 300
    latency_max_seconds: float = 10.0


def _quiet(_: Any) -> None:
    """librdkafka error callback: connection hiccups are counted by the scenario, not logged."""


def ensure_topic(broker: Broker, topic: str, partitions: int) -> str:
    """Create `topic`: 'created', 'exists', 'created out of band' (the mock's C API) or 'auto'
    (auto-created by the first Metadata request, with the broker's default partition count)."""
    config: dict[str, Any] = {"bootstrap.servers": broker.bootstrap, "error_cb": _quiet}
    admin = AdminClient(config)
    outcome = "auto"
    if not broker.create_topics and broker.create_topic_out_of_band(topic, partitions):
        outcome = "created out of band"
    elif broker.create_topics:
        futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10,
                                      request_timeout=15)
        try:
            futures[topic].result(timeout=20)
            outcome = "created"
        except Exception as exc:
            first = exc.args[0] if exc.args else None
            exists = isinstance(first, KafkaError) and (
                first.code() == KafkaError.TOPIC_ALREADY_EXISTS)
            if not exists:
                raise
            outcome = "exists"
    # Wait until metadata shows the topic with its partitions (auto-creates where supported).
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=5)
        entry = md.topics.get(topic)
        if entry is not None and entry.error is None and len(entry.partitions) >= 1:
            return outcome
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} did not appear in metadata")


def produce_throughput(broker: Broker, topic: str, p: DataPlaneParams) -> dict[str, Any]:
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 5,
        "compression.type": "none", "queue.buffering.max.messages": 500_000,
        "error_cb": _quiet,
    })
    failures = 0

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        nonlocal failures
        if err is not None:
            failures += 1

    payload = b"x" * p.message_bytes
    # Warm the connection and metadata so the timed part is steady-state producing.
    producer.produce(topic, payload, partition=0, on_delivery=on_delivery)
    producer.flush(15)
    stats = broker.stats()
    cpu0 = stats.cpu_seconds()
    started = time.monotonic()
    deadline = started + p.max_seconds
    sent = 0
    while sent < p.messages and time.monotonic() < deadline:
        try:
            producer.produce(topic, payload, partition=0, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.005)
        if sent % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(max(deadline - time.monotonic(), 0) + 10)
    elapsed = time.monotonic() - started
    cpu = stats.cpu_seconds() - cpu0
    delivered = sent - remaining - failures
    return {
        "messages": delivered,
        "failed": failures + remaining,
        "seconds": elapsed,
        "msgs_per_s": delivered / elapsed,
        "mb_per_s": delivered * p.message_bytes / elapsed / 1e6,
        "broker_cpu_s": cpu,
        "broker_cpu_us_per_msg": cpu / delivered * 1e6 if delivered else None,
        "rss_mb": stats.rss_bytes() / 1e6,
    }


def consume_throughput(broker: Broker, topic: str, expected: int,
                       p: DataPlaneParams) -> dict[str, Any]:
    """Read `expected` messages from offset 0; the rate is first message -> last message, the
    consumer's start-up (metadata, connection, offset lookup) is reported separately."""
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "bench-assign",
        "enable.auto.commit": False, "enable.partition.eof": False, "error_cb": _quiet,
    })
    stats = broker.stats()
    try:
        cpu0 = stats.cpu_seconds()
        started = time.monotonic()
        consumer.assign([TP(topic, 0, OFFSET_BEGINNING)])
        deadline = started + p.max_seconds
        first: float | None = None
        first_batch = first_bytes = 0
        received = errors = nbytes = 0
        while received < expected and time.monotonic() < deadline:
            batch = consumer.consume(10_000, 0.5)
            for msg in batch:
                if msg.error() is not None:
                    errors += 1
                    continue
                received += 1
                nbytes += len(msg.value() or b"")
            if first is None and received:
                first = time.monotonic()
                first_batch, first_bytes = received, nbytes
        finished = time.monotonic()
        cpu = stats.cpu_seconds() - cpu0
    finally:
        consumer.close()
    if first is None:
        raise RuntimeError(f"no message consumed in {p.max_seconds:.0f}s")
    streaming = max(finished - first, 1e-9)
    return {
        "messages": received,
        "expected": expected,
        "errors": errors,
        "time_to_first_ms": (first - started) * 1000,
        "seconds": streaming,
        "msgs_per_s": (received - first_batch) / streaming,
        "mb_per_s": (nbytes - first_bytes) / streaming / 1e6,
        "broker_cpu_s": cpu,
        "broker_cpu_us_per_msg": cpu / received * 1e6,
    }


def wakeup_latency(broker: Broker, topic: str, p: DataPlaneParams) -> dict[str, Any]:
    """A consumer parked at the log end; one message at a time; send -> receive, monotonic."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0,
                         "error_cb": _quiet})
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "bench-latency",
        "enable.auto.commit": False, "enable.partition.eof": False, "fetch.wait.max.ms": 500,
        "fetch.min.bytes": 1, "error_cb": _quiet,
    })
    samples: list[float] = []
    lost = 0
    try:
        consumer.assign([TP(topic, 0, OFFSET_END)])
        # Warm up: until a produced message comes back, the consumer is not parked at the end.
        warm_deadline = time.monotonic() + 15
        warmed = False
        while not warmed and time.monotonic() < warm_deadline:
            producer.produce(topic, b"warm", partition=0)
            producer.flush(5)
            poll_until = time.monotonic() + 1.0
            while time.monotonic() < poll_until:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    warmed = True
                    break
        if not warmed:
            raise RuntimeError("consumer never received a warm-up message")
        # Drain anything else the warm-up left behind.
        while consumer.poll(0.3) is not None:
            pass
        stats = broker.stats()
        cpu0 = stats.cpu_seconds()
        started = time.monotonic()
        deadline = started + p.latency_max_seconds
        for seq in range(p.latency_samples):
            if time.monotonic() >= deadline:
                break
            key = seq.to_bytes(4, "big")
            # Let the consumer's next fetch park at the log end before we produce.
            time.sleep(0.002)
            sent_at = time.monotonic()
            producer.produce(topic, b"l" * p.message_bytes, key=key, partition=0)
            producer.poll(0)
            got = False
            wait_until = sent_at + 2.0
            while time.monotonic() < wait_until:
                msg = consumer.poll(0.5)
                producer.poll(0)
                if msg is None or msg.error() is not None:
                    continue
                if msg.key() == key:
                    samples.append(time.monotonic() - sent_at)
                    got = True
                    break
            if not got:
                lost += 1
        cpu = stats.cpu_seconds() - cpu0
        producer.flush(5)
    finally:
        consumer.close()
    if not samples:
        raise RuntimeError(f"no latency samples ({lost} lost)")
    return {
        "samples": len(samples),
        "lost": lost,
        "p50_ms": percentile(samples, 50) * 1000,
        "p99_ms": percentile(samples, 99) * 1000,
        "max_ms": max(samples) * 1000,
        "broker_cpu_s": cpu,
    }


def start_time(broker_factory: Any, repeats: int) -> dict[str, Any]:
    """Median seconds from process spawn to answering ApiVersions, over `repeats` fresh starts."""
    times: list[float] = []
    for _ in range(repeats):
        broker = broker_factory()
        try:
            broker.start()
            assert broker.start_to_ready_s is not None
            times.append(broker.start_to_ready_s)
        finally:
            broker.cleanup()
    return {"start_to_accepting_ms": percentile(times, 50) * 1000,
            "runs_ms": [t * 1000 for t in times]}
