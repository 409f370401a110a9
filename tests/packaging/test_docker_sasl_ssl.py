"""The SASL_SSL example, docker/compose.sasl_ssl.yaml, run by its image under a Docker engine.

docker/test.sh makes throwaway certificates with docker/make-test-certs.sh, starts the example's
broker on a free host port and runs this file with `REBALANCED_SASL_HOST_PORT` and
`REBALANCED_CERTS_DIR` set. Without them the tests skip (no Docker engine; make test runs the
same broker settings as a process in tests/integration/test_compose_sasl_ssl.py).

What a user of the example does, from the host: connect over SASL_SSL as the super user, give an
application user its group and topic with `rebalanced acls`, add a SCRAM user with `rebalanced
users scram`, and consume as that user."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

PORT = os.environ.get("REBALANCED_SASL_HOST_PORT", "")
live = pytest.mark.skipif(not PORT, reason="runs the SASL_SSL example: make docker-test")
pytestmark = [pytest.mark.integration, live]


def client_settings(user: str, password: str, mechanism: str = "PLAIN") -> dict[str, Any]:
    return {"bootstrap.servers": f"localhost:{PORT}", "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(Path(os.environ["REBALANCED_CERTS_DIR"]) / "ca.pem")}


def rebalanced(tmp_path: Path, *args: str, stdin: str = "") -> str:
    """The operators' CLI on the host, connected as the example's super user."""
    properties = tmp_path / "admin.properties"
    properties.write_text("".join(f"{key}={value}\n" for key, value in
                                  client_settings("admin", "admin-secret").items()
                                  if key != "bootstrap.servers"))
    command = [sys.executable, "-m", "coordinator", *args, "--bootstrap-server",
               f"localhost:{PORT}", "--command-config", str(properties)]
    result = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (command, result.stdout, result.stderr)
    return result.stdout


def produce(topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer(client_settings("admin", "admin-secret"))
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def consume(settings: dict[str, Any], topic: str, count: int,
            timeout_s: float = 30) -> tuple[list[bytes], list[str]]:
    from confluent_kafka import Consumer

    consumer = Consumer({**settings, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    seen: list[bytes] = []
    errors: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                errors.append(error.name())
                if not error.retriable():
                    break
                continue
            seen.append(message.value() or b"")
            consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()
    return seen, errors


def test_the_super_user_produces_and_consumes_over_sasl_ssl() -> None:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient(client_settings("admin", "admin-secret")).list_topics(timeout=30)
    (advertised,) = metadata.brokers.values()
    assert (advertised.host, advertised.port) == ("localhost", int(PORT))
    topic = f"admin-{uuid.uuid4().hex[:8]}"
    produce(topic, [b"a", b"b", b"c"])
    seen, errors = consume({**client_settings("admin", "admin-secret"),
                            "group.id": f"g-{topic}"}, topic, 3)
    assert sorted(seen) == [b"a", b"b", b"c"], errors


def test_a_wrong_password_is_refused() -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    reported: list[KafkaError] = []
    settings = client_settings("admin", "not-the-password")
    settings["error_cb"] = reported.append
    admin = AdminClient(settings)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # serves error_cb
    assert any(error.code() == KafkaError._AUTHENTICATION for error in reported), reported


def test_an_application_user_needs_its_acls_then_consumes(tmp_path: Path) -> None:
    topic, group = f"orders-{uuid.uuid4().hex[:8]}", f"app-{uuid.uuid4().hex[:8]}"
    produce(topic, [b"1", b"2", b"3"])
    app = {**client_settings("app", "app-secret"), "group.id": group}
    seen, errors = consume(app, topic, 3, timeout_s=10)
    assert seen == []
    assert {"GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED"} & set(errors), errors

    for resource in (["--group", group], ["--topic", topic]):
        rebalanced(tmp_path, "acls", "add", *resource, "--allow-principal", "User:app",
                   "--operation", "Read")
    listed = rebalanced(tmp_path, "acls", "list", "--json")
    assert group in listed and topic in listed, listed
    seen, errors = consume(app, topic, 3)
    assert sorted(seen) == [b"1", b"2", b"3"], errors


def test_a_scram_user_added_with_the_cli_connects(tmp_path: Path) -> None:
    user, topic = f"scram-{uuid.uuid4().hex[:6]}", f"scram-{uuid.uuid4().hex[:8]}"
    rebalanced(tmp_path, "users", "scram", "add", "--user", user, "--mechanism",
               "SCRAM-SHA-512", stdin="s3cret-password\n")
    assert user in rebalanced(tmp_path, "users", "scram", "list")
    for resource in (["--group", f"g-{topic}"], ["--topic", topic]):
        rebalanced(tmp_path, "acls", "add", *resource, "--allow-principal", f"User:{user}",
                   "--operation", "Read")
    produce(topic, [b"x"])
    settings = {**client_settings(user, "s3cret-password", "SCRAM-SHA-512"),
                "group.id": f"g-{topic}"}
    seen, errors = consume(settings, topic, 1)
    assert seen == [b"x"], errors
