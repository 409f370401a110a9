"""Clients pinned to old protocol versions (Kafka 0.8.2-0.10.1 era) against the real broker.

kafka-python's `api_version` pins the versions it speaks:

* (0, 10, 1): Produce v2 / Fetch v3 (magic 1), ListOffsets v1, Metadata v2, JoinGroup v1;
* (0, 9):     Produce v1 / Fetch v1 (magic 0), ListOffsets v0, Metadata v0, group APIs v0;
* (0, 8, 2):  Produce v0 / Fetch v0 (magic 0), OffsetCommit v1 / OffsetFetch v1, no groups.

Also raw requests for what clients do not send on purpose: a bad CRC, inconsistent inner
offsets, OffsetCommit v0, and a refused version from many connections (logged once).
"""

from __future__ import annotations

import gzip
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from storage.legacy import encode_message
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, api_version: tuple[int, ...], topic: str, start: int,
             count: int) -> None:
    # Half plain, half gzip: both legacy shapes (single messages, a compressed wrapper).
    for compression, numbers in ((None, range(start, start + count // 2)),
                                 ("gzip", range(start + count // 2, start + count))):
        producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version,
                                 compression_type=compression, linger_ms=20)
        futures = [producer.send(topic, key=b"%d" % n, value=b"value-%d" % n) for n in numbers]
        producer.flush(30)
        for future in futures:
            future.get(10)
        producer.close(5)


def _consume(consumer: KafkaConsumer, count: int, timeout_s: float = 60) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    return got


def _values(records: list[Any]) -> list[bytes]:
    return sorted((r.value for r in records), key=lambda v: int(v.split(b"-")[1]))


def _group_consumer(bootstrap: str, api_version: tuple[int, ...], topic: str,
                    group: str) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version,
                             group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=10_000,
                             heartbeat_interval_ms=1_000)
    consumer.subscribe([topic])
    return consumer


@pytest.mark.parametrize("api_version", [(0, 10, 1), (0, 9)], ids=["0.10.1", "0.9"])
def test_group_consumer_commits_and_resumes_across_a_restart(
        tmp_path: Path, api_version: tuple[int, ...]) -> None:
    topic, group = "legacy-orders", "legacy-billing"
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        _produce(broker.bootstrap, api_version, topic, 0, 40)
        consumer = _group_consumer(broker.bootstrap, api_version, topic, group)
        first = _consume(consumer, 40)
        assert _values(first) == [b"value-%d" % n for n in range(40)]
        assert [r.offset for r in sorted(first, key=lambda r: r.offset)] == list(range(40))
        if api_version >= (0, 10):
            assert all(r.timestamp > 0 for r in first)  # magic 1 carries the producer's time
        consumer.commit()
        consumer.close()
    finally:
        broker.stop()
    restarted = BrokerProcess(tmp_path / "data", port=broker.port).start()
    try:
        _produce(restarted.bootstrap, api_version, topic, 40, 10)
        consumer = _group_consumer(restarted.bootstrap, api_version, topic, group)
        second = _consume(consumer, 10)
        consumer.close()
        assert _values(second) == [b"value-%d" % n for n in range(40, 50)]
    finally:
        restarted.stop()
    log = broker.log_text()
    assert "connection closed on bad input" not in log


def test_kafka_0_8_2_client_consumes_and_commits_without_groups(tmp_path: Path) -> None:
    topic, group = "oldest", "manual"
    api_version = (0, 8, 2)
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        _produce(broker.bootstrap, api_version, topic, 0, 20)
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                                 group_id=group, auto_offset_reset="earliest",
                                 enable_auto_commit=False)
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        got = _consume(consumer, 20)
        assert _values(got) == [b"value-%d" % n for n in range(20)]
        consumer.commit()  # OffsetCommit v1: no generation, stored for the group
        assert consumer.committed(partition) == 20  # OffsetFetch v1
        consumer.close()
    finally:
        broker.stop()


# ------------------------------------------------------------------------------ raw requests


def _exchange(port: int, frames: list[bytes]) -> list[bytes]:
    """Send request frames on one connection; return the response bodies (after the size)."""
    replies = []
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        for frame in frames:
            sock.sendall(frame)
            size = struct.unpack(">i", _read(sock, 4))[0]
            replies.append(_read(sock, size))
    return replies


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def _produce_frame(version: int, records: bytes, correlation_id: int = 1) -> bytes:
    partition_cls = ProduceRequest.TopicProduceData.PartitionProduceData
    request = ProduceRequest(version=version, acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="raw", partition_data=[
            partition_cls(index=0, records=records)])])
    request.with_header(correlation_id=correlation_id, client_id="raw-legacy")
    return bytes(request.encode(header=True, framed=True))


