"""Transactions as a partition sees them: control batches (markers), the last stable offset and
the index of aborted transactions.

A transactional producer's batches carry the transactional attribute bit (0x10); the
transaction ends on each partition with a control batch (attributes 0x30) of one record whose
key is `int16 version 0, int16 type` (0 abort, 1 commit) and whose value is `int16 version 0,
int32 coordinator epoch`, as Kafka writes them. A read_committed reader stops at the last
stable offset (the first offset of the oldest transaction still open, else the high watermark)
and is told of the aborted transactions in what it reads, so it can drop their records.

`PartitionTransactions` keeps both from the batches as they are appended (`observe_batches`
replays a log's batches the same way, for start-up).
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field

from storage.crc import crc32c
from storage.varint import read_varint, varint_bytes

TRANSACTIONAL = 0x10
CONTROL = 0x20
ABORT_MARKER = 0
COMMIT_MARKER = 1

_HEAD = struct.Struct(">qiibI")  # base offset, length, leader epoch, magic, crc
_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count (covered by the CRC)
_BATCH = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE = _BATCH.size
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def encode_control_batch(producer_id: int, producer_epoch: int, committed: bool,
                         timestamp_ms: int, coordinator_epoch: int = 0,
                         base_offset: int = 0) -> bytes:
    """One control batch ending `producer_id`'s transaction on a partition."""
    key = _CONTROL_KEY.pack(0, COMMIT_MARKER if committed else ABORT_MARKER)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    body = b"".join((b"\x00", varint_bytes(0), varint_bytes(0),
                     varint_bytes(len(key)), key, varint_bytes(len(value)), value,
                     varint_bytes(0)))
    record = varint_bytes(len(body)) + body
    tail = _TAIL.pack(TRANSACTIONAL | CONTROL, 0, timestamp_ms, timestamp_ms, producer_id,
                      producer_epoch, -1, 1)
    crc = crc32c(record, crc32c(tail))
    head = _HEAD.pack(base_offset, _HEADER_SIZE - 12 + len(record), 0, 2, crc)
    return head + tail + record


def control_type(batch: bytes | memoryview, start: int = 0) -> int:
    """The marker type (ABORT_MARKER or COMMIT_MARKER) of the control batch at `start`."""
    cursor = start + _HEADER_SIZE
    _, cursor = read_varint(batch, cursor)  # record length
    cursor += 1  # attributes
    _, cursor = read_varint(batch, cursor)  # timestamp delta
    _, cursor = read_varint(batch, cursor)  # offset delta
    key_length, cursor = read_varint(batch, cursor)
    if key_length < 4:
        raise ValueError("a control record's key is shorter than 4 bytes")
    _, marker = _CONTROL_KEY.unpack_from(batch, cursor)
    return int(marker)


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


@dataclass(slots=True)
class PartitionTransactions:
    # producer id -> first offset of its transaction still open on this partition
    open: dict[int, int] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)  # in marker order
    _aborted_ends: list[int] = field(default_factory=list)

    def appended(self, producer_id: int, first_offset: int) -> None:
        """A transactional data batch of `producer_id` was appended at `first_offset`."""
        self.open.setdefault(producer_id, first_offset)

    def ended(self, producer_id: int, marker_offset: int, committed: bool) -> None:
        """A marker for `producer_id` was appended at `marker_offset`."""
        first = self.open.pop(producer_id, None)
        if first is not None and not committed:
            self.aborted.append(AbortedTxn(producer_id, first, marker_offset))
            self._aborted_ends.append(marker_offset)

    def last_stable_offset(self, high_watermark: int) -> int:
        if not self.open:
            return high_watermark
        return min(min(self.open.values()), high_watermark)

    def aborted_in(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_offset)."""
        if not self.aborted:
            return []
        start = bisect.bisect_left(self._aborted_ends, fetch_offset)
        return [a for a in self.aborted[start:] if a.first_offset < upper_offset]

    def truncate_before(self, log_start_offset: int) -> None:
        """Forget aborted transactions wholly before the log start (retention removed them)."""
        cut = bisect.bisect_left(self._aborted_ends, log_start_offset)
        if cut:
            del self.aborted[:cut]
            del self._aborted_ends[:cut]

    def observe_batches(self, data: bytes | memoryview) -> int:
        """Replay a run of whole batches; returns the offset after the last one."""
        view = memoryview(data)
        pos = 0
        after = -1
        while pos + _HEADER_SIZE <= len(view):
            (base, length, _, _, _, attributes, delta, _, _, producer_id, _, _,
             _) = _BATCH.unpack_from(view, pos)
            if pos + 12 + length > len(view):
                break
            if attributes & TRANSACTIONAL and producer_id >= 0:
                if attributes & CONTROL:
                    self.ended(producer_id, base,
                               control_type(view, pos) == COMMIT_MARKER)
                else:
                    self.appended(producer_id, base)
            after = base + delta + 1
            pos += 12 + length
        return after
