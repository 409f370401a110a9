"""The transaction log: the stand-in for `__transaction_state`, one partition log.

`<data>/__transaction_state-0/` holds the transaction coordinator's records in Kafka's
TransactionLogKey/Value format (`coordinator/txn/records.py`), one uncompressed batch per
append. `append` writes and fsyncs before it returns, so a state change is durable before the
request it answers is answered. The one record no request waits for, a transaction's completion
after its markers, is written without its own fsync: a crash that loses it leaves the
transaction prepared, and the restart writes its markers again, which end nothing twice.
Transactions are rare next to heartbeats and commits, so this log does not share the group
log's group commit. `load` replays every record into a
`TransactionCoordinator` at start-up; the last record of each transactional id wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from storage.fs import REAL_FS, FileSystem
from storage.log import LogConfig, PartitionLog
from storage.record_batch import iter_records

TOPIC = "__transaction_state"
_READ_BYTES = 1 << 20


class Replayer(Protocol):
    def replay(self, key: bytes, value: bytes | None) -> None: ...


class TransactionLog:
    def __init__(self, log: PartitionLog) -> None:
        self._log = log

    @classmethod
    def open(cls, data_dir: Path, config: LogConfig, fs: FileSystem = REAL_FS, *,
             repair: bool = False) -> TransactionLog:
        # Kept whole: a transactional id's last record must never age out under retention.
        kept = replace(config, retention_ms=-1, retention_bytes=-1)
        return cls(PartitionLog.open(data_dir / f"{TOPIC}-0", kept, fs, repair=repair))

    def load(self, into: Replayer) -> int:
        """Replay every record into `into`; returns how many were read."""
        count = 0
        offset = self._log.log_start_offset
        end = self._log.log_end_offset
        while offset < end:
            data = self._log.read(offset, _READ_BYTES)
            if not data:
                break
            for record_offset, key, value in iter_records(data):
                if key is not None:
                    into.replay(key, value)
                    count += 1
                offset = record_offset + 1
            # A run of control or empty batches still moves on: read from the batch after.
            offset = max(offset, _next_batch_offset(data))
        return count

    def append(self, records: Sequence[tuple[bytes, bytes | None]], now_ms: int, *,
               sync: bool = True) -> None:
        """Write `records` as one batch and fsync (`sync=False`: written, and made durable
        by the next fsync of this log). Raises `OSError` (nothing acknowledged)."""
        if not records:
            return
        self._log.append_records(records, now_ms)
        if sync:
            self._log.flush()

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    def close(self) -> None:
        self._log.close()


def _next_batch_offset(data: bytes) -> int:
    """The offset after the last whole batch in `data` (base offset + last offset delta + 1)."""
    pos = 0
    after = 0
    while pos + 61 <= len(data):
        base = int.from_bytes(data[pos:pos + 8], "big", signed=True)
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        delta = int.from_bytes(data[pos + 23:pos + 27], "big", signed=True)
        after = base + delta + 1
        pos += 12 + length
    return after
