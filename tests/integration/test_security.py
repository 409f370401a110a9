"""Secured listeners on one real broker: SSL (with client certificates requested),
SASL_PLAINTEXT and SASL_SSL next to PLAINTEXT, driven by stock clients (librdkafka, kafka-python,
aiokafka) with PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (unsecured JWS), and by raw requests
for what clients never send: wrong passwords, requests before authentication, unknown
mechanisms, plaintext on a TLS port, expired KIP-368 sessions."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from tests.bench import wire
from tests.broker_process import BrokerProcess, free_port
from tests.tls_material import Pki

pytestmark = pytest.mark.integration

PLAIN_USERS = 'user_alice="alice-secret" user_bob="bob-secret"'
JAAS = f"org.apache.kafka.common.security.plain.PlainLoginModule required {PLAIN_USERS};"
SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-secret"


@dataclass
class Secured:
    broker: BrokerProcess
    pki: Pki
    ports: dict[str, int]

    def log(self) -> str:
        return self.broker.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("security")
    pki = Pki.create(root / "pki")
    server_pem = pki.issue("server", server=True, CN="localhost", O="rebalanced tests")
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    broker = BrokerProcess(root / "data", port=ports["PLAINTEXT"], settings={
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server_pem),
        "ssl.truststore.location": str(pki.ca_path),
        "listener.name.ssl.ssl.client.auth": "requested",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "100",
    })
    broker.start()
    # SCRAM users are the broker's own records, created as in Kafka through the admin API.
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(SCRAM_USER, ScramCredentialInfo(mechanism, 4096),
                                     SCRAM_PASSWORD.encode())
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)]
    for future in admin.alter_user_scram_credentials(list(upserts)).values():
        future.result(timeout=15)
    try:
        yield Secured(broker, pki, ports)
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_path.read_text(errors="replace")


def _client_config(secured: Secured, listener: str, mechanism: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": f"127.0.0.1:{secured.ports[listener]}",
        "security.protocol": listener,
    }
    if listener in ("SSL", "SASL_SSL"):
        config["ssl.ca.location"] = str(secured.pki.ca_path)
    if mechanism in (None, "client certificate"):
        return config  # TLS alone; the certificate is the caller's
    if mechanism == "OAUTHBEARER":
        config.update({"sasl.mechanism": mechanism,
                       "enable.sasl.oauthbearer.unsecure.jwt": True,
                       "sasl.oauthbearer.config": "principal=dave"})
    elif mechanism == "PLAIN":
        config.update({"sasl.mechanism": mechanism, "sasl.username": "alice",
                       "sasl.password": "alice-secret"})
    else:
        config.update({"sasl.mechanism": mechanism, "sasl.username": SCRAM_USER,
                       "sasl.password": SCRAM_PASSWORD})
    return config


# Every way in, for each of the three clients: TLS without and with a client certificate,
# and SASL over plaintext and over TLS with each mechanism.
CASES = [(listener, mechanism)
         for listener, mechanisms in (
             ("SSL", (None, "client certificate")),
             ("SASL_PLAINTEXT", ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")),
             ("SASL_SSL", ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")))
         for mechanism in mechanisms]
CASE_IDS = [f"{listener}-{mechanism or 'server certificate'}".replace(" ", "-")
            for listener, mechanism in CASES]


def _unsecured_jws(principal: str) -> str:
    """A token Kafka's unsecured validator accepts (alg none), as development setups make."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': principal, 'iat': now, 'exp': now + 3600})}."


def _password_login(mechanism: str) -> tuple[str, str]:
    """A user of the broker's PLAIN users (JAAS) or of its SCRAM credentials."""
    return ("alice", "alice-secret") if mechanism == "PLAIN" else (SCRAM_USER, SCRAM_PASSWORD)


def _client_certificate(secured: Secured) -> tuple[Path, Path]:
    client = secured.pki.issue(f"client-{uuid.uuid4().hex[:6]}", CN="billing", O="Acme")
    return client.with_suffix(".key"), client.with_suffix(".crt")


