"""Two named listeners on one broker, the way a container publishes one for its network and one
for the host: a client is told the address of the listener it came in on, in Metadata and in
FindCoordinator, and a consumer group works through either."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from tests.broker_process import BrokerProcess, free_port

pytestmark = pytest.mark.integration
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def two_listeners(tmp_path: Path):
    internal, external = free_port(), free_port()
    broker = BrokerProcess(tmp_path / "data", port=internal, settings={
        "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://0.0.0.0:{external}",
        # What a container advertises: its service name inside, localhost to the host. Both
        # resolve here, to loopback, so that clients can follow either.
        "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},"
                                f"EXTERNAL://localhost:{external}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    })
    broker.start()
    try:
        yield broker, internal, external
    finally:
        broker.stop()


def _metadata_broker(port: int) -> tuple[str, int]:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    brokers = admin.list_topics(timeout=10).brokers
    (only,) = brokers.values()
    return str(only.host), int(only.port)


def test_metadata_advertises_the_listener_the_client_came_in_on(two_listeners) -> None:
    _, internal, external = two_listeners
    assert _metadata_broker(internal) == ("127.0.0.1", internal)
    assert _metadata_broker(external) == ("localhost", external)


def test_a_group_commits_through_the_external_listener(two_listeners) -> None:
    _, internal, external = two_listeners
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": f"localhost:{external}"})
    for i in range(5):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": f"localhost:{external}", "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        seen: list[bytes] = []
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value() or b"")
                consumer.commit(message=message, asynchronous=False)
            if len(seen) == 5:
                break
        assert sorted(seen) == [str(i).encode() for i in range(5)]
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{external}"})
    (description,) = [f.result(10) for f in admin.describe_consumer_groups([group]).values()]
    assert (description.coordinator.host, description.coordinator.port) == ("localhost", external)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{internal}"})
    (description,) = [f.result(10) for f in admin.describe_consumer_groups([group]).values()]
    assert (description.coordinator.host, description.coordinator.port) == ("127.0.0.1", internal)


@pytest.mark.parametrize(("env", "line"), [
    ({"REBALANCED_LISTENERS": "INTERNAL://0.0.0.0:9092"},
     "rebalanced: configuration error: listener INTERNAL has no entry in "
     "listener.security.protocol.map (e.g. INTERNAL:PLAINTEXT)"),
    ({"REBALANCED_ADVERTISED_LISTENERS": "PLAINTEXT://broker"},
     "rebalanced: configuration error: REBALANCED_ADVERTISED_LISTENERS: invalid value "
     "'PLAINTEXT://broker' for advertised.listeners: 'PLAINTEXT://broker': expected "
     "NAME://host:port"),
])
def test_a_wrong_listener_stops_the_broker_with_one_line(tmp_path: Path, env: dict[str, str],
                                                         line: str) -> None:
    result = subprocess.run([sys.executable, "-m", "coordinator", "--log.dirs",
                             str(tmp_path / "data")], cwd=PROJECT, env={**os.environ, **env},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [line]


# The container's case (a root-owned bind mount, the broker as uid 10001) runs in the Docker
# test (tests/packaging/test_docker_image.py); as root here, every directory is writable.
@pytest.mark.skipif(os.getuid() == 0, reason="root may write any directory")
def test_an_unwritable_data_directory_says_what_to_chown(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o500)
    result = subprocess.run([sys.executable, "-m", "coordinator", "--log.dirs", str(data)],
                            cwd=PROJECT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"rebalanced: log.dirs {data} is not writable by uid {os.getuid()} (gid {os.getgid()}):"
        f" run `chown -R {os.getuid()}:{os.getgid()}` on {data} (for a bind mount: on its host"
        " directory)"]
