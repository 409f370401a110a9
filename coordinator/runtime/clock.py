"""Time sources. Only the runtime reads a clock; the core receives `now_ms` as a parameter.

The core uses one time value for timer deadlines *and* for every persisted timestamp (the
group's `current_state_timestamp`, commit and expire timestamps of offsets, the group log's batch
timestamps; offset expiry and compaction compare them across restarts). So `now_ms()` is
epoch-aligned but monotonic: the wall clock read once at start plus monotonic elapsed time.
It drifts from NTP-corrected wall time over a long uptime; that is acceptable for retention
measured in minutes and it never jumps backwards under a deadline.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Epoch-aligned monotonic milliseconds: what the core receives as `now_ms`."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds for deadlines; never goes backwards."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch as the system tells it now: for log lines only;
        persisted timestamps use `now_ms`."""
        ...


class SystemClock:
    def __init__(self) -> None:
        self._epoch_offset_ms = time.time_ns() // 1_000_000 - self.monotonic_ms()

    def now_ms(self) -> int:
        # Read for every heartbeat and commit: one call, not two.
        return time.monotonic_ns() // 1_000_000 + self._epoch_offset_ms

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to; both readings advance together."""

    def __init__(self, now_ms: int = 0, wall_offset_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._wall_offset_ms = wall_offset_ms

    def monotonic_ms(self) -> int:
        return self._now_ms

    def now_ms(self) -> int:
        return self._now_ms

    def wall_ms(self) -> int:
        return self._now_ms + self._wall_offset_ms

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("time never goes backwards")
        self._now_ms += ms
        return self._now_ms

    def set(self, now_ms: int) -> int:
        if now_ms < self._now_ms:
            raise ValueError("time never goes backwards")
        self._now_ms = now_ms
        return self._now_ms