@pytest.mark.parametrize(("listener", "mechanism"), CASES, ids=CASE_IDS)
def test_confluent_kafka_consumer_group_over_a_secured_listener(
        secured: Secured, listener: str, mechanism: str | None) -> None:
    config = _client_config(secured, listener, mechanism)
    if mechanism == "client certificate":
        key, certificate = _client_certificate(secured)
        config.update({"ssl.certificate.location": str(certificate),
                       "ssl.key.location": str(key)})
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    for i in range(3):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(seen) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value() or b"")
        assert seen == [b"m0", b"m1", b"m2"]
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == 3
    finally:
        consumer.close()


@pytest.mark.parametrize(("listener", "mechanism"), CASES, ids=CASE_IDS)
def test_kafka_python_consumer_group_over_a_secured_listener(
        secured: Secured, listener: str, mechanism: str | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider
    from kafka.structs import TopicPartition as KafkaTopicPartition

    class UnsecuredToken(AbstractTokenProvider):
        def token(self) -> str:
            return _unsecured_jws("dave")

    common: dict[str, Any] = dict(bootstrap_servers=f"127.0.0.1:{secured.ports[listener]}",
                                  security_protocol=listener)
    if listener in ("SSL", "SASL_SSL"):
        common["ssl_cafile"] = str(secured.pki.ca_path)
    if mechanism == "client certificate":
        key, certificate = _client_certificate(secured)
        common.update(ssl_certfile=str(certificate), ssl_keyfile=str(key))
    elif mechanism == "OAUTHBEARER":
        common.update(sasl_mechanism=mechanism, sasl_oauth_token_provider=UnsecuredToken())
    elif mechanism is not None:
        user, password = _password_login(mechanism)
        common.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                      sasl_plain_password=password)
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(**common)
    producer.send(topic, b"hello").get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, **common)
    try:
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while not values and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [record.value for record in records]
        assert values == [b"hello"]
        consumer.commit()
        assert consumer.committed(KafkaTopicPartition(topic, 0)) == 1
    finally:
        consumer.close()


@pytest.mark.parametrize(("listener", "mechanism"), CASES, ids=CASE_IDS)
async def test_aiokafka_consumer_group_over_a_secured_listener(
        secured: Secured, listener: str, mechanism: str | None) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.structs import TopicPartition as AioTopicPartition

    class UnsecuredToken(AbstractTokenProvider):
        async def token(self) -> str:
            return _unsecured_jws("dave")

    options: dict[str, Any] = dict(bootstrap_servers=f"127.0.0.1:{secured.ports[listener]}",
                                   security_protocol=listener)
    if listener in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=str(secured.pki.ca_path))
        if mechanism == "client certificate":
            key, certificate = _client_certificate(secured)
            context.load_cert_chain(str(certificate), str(key))
        options["ssl_context"] = context
    if mechanism == "OAUTHBEARER":
        options.update(sasl_mechanism=mechanism, sasl_oauth_token_provider=UnsecuredToken())
    elif mechanism is not None and mechanism != "client certificate":
        user, password = _password_login(mechanism)
        options.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                       sasl_plain_password=password)
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(**options)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"x")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False, **options)
    await consumer.start()
    try:
        message = await asyncio.wait_for(consumer.getone(), 30)
        assert message.value == b"x"
        await consumer.commit()
        assert await consumer.committed(AioTopicPartition(topic, 0)) == 1
    finally:
        await consumer.stop()


def test_a_wrong_password_fails_the_client_with_kafkas_message(secured: Secured) -> None:
    errors: list[KafkaError] = []
    config = {**_client_config(secured, "SASL_PLAINTEXT", "PLAIN"), "sasl.password": "nope",
              "error_cb": errors.append}
    producer = Producer(config)
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "Invalid username or password" in errors[0].str()
    del producer


# Raw requests ---------------------------------------------------------------------------------


async def _authenticate_plain(conn: wire.Connection, password: str, version: int = 2) -> Any:
    handshake = await conn.call(17, 1, {"mechanism": "PLAIN"})
    assert handshake.error_code.value == 0
    return await conn.call(36, version, {"auth_bytes": b"\x00alice\x00" + password.encode()})


