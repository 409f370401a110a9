"""The examples of docs/testing.md, each a test: stock Python clients against the kit's broker.

Keep these in step with the document: a reader copies them."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.structs import OffsetAndMetadata

from coordinator.testkit import RebalancedBroker
from tests.testkit.clients import PolledConsumer, create_topic


def produce(bootstrap: str, topic: str, count: int, partitions: int = 2) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i, partition=i % partitions)
    producer.flush(10)


# 1. Commit before revoke, under a rebalance the test starts --------------------------------

def test_commit_before_revoke_under_a_forced_rebalance(
        rebalanced_broker: RebalancedBroker) -> None:
    bootstrap, control = rebalanced_broker.bootstrap, rebalanced_broker.control
    create_topic(bootstrap, "orders")
    produce(bootstrap, "orders", 20)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "heartbeat.interval.ms": 200})
    seen: dict[int, int] = {}
    committed_on_revoke: list[list[Any]] = []

    def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
        # The application's duty: commit what it processed before it loses the partitions.
        if seen:
            offsets = [TopicPartition("orders", p, o + 1) for p, o in seen.items()]
            c.commit(offsets=offsets, asynchronous=False)
            committed_on_revoke.append(offsets)

    consumer.subscribe(["orders"], on_revoke=on_revoke)
    try:
        while len(seen) < 2 or sum(o + 1 for o in seen.values()) < 20:
            message = consumer.poll(0.1)
            if message is not None and not message.error():
                seen[int(message.partition() or 0)] = int(message.offset() or 0)
        generation = control.wait_for_group("billing", members=1)["generation_id"]
        control.rebalance("billing")  # as when another instance joins
        deadline = time.monotonic() + 20
        while not committed_on_revoke and time.monotonic() < deadline:
            consumer.poll(0.1)
        control.wait_for_rebalance("billing", after_generation=generation)
        committed = consumer.committed([TopicPartition("orders", 0), TopicPartition("orders", 1)],
                                       timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == {0: 10, 1: 10}
    finally:
        consumer.close()


# 2. A consumer that survives its coordinator being unavailable for a while -----------------

def test_a_consumer_survives_the_coordinator_being_unavailable(
        rebalanced_broker: RebalancedBroker) -> None:
    bootstrap, control = rebalanced_broker.bootstrap, rebalanced_broker.control
    create_topic(bootstrap, "orders")
    produce(bootstrap, "orders", 10)
    consumer = KafkaConsumer("orders", bootstrap_servers=bootstrap, group_id="billing",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             heartbeat_interval_ms=200)
    try:
        records = 0
        while records < 10:
            records += sum(len(batch) for batch in consumer.poll(200).values())
        # Two seconds of COORDINATOR_NOT_AVAILABLE on the group's heartbeats and commits.
        outage = [control.add_fault(match={"api": api, "group_id": "billing"},
                                    action={"type": "error",
                                            "error_code": "COORDINATOR_NOT_AVAILABLE"},
                                    for_ms=2000)
                  for api in ("Heartbeat", "OffsetCommit")]
        outage[0].wait(hits=1)
        deadline = time.monotonic() + 30
        while True:  # the application keeps polling and retries its commit
            consumer.poll(100)
            try:
                consumer.commit({KafkaTopicPartition("orders", p): OffsetAndMetadata(5, "", -1)
                                 for p in (0, 1)})
                break
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert control.wait_for_group("billing", members=1)
        assert consumer.committed(KafkaTopicPartition("orders", 0)) == 5
    finally:
        consumer.close()


# 3. The session expiry of a stuck consumer, through virtual time ---------------------------

async def test_a_stuck_consumers_session_expires_through_virtual_time(
        async_rebalanced_broker: RebalancedBroker) -> None:
    from aiokafka import AIOKafkaConsumer

    broker = async_rebalanced_broker
    control = broker.control
    await asyncio.to_thread(create_topic, broker.bootstrap, "orders")
    consumer = AIOKafkaConsumer("orders", bootstrap_servers=broker.bootstrap,
                                group_id="billing", session_timeout_ms=45_000,
                                heartbeat_interval_ms=200)
    await consumer.start()
    try:
        group = await asyncio.to_thread(control.wait_for_group, "billing", members=1)
        stuck = group["members"][0]["member_id"]
        # Its heartbeats never get an answer (its process hangs, say); 45 s pass at once.
        control.add_fault(match={"api": "Heartbeat", "member_id": stuck},
                          action={"type": "blackhole"})
        await asyncio.to_thread(control.advance, 45_000)
        removed = await asyncio.to_thread(control.wait_for_member_removed, "billing",
                                          member_id=stuck, cause="session_expiry")
        assert removed["cause"] == "session_expiry"
    finally:
        control.clear_faults()
        await consumer.stop()


# 4. A fenced static member -----------------------------------------------------------------

def test_a_second_instance_with_the_same_instance_id_fences_the_first(
        rebalanced_broker: RebalancedBroker) -> None:
    bootstrap, control = rebalanced_broker.bootstrap, rebalanced_broker.control
    create_topic(bootstrap, "orders")

    def instance() -> Consumer:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing",
                             "group.instance.id": "billing-0", "heartbeat.interval.ms": 200,
                             "session.timeout.ms": 6000})
        consumer.subscribe(["orders"])
        return consumer

    first = instance()
    try:
        while not control.group("billing") or not control.group("billing")["members"]:
            first.poll(0.1)
        second = instance()
        try:
            fenced = None
            deadline = time.monotonic() + 30
            while fenced is None and time.monotonic() < deadline:
                second.poll(0.05)
                try:
                    message = first.poll(0.05)
                except Exception as exc:  # librdkafka raises the fatal error
                    fenced = exc.args[0]
                    break
                if message is not None and message.error():
                    fenced = message.error()
            assert fenced is not None
            # librdkafka raises it as a fatal error naming the cause.
            assert fenced.code() in (KafkaError.FENCED_INSTANCE_ID, KafkaError._FATAL)
            assert "fenced" in fenced.str()
            events = [e["event_type"] for e in control.events("billing")]
            assert "static_member_replaced" in events
        finally:
            second.close()
    finally:
        first.close()


# 5. Kill one instance of three, within a pause budget --------------------------------------

_INSTANCE = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "billing",
                         "heartbeat.interval.ms": 200, "session.timeout.ms": 6000})
    consumer.subscribe(["orders"])
    while True:
        consumer.poll(0.1)
""")


