"""Client certificates on an SSL listener (`ssl.client.auth=required`): the principal is the
certificate's subject mapped by `ssl.principal.mapping.rules`, and a client without a
certificate, or with one from another CA, does not get in. The broker runs in this process
(real sockets, real TLS) so that the connections' principals can be read."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from protocol.server import KafkaServer
from tests.bench import wire
from tests.integration.in_process import ssl_server, until
from tests.tls_material import Pki

pytestmark = pytest.mark.integration


@pytest.fixture
async def mtls(tmp_path: Path) -> AsyncIterator[tuple[KafkaServer, Pki]]:
    pki = Pki.create(tmp_path / "pki")
    server_pem = pki.issue("server", server=True, CN="localhost")
    async with ssl_server(tmp_path / "data", {
        "listener.name.ssl.ssl.keystore.location": str(server_pem),
        "listener.name.ssl.ssl.truststore.location": str(pki.ca_path),
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=ops,.*$/$1-ops/L,DEFAULT",
    }) as server:
        yield server, pki


def _client_context(pki: Pki, certificate: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_path))
    if certificate is not None:
        context.load_cert_chain(str(certificate))
    return context


async def _principals_after_api_versions(server: KafkaServer, pki: Pki,
                                         certificate: Path) -> set[str]:
    conn = await wire.Connection.open("127.0.0.1", server.port,
                                      tls=_client_context(pki, certificate))
    try:
        await wire.api_versions(conn)
        return {connection.principal for connection in server.connections}
    finally:
        await conn.close()
        await until(lambda: not server.connections, "connection closed")


async def test_the_principal_is_the_certificate_subject_as_mapped(mtls) -> None:
    server, pki = mtls
    alice = pki.issue("alice", CN="Alice", OU="ops", O="Acme", C="DE")
    assert await _principals_after_api_versions(server, pki, alice) == {"User:alice-ops"}
    # No rule matches: DEFAULT, the subject as Kafka writes it (RFC 2253, most specific first).
    bob = pki.issue("bob", CN="bob", OU="dev", O="Acme, Inc.", C="DE")
    assert await _principals_after_api_versions(server, pki, bob) == {
        "User:CN=bob,OU=dev,O=Acme\\, Inc.,C=DE"}


@pytest.mark.parametrize("which", ["no certificate", "another CA"])
async def test_a_client_without_a_trusted_certificate_is_refused(mtls, tmp_path: Path,
                                                                 which: str) -> None:
    server, pki = mtls
    certificate = None
    if which == "another CA":
        certificate = Pki.create(tmp_path / "other", "other CA").issue("mallory", CN="alice")
    with pytest.raises((wire.WireError, ssl.SSLError, ConnectionError, OSError)):
        conn = await wire.Connection.open("127.0.0.1", server.port,
                                          tls=_client_context(pki, certificate))
        try:
            await wire.api_versions(conn)
        finally:
            await conn.close()
    assert not server.connections


async def test_a_certificate_no_rule_maps_is_refused(tmp_path: Path) -> None:
    pki = Pki.create(tmp_path / "pki")
    async with ssl_server(tmp_path / "data", {
        "ssl.keystore.location": str(pki.issue("server", server=True, CN="localhost")),
        "ssl.truststore.location": str(pki.ca_path),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=ops,.*$/$1/",
    }) as server:
        stranger = pki.issue("stranger", CN="stranger", OU="dev", O="Acme")
        with pytest.raises((wire.WireError, ConnectionError, OSError)):
            conn = await wire.Connection.open("127.0.0.1", server.port,
                                              tls=_client_context(pki, stranger))
            try:
                await wire.api_versions(conn)
            finally:
                await conn.close()
        assert not server.connections


async def test_tls_handshakes_under_way_count_against_max_connections(tmp_path: Path) -> None:
    pki = Pki.create(tmp_path / "pki")
    async with ssl_server(tmp_path / "data", {
        "ssl.keystore.location": str(pki.issue("server", server=True, CN="localhost")),
    }, max_connections=2) as server:
        # Two sockets that never finish their handshake hold both places ...
        stalled = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        await until(lambda: server.handshaking == 2, "handshakes counted")
        with pytest.raises((wire.WireError, ConnectionError, OSError, ssl.SSLError)):
            conn = await wire.Connection.open("127.0.0.1", server.port,
                                              tls=_client_context(pki, None), timeout=3)
            await wire.api_versions(conn)
        # ... until they go.
        for _, writer in stalled:
            writer.close()
        await until(lambda: server.handshaking == 0, "handshakes released")
        conn = await wire.Connection.open("127.0.0.1", server.port,
                                          tls=_client_context(pki, None))
        assert 18 in await wire.api_versions(conn)
        await conn.close()
