"""`__consumer_offsets` over the protocol: a stock consumer reads the group log and our codec
decodes what it reads; the topic is internal and read-only."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer
from kafka import TopicPartition as KPTopicPartition

from coordinator.grouplog.codec import decode_record
from coordinator.grouplog.records import GroupMetadataRecord, OffsetCommitRecord
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

OFFSETS = "__consumer_offsets"
PARTITIONS = 50


def test_a_stock_consumer_reads_and_decodes_the_group_log(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(6):
            producer.produce("orders", b"v", partition=i % 2)
        assert producer.flush(30) == 0

        # A group that rebalances (GroupMetadata records) and commits (OffsetCommit records).
        member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readers",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False,
                           "session.timeout.ms": 6000})
        member.subscribe(["orders"])
        deadline = time.monotonic() + 30
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        member.commit(offsets=[TopicPartition("orders", 0, 3), TopicPartition("orders", 1, 2)],
                      asynchronous=False)
        member.close()

        described = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            [topic] = described.describe_topics([OFFSETS])
            assert topic["is_internal"] is True
            assert len(topic["partitions"]) == PARTITIONS
            listed = {t["name"]: t for t in described.describe_topics()}
            assert listed[OFFSETS]["is_internal"] is True
        finally:
            described.close()

        reader = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                               group_id=None, consumer_timeout_ms=3000)
        try:
            partitions = [KPTopicPartition(OFFSETS, p) for p in range(PARTITIONS)]
            reader.assign(partitions)
            reader.seek_to_beginning(*partitions)
            ends = reader.end_offsets(partitions)
            assert sum(ends.values()) >= 3
            commits: dict[tuple[str, int], int] = {}
            group_metadata = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and sum(reader.position(tp) < ends[tp]
                                                      for tp in partitions):
                for messages in reader.poll(timeout_ms=500).values():
                    for message in messages:
                        record = decode_record(message.key, message.value)
                        if getattr(record.key, "group", None) != "readers":
                            continue
                        if isinstance(record, OffsetCommitRecord) and record.value:
                            commits[(record.key.topic, record.key.partition)] = (
                                record.value.offset)
                        elif isinstance(record, GroupMetadataRecord):
                            group_metadata.append(record)
        finally:
            reader.close()
        assert commits == {("orders", 0): 3, ("orders", 1): 2}
        assert group_metadata and any(r.value and r.value.protocol_type == "consumer"
                                      for r in group_metadata)

        # Read-only: Produce, CreateTopics and DeleteTopics are refused.
        refusing = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0,
                             "message.timeout.ms": 10000})
        delivery: list[object] = []
        refusing.produce(OFFSETS, b"x", partition=0,
                         on_delivery=lambda err, msg: delivery.append(err))
        refusing.flush(15)
        assert delivery and delivery[0] is not None
        with pytest.raises(KafkaException) as created:
            admin.create_topics([NewTopic(OFFSETS, 1, 1)])[OFFSETS].result(30)
        assert "TOPIC_ALREADY_EXISTS" in str(created.value)
        with pytest.raises(KafkaException):
            admin.delete_topics([OFFSETS])[OFFSETS].result(30)
        assert admin.list_topics(OFFSETS, timeout=30).topics[OFFSETS].error is None
    finally:
        broker.stop()
