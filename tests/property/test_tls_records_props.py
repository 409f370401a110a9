"""The TLS record path, in C and in Python, against a real TLS client over memory: whatever the
client's messages (empty to several records long) and however its byte stream is cut into TCP
reads, the connection gets exactly the client's bytes, in order, record by record, and the
client gets back exactly the connection's answers; both paths hand on the same pieces."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import protocol.tls
from protocol.tls import TlsLayer
from tests.tls_memory import Pair, layer_class, tls_contexts

_CONTEXTS = tls_contexts(Path(tempfile.mkdtemp(prefix="tls-props-")))

_PATTERN = bytes(range(256)) * 200  # 51,200 bytes to cut messages from


def _message(size: int, offset: int) -> bytes:
    return _PATTERN[offset:offset + size]


# Small messages and ones of one to three records, as sizes (a drawn 40 KB blob would be
# mostly noise to shrink).
messages = st.lists(st.builds(_message, st.one_of(st.integers(1, 64),
                                                  st.integers(16_000, 40_000)),
                              st.integers(0, 255)),
                    min_size=1, max_size=5)
cuts = st.lists(st.integers(min_value=1, max_value=20_000), min_size=1, max_size=12)


async def _exchange(in_c: bool, sent: list[bytes], sizes: list[int]) -> tuple[list[bytes],
                                                                              bytes]:
    pair = Pair(layer_class(TlsLayer, in_c), _CONTEXTS)
    assert pair.layer._records_bound is in_c
    for message in sent:
        pair.client.write(message)
    stream = pair.outgoing.read()
    start, turn = 0, 0
    while start < len(stream):  # TCP reads of the sizes drawn, over and over
        size = sizes[turn % len(sizes)]
        pair.layer.data_received(stream[start:start + size])
        start, turn = start + size, turn + 1
    assert not pair.layer.failures
    return list(pair.layer.app.received), pair.answers()


@settings(max_examples=60, deadline=None)
@given(sent=messages, sizes=cuts)
def test_every_byte_arrives_once_in_order_on_both_paths(sent: list[bytes],
                                                        sizes: list[int]) -> None:
    if not protocol.tls.RECORDS_IN_C:
        pytest.skip("protocol._tls_records was not built")
    pieces_c, answers_c = asyncio.run(_exchange(True, sent, sizes))
    pieces_python, answers_python = asyncio.run(_exchange(False, sent, sizes))
    assert b"".join(pieces_c) == b"".join(sent)
    assert pieces_c == pieces_python  # one piece per record, on either path
    assert answers_c == answers_python == b"".join(b"re:" + piece for piece in pieces_c)
