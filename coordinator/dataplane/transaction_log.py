"""The transaction log: the stand-in for `__transaction_state`, one partition log.

`<data>/__transaction_state-0/` holds the transaction coordinator's records in Kafka's
TransactionLogKey/Value format (`coordinator/txn/records.py`), one uncompressed batch per
append. `append` writes and fsyncs before it returns, so a state change is durable before the
request it answers is answered. The one record no request waits for, a transaction's completion
after its markers, is written without its own fsync: a crash that loses it leaves the
transaction prepared, and the restart writes its markers again, which end nothing twice.
`append_then` is the requests' path: it writes at once and calls back once an fsync covers the
write; the fsync runs off the loop, and the writes of one turn (and those made while an fsync
runs) share the next one, as the group log's commits do. `load` replays every record into a
`TransactionCoordinator` at start-up; the last record of each transactional id wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
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


Written = Callable[[BaseException | None], None]


class TransactionLog:
    def __init__(self, log: PartitionLog) -> None:
        self._log = log
        self._waiting: list[Written] = []  # appends since the running fsync started
        self._flushing = False

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

    def append_then(self, records: Sequence[tuple[bytes, bytes | None]], now_ms: int,
                    written: Written) -> None:
        """Write `records` as one batch now; call `written` (on the loop) once an fsync covers
        it, with None, or with the error that leaves it not durable."""
        try:
            self._log.append_records(records, now_ms)
        except OSError as exc:
            written(exc)
            return
        self._waiting.append(written)
        if not self._flushing:
            self._flushing = True
            # At the end of this turn, so that its other appends share the fsync.
            asyncio.get_running_loop().call_soon(self._start_flush)

    def _start_flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        if not waiting:
            self._flushing = False
            return
        job = asyncio.get_running_loop().run_in_executor(None, self._log.flush)
        job.add_done_callback(lambda done: self._flushed(done, waiting))

    def _flushed(self, done: asyncio.Future[None], waiting: list[Written]) -> None:
        error = done.exception()
        for written in waiting:
            written(error)
        self._start_flush()

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