def test_killing_one_instance_of_three_pauses_the_group_within_budget(
        rebalanced_broker: RebalancedBroker) -> None:
    bootstrap, control = rebalanced_broker.bootstrap, rebalanced_broker.control
    create_topic(bootstrap, "orders", partitions=6)
    instances = [subprocess.Popen([sys.executable, "-c", _INSTANCE, bootstrap])
                 for _ in range(3)]
    try:
        generation = control.wait_for_group("billing", members=3, timeout=60)["generation_id"]
        instances[0].send_signal(signal.SIGKILL)  # no LeaveGroup: the process is gone
        instances[0].wait()
        # The broker notices the closed connection (disconnect grace, 1 s by default).
        control.wait_for_member_removed("billing", cause="disconnect", timeout=30)
        control.wait_for_rebalance("billing", after_generation=generation)
        control.wait_for_group("billing", members=2)
        control.assert_max_pause("billing", 5_000)
    finally:
        for instance in instances:
            if instance.poll() is None:
                instance.kill()
                instance.wait()


def test_a_group_its_last_member_leaves_is_not_paused_ever_after(
        rebalanced_broker: RebalancedBroker) -> None:
    # The leave starts a rebalance that the group's emptying ends (`group_empty`, no
    # `group_stabilized`): its pause ends there, as the forensics report ends it.
    bootstrap, control = rebalanced_broker.bootstrap, rebalanced_broker.control
    create_topic(bootstrap, "audit", partitions=2)
    with PolledConsumer(bootstrap, "audit-readers", "audit"):
        control.wait_for_group("audit-readers", members=1, timeout=60)
    control.wait_for_member_removed("audit-readers", cause="leave", timeout=30)
    control.wait_for_group("audit-readers", state="Empty", members=0)
    settled = control.pauses("audit-readers")
    time.sleep(1.5)
    assert control.pauses("audit-readers") == settled
    assert control.assert_max_pause("audit-readers", 1_000) < 1_000
