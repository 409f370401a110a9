"""A real broker whose open-files limit is lower than its number of partitions: a stock client
produces to and fetches from every partition, a consumer group commits offsets for all of them,
and the broker keeps its topic segment files within the budget the limit leaves (no EMFILE,
the group log still committing), also across a restart."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.runtime.broker import open_segments_limit
from storage.fs import FAULT_PLAN_ENV
from tests.broker_process import BrokerProcess

NOFILE = 192
GROUP_LOG_PARTITIONS = 10
PARTITIONS = 250  # more than the process may open files
PER_PARTITION = 12
REPO_ROOT = Path(__file__).resolve().parents[2]

# The broker under a hard open-files limit it cannot raise (what `ulimit -n 192` gives it).
LIMITED = [sys.executable, "-c",
           "import resource, runpy, sys\n"
           f"resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, {NOFILE}))\n"
           "sys.argv[0] = 'coordinator'\n"
           "runpy.run_module('coordinator', run_name='__main__', alter_sys=True)\n"]

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")


def limited_broker(data_dir: Path) -> BrokerProcess:
    broker = BrokerProcess(data_dir, command=LIMITED, settings={
        "offsets.topic.num.partitions": str(GROUP_LOG_PARTITIONS),
        "log.segment.bytes": "1024",  # several sealed segments per partition
    })
    broker.env = {"PYTHONPATH": str(REPO_ROOT)}  # this source tree, run from the data dir
    return broker


def open_segment_files(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    fd_dir = Path(f"/proc/{broker.proc.pid}/fd")
    count = 0
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if target.endswith(".log") and "/t-" in target:
            count += 1
    return count


def consume_all(bootstrap: str, group: str, count: int) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition("t", p, 0) for p in range(PARTITIONS)])
    seen: dict[int, list[bytes]] = {}
    got = 0
    deadline = time.monotonic() + 90
    while got < count and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=1.0):
            assert message.error() is None, message.error()
            partition = message.partition()
            assert partition is not None
            seen.setdefault(partition, []).append(message.value() or b"")
            got += 1
    # The group log commits an offset for every partition.
    offsets = [TopicPartition("t", p, len(seen.get(p, []))) for p in range(PARTITIONS)]
    consumer.commit(offsets=offsets, asynchronous=False)
    committed = consumer.committed([TopicPartition("t", p) for p in range(PARTITIONS)],
                                   timeout=30)
    assert [tp.offset for tp in committed] == [PER_PARTITION] * PARTITIONS
    consumer.close()
    return seen


def test_more_partitions_than_descriptors_are_served(tmp_path: Path) -> None:
    budget = open_segments_limit(-1, GROUP_LOG_PARTITIONS, 2**31 - 1, 0, NOFILE)
    assert budget < NOFILE < PARTITIONS
    broker = limited_broker(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", num_partitions=PARTITIONS,
                                      replication_factor=1)])["t"].result(60)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "linger.ms": 5})
        expected = {p: [f"{p}-{i}-".encode() * 8 for i in range(PER_PARTITION)]
                    for p in range(PARTITIONS)}
        for i in range(PER_PARTITION):
            for p in range(PARTITIONS):
                producer.produce("t", value=expected[p][i], partition=p)
            producer.poll(0)
        assert producer.flush(60) == 0
        assert open_segment_files(broker) <= budget + 2  # + rolled ones waiting for a seal
        seen = consume_all(broker.bootstrap, "g", PARTITIONS * PER_PARTITION)
        assert seen == expected
        assert open_segment_files(broker) <= budget + 2
        broker.stop()
        assert broker.proc is not None and broker.proc.returncode == 0

        broker.start()  # recovery of every partition under the same limit
        assert consume_all(broker.bootstrap, "g2", PARTITIONS * PER_PARTITION) == expected
    finally:
        broker.stop()
    text = broker.log_text()
    assert "Too many open files" not in text and "EMFILE" not in text
    assert "log offline" not in text
    assert f"\"open_files_limit\": {NOFILE}" in text


def test_an_fsync_failing_when_a_segment_is_closed_takes_only_its_partition_offline(
        tmp_path: Path) -> None:
    """The budget closes partition 0's idle active segment, its fsync fails (injected): that
    partition answers KAFKA_STORAGE_ERROR, the others carry on, and a restart has every
    record that was acknowledged and none that was refused."""
    arm = tmp_path / "arm"
    broker = BrokerProcess(tmp_path / "data", settings={"log.open.segments.max": "4"})
    broker.env = {FAULT_PLAN_ENV: json.dumps([
        {"op": "fsync", "path": "/t-0/", "armed_by": str(arm)}])}
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", num_partitions=8,
                                      replication_factor=1)])["t"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "message.timeout.ms": 3000, "retries": 0})
        acknowledged = [f"a{i}".encode() for i in range(5)]
        for value in acknowledged:
            producer.produce("t", value=value, partition=0)
        assert producer.flush(30) == 0
        arm.touch()
        for p in range(1, 8):  # the fifth open segment closes partition 0's, the LRU one
            producer.produce("t", value=b"other", partition=p)
        assert producer.flush(30) == 0
        errors: list[object] = []
        producer.produce("t", value=b"refused", partition=0,
                         on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(30)
        assert errors and errors[0] is not None
        assert "KAFKA_STORAGE_ERROR" in str(errors[0])
        producer.produce("t", value=b"still", partition=1)
        assert producer.flush(30) == 0
    finally:
        broker.stop()
    assert "fsync before closing an idle segment failed" in broker.log_text()

    broker.env = {}
    broker.start()
    try:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(acknowledged) and time.monotonic() < deadline:
            got += [m.value() or b"" for m in consumer.consume(100, timeout=1.0)
                    if m.error() is None]
        assert got == acknowledged
        assert not [m for m in consumer.consume(100, timeout=1.0) if m.error() is None]
        consumer.close()
    finally:
        broker.stop()
