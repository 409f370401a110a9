"""The ops port's budget, over real HTTP against the real broker: its connection limit, the
header timeout, a half-sent request that holds nobody else up, /metrics correct while cached,
and file descriptors kept for the Kafka port and the group log however many HTTP clients come."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, free_port
from tests.integration.test_ops_endpoint import samples

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HALF_SENT = b"GET /metrics HTTP/1.1\r\nHost: broker\r\n"  # the head's blank line never comes


def ops_broker(tmp_path: Path, **settings: str) -> tuple[BrokerProcess, int]:
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", settings={
        "metrics.listener": f"127.0.0.1:{port}", **settings})
    return broker, port


def wait_listening(port: int, seconds: float = 30) -> None:
    """The metrics port opens just after the Kafka port."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def get(port: int, path: str = "/metrics", timeout: float = 10) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def half_sent(port: int, timeout: float = 10) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(HALF_SENT)
    return sock


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def kafka_answers(bootstrap: str, timeout: float = 10) -> bool:
    """A new Kafka connection is accepted and answers ApiVersions."""
    host, _, port = bootstrap.rpartition(":")
    request = b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x05probe"  # ApiVersions v0, id 7
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(len(request).to_bytes(4, "big") + request)
        head = sock.recv(8)
    return len(head) == 8 and head[4:8] == b"\x00\x00\x00\x07"


@pytest.fixture
def broker_and_port(tmp_path: Path, request: pytest.FixtureRequest
                    ) -> Iterator[tuple[BrokerProcess, int]]:
    broker, port = ops_broker(tmp_path, **getattr(request, "param", {}))
    broker.start()
    try:
        wait_listening(port)
        yield broker, port
    finally:
        broker.stop()


@pytest.mark.parametrize("broker_and_port", [{"metrics.max.connections": "4",
                                              "metrics.header.timeout.ms": "30000"}],
                         indirect=True)
def test_connections_over_the_limit_are_answered_503_and_closed(
        broker_and_port: tuple[BrokerProcess, int]) -> None:
    broker, port = broker_and_port
    held = [half_sent(port) for _ in range(4)]
    try:
        time.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        answer = read_all(extra)
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b"too many connections\n")
        assert kafka_answers(broker.bootstrap)
    finally:
        held.pop().close()
    time.sleep(0.2)  # the freed slot is counted out when its close is seen
    assert get(port)[0] == 200
    for sock in held:
        sock.close()
    assert "metrics connection refused" in broker.log_text()


@pytest.mark.parametrize("broker_and_port", [{"metrics.header.timeout.ms": "300"}],
                         indirect=True)
