"""The event journal: a directory of JSON-lines files, rotated and capped (docs/events.md §1).

Closed files are named `events-<ts of the first line>-<sequence>.jsonl` and ordered by the
sequence, never by the timestamp: after the wall clock steps back, the newest file may carry
the smallest timestamp, and retention must still delete the oldest files, not the newest.

Appending only buffers the line: the runtime calls `flush()` every 100 ms, which writes the
buffer with one `os.write`, rotates the active file when it is big or old enough, and applies
the retention cap. A failed write drops the buffered lines and counts them instead of raising:
the journal must never stall or fail the coordinator.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path

import structlog

__all__ = ["ACTIVE_NAME", "CLOSED_PATTERN", "Journal", "closed_sequence"]

log = structlog.get_logger("rebalanced.journal")

# Hidden, so directory listers (Spark's file source among them) never read a half-written file.
ACTIVE_NAME = ".events-active.jsonl"
# The sequence has 6 digits, more once it passes 999,999 (it never wraps).
CLOSED_PATTERN = re.compile(r"^events-(\d{13})-(\d{6,})\.jsonl$")


def closed_sequence(name: str) -> int | None:
    """The sequence number of a closed journal file's name, else None."""
    match = CLOSED_PATTERN.match(name)
    return int(match.group(2)) if match else None


class Journal:
    def __init__(self, directory: Path, *, segment_bytes: int, segment_ms: int,
                 retention_bytes: int, wall_ms: Callable[[], int]) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.retention_bytes = retention_bytes
        self._wall_ms = wall_ms
        self._buffer: list[str] = []
        self.dropped_events = 0
        self._failing = False
        self._closed = False
        self._fd = -1
        self._size = 0
        self._opened_ms = 0
        self._first_ts = 0
        directory.mkdir(parents=True, exist_ok=True)
        self._sequence = self._last_sequence()
        active = directory / ACTIVE_NAME
        if active.exists() and active.stat().st_size > 0:
            self._close_file(active, _first_ts_of(active) or wall_ms())  # left by an earlier run
        self._open_active()

    @property
    def active_path(self) -> Path:
        return self.directory / ACTIVE_NAME

    def append(self, line: str) -> None:
        """Buffer one `\\n`-terminated line; cheap, it sits on the commit path."""
        self._buffer.append(line)

    @property
    def pending(self) -> bool:
        return bool(self._buffer)

    @property
    def active_size(self) -> int:
        return self._size

    def rotation_due_ms(self) -> int | None:
        """Milliseconds until the active file is old enough to rotate; None while it is
        empty (an empty file is never rotated)."""
        if self._closed or not self._size:
            return None
        return max(self.segment_ms - (self._wall_ms() - self._opened_ms), 0)

    def flush(self) -> None:
        if self._closed:
            return
        if self._buffer:
            lines = self._buffer
            self._buffer = []
            self._write(lines)
        if not self._size:
            return
        age_ms = self._wall_ms() - self._opened_ms
        # A negative age is a backwards clock step: close the file now rather than keep it
        # open until the clock is back where it was.
        if self._size >= self.segment_bytes or age_ms >= self.segment_ms or age_ms < 0:
            self.rotate()

    def _write(self, lines: list[str]) -> None:
        data = "".join(lines).encode("utf-8")
        written = 0
        try:
            if self._fd < 0:
                self._open_active()
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as exc:
            lost = data.count(b"\n", written)
            if written and data[written - 1:written] != b"\n":
                # The torn line is counted as lost; end it so that only it is malformed.
                with contextlib.suppress(OSError):
                    os.write(self._fd, b"\n")
            self.dropped_events += lost
            if not self._failing:
                self._failing = True
                log.warning("journal write failed", error=str(exc), dropped=lost,
                            directory=str(self.directory))
        else:
            if self._failing:
                self._failing = False
                log.info("journal writes resumed", dropped_total=self.dropped_events)
        if written:
            if not self._size:  # a file's age counts from its first line
                self._first_ts = _first_ts_of_bytes(data) or self._wall_ms()
                self._opened_ms = self._wall_ms()
            self._size += written

    def rotate(self) -> None:
        """Close the active file under its final name and start a new one."""
        if not self._size:
            return
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1
        self._close_file(self.active_path, self._first_ts)
        self._open_active()
        self._apply_retention()

    def close(self) -> None:
        """Write what is buffered and close the active file under its final name, so that a
        streaming reader sees the last events of a stopped broker."""
        self.flush()
        self.rotate()
        self._closed = True
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # files ------------------------------------------------------------------------------------

    def _open_active(self) -> None:
        try:
            self._fd = os.open(self.active_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._size = os.fstat(self._fd).st_size
        except OSError as exc:
            self._fd = -1
            self._size = 0
            log.warning("journal file cannot be opened", error=str(exc),
                        directory=str(self.directory))
        self._opened_ms = self._wall_ms()

    def _close_file(self, path: Path, first_ts: int) -> None:
        self._sequence += 1
        final = self.directory / f"events-{max(first_ts, 0):013d}-{self._sequence:06d}.jsonl"
        try:
            os.replace(path, final)  # atomic: readers see the whole file or nothing
        except OSError as exc:
            log.warning("journal rotation failed", error=str(exc), path=str(path))

    def closed_files(self) -> list[Path]:
        """The closed files, oldest first: in the order of their sequence numbers."""
        found = []
        for entry in os.scandir(self.directory):
            sequence = closed_sequence(entry.name)
            if sequence is not None:
                found.append((sequence, entry.name, Path(entry.path)))
        return [path for _, _, path in sorted(found)]

    def _last_sequence(self) -> int:
        return max((closed_sequence(p.name) or 0 for p in self.closed_files()), default=0)

    def _apply_retention(self) -> None:
        if self.retention_bytes < 0:
            return
        try:
            files = [(p, p.stat().st_size) for p in self.closed_files()]
        except OSError:
            return
        total = sum(size for _, size in files)
        for path, size in files:
            if total <= self.retention_bytes:
                break
            try:
                path.unlink()
            except OSError:
                continue
            total -= size


def _first_ts_of_bytes(data: bytes) -> int | None:
    """The `ts` of the first line, read without a JSON parse (it is the third key)."""
    start = data.find(b'"ts": ')
    if start < 0 or start > 64:
        return None
    end = start + 6
    while end < len(data) and 48 <= data[end] <= 57:
        end += 1
    return int(data[start + 6:end]) if end > start + 6 else None


def _first_ts_of(path: Path) -> int | None:
    try:
        with path.open("rb") as f:
            return _first_ts_of_bytes(f.read(128))
    except OSError:
        return None
