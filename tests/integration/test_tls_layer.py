"""The TLS layer of SSL listeners against real TLS clients: pipelined requests beyond the
in-flight limit (reading pauses with decrypted records still pending), requests and answers
larger than a TLS record, the client's close_notify, and bad input before the handshake ends
(garbage, silence past the handshake timeout): one line each and a close."""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog

import protocol.server
import protocol.tls
from protocol.server import KafkaServer
from tests.bench import wire
from tests.integration.in_process import ssl_server, until
from tests.tls_material import Pki

pytestmark = pytest.mark.integration

_SIZE = struct.Struct(">i")


@pytest.fixture(params=["records in C", "records in Python"])
async def tls_server(request: pytest.FixtureRequest, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[KafkaServer, Pki]]:
    if request.param == "records in C" and not protocol.tls.RECORDS_IN_C:
        pytest.skip("protocol._tls_records was not built")
    monkeypatch.setattr(protocol.tls.TlsLayer, "records_in_c",
                        request.param == "records in C")
    pki = Pki.create(tmp_path / "pki")
    async with ssl_server(tmp_path / "data", {
        "ssl.keystore.location": str(pki.issue("server", server=True, CN="localhost")),
    }, max_in_flight=4) as server:
        yield server, pki


async def _open(server: KafkaServer, pki: Pki) -> tuple[asyncio.StreamReader,
                                                        asyncio.StreamWriter]:
    context = ssl.create_default_context(cafile=str(pki.ca_path))
    return await asyncio.open_connection("127.0.0.1", server.port, ssl=context,
                                         server_hostname="localhost")


def _frame(api_key: int, version: int, body: dict[str, object], correlation_id: int) -> bytes:
    frame = wire.encode(api_key, version, body)
    struct.pack_into(">i", frame, 8, correlation_id)
    return bytes(frame)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), 10))
    return await asyncio.wait_for(reader.readexactly(size), 10)


async def test_pipelined_requests_are_answered_in_order(tls_server) -> None:
    server, pki = tls_server
    reader, writer = await _open(server, pki)
    # 300 requests in one write: many in each record, far more than max_in_flight (4).
    writer.write(b"".join(_frame(18, 0, {}, n) for n in range(300)))
    for n in range(300):
        frame = await _read_frame(reader)
        assert _SIZE.unpack_from(frame, 0)[0] == n
        assert wire.decode(18, 0, frame).error_code.value == 0
    writer.close()
    await until(lambda: not server.connections, "connection closed")


async def test_a_request_and_an_answer_larger_than_a_record(tls_server) -> None:
    server, pki = tls_server
    reader, writer = await _open(server, pki)
    names = [f"a-topic-name-long-enough-to-fill-records-{n:05d}" for n in range(2000)]
    request = _frame(3, 9, {"topics": [{"name": name} for name in names],
                            "allow_auto_topic_creation": False}, 7)
    assert len(request) > 3 * 16384
    writer.write(request)
    reply = wire.decode(3, 9, await _read_frame(reader))
    assert sorted(t.name for t in reply.topics) == sorted(names)
    # The connection goes on serving after it.
    writer.write(_frame(18, 0, {}, 8))
    assert wire.decode(18, 0, await _read_frame(reader)).error_code.value == 0
    writer.close()
    await until(lambda: not server.connections, "connection closed")


async def test_records_split_at_every_point_across_tcp_writes(tls_server) -> None:
    """The client's TLS bytes arrive a few at a time (each record cut in many pieces, the
    cuts falling inside headers and bodies, two records sharing a piece): every request is
    read whole once its record is complete, including the rest of a record the SSL object
    had already taken in part."""
    server, pki = tls_server
    context = ssl.create_default_context(cafile=str(pki.ca_path))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)

    async def exchange() -> None:
        if outgoing.pending:
            writer.write(outgoing.read())
            await writer.drain()
        incoming.write(await asyncio.wait_for(reader.read(65536), 10))

    while True:
        try:
            client.do_handshake()
            break
        except ssl.SSLWantReadError:
            await exchange()
    big = _frame(3, 9, {"topics": [{"name": f"split-topic-{n:04d}"} for n in range(1500)],
                        "allow_auto_topic_creation": False}, 1)
    assert len(big) > 16384
    for piece_size, frames in ((7, [_frame(18, 0, {}, n) for n in range(2, 6)]),
                               (1000, [big, _frame(18, 0, {}, 6)])):
        for frame in frames:
            client.write(frame)  # one or more records each
        stream = outgoing.read()
        for start in range(0, len(stream), piece_size):
            writer.write(stream[start:start + piece_size])
            await writer.drain()
            await asyncio.sleep(0)
        answers = bytearray()
        wanted = len(frames)
        got: list[bytes] = []
        while len(got) < wanted:
            try:
                answers += client.read(65536)
            except ssl.SSLWantReadError:
                incoming.write(await asyncio.wait_for(reader.read(65536), 10))
                continue
            while len(answers) >= 4 and len(answers) >= 4 + _SIZE.unpack_from(answers)[0]:
                size = _SIZE.unpack_from(answers)[0]
                got.append(bytes(answers[4:4 + size]))
                del answers[:4 + size]
        ids = [_SIZE.unpack_from(frame, 0)[0] for frame in got]
        assert ids == [_SIZE.unpack_from(frame, 8)[0] for frame in frames]
    writer.close()
    await until(lambda: not server.connections, "connection closed")