def test_a_request_head_not_sent_in_time_gets_408(
        broker_and_port: tuple[BrokerProcess, int]) -> None:
    _, port = broker_and_port
    sock = half_sent(port)
    started = time.monotonic()
    answer = read_all(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert 0.2 < time.monotonic() - started < 5
    silent = socket.create_connection(("127.0.0.1", port), timeout=10)  # never sends a byte
    assert read_all(silent).startswith(b"HTTP/1.1 408 ")
    silent.close()


@pytest.mark.parametrize("broker_and_port", [{"metrics.header.timeout.ms": "30000"}],
                         indirect=True)
def test_a_half_sent_request_holds_up_nobody_else(
        broker_and_port: tuple[BrokerProcess, int]) -> None:
    _, port = broker_and_port
    stalled = [half_sent(port) for _ in range(3)]
    try:
        started = time.monotonic()
        for path in ("/metrics", "/", "/metrics"):
            assert get(port, path)[0] == 200
        assert time.monotonic() - started < 5
    finally:
        for sock in stalled:
            sock.close()


@pytest.mark.parametrize("broker_and_port", [{"metrics.cache.ms": "1500"}], indirect=True)
def test_metrics_are_shared_within_the_cache_interval_and_fresh_after_it(
        broker_and_port: tuple[BrokerProcess, int]) -> None:
    broker, port = broker_and_port
    topic = "audited"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    commit_total = ("kafka_server_group_coordinator_metrics_offset_commit_total", ())
    numoffsets = ("kafka_coordinator_group_groupmetadatamanager_numoffsets", ())
    status, before = get(port)
    assert status == 200 and samples(before.decode())[commit_total] == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "auditor"})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False)
    finally:
        consumer.close()
    # Eight clients at once, within the interval: one document for all, the one built before.
    bodies: list[bytes] = []
    threads = [threading.Thread(target=lambda: bodies.append(get(port)[1])) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(bodies) == 8 and set(bodies) == {before}

    time.sleep(1.6)
    after = samples(get(port)[1].decode())
    assert after[commit_total] == 1 and after[numoffsets] == 1
    classic = ("kafka_server_group_coordinator_metrics_group_count", (("protocol", "classic"),))
    assert after[classic] == 1
    status, html = get(port, "/")
    assert status == 200 and b"auditor" in html


@pytest.mark.parametrize("broker_and_port", [{}], indirect=True)
def test_kept_alive_connection_answers_request_after_request(
        broker_and_port: tuple[BrokerProcess, int]) -> None:
    _, port = broker_and_port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for path in ("/metrics", "/", "/nothing", "/metrics"):
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            assert response.status == (404 if path == "/nothing" else 200)
            assert response.getheader("Connection") == "keep-alive"
        connection.request("HEAD", "/")
        response = connection.getresponse()
        assert response.status == 200 and response.read() == b""
        connection.request("POST", "/metrics", body=b"x" * 100)
        response = connection.getresponse()
        assert response.status == 405 and response.getheader("Connection") == "close"
    finally:
        connection.close()


def test_http_flood_leaves_descriptors_for_the_group_log_and_kafka(tmp_path: Path) -> None:
    """Open files limited to 128 (soft) and 256 (hard), 400 half-sent HTTP requests held open
    while a client commits through several group-log segment rolls: the broker raised its limit
    to 256 and kept HTTP to 256 / 8 connections, every commit succeeds and new Kafka
    connections are accepted."""
    broker, port = ops_broker(tmp_path, **{"metrics.max.connections": "64",
                                           "metrics.header.timeout.ms": "60000",
                                           "offsets.topic.segment.bytes": "4096"})
    limited = ("import resource, runpy, sys; "
               f"sys.path.insert(0, {str(REPO)!r}); "
               "resource.setrlimit(resource.RLIMIT_NOFILE, (128, 256)); "
               "runpy.run_module('coordinator', run_name='__main__', alter_sys=True)")
    broker.command = [sys.executable, "-c", limited]
    broker.start()
    flood: list[socket.socket] = []
    try:
        wait_listening(port)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("rolled", 1, 1)])["rolled"].result(30)
        for _ in range(400):
            # Refused and closed before the request was sent: what a flood beyond the limit gets.
            with contextlib.suppress(OSError):
                flood.append(half_sent(port, timeout=0.2))
        assert kafka_answers(broker.bootstrap, timeout=3)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "roller"})
        slowest = 0.0
        try:
            for offset in range(300):
                started = time.monotonic()
                consumer.commit(offsets=[TopicPartition("rolled", 0, offset)],
                                asynchronous=False)
                slowest = max(slowest, time.monotonic() - started)
        finally:
            consumer.close()
        assert slowest < 3, f"a commit took {slowest:.1f} s"
        assert kafka_answers(broker.bootstrap, timeout=3)
        rolled = [d for d in broker.data_dir.glob("__consumer_offsets-*")
                  if len(list(d.glob("*.log"))) > 1]
        assert rolled, "the group log never rolled"
    finally:
        for sock in flood:
            sock.close()
        broker.stop()
    lines = [json.loads(line) for line in broker.log_text().splitlines()
             if line.startswith("{")]
    started = next(line for line in lines if line["event"] == "broker started")
    listening = next(line for line in lines if line["event"] == "metrics listening")
    assert started["open_files_limit"] == 256 and listening["max_connections"] == 256 // 8
    assert not [line for line in lines if line.get("level") == "error"]
    assert "Too many open files" not in broker.log_text()
