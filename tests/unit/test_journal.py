"""The event journal: rotation by size and time, atomic closed files, retention, full disk."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator.group.events import (
    GroupStabilized,
    MemberRemoved,
    RebalanceCause,
    RebalanceStarted,
    RemovalCause,
    journal_record,
    rebalance_cause,
)
from coordinator.runtime.event_journal import EventJournal
from coordinator.runtime.journal_files import ACTIVE_NAME, CLOSED_PATTERN, Journal, closed_sequence


class Wall:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def line(ts: int, n: int = 0) -> str:
    return json.dumps({"v": 1, "event_type": "x", "ts": ts, "n": n}) + "\n"


def open_journal(tmp_path: Path, wall: Wall, **overrides: int) -> Journal:
    settings = {"segment_bytes": 1 << 20, "segment_ms": 60_000, "retention_bytes": -1}
    settings.update(overrides)
    return Journal(tmp_path / "events", wall_ms=wall, **settings)


def all_lines(journal: Journal) -> list[dict[str, Any]]:
    paths = [*journal.closed_files(), journal.active_path]
    return [json.loads(text) for p in paths if p.exists()
            for text in p.read_text().splitlines()]


def test_lines_are_buffered_until_flush(tmp_path: Path) -> None:
    wall = Wall()
    journal = open_journal(tmp_path, wall)
    journal.append(line(wall.now))
    assert journal.active_path.read_text() == ""
    journal.flush()
    assert all_lines(journal) == [json.loads(line(wall.now))]


def test_rotates_by_size_under_a_name_from_the_first_line(tmp_path: Path) -> None:
    wall = Wall()
    journal = open_journal(tmp_path, wall, segment_bytes=1024)
    for n in range(40):
        journal.append(line(wall.now + n, n))
        journal.flush()
    closed = journal.closed_files()
    assert closed, "nothing rotated"
    assert all(CLOSED_PATTERN.match(p.name) for p in closed)
    assert closed[0].name == f"events-{wall.now:013d}-000001.jsonl"
    assert all(p.stat().st_size >= 1024 for p in closed)
    assert [record["n"] for record in all_lines(journal)] == list(range(40))


def test_rotates_by_time_but_never_an_empty_file(tmp_path: Path) -> None:
    wall = Wall()
    journal = open_journal(tmp_path, wall, segment_ms=1000)
    wall.now += 5000
    journal.flush()
    assert journal.closed_files() == []
    journal.append(line(wall.now))
    journal.flush()
    wall.now += 999
    journal.flush()
    assert journal.closed_files() == []
    wall.now += 1
    journal.flush()
    assert len(journal.closed_files()) == 1
    assert journal.active_path.stat().st_size == 0


def test_retention_deletes_the_oldest_closed_files(tmp_path: Path) -> None:
    wall = Wall()
    journal = open_journal(tmp_path, wall, segment_bytes=1024, retention_bytes=4096)
    for n in range(400):
        journal.append(line(wall.now + n, n))
        journal.flush()
    closed = journal.closed_files()
    assert sum(p.stat().st_size for p in closed) <= 4096
    kept = [record["n"] for record in all_lines(journal)]
    assert kept == list(range(kept[0], 400)) and kept[0] > 0


def test_a_backwards_clock_step_does_not_make_retention_delete_the_newest_files(
    tmp_path: Path,
) -> None:
    """Files are ordered by their sequence: after the clock stepped back a day, the new files
    carry smaller timestamps than the old ones, and still outlive them."""
    wall = Wall()
    journal = open_journal(tmp_path, wall, segment_bytes=1024, retention_bytes=4096)
    for n in range(200):
        journal.append(line(wall.now, n))
        journal.flush()
        wall.now += 10
        if n == 99:
            wall.now -= 86_400_000
    kept = [record["n"] for record in all_lines(journal)]
    assert kept == list(range(kept[0], 200)) and kept[0] > 100
    stamps = [int(CLOSED_PATTERN.match(p.name).group(1))  # type: ignore[union-attr]
              for p in journal.closed_files()]
    assert stamps == sorted(stamps)  # all after the step: the old ones went first

    reopened = open_journal(tmp_path, wall, segment_bytes=1024, retention_bytes=4096)
    assert reopened._sequence == closed_sequence(journal.closed_files()[-1].name)


def test_a_backwards_clock_step_closes_the_active_file(tmp_path: Path) -> None:
    wall = Wall()
    journal = open_journal(tmp_path, wall)
    journal.append(line(wall.now))
    journal.flush()
    wall.now -= 3_600_000
    journal.flush()
    assert len(journal.closed_files()) == 1


def test_the_sequence_does_not_wrap(tmp_path: Path) -> None:
    directory = tmp_path / "events"
    directory.mkdir()
    (directory / "events-1700000000000-999999.jsonl").write_text(line(1))
    wall = Wall()
    wall.now = 1_600_000_000_000  # and the clock is behind the old file's name
    journal = open_journal(tmp_path, wall)
    journal.append(line(wall.now))
    journal.flush()
    journal.rotate()
    names = [p.name for p in journal.closed_files()]
    assert names == ["events-1700000000000-999999.jsonl", "events-1600000000000-1000000.jsonl"]
    assert all(CLOSED_PATTERN.match(name) for name in names)


def test_a_file_left_active_by_an_earlier_run_is_closed_on_open(tmp_path: Path) -> None:
    wall = Wall()
    journal = open_journal(tmp_path, wall)
    journal.append(line(1_600_000_000_123))
    journal.flush()
    os.close(journal._fd)  # a crash: nothing else happens
    reopened = open_journal(tmp_path, wall)
    assert [p.name for p in reopened.closed_files()] == ["events-1600000000123-000001.jsonl"]
    assert not (tmp_path / "events" / ACTIVE_NAME).read_text()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_drops_and_counts_lines_instead_of_raising(tmp_path: Path) -> None:
    wall = Wall()
    journal = open_journal(tmp_path, wall)
    os.close(journal._fd)
    journal._fd = os.open("/dev/full", os.O_WRONLY)  # every write fails with ENOSPC
    for n in range(3):
        journal.append(line(wall.now, n))
    journal.flush()
    assert journal.dropped_events == 3
    journal.append(line(wall.now))
    journal.flush()
    assert journal.dropped_events == 4


def test_journal_record_uses_the_contract_names() -> None:
    started = RebalanceStarted(ts_ms=5, group_id="g", generation_id=3, partition=7,
                               previous_state="Stable", reason="removing member m on heartbeat "
                               "expiration", cause=RebalanceCause.SESSION_EXPIRY, member_id="m",
                               client_id="c", client_host="/h")
    record = journal_record(started.as_dict(), 1_700_000_000_000)
    assert record == {
        "v": 1, "event_type": "rebalance_started", "ts": 1_700_000_000_000, "group_id": "g",
        "generation": 3, "partition": 7, "from_state": "Stable",
        "reason": "removing member m on heartbeat expiration", "member_id": "m",
        "client_id": "c", "client_host": "/h", "to_state": "PreparingRebalance",
        "cause": "session_expiry"}
    stabilized = journal_record(GroupStabilized(ts_ms=5, group_id="g", generation_id=4,
                                                member_count=2, duration_ms=9).as_dict(), 1)
    assert stabilized["num_members"] == 2 and stabilized["to_state"] == "Stable"
    removed = journal_record(MemberRemoved(
        ts_ms=5, group_id="g", generation_id=3, member_id="m", group_instance_id=None,
        client_id="c", client_host="/h", cause=RemovalCause.LEAVE).as_dict(), 1)
    assert removed["cause"] == "leave" and removed["generation"] == 3


@pytest.mark.parametrize(("reason", "cause"), [
    ("adding new member m with group instance id None; client reason: not provided",
     "member_join"),
    ("member m joining group during rebalance; client reason: x", "member_rejoin"),
    ("leader m re-joining group; client reason: not provided", "member_rejoin"),
    ("updating metadata for member m; client reason: not provided", "metadata_change"),
    ("static member m with instance id i changed the selected protocol; client reason: y",
     "metadata_change"),
    ("removing member m on LeaveGroup; client reason: the consumer is being closed",
     "member_leave"),
    ("removing member m on heartbeat expiration", "session_expiry"),
    ("removing ['m'] on pending sync request expiration", "rebalance_timeout"),
    ("removing member m on disconnect", "disconnect"),
    ("removing member m: its connection closed 1000 ms ago without LeaveGroup", "disconnect"),
    ("failed to persist the group metadata", "write_failure"),
    ("something new", "other"),
])
def test_rebalance_causes(reason: str, cause: str) -> None:
    """The cause is set where the rebalance starts and reaches the journal as it is: the
    reason's text plays no part in it."""
    started = RebalanceStarted(ts_ms=5, group_id="g", generation_id=3, partition=7,
                               previous_state="Stable", reason=reason,
                               cause=RebalanceCause(cause))
    assert rebalance_cause(started) == cause
    assert journal_record(started.as_dict(), 1)["cause"] == cause


