"""A budget of open segment files for topic partition logs.

Each open segment holds one file descriptor. With thousands of partitions, keeping every
segment open would spend the process's open-files limit, and the group log's segment rolls,
new connections and the ops port would then fail with EMFILE. So topic partition logs open
their segment files lazily (on the first read or append) and register each open one here; when
more than `limit` are open, the least recently used are closed:

1. sealed segments first (only ever read, so closing one costs a reopen on its next read);
2. then idle active segments, each only once its data is fsynced: a clean one is closed at
   once; a dirty one is fsynced first, under its log's lock, and a failed fsync takes that log
   offline (`PartitionLog` answers KAFKA_STORAGE_ERROR from then on) instead of losing the
   write-back error with the descriptor.

A segment rolled but not sealed yet (the seal thread is about to fsync it) and an active
segment whose log is being flushed on a worker thread are skipped: a descriptor is closed only
when no other thread can be using it. The group log keeps its own descriptors and is never
registered here.

Threads: the budget belongs to one thread, the one that made it (the broker's event loop),
which alone registers, touches and closes. Segments opened on other threads (a partition built
by the topic-admin thread) are closed there before anyone else sees them and reopened by path
on the owner thread when first used. Closing through the segment sets its handle's descriptor
to -1 first, so a late use raises EBADF rather than reaching a reused descriptor number.

Cost on the hot path: a read or append of an open segment moves it to the recent end of its
`OrderedDict` (one C call); nothing else.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from storage.segment import Segment

__all__ = ["MIN_OPEN_SEGMENTS", "DescriptorBudget", "SegmentOwner"]

# Below this a read of one segment could close the segment the same request appends to next.
MIN_OPEN_SEGMENTS = 4


class SegmentOwner(Protocol):
    """The log a segment belongs to: closes its active segment when asked, if it can."""

    def close_idle_active(self, segment: Segment) -> bool:
        """Close `segment` (the log's active one) after making it durable; False when it is
        in use on another thread right now (try a later one)."""
        ...


class DescriptorBudget:
    """At most `limit` open segment files (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, MIN_OPEN_SEGMENTS)
        self._owner_thread = threading.get_ident()
        # Open segments, least recently used first: sealed ones, and active (or rolled) ones.
        self.sealed: OrderedDict[Segment, None] = OrderedDict()
        self.active: OrderedDict[Segment, None] = OrderedDict()
        self.closed_total = 0  # descriptors closed to stay within the budget
        # Rolled segments the seal thread has sealed since: moved to `sealed` by the owner.
        self._sealed_elsewhere: deque[Segment] = deque()

    def bind_to_current_thread(self) -> None:
        """Make the calling thread the owner (the loop, when made elsewhere)."""
        self._owner_thread = threading.get_ident()

    def on_owner_thread(self) -> bool:
        return threading.get_ident() == self._owner_thread

    @property
    def open_count(self) -> int:
        return len(self.sealed) + len(self.active)

    def now_sealed(self, segment: Segment) -> None:
        """`segment` was sealed (any thread): from now on it is closed before active ones."""
        self._sealed_elsewhere.append(segment)  # one atomic append; the owner moves it

    def opened(self, segment: Segment, *, active: bool) -> OrderedDict[Segment, None]:
        """Register a segment that just opened its file (owner thread); returns the LRU it
        is in. Closes others if over the budget."""
        lru = self.active if active else self.sealed
        lru[segment] = None
        self._move_sealed()  # here too, so that the queue stays short under a roomy budget
        if len(self.sealed) + len(self.active) > self.limit:
            self.enforce(keep=segment)
        return lru

    def _move_sealed(self) -> None:
        moved = self._sealed_elsewhere
        active, sealed = self.active, self.sealed
        while moved:
            segment = moved.popleft()
            if segment._lru is active:  # else closed or deleted meanwhile
                del active[segment]
                sealed[segment] = None
                segment._lru = sealed

    def enforce(self, keep: Segment | None = None) -> None:
        """Close least recently used segments until within the budget (owner thread).

        Skipped segments (in use elsewhere) are kept: the budget may stay exceeded by them
        until the next call."""
        self._move_sealed()
        excess = len(self.sealed) + len(self.active) - self.limit
        if excess <= 0:
            return
        sealed = self.sealed
        while excess > 0 and sealed:
            segment = next(iter(sealed))
            if segment is keep:
                sealed.move_to_end(segment)
                if len(sealed) == 1:
                    break
                continue
            segment.close_files()  # removes it from `sealed`
            self.closed_total += 1
            excess -= 1
        active = self.active
        for _ in range(len(active)):
            if excess <= 0 or not active:
                break
            segment = next(iter(active))
            if segment is keep or not segment.try_close_idle():
                active.move_to_end(segment)  # in use: treat as recently used
                continue
            self.closed_total += 1
            excess -= 1
