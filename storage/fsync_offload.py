"""fsync on a thread that never takes the interpreter lock.

A Python thread that runs `os.fsync` takes the interpreter lock back after each system call and
to hand its outcome to the event loop; whenever the event loop holds the lock, the two threads
trade it through futexes and context switches, about a dozen futex calls per fsync under a
steady stream of durable commits. `storage._fsync_worker` (C, built when a compiler is at
hand) runs plain POSIX threads instead: one fsyncs a descriptor of its own, checks that the
segment's path still names the file, and signals an eventfd that the event loop watches.

`FsyncOffload` is the event loop's side, over one or more such threads: `submit` a job
(`Segment.offloaded_fsync`) with a callback, which runs on the loop with the fsync's errno (0
when it succeeded) and whether the path still names the file. Where the extension was not
built `AVAILABLE` is False and the group log keeps its Python fsync thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Any, NamedTuple

try:
    from storage._fsync_worker import FsyncWorker as _FsyncWorker  # type: ignore[import-not-found]
except ImportError:  # built without a C compiler
    _FsyncWorker = None

AVAILABLE = _FsyncWorker is not None


class OffloadedFsync(NamedTuple):
    """One fsync for the worker: `fd` is the worker's own (it closes it), `path` (bytes)
    should still name the file (`device`, `inode`) after the fsync."""

    fd: int
    path: bytes
    device: int
    inode: int


class FsyncOffload:
    """`threads` C fsync threads sharing one queue (jobs for different files run at once,
    their outcomes in any order), the outcomes delivered on `loop` (see the module
    docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int = 1) -> None:
        if _FsyncWorker is None:
            raise RuntimeError("storage._fsync_worker was not built")
        self.loop = loop
        self._worker: Any = _FsyncWorker(threads)
        self._callbacks: dict[int, Callable[[int, bool], None]] = {}
        self._event_fd: int = self._worker.fileno()
        loop.add_reader(self._event_fd, self._collect)

    def submit(self, job: OffloadedFsync, done: Callable[[int, bool], None]) -> None:
        """fsync `job.fd` (then close it) on the thread; `done(errno, still_named)` on the
        loop afterwards."""
        try:
            token = self._worker.submit(job.fd, job.path, job.device, job.inode)
        except BaseException:
            os.close(job.fd)
            raise
        self._callbacks[token] = done

    def _collect(self) -> None:
        for token, error, named in self._worker.completed():
            self._callbacks.pop(token)(error, named)

    def close(self) -> None:
        """Run the jobs already submitted, then stop the threads (their callbacks are not
        called: the loop is stopping)."""
        if not self.loop.is_closed():
            with contextlib.suppress(RuntimeError, ValueError):
                self.loop.remove_reader(self._event_fd)
        self._worker.close()
        self._callbacks.clear()