def _produce_error(reply: bytes, version: int) -> int:
    response = ProduceResponse.decode(reply[4:], version=version)
    return int(response.responses[0].partition_responses[0].error_code)


def test_bad_legacy_input_gets_kafkas_error_codes_and_nothing_is_stored(
        broker: BrokerProcess) -> None:
    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    builder.append(0, 1_700_000_000_000, None, b"good")
    good = bytes(builder.build())
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0x01
    inner = b"".join(encode_message(o, 1, 0, 1, None, b"v") for o in (0, 2, 3))
    inconsistent = encode_message(3, 1, 1, 1, None, gzip.compress(inner))
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 1))
    assert producer.partitions_for("raw") == {0}  # Metadata creates the topic
    producer.close()
    replies = _exchange(broker.port, [
        _produce_frame(2, bytes(bad_crc), 1),
        _produce_frame(1, inconsistent, 2),
        _produce_frame(0, good[:-3], 3),
        _produce_frame(2, good, 4),
    ])
    codes = [_produce_error(r, v) for r, v in zip(replies, [2, 1, 0, 2], strict=True)]
    assert codes == [2, 87, 2, 0]  # CORRUPT_MESSAGE, INVALID_RECORD, CORRUPT_MESSAGE, NONE
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 10, 1),
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition("raw", 0)])
    stored = _consume(consumer, 1, timeout_s=20)
    consumer.close()
    assert [(r.offset, r.value) for r in stored] == [(0, b"good")]  # nothing else took an offset


def test_offset_commit_v0_is_answered_unsupported_and_the_connection_stays_open(
        broker: BrokerProcess) -> None:
    partition_cls = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    request = OffsetCommitRequest(version=0, group_id="zk-era", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
            partition_cls(partition_index=0, committed_offset=5, committed_metadata="")])])
    request.with_header(correlation_id=9, client_id="zk-era-client")
    api_versions = struct.pack(">hhi", 18, 0, 10) + b"\x00\x02ok"
    replies = _exchange(broker.port, [bytes(request.encode(header=True, framed=True)),
                                      struct.pack(">i", len(api_versions)) + api_versions])
    response = OffsetCommitResponse.decode(replies[0][4:], version=0)
    assert response.topics[0].partitions[0].error_code == 35  # UNSUPPORTED_VERSION
    assert struct.unpack_from(">ih", replies[1]) == (10, 0)  # the connection still answers
    deadline = time.monotonic() + 30  # the log is written out every 100 ms
    while "zk-era-client" not in broker.log_text():
        assert time.monotonic() < deadline, "the refusal was not logged"
        time.sleep(0.05)
    assert "OffsetCommit v1 or later" in broker.log_text()


def test_a_refused_version_is_logged_once_per_client_and_version(broker: BrokerProcess) -> None:
    # Fetch v99 from the same client on 20 connections: one warning line, not 20.
    def refused(client_id: bytes) -> None:
        body = struct.pack(">hhih", 1, 99, 1, len(client_id)) + client_id + b"\x00" * 8
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            assert sock.recv(100) == b""  # closed, as Kafka closes on an unknown version

    for _ in range(20):
        refused(b"stubborn-app")
    # Another client's refusal, logged after all of those: once it is in the log, every
    # line the 20 could have written is too.
    refused(b"marker-app")
    deadline = time.monotonic() + 30
    while "marker-app" not in broker.log_text():
        assert time.monotonic() < deadline, "the refusals were not logged"
        time.sleep(0.1)
    lines = [line for line in broker.log_text().splitlines() if "stubborn-app" in line]
    assert len(lines) == 1, lines
    assert '"api": "Fetch"' in lines[0] and '"api_version": 99' in lines[0]
    assert "v0-v16" in lines[0]


@pytest.mark.parametrize("fallback", ["0.9.0", "0.10.0"])
def test_librdkafka_configured_for_an_old_broker(broker: BrokerProcess, fallback: str) -> None:
    # No ApiVersions: librdkafka uses the versions of `broker.version.fallback` (0.9.0: Produce
    # and Fetch v1, magic 0; 0.10.0: v2, magic 1), here with gzip.
    from confluent_kafka import Consumer, Producer

    topic = "rdk-" + fallback.replace(".", "-")
    conf = {"bootstrap.servers": broker.bootstrap, "api.version.request": False,
            "broker.version.fallback": fallback, "log_level": 3}
    producer = Producer({**conf, "compression.type": "gzip", "linger.ms": 5})
    for i in range(100):
        producer.produce(topic, key=b"k", value=b"value-%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < 100 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value() or b"")
    committed = consumer.commit(asynchronous=False)
    consumer.close()
    assert values == [b"value-%d" % i for i in range(100)]
    assert committed is not None and committed[0].offset == 100
