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

import pytest

import protocol
import protocol.tls
from protocol.tls import TlsLayer
from tests.tls_memory import Pair, layer_class, tls_contexts


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    return tls_contexts(Path(tmp_path_factory.mktemp("pki")))


@pytest.fixture(params=["c", "python"])
async def pair(request: pytest.FixtureRequest,
         contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> AsyncIterator[Pair]:
    in_c = request.param == "c"
    if in_c and not protocol.tls.RECORDS_IN_C:
        pytest.skip("protocol._tls_records was not built")
    made = Pair(layer_class(TlsLayer, in_c), contexts)
    assert made.layer._records_bound is in_c
    yield made


async def test_requests_in_answers_out(pair: Pair) -> None:
    for n in range(3):
        pair.client.write(b"request %d" % n)
        pair.to_layer()
        assert pair.answers() == b"re:request %d" % n
    assert pair.layer.app.received == [b"request 0", b"request 1", b"request 2"]
    assert not pair.layer.failures and not pair.raw.closed


async def test_records_cut_in_pieces_and_sent_together(pair: Pair) -> None:
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


async def test_an_answer_larger_than_a_record(pair: Pair) -> None:
    pair.layer.write(b"x" * 70_000)  # five records in one write
    assert len(pair.raw.written) == 1
    assert pair.answers() == b"x" * 70_000


async def test_records_wait_while_reading_is_paused(pair: Pair) -> None:
    pair.layer.pause_reading()
    pair.client.write(b"first")
    pair.client.write(b"second")
    pair.to_layer()
    assert pair.layer.app.received == []
    pair.layer._app_reading_paused = False
    pair.layer._read_records()
    assert pair.layer.app.received == [b"first", b"second"]


async def test_an_altered_record_fails_the_stream_once_and_closes(pair: Pair) -> None:
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


async def test_close_notify_ends_the_stream(pair: Pair) -> None:
    with contextlib.suppress(ssl.SSLWantReadError):
        pair.client.unwrap()
    pair.to_layer()
    assert pair.layer.app.eof and not pair.layer.failures


async def test_an_end_of_stream_inside_a_record(pair: Pair) -> None:
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
        made = Pair(layer_class(fallback.TlsLayer, True), contexts)
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
    made = Pair(layer_class(TlsLayer, True), contexts)
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
