"""The SASL_SSL example of docker/compose.sasl_ssl.yaml, run without Docker: its broker
environment as written (host paths and free ports put in), certificates from
docker/make-test-certs.sh, then a real client over SASL_SSL and the image's healthcheck."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer

from tests.broker_process import free_port

pytestmark = pytest.mark.integration
PROJECT = Path(__file__).resolve().parents[2]


def _compose_environment(certs: Path, port: int, health_port: int) -> dict[str, str]:
    compose = yaml.safe_load((PROJECT / "docker" / "compose.sasl_ssl.yaml").read_text())
    environment: dict[str, str] = {}
    for key, value in compose["services"]["broker"]["environment"].items():
        text = re.sub(r"\$\{REBALANCED_HOST_PORT:-\d+\}", str(port), str(value))
        text = (text.replace("0.0.0.0:9093", f"127.0.0.1:{port}")
                .replace(":29093", f":{health_port}").replace("/certs/", f"{certs}/"))
        environment[key] = text
    return environment


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, dict[str, str]]]:
    root = tmp_path_factory.mktemp("compose-sasl-ssl")
    subprocess.run(["sh", str(PROJECT / "docker" / "make-test-certs.sh"), str(root / "certs")],
                   check=True, capture_output=True, timeout=60)
    port, health_port = free_port(), free_port()
    environment = _compose_environment(root / "certs", port, health_port)
    log = open(root / "broker.log", "ab")  # noqa: SIM115 - owned by the child process
    proc = subprocess.Popen([sys.executable, "-m", "coordinator", "--log.dirs",
                             str(root / "data")], cwd=PROJECT, stdout=log, stderr=log,
                            env={**os.environ, **environment})
    try:
        deadline = time.monotonic() + 15
        while True:
            assert proc.poll() is None, (root / "broker.log").read_text()[-2000:]
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the broker did not start"
                time.sleep(0.05)
        yield port, environment
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()
    text = (root / "broker.log").read_text(errors="replace")
    assert "Traceback" not in text and "admin-secret" not in text


def test_a_client_configured_as_the_example_says(
        example: tuple[int, dict[str, str]]) -> None:
    port, environment = example
    certs = Path(environment["REBALANCED_SSL_KEYSTORE_LOCATION"]).parent
    config = {"bootstrap.servers": f"localhost:{port}", "security.protocol": "SASL_SSL",
              "sasl.mechanism": "PLAIN", "sasl.username": "admin",
              "sasl.password": "admin-secret", "ssl.ca.location": str(certs / "ca.pem")}
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    producer.produce(topic, value=b"order")
    assert producer.flush(15) == 0
    consumer = Consumer({**config, "group.id": "my-app", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                assert message.value() == b"order"
                break
        else:
            raise AssertionError("nothing consumed over SASL_SSL")
    finally:
        consumer.close()


def test_the_healthcheck_uses_the_loopback_listener(
        example: tuple[int, dict[str, str]]) -> None:
    _, environment = example
    done = subprocess.run([sys.executable, "-m", "coordinator.cli.healthcheck"], cwd=PROJECT,
                          env={**os.environ, **environment}, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
