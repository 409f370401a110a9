"""A hashed timing wheel of keyed deadlines; pure, time is passed in.

Theory of operation
-------------------
Time is cut into ticks of `tick_ms`. The wheel is a ring of `wheel_size` buckets; a deadline
falls into tick `deadline_ms // tick_ms` and its entry lives in bucket `tick % wheel_size`.
A deadline further away than one revolution (`tick_ms * wheel_size`) shares a bucket with
nearer ones: this is the *round-counting* variant (Varghese & Lauck's scheme 6, Netty's
`HashedWheelTimer`) rather than Kafka's hierarchical `TimingWheel`. Each entry remembers its own
deadline, so when the cursor visits a bucket only entries whose deadline has passed fire; the
others wait for a later revolution. A 30-minute session deadline therefore costs one dictionary
slot and one comparison per revolution, never work per tick.

Every key maps to exactly one entry (`_entries`, the key's bucket), and each bucket is a dict
in insertion order, key to deadline, so `schedule` (which replaces an existing deadline of the
same key), `cancel` and a reschedule are O(1).

`poll(now_ms)` moves the cursor from the last polled tick to the tick of `now_ms`. Ticks wholly
in the past are visited once (at most one revolution: after a long pause every bucket is scanned
once, not once per missed tick). The bucket of the current tick is only partly due, so there the
exact deadline is compared with `now_ms`: a key may fire after its deadline (the runtime polls
late) but never before it. A deadline scheduled in the past lands in the current tick and fires
on the next poll.

`next_deadline()` tells the runtime when to poll next. It scans forward from the cursor for the
first bucket holding an entry due within the coming revolution and returns the smallest deadline
there. If no entry is due within a revolution it returns the start of the next revolution: an
early wake-up that only advances the cursor. The answer is cached until the next `poll`; a
`schedule` lowers the cached value, a `cancel` leaves it (an early wake-up is harmless). The
value is therefore never later than the earliest deadline.

Imperfection: a bucket holding many far-future entries is re-scanned once per revolution.
Choose `tick_ms * wheel_size` comfortably above the common session timeouts to keep that rare.
"""

from __future__ import annotations

from coordinator.group.result import TimerKey

__all__ = ["TimerWheel"]

# Keys armed at the peak before an emptying wheel fits its tables (`_fit_tables`): small
# tables are not worth the pass over every bucket.
_FIT_FROM = 1024


class TimerWheel:
    """Keyed one-shot deadlines on a hashed wheel; keys are hashable tuples such as
    `("heartbeat", group_id, member_id)`."""

    __slots__ = ("_buckets", "_cached_next", "_cursor", "_entries", "_peak", "tick_ms",
                 "wheel_size")

    def __init__(self, *, tick_ms: int = 10, wheel_size: int = 512, start_ms: int = 0) -> None:
        if tick_ms <= 0 or wheel_size <= 0:
            raise ValueError("tick_ms and wheel_size must be positive")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        # Each bucket maps its keys to their deadlines (the caller's own int objects: a broker
        # arms one key per member, and a new int per key cost 32 bytes each).
        self._buckets: list[dict[TimerKey, int]] = [{} for _ in range(wheel_size)]
        # key -> the bucket that holds it. The bucket is usually the deadline's tick's, but a
        # deadline already past goes to the cursor's, so it is kept. Whether an entry is due
        # needs only its deadline (an entry of an earlier tick has an earlier deadline), and
        # keys due at the same time keep the order they were armed in: they share a bucket,
        # whose dict keeps insertion order, and the sort below is stable.
        self._entries: dict[TimerKey, dict[TimerKey, int]] = {}
        # Every tick before `_cursor` has been processed completely.
        self._cursor = start_ms // tick_ms
        self._cached_next: int | None = None
        # The most keys armed since the tables were last fitted (`_fit_tables`).
        self._peak = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def deadline(self, key: TimerKey) -> int | None:
        bucket = self._entries.get(key)
        return None if bucket is None else bucket[key]

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        """Arm `key` at `deadline_ms`, replacing its previous deadline if it had one."""
        entries = self._entries
        # Popped, not overwritten: the entry and the bucket then hold the same key object
        # (an overwrite keeps the old key in `_entries` and puts the new one in the bucket).
        old = entries.pop(key, None)
        if old is not None:
            del old[key]
        bucket = self._buckets[max(deadline_ms // self.tick_ms, self._cursor) % self.wheel_size]
        entries[key] = bucket
        bucket[key] = deadline_ms
        if len(entries) > self._peak:
            self._peak = len(entries)
        if self._cached_next is not None and deadline_ms < self._cached_next:
            self._cached_next = deadline_ms

    def cancel(self, key: TimerKey) -> None:
        """Disarm `key`; unknown keys are ignored."""
        bucket = self._entries.pop(key, None)
        if bucket is not None:
            del bucket[key]

    def poll(self, now_ms: int) -> list[TimerKey]:
        """Remove and return every key whose deadline is <= `now_ms`, earliest first."""
        self._cached_next = None
        now_tick = now_ms // self.tick_ms
        due: list[tuple[int, TimerKey]] = []
        if now_tick - self._cursor >= self.wheel_size:
            # A long pause: visit every bucket once instead of once per missed tick.
            for bucket in self._buckets:
                self._collect(bucket, now_ms, due)
        else:
            for tick in range(self._cursor, now_tick + 1):
                self._collect(self._buckets[tick % self.wheel_size], now_ms, due)
        self._cursor = max(self._cursor, now_tick)
        due.sort(key=lambda item: item[0])
        entries = self._entries
        for _, key in due:
            del entries.pop(key)[key]
        if self._peak > _FIT_FROM and len(entries) * 2 < self._peak:
            self._fit_tables()
        return [key for _, key in due]

    def _fit_tables(self) -> None:
        """A dict keeps the table of its largest size: once half the keys of the peak are
        gone (a join storm's keys fired or cancelled), the tables are made anew at their
        present size. O(keys + buckets), at most once per halving."""
        buckets = [dict(bucket.items()) for bucket in self._buckets]
        self._entries = {key: buckets[i] for i, bucket in enumerate(buckets) for key in bucket}
        self._buckets = buckets
        self._peak = len(self._entries)

    def next_deadline(self) -> int | None:
        """A time at or before the earliest deadline (see the module docstring); None if empty."""
        if not self._entries:
            return None
        if self._cached_next is None:
            self._cached_next = self._scan_next()
        return self._cached_next

    def _scan_next(self) -> int:
        horizon = self._cursor + self.wheel_size
        horizon_ms = horizon * self.tick_ms
        wheel_size = self.wheel_size
        for tick in range(self._cursor, horizon):
            best: int | None = None
            for deadline_ms in self._buckets[tick % wheel_size].values():
                if deadline_ms < horizon_ms and (best is None or deadline_ms < best):
                    best = deadline_ms
            if best is not None:
                return best
        return horizon_ms

    @staticmethod
    def _collect(bucket: dict[TimerKey, int], now_ms: int,
                 due: list[tuple[int, TimerKey]]) -> None:
        for key, deadline_ms in bucket.items():
            if deadline_ms <= now_ms:
                due.append((deadline_ms, key))