def _journal_and_events(tmp_path: Path, wall_ms: Callable[[], int], *, segment_ms: int
                        ) -> tuple[Journal, EventJournal]:
    """An event journal writing to a journal of `segment_ms` on the given clock."""
    journal = Journal(tmp_path / "events", wall_ms=wall_ms, segment_bytes=1 << 20,
                      segment_ms=segment_ms, retention_bytes=-1)
    events = EventJournal(wall_ms)
    events.open(journal)
    return journal, events


async def test_an_idle_journal_wakes_only_to_rotate(tmp_path: Path) -> None:
    """Lines are written within 100 ms of their event; with none waiting, the next timer is
    the active file's rotation, not a 100 ms tick, and the file still rotates on time."""
    import asyncio
    import time

    def wall_ms() -> int:
        return int(time.time() * 1000)

    journal, events = _journal_and_events(tmp_path, wall_ms, segment_ms=400)
    try:
        events.offsets_committed("g", "m", 1, 10)
        await asyncio.sleep(0.2)
        assert [e["event_type"] for e in all_lines(journal)] == ["offsets_committed"]
        assert not events._flush_pending  # no 100 ms tick while nothing waits
        rotation = events._rotation
        assert rotation is not None
        assert 0.05 < rotation.when() - asyncio.get_running_loop().time() < 0.35
        events.offsets_committed("g", "m", 1, 10)  # a new line: written within 100 ms again
        assert events._rotation is None and events._flush_pending
        await asyncio.sleep(0.5)
        assert len(journal.closed_files()) == 1 and journal.active_size == 0
        assert events._rotation is None and not events._flush_pending  # empty: no timer
        assert len(all_lines(journal)) == 2
    finally:
        events.close()


async def test_the_active_file_rotates_soon_after_the_wall_clock_steps(tmp_path: Path) -> None:
    """The file's age is wall-clock time: stepped forward past the rotation age (NTP, the test
    kit's clock) the file rotates within about a second, not a whole `segment.ms` later;
    stepped back it is closed within about a second too."""
    import asyncio

    now = [1_000_000]

    def wall_ms() -> int:
        return now[0]

    journal, events = _journal_and_events(tmp_path, wall_ms, segment_ms=60_000)
    try:
        events.offsets_committed("g", "m", 1, 10)
        await asyncio.sleep(0.2)
        rotation = events._rotation
        assert rotation is not None
        assert rotation.when() - asyncio.get_running_loop().time() < 1.0
        now[0] += 61_000  # forward, past the 60 s rotation age
        await asyncio.sleep(1.1)
        assert len(journal.closed_files()) == 1 and journal.active_size == 0
        events.offsets_committed("g", "m", 1, 10)
        await asyncio.sleep(0.2)
        now[0] -= 3_600_000  # back an hour
        await asyncio.sleep(1.1)
        assert len(journal.closed_files()) == 2 and journal.active_size == 0
        assert events._rotation is None  # the active file is empty: no timer
    finally:
        events.close()