async def _closed(conn: wire.Connection, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if conn._protocol.error is not None:
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_wrong_password_is_sasl_authentication_failed_then_closed(
        secured: Secured) -> None:
    before = secured.log().count('"authentication failed"')
    conn = await wire.Connection.open("127.0.0.1", secured.ports["SASL_PLAINTEXT"])
    await wire.api_versions(conn)
    started = time.monotonic()
    reply = await _authenticate_plain(conn, "wrong")
    assert reply.error_code.value == 58  # SASL_AUTHENTICATION_FAILED
    assert reply.error_message == "Authentication failed: Invalid username or password"
    assert time.monotonic() - started >= 0.09  # connection.failed.authentication.delay.ms
    assert await _closed(conn)
    await asyncio.sleep(0.2)
    log = secured.log()
    assert log.count('"authentication failed"') == before + 1
    assert "wrong" not in log.split('"authentication failed"')[-1].split("\n")[0]


async def test_a_request_before_authentication_closes_the_connection(secured: Secured) -> None:
    conn = await wire.Connection.open("127.0.0.1", secured.ports["SASL_SSL"],
                                      tls=ssl.create_default_context(
                                          cafile=str(secured.pki.ca_path)))
    await wire.api_versions(conn)
    pending = conn.send_raw(wire.encode(3, 9, {"topics": [], "allow_auto_topic_creation":
                                               False}))
    assert await _closed(conn)
    assert not pending.done() or pending.exception() is not None
    assert "request before SASL authentication" in secured.log()


async def test_an_unknown_mechanism_is_refused_with_the_enabled_ones(secured: Secured) -> None:
    conn = await wire.Connection.open("127.0.0.1", secured.ports["SASL_PLAINTEXT"])
    reply = await conn.call(17, 1, {"mechanism": "GSSAPI"})
    assert reply.error_code.value == 33  # UNSUPPORTED_SASL_MECHANISM
    assert list(reply.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    assert await _closed(conn)


async def test_handshake_v0_then_bare_tokens(secured: Secured) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", secured.ports["SASL_PLAINTEXT"])

    async def frame() -> bytes:
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
        return await reader.readexactly(size)

    try:
        writer.write(bytes(wire.encode(17, 0, {"mechanism": "PLAIN"})))
        assert wire.decode(17, 0, await frame()).error_code.value == 0
        # After a v0 handshake the token goes bare, size-prefixed, and so does the answer.
        token = b"\x00alice\x00alice-secret"
        writer.write(struct.pack(">i", len(token)) + token)
        assert await frame() == b""
        # Authenticated: Kafka requests again.
        writer.write(bytes(wire.encode(3, 9, {"topics": [], "allow_auto_topic_creation":
                                              False})))
        assert wire.decode(3, 9, await frame()).brokers
    finally:
        writer.close()


async def test_plaintext_on_a_tls_port_is_closed_cleanly(secured: Secured) -> None:
    before = secured.log().count("TLS handshake failed")
    conn = await wire.Connection.open("127.0.0.1", secured.ports["SSL"])
    conn.send_raw(wire.encode(18, 0, {}))
    assert await _closed(conn)
    await asyncio.sleep(0.2)
    assert secured.log().count("TLS handshake failed") == before + 1
    # The broker still serves TLS clients.
    tls = await wire.Connection.open("127.0.0.1", secured.ports["SSL"],
                                     tls=ssl.create_default_context(
                                         cafile=str(secured.pki.ca_path)))
    assert 17 in await wire.api_versions(tls)
    await tls.close()


def test_librdkafka_reauthenticates_within_the_session_lifetime(tmp_path: Path) -> None:
    import urllib.request

    plain, sasl, metrics = free_port(), free_port(), free_port()
    broker = BrokerProcess(tmp_path / "data", port=plain, settings={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": "1500",
        "metrics.listener": f"127.0.0.1:{metrics}",
    }).start()
    config = {"bootstrap.servers": f"127.0.0.1:{sasl}", "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "alice",
              "sasl.password": "alice-secret"}
    topic = f"t-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    consumed = 0
    try:
        deadline = time.monotonic() + 6  # four session lifetimes
        while time.monotonic() < deadline:
            producer.produce(topic, b"x")
            producer.poll(0)
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                consumed += 1
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as page:
            text = page.read().decode()
    finally:
        consumer.close()
        producer.flush(5)
        broker.stop()
    handshakes = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                     if line.startswith('rebalanced_requests_total{api="SaslHandshake"'))
    log = broker.log_path.read_text(errors="replace")
    assert consumed > 10
    assert handshakes >= 6  # each connection authenticated again, more than once
    assert "SASL session expired" not in log and "Traceback" not in log
