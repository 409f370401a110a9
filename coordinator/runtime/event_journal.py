"""The group runtime's journal lines: each operator event as one JSON line, written in batches.

Events are also logged (structlog, `rebalanced.events`) unless quiet. The journal file itself
(rotation, retention, failed writes) is `coordinator/runtime/journal_files.py`; this module decides
what goes in it and when it is flushed: every 100 ms while lines are waiting, one `os.write`
instead of a syscall per event; with none waiting, once more when the active file is due to
rotate (not every 100 ms: each timer is a wake-up of an otherwise idle broker).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any

import structlog

from coordinator.group.events import JOURNAL_SCHEMA_VERSION, journal_record
from coordinator.runtime.journal_files import Journal

events_log = structlog.get_logger("rebalanced.events")

# What `json.dumps(journal_record(...))` makes of the `offsets_committed` event (default
# separators, ASCII only), formatted directly as it is written once per commit.
_OFFSETS_COMMITTED_LINE = ('{"v": ' + str(JOURNAL_SCHEMA_VERSION) + ', "event_type": '
                           '"offsets_committed", "ts": %d, "group_id": %s, "member_id": %s, '
                           '"generation": %d, "partitions": %d}\n')
_json_string = encode_basestring_ascii

# Free text in an event (a reason, a group or member id chosen by a client) is cut to this many
# characters in the journal and the logs: a client must not make every line of its group's
# history megabytes long.
MAX_TEXT_CHARS = 1024

# With lines in the active file and no event coming, how long the journal waits at most before
# it looks whether the file is due to rotate (see `_flush`).
_ROTATION_CHECK_MS = 1000


def _bounded(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload`, with any string value longer than `MAX_TEXT_CHARS` cut and marked."""
    long = [key for key, value in payload.items()
            if type(value) is str and len(value) > MAX_TEXT_CHARS]
    if not long:
        return payload
    bounded = dict(payload)
    for key in long:
        text = bounded[key]
        bounded[key] = f"{text[:MAX_TEXT_CHARS]}...({len(text) - MAX_TEXT_CHARS} more chars)"
    return bounded


class EventJournal:
    def __init__(self, wall_ms: Callable[[], int]) -> None:
        self.wall_ms = wall_ms
        self.journal: Journal | None = None  # set by `open`; events before it are only logged
        self._flush_pending = False
        # With no line waiting: the flush that rotates the active file when it is old enough.
        self._rotation: asyncio.TimerHandle | None = None

    def open(self, journal: Journal) -> None:
        self.journal = journal

    def close(self) -> None:
        if self._rotation is not None:
            self._rotation.cancel()
            self._rotation = None
        if self.journal is not None:
            self.journal.close()

    def event(self, payload: dict[str, Any], quiet: bool = False) -> None:
        payload = _bounded(payload)
        if not quiet:
            events_log.info(payload.get("event", "group event"),
                            **{k: v for k, v in payload.items() if k != "event"})
        if self.journal is not None:
            self.journal.append(json.dumps(journal_record(payload, self.wall_ms()),
                                           default=str) + "\n")
            self._schedule_flush()

    def offsets_committed(self, group_id: str, member_id: str, generation_id: int,
                          partitions: int) -> None:
        """The quiet `offsets_committed` event: the journal line `event` would write, formatted
        directly, as one is written per commit."""
        if self.journal is None:
            return
        self.journal.append(_OFFSETS_COMMITTED_LINE % (
            self.wall_ms(), _json_string(group_id), _json_string(member_id), generation_id,
            partitions))
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_pending:
            # Batch journal writes: one write per 100 ms instead of a syscall per event.
            self._flush_pending = True
            if self._rotation is not None:
                self._rotation.cancel()
                self._rotation = None
            asyncio.get_running_loop().call_later(0.1, self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        self._rotation = None
        journal = self.journal
        if journal is None:
            return
        journal.flush()
        if journal.pending:
            self._schedule_flush()
            return
        due_ms = journal.rotation_due_ms()
        if due_ms is not None:
            # The active file holds lines: rotate it on time even if no event comes. Its age is
            # wall-clock time and this timer's is the loop's, so look again at least every
            # `_ROTATION_CHECK_MS`: a clock stepped forward (NTP, the test kit's clock) rotates
            # it within that, one stepped back closes it within that.
            self._rotation = asyncio.get_running_loop().call_later(
                min(max(due_ms, 100), _ROTATION_CHECK_MS) / 1000, self._flush)
