"""A transaction marker fences the older epochs of its producer on that partition."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from coordinator.dataplane.producers import ProducerSequenceError, ProducerTable
from storage.record_batch import encode_batch
from storage.transactions import TRANSACTIONAL


def batch(producer_id: int, epoch: int, sequence: int) -> bytes:
    data = bytearray(encode_batch([(b"k", b"v")], 1000))
    struct.pack_into(">h", data, 21, TRANSACTIONAL)
    struct.pack_into(">qhi", data, 43, producer_id, epoch, sequence)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def append(table: ProducerTable, data: bytes, offset: int) -> None:
    table.check("t", 0, data).record(offset)


def test_a_bumped_marker_refuses_the_old_epoch_and_restarts_the_sequence() -> None:
    table = ProducerTable()
    append(table, batch(9, 0, 0), 0)
    append(table, batch(9, 0, 1), 1)
    table.fence("t", 0, 9, 1)  # aborted by a timeout under epoch 1
    with pytest.raises(ProducerSequenceError) as refused:
        table.check("t", 0, batch(9, 0, 2))
    assert refused.value.code == ErrorCode.invalid_producer_epoch
    append(table, batch(9, 2, 0), 3)  # the producer initialised again: a new epoch


def test_a_commit_marker_under_the_same_epoch_keeps_the_sequence() -> None:
    table = ProducerTable()
    append(table, batch(9, 0, 0), 0)
    table.fence("t", 0, 9, 0)
    append(table, batch(9, 0, 1), 2)  # the next transaction goes on with its sequence
    with pytest.raises(ProducerSequenceError):
        table.check("t", 0, batch(9, 0, 5))
