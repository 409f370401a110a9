"""The TLS layer's record path, in C (`protocol/_tls_records.c`) and in Python, against a real
TLS client over memory: requests in, answers out, records cut and joined, an altered record,
the client's close_notify and an end of stream inside a record. Each test runs on both paths;
the last one imports the layer as it is where the extension was not built."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import protocol
import protocol.tls
from protocol.tls import TlsLayer
from tests.tls_material import Pki


class _Transport:
    """The TCP side of the layer: keeps what the layer writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 9092) if name == "peername" else default


class _Echo(asyncio.Protocol):
    """Answers every piece of data with b"re:" and the data; remembers the end of stream."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.received: list[bytes] = []
        self.eof = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received.append(data)
        self.transport.write(b"re:" + data)

    def eof_received(self) -> bool:
        self.eof = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


def _layer_class(base: type, in_c: bool) -> type:
    class Layer(base):  # type: ignore[valid-type, misc]
        __slots__ = ("app", "failures")
        records_in_c = in_c

        def handshake_completed(self) -> asyncio.Protocol | None:
            self.app = _Echo()
            return self.app

        def stream_failed(self, reason: str) -> None:
            self.failures.append(reason)

    return Layer


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    pki = Pki.create(Path(tmp_path_factory.mktemp("pki")))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(pki.issue("server", server=True, CN="localhost")))
    return server, ssl.create_default_context(cafile=str(pki.ca_path))


class _Pair:
    """A client `SSLObject` and a layer, their bytes carried over memory by hand."""

    def __init__(self, layer_class: type, contexts: tuple[ssl.SSLContext, ssl.SSLContext]):
        server_context, client_context = contexts
        self.raw = _Transport()
        self.layer = layer_class(server_context, 10.0)
        self.layer.failures = []
        self.layer.connection_made(self.raw)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.client = client_context.wrap_bio(self.incoming, self.outgoing,
                                              server_hostname="localhost")
        for _ in range(10):
            with contextlib.suppress(ssl.SSLWantReadError):
                self.client.do_handshake()
            self.to_layer()
            self.to_client()
        assert self.layer._app is not None, "no handshake"

    def to_layer(self, pieces: int = 1) -> None:
        if not self.outgoing.pending:
            return
        stream = self.outgoing.read()
        size = max(1, -(-len(stream) // pieces))
        for start in range(0, len(stream), size):
            self.layer.data_received(stream[start:start + size])

    def to_client(self) -> None:
        for data in self.raw.written:
            self.incoming.write(data)
        self.raw.written.clear()

    def answers(self) -> bytes:
        self.to_client()
        out = bytearray()
        with contextlib.suppress(ssl.SSLWantReadError):
            while chunk := self.client.read(65536):
                out += chunk
        return bytes(out)


@pytest.fixture(params=["c", "python"])
async def pair(request: pytest.FixtureRequest,
         contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> AsyncIterator[_Pair]:
    in_c = request.param == "c"
    if in_c and not protocol.tls.RECORDS_IN_C:
        pytest.skip("protocol._tls_records was not built")
    made = _Pair(_layer_class(TlsLayer, in_c), contexts)
    assert made.layer._records_bound is in_c
    yield made


async def test_requests_in_answers_out(pair: _Pair) -> None:
    for n in range(3):
        pair.client.write(b"request %d" % n)
        pair.to_layer()
        assert pair.answers() == b"re:request %d" % n
    assert pair.layer.app.received == [b"request 0", b"request 1", b"request 2"]
    assert not pair.layer.failures and not pair.raw.closed


async def test_records_cut_in_pieces_and_sent_together(pair: _Pair) -> None:
    for n in range(4):
        pair.client.write(b"together %d" % n)  # four records in one TCP read
    pair.to_layer()
    assert pair.layer.app.received == [b"together %d" % n for n in range(4)]
    assert pair.answers() == b"".join(b"re:together %d" % n for n in range(4))
    pair.layer.app.received.clear()
    big = bytes(range(256)) * 200  # 51,200 bytes: four records, cut in 37 pieces
    pair.client.write(big)
    pair.to_layer(pieces=37)
    assert b"".join(pair.layer.app.received) == big
    answer = pair.answers()
    assert answer == b"".join(b"re:" + piece for piece in pair.layer.app.received)


async def test_an_answer_larger_than_a_record(pair: _Pair) -> None:
    pair.layer.write(b"x" * 70_000)  # five records in one write
    assert len(pair.raw.written) == 1
    assert pair.answers() == b"x" * 70_000


async def test_records_wait_while_reading_is_paused(pair: _Pair) -> None:
    pair.layer.pause_reading()
    pair.client.write(b"first")
    pair.client.write(b"second")
    pair.to_layer()
    assert pair.layer.app.received == []
    pair.layer._app_reading_paused = False
    pair.layer._read_records()
    assert pair.layer.app.received == [b"first", b"second"]


async def test_an_altered_record_fails_the_stream_once_and_closes(pair: _Pair) -> None:
    pair.client.write(b"to be altered")
    record = bytearray(pair.outgoing.read())
    record[-3] ^= 0x55
    pair.layer.data_received(bytes(record))
    assert pair.layer.app.received == []
    assert len(pair.layer.failures) == 1
    assert "decryption failed or bad record mac" in pair.layer.failures[0].lower()
    assert pair.raw.closed and pair.layer._closing
    assert len(pair.raw.written) == 1  # the alert that tells the client why
    pair.layer.write(b"after the close")
    assert len(pair.raw.written) == 1  # nothing more


async def test_close_notify_ends_the_stream(pair: _Pair) -> None:
    with contextlib.suppress(ssl.SSLWantReadError):
        pair.client.unwrap()
    pair.to_layer()
    assert pair.layer.app.eof and not pair.layer.failures


async def test_an_end_of_stream_inside_a_record(pair: _Pair) -> None:
    pair.client.write(b"cut short")
    record = pair.outgoing.read()
    pair.layer.data_received(record[:10])
    pair.layer.eof_received()
    assert pair.layer.app.received == [] and pair.layer.app.eof
    assert not pair.layer.failures  # an end of stream, not an altered record


async def test_without_the_extension_the_python_path_serves(
        contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "protocol._tls_records", None)  # an import that fails
    monkeypatch.delattr(protocol, "_tls_records", raising=False)
    try:
        fallback = importlib.reload(protocol.tls)
        assert fallback.RECORDS_IN_C is False
        made = _Pair(_layer_class(fallback.TlsLayer, True), contexts)
        assert made.layer._records_bound is False
        made.client.write(b"no extension")
        made.to_layer(pieces=3)
        assert made.answers() == b"re:no extension"
    finally:
        monkeypatch.undo()
        importlib.reload(protocol.tls)


async def test_a_busy_connection_keeps_its_record_buffers(
        contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    if not protocol.tls.RECORDS_IN_C:
        pytest.skip("protocol._tls_records was not built")
    made = _Pair(_layer_class(TlsLayer, True), contexts)
    for n in range(10):  # an authentication and a few requests: not busy
        made.client.write(b"%d" % n)
        made.to_layer()
    assert not made.layer.keeping_record_buffers
    for n in range(10):  # a steady stream, each record within milliseconds of the last
        made.client.write(b"%d" % n)
        made.to_layer()
    assert made.layer.keeping_record_buffers
    assert made.answers().count(b"re:") == 20
    await asyncio.sleep(0.1)  # a gap: the next record hands them back
    made.client.write(b"after a pause")
    made.to_layer()
    assert not made.layer.keeping_record_buffers
    for n in range(20):
        made.client.write(b"%d" % n)
        made.to_layer()
    assert made.layer.keeping_record_buffers
    assert made.layer.release_record_buffers() is True  # the idle sweep's call
    assert not made.layer.keeping_record_buffers
    assert made.layer.release_record_buffers() is False
    made.client.write(b"still served")
    made.to_layer()
    assert made.answers().endswith(b"re:still served")