async def test_close_notify_ends_the_connection(tls_server) -> None:
    server, pki = tls_server
    conn = await wire.Connection.open("127.0.0.1", server.port,
                                      tls=ssl.create_default_context(cafile=str(pki.ca_path)))
    assert 18 in await wire.api_versions(conn)
    assert len(server.connections) == 1
    await conn.close()
    await until(lambda: not server.connections and not server.handshaking,
                "connection released")


async def test_the_idle_sweep_takes_back_a_busy_connections_buffers(tmp_path: Path) -> None:
    if not protocol.tls.RECORDS_IN_C:
        pytest.skip("protocol._tls_records was not built")
    pki = Pki.create(tmp_path / "pki")
    async with ssl_server(tmp_path / "data", {
        "ssl.keystore.location": str(pki.issue("server", server=True, CN="localhost")),
    }, idle_ms=2000) as server:  # a sweep every 0.5 s, a close after 2 s idle
        conn = await wire.Connection.open(
            "127.0.0.1", server.port, tls=ssl.create_default_context(cafile=str(pki.ca_path)))
        assert 18 in await wire.api_versions(conn)
        (connection,) = server.connections
        layer: Any = connection._transport
        assert not layer.keeping_record_buffers
        for _ in range(400):  # busy: requests within milliseconds of each other
            assert 18 in await wire.api_versions(conn)
            if layer.keeping_record_buffers:
                break
        assert layer.keeping_record_buffers
        await until(lambda: not layer.keeping_record_buffers, "buffers handed back", 1.8)
        assert connection in server.connections  # idle, not yet closed
        await conn.close()


async def test_an_altered_record_is_one_line_and_a_close(tls_server) -> None:
    """A record changed on the way after the handshake: the connection is closed with one
    line, and the broker goes on serving others."""
    server, pki = tls_server
    context = ssl.create_default_context(cafile=str(pki.ca_path))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    while True:
        try:
            client.do_handshake()
            break
        except ssl.SSLWantReadError:
            if outgoing.pending:
                writer.write(outgoing.read())
            incoming.write(await asyncio.wait_for(reader.read(65536), 10))
    writer.write(outgoing.read())  # the client's Finished
    with structlog.testing.capture_logs() as logs:
        client.write(_frame(18, 0, {}, 1))
        record = bytearray(outgoing.read())
        record[-1] ^= 0x01  # the record's authentication tag
        writer.write(bytes(record))
        assert await _closed_by_the_broker(reader)
        writer.close()
        await until(lambda: not server.connections, "connection closed")
    refused = [e for e in logs if e.get("problem") == "TLS record refused"]
    assert len(refused) == 1, logs
    assert "bad record mac" in refused[0]["reason"].lower()
    assert not [e for e in logs if e.get("exc_info") or e.get("log_level") == "error"]
    conn = await wire.Connection.open("127.0.0.1", server.port, tls=context)
    assert 18 in await wire.api_versions(conn)
    await conn.close()


async def _closed_by_the_broker(reader: asyncio.StreamReader) -> bool:
    try:
        while await asyncio.wait_for(reader.read(4096), 10):
            pass  # the alert
    except ConnectionError:
        pass
    return True


async def test_garbage_instead_of_a_handshake_is_one_line_and_a_close(tls_server) -> None:
    server, _ = tls_server
    with structlog.testing.capture_logs() as logs:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"\x16\x03\x01\x00\x20" + bytes(range(32)) + b"GET / HTTP/1.0\r\n\r\n")
        assert await _closed_by_the_broker(reader)
        writer.close()
        await until(lambda: not server.handshaking, "handshake released")
    refused = [e for e in logs if e.get("problem") == "TLS handshake failed"]
    assert len(refused) == 1, logs
    assert refused[0]["listener"] == "SSL" and refused[0]["client_host"] == "/127.0.0.1"
    assert not [e for e in logs if e.get("exc_info") or e.get("log_level") == "error"]
    assert not server.connections


async def test_no_handshake_within_the_timeout_is_closed(tls_server, monkeypatch) -> None:
    server, pki = tls_server
    monkeypatch.setattr(protocol.server, "_TLS_HANDSHAKE_TIMEOUT_S", 0.3)
    with structlog.testing.capture_logs() as logs:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        await until(lambda: server.handshaking == 1, "handshake counted")
        assert await _closed_by_the_broker(reader)
        writer.close()
        await until(lambda: not server.handshaking, "handshake released")
    assert [e["reason"] for e in logs if e.get("problem") == "TLS handshake failed"] == [
        "no TLS handshake within 0.3 s"]
    # A client that does shake hands is served.
    conn = await wire.Connection.open("127.0.0.1", server.port,
                                      tls=ssl.create_default_context(cafile=str(pki.ca_path)))
    assert 18 in await wire.api_versions(conn)
    await conn.close()
