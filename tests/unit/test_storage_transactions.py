"""Control batches, the last stable offset and the aborted-transaction index of a partition."""

from __future__ import annotations

import struct
from pathlib import Path

from crc32c import crc32c

from storage.batch import scan_batches
from storage.log import LogConfig, PartitionLog
from storage.record_batch import encode_batch, iter_records
from storage.transactions import (
    ABORT_MARKER,
    COMMIT_MARKER,
    CONTROL,
    TRANSACTIONAL,
    AbortedTxn,
    PartitionTransactions,
    control_type,
    encode_control_batch,
)


def transactional_batch(producer_id: int, count: int = 2) -> bytes:
    """A producer's transactional batch: attributes 0x10, its producer id, epoch 0."""
    batch = bytearray(encode_batch([(b"k", b"v")] * count, 1000))
    struct.pack_into(">h", batch, 21, TRANSACTIONAL)
    struct.pack_into(">qhi", batch, 43, producer_id, 0, 0)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_a_control_batch_is_a_valid_batch_in_kafkas_layout() -> None:
    batch = encode_control_batch(77, 3, True, 5000, coordinator_epoch=9)
    batches, _, error = scan_batches(batch)
    assert error is None and len(batches) == 1
    attributes, = struct.unpack_from(">h", batch, 21)
    assert attributes == TRANSACTIONAL | CONTROL
    assert struct.unpack_from(">qh", batch, 43) == (77, 3)
    assert control_type(batch) == COMMIT_MARKER
    assert control_type(encode_control_batch(77, 3, False, 5000)) == ABORT_MARKER
    assert list(iter_records(batch)) == []  # readers of data records skip it


def test_last_stable_offset_and_aborted_index() -> None:
    txns = PartitionTransactions()
    assert txns.last_stable_offset(10) == 10
    txns.appended(1, 10)
    txns.appended(2, 12)
    txns.appended(1, 14)  # same open transaction: its first offset stays
    assert txns.last_stable_offset(16) == 10
    txns.ended(1, 16, committed=False)
    assert txns.last_stable_offset(17) == 12
    txns.ended(2, 17, committed=True)
    assert txns.last_stable_offset(18) == 18
    assert txns.aborted == [AbortedTxn(1, 10, 16)]
    assert txns.aborted_in(0, 18) == [AbortedTxn(1, 10, 16)]
    assert txns.aborted_in(17, 30) == []  # ended before the fetch offset
    assert txns.aborted_in(0, 10) == []  # starts at or after the upper bound
    txns.ended(3, 20, committed=False)  # a marker with no open transaction here: nothing
    assert len(txns.aborted) == 1
    txns.truncate_before(17)
    assert txns.aborted == []


def test_replaying_a_log_rebuilds_the_index(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig())
    live = PartitionTransactions()
    for batch in (transactional_batch(5), transactional_batch(6), encode_batch([(b"x", b"y")], 1),
                  encode_control_batch(5, 0, False, 2), transactional_batch(6)):
        info = log.append(batch, 2)
        attributes, = struct.unpack_from(">h", batch, 21)
        producer_id, = struct.unpack_from(">q", batch, 43)
        if attributes & CONTROL:
            live.ended(producer_id, info.base_offset, control_type(batch) == COMMIT_MARKER)
        elif attributes & TRANSACTIONAL:
            live.appended(producer_id, info.base_offset)
    rebuilt = PartitionTransactions()
    assert rebuilt.observe_batches(log.read(0, 1 << 20)) == log.log_end_offset
    assert rebuilt.aborted == live.aborted == [AbortedTxn(5, 0, 5)]
    assert rebuilt.open == live.open == {6: 2}
    assert rebuilt.last_stable_offset(log.log_end_offset) == 2
    log.close()
