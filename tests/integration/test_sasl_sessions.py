"""SASL sessions on a real SASL_PLAINTEXT listener (in this process, real sockets): KIP-368
re-authentication within `connections.max.reauth.ms` and the close of a session that expired,
a SCRAM exchange step by step, and SaslAuthenticate out of order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from scramp import ScramClient

from coordinator.security.scram_store import ScramStore, credential_from_password
from coordinator.settings import BrokerSettings
from protocol.server import KafkaServer
from tests.bench import wire
from tests.integration.in_process import started_broker

pytestmark = pytest.mark.integration

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')
METADATA = {"topics": [], "allow_auto_topic_creation": False}


@pytest.fixture
async def sasl_server(tmp_path: Path) -> AsyncIterator[KafkaServer]:
    from coordinator.security.listeners import listener_security

    broker = await started_broker(tmp_path / "data", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": "1000",
        "connection.failed.authentication.delay.ms": "0",
    }, partitions=None)
    settings: BrokerSettings = broker.settings
    store = ScramStore(settings.data_dir)
    store.write({"carol": {"SCRAM-SHA-256": credential_from_password(
        "SCRAM-SHA-256", "carol-secret", 4096)}})
    server = KafkaServer(broker, listeners=[("SASL_PLAINTEXT", "127.0.0.1", 0)],
                         security=listener_security(settings), max_frame_bytes=1 << 20)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await broker.stop()


async def _plain(conn: wire.Connection, user: str, password: str) -> Any:
    assert (await conn.call(17, 1, {"mechanism": "PLAIN"})).error_code.value == 0
    return await conn.call(36, 2, {"auth_bytes": f"\0{user}\0{password}".encode()})


async def _closed(conn: wire.Connection, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if conn._protocol.error is not None:
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_session_is_renewed_by_reauthentication_and_closed_once_expired(
        sasl_server: KafkaServer) -> None:
    conn = await wire.Connection.open("127.0.0.1", sasl_server.port)
    reply = await _plain(conn, "alice", "alice-secret")
    assert reply.error_code.value == 0
    assert reply.session_lifetime.total_seconds() == 1.0
    await asyncio.sleep(0.6)
    renewed = await _plain(conn, "alice", "alice-secret")  # KIP-368, same connection
    assert renewed.error_code.value == 0 and renewed.session_lifetime.total_seconds() == 1.0
    await asyncio.sleep(0.6)  # past the first session's end, within the renewed one
    assert (await conn.call(3, 9, METADATA)).brokers
    await asyncio.sleep(0.6)
    conn.send_raw(wire.encode(3, 9, METADATA))
    assert await _closed(conn)


async def test_reauthentication_as_another_user_fails(sasl_server: KafkaServer) -> None:
    conn = await wire.Connection.open("127.0.0.1", sasl_server.port)
    assert (await _plain(conn, "alice", "alice-secret")).error_code.value == 0
    reply = await _plain(conn, "bob", "bob-secret")
    assert reply.error_code.value == 58
    assert await _closed(conn)


async def test_scram_sha_256_step_by_step(sasl_server: KafkaServer) -> None:
    for password, expected in (("carol-secret", 0), ("wrong", 58)):
        conn = await wire.Connection.open("127.0.0.1", sasl_server.port)
        assert (await conn.call(17, 1, {"mechanism": "SCRAM-SHA-256"})).error_code.value == 0
        client = ScramClient(["SCRAM-SHA-256"], "carol", password)
        first = await conn.call(36, 2, {"auth_bytes": client.get_client_first().encode()})
        assert first.error_code.value == 0
        client.set_server_first(first.auth_bytes.decode())
        final = await conn.call(36, 2, {"auth_bytes": client.get_client_final().encode()})
        assert final.error_code.value == expected
        if expected == 0:
            client.set_server_final(final.auth_bytes.decode())  # the server proved its key
            assert (await conn.call(3, 9, METADATA)).brokers
        else:
            assert await _closed(conn)
        await conn.close()


async def test_scram_refuses_channel_binding_and_unknown_extensions(
        sasl_server: KafkaServer) -> None:
    for first in ("p=tls-unique,,n=carol,r=abcdef", "n,,n=carol,r=abcdef,ext=1"):
        conn = await wire.Connection.open("127.0.0.1", sasl_server.port)
        assert (await conn.call(17, 1, {"mechanism": "SCRAM-SHA-256"})).error_code.value == 0
        reply = await conn.call(36, 2, {"auth_bytes": first.encode()})
        assert reply.error_code.value == 58
        assert await _closed(conn)


async def test_sasl_authenticate_before_a_handshake_is_illegal(sasl_server: KafkaServer) -> None:
    conn = await wire.Connection.open("127.0.0.1", sasl_server.port)
    reply = await conn.call(36, 2, {"auth_bytes": b"\0alice\0alice-secret"})
    assert reply.error_code.value == 34  # ILLEGAL_SASL_STATE
    assert await _closed(conn)


async def test_a_large_frame_before_authentication_closes_the_connection(
        sasl_server: KafkaServer) -> None:
    # Kafka's sasl.server.max.receive.size (512 KiB) until authenticated; after, the usual.
    big = {"auth_bytes": b"x" * 600_000}
    conn = await wire.Connection.open("127.0.0.1", sasl_server.port)
    assert (await conn.call(17, 1, {"mechanism": "PLAIN"})).error_code.value == 0
    conn.send_raw(wire.encode(36, 2, big))
    assert await _closed(conn)
    conn = await wire.Connection.open("127.0.0.1", sasl_server.port)
    assert (await _plain(conn, "alice", "alice-secret")).error_code.value == 0
    reply = await conn.call(36, 2, big)  # answered: ILLEGAL_SASL_STATE once authenticated
    assert reply.error_code.value == 34
