"""The filesystem seam under the partition log.

Everything `storage/segment.py`, `storage/log.py` and `storage/topics.py` do to disk goes
through a `FileSystem`, so a test can swap in `FaultyFileSystem` and make the next write,
fsync, truncate, open or rename fail (the idea of franz-go's `kfake/persist_fs.go`
`failNextSync`). The real implementation is a thin layer over `os`: file descriptors, `pread`,
`ftruncate`, `fsync`, and directory fsyncs after anything that changes a directory.

A broker process started with `REBALANCED_FAULT_PLAN` set (a test's doing; see
`filesystem_from_env`) runs on a `FaultyFileSystem` built from that plan; otherwise the real
one, with no cost on any path.

What is left to the callers: deciding *when* to fsync (the log's policy) and what to do after a
failure (the log rolls a failed append back with `truncate`).

Raises: every method may raise `OSError`; anything else is a bug.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections import deque
from pathlib import Path

__all__ = [
    "FAULT_PLAN_ENV",
    "REAL_FS",
    "AppendHandle",
    "FaultRule",
    "FaultyFileSystem",
    "FileSystem",
    "ReadHandle",
    "filesystem_from_env",
]

Buffer = bytes | bytearray | memoryview


class ReadHandle:
    """A file opened for positional reads."""

    __slots__ = ("_fd", "_identity", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._identity: tuple[int, int] | None = None

    def fileno(self) -> int:
        return self._fd

    def identity(self) -> tuple[int, int]:
        """(device, inode) of the open file: fixed for the descriptor's life, so asked of the
        kernel once (a durable append checks it after every fsync)."""
        identity = self._identity
        if identity is None:
            opened = os.fstat(self._fd)
            identity = self._identity = (opened.st_dev, opened.st_ino)
        return identity

    def pread(self, size: int, position: int) -> bytes:
        """Up to `size` bytes at `position` (fewer only at end of file)."""
        data = os.pread(self._fd, size, position)
        if len(data) == size or not data:
            return data
        # A regular file returns short reads only at EOF, but be exact anyway.
        parts = [data]
        got = len(data)
        while got < size:
            more = os.pread(self._fd, size - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd < 0


class AppendHandle(ReadHandle):
    """A file opened `O_RDWR | O_APPEND`: every `write` lands at the current end of file.

    The same descriptor serves `pread`, so the active segment needs one descriptor only.
    """

    __slots__ = ()

    def write(self, data: Buffer) -> None:
        """Write all of `data` (looping over short writes)."""
        view = memoryview(data)
        written = os.write(self._fd, view)
        while written < len(view):
            written += os.write(self._fd, view[written:])

    def fsync(self) -> None:
        os.fsync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)


class FileSystem:
    """The real filesystem. Subclass it to inject failures (see `FaultyFileSystem`)."""

    def open_append(self, path: Path, *, create: bool = True) -> AppendHandle:
        """Open `path` for appending and positional reads, creating it if absent (unless not
        `create`: then `FileNotFoundError`)."""
        fd = os.open(path, _append_flags(create), 0o644)
        return AppendHandle(path, fd)

    def open_read(self, path: Path) -> ReadHandle:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
        return ReadHandle(path, fd)

    def read_bytes(self, path: Path) -> bytes:
        return path.read_bytes()

    def write_atomic(self, path: Path, data: Buffer) -> None:
        """Replace `path` with `data` so a crash leaves either the old or the new file.

        Writes `path.tmp`, fsyncs it, renames it over `path`, then fsyncs the directory.
        """
        tmp = path.with_name(path.name + ".tmp")
        self.remove(tmp)  # a leftover of a failed attempt; a new file needs no truncate
        handle = self.open_append(tmp)
        try:
            try:
                handle.write(data)
                handle.fsync()
            finally:
                handle.close()
            self.rename(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                self.remove(tmp)
            raise
        self.fsync_dir(path.parent)

    def write_unsynced(self, path: Path, data: Buffer) -> None:
        """`write_atomic` without the fsyncs: readers see the old or the new file, but a
        crash of the machine may lose the new one. For a disk whose fsyncs fail."""
        tmp = path.with_name(path.name + ".tmp")
        self.remove(tmp)
        handle = self.open_append(tmp)
        try:
            handle.write(data)
        finally:
            handle.close()
        self.rename(tmp, path)

    def listdir(self, path: Path) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: Path) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: Path) -> bool:
        return os.path.isdir(path)

    def getsize(self, path: Path) -> int:
        return os.path.getsize(path)

    def same_file(self, path: Path, handle: ReadHandle) -> bool:
        """Does `path` still name the file `handle` has open (not deleted nor replaced)?"""
        try:
            named = os.stat(path)
        except FileNotFoundError:
            return False
        return (named.st_dev, named.st_ino) == handle.identity()

    def mtime_ms(self, path: Path) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def makedirs(self, path: Path) -> None:
        """Create `path` (and parents) if absent; fsync the parent when a directory was made."""
        if os.path.isdir(path):
            return
        os.makedirs(path, exist_ok=True)
        self.fsync_dir(path.parent)

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def remove(self, path: Path) -> None:
        """Remove a file; a missing file is not an error."""
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

    def rmtree(self, path: Path) -> None:
        """Remove a directory tree; a missing directory is not an error."""
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(path)

    def fsync_dir(self, path: Path) -> None:
        """Make entries created, renamed or removed in `path` durable."""
        fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_O_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)

REAL_FS = FileSystem()


# --------------------------------------------------------------------------------------------
# Fault injection
# --------------------------------------------------------------------------------------------


def _append_flags(create: bool) -> int:
    flags = os.O_RDWR | os.O_APPEND | _O_CLOEXEC
    return flags | os.O_CREAT if create else flags


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device (injected)")


def _eio() -> OSError:
    return OSError(errno.EIO, "Input/output error (injected)")


class FaultRule:
    """A standing failure: every `op` on a file whose path contains `path` fails with `exc`,
    `times` times (-1: for ever), once the file `armed_by` exists (if given) and after the
    first `after` matching operations went through. A failing write writes its first
    `partial` bytes first (a torn write)."""

    def __init__(self, op: str, exc: OSError, *, path: str = "", times: int = -1,
                 after: int = 0, armed_by: str = "", partial: int = 0) -> None:
        self.op = op
        self.partial = partial
        self.exc = exc
        self.path = path
        self.times = times
        self.after = after
        self.armed_by = armed_by
        self.fired = 0

    def take(self, op: str, path: Path | None) -> OSError | None:
        if op != self.op or self.times == 0:
            return None
        if self.path and (path is None or self.path not in str(path)):
            return None
        if self.armed_by and not os.path.exists(self.armed_by):
            return None
        if self.after > 0:
            self.after -= 1
            return None
        if self.times > 0:
            self.times -= 1
        self.fired += 1
        return self.exc


class FaultyFileSystem(FileSystem):
    """The real filesystem plus injected failures, for tests.

    Each `fail_next_*` call queues one failure for the next matching operation on any file
    opened through this object. `fail_next_write(partial=n)` writes the first `n` bytes before
    raising, to model a torn write. `fail_always` adds a standing `FaultRule` (a disk that
    keeps failing). `ops` counts the operations seen, for assertions such as "no fsync
    happened".
    """

    def __init__(self, rules: list[FaultRule] | None = None) -> None:
        self._faults: dict[str, deque[tuple[OSError, int, str]]] = {}
        self.rules: list[FaultRule] = list(rules or [])
        self.ops: dict[str, int] = {}

    def _queue(self, op: str, exc: OSError | None, partial: int = 0, suffix: str = "") -> None:
        self._faults.setdefault(op, deque()).append((exc or _eio(), partial, suffix))

    def _take(self, op: str, path: Path | None = None) -> tuple[OSError, int] | None:
        self.ops[op] = self.ops.get(op, 0) + 1
        queue = self._faults.get(op)
        if queue:
            exc, partial, suffix = queue[0]
            if not suffix or (path is not None and path.name.endswith(suffix)):
                queue.popleft()
                return exc, partial
        for rule in self.rules:
            fired = rule.take(op, path)
            if fired is not None:
                return fired, rule.partial
        return None

    def fail_always(self, op: str, exc: OSError | None = None, *, path: str = "",
                    times: int = -1) -> FaultRule:
        """Fail every `op` (on paths containing `path`) from now on, or the next `times`."""
        rule = FaultRule(op, exc or (_enospc() if op == "write" else _eio()), path=path,
                         times=times)
        self.rules.append(rule)
        return rule

    def fail_next_write(self, exc: OSError | None = None, *, partial: int = 0) -> None:
        self._queue("write", exc or _enospc(), partial)

    def fail_next_fsync(self, exc: OSError | None = None) -> None:
        self._queue("fsync", exc)

    def fail_next_truncate(self, exc: OSError | None = None) -> None:
        self._queue("truncate", exc)

    def fail_next_open(self, exc: OSError | None = None, *, suffix: str = "") -> None:
        """Fail the next open (of a file whose name ends with `suffix`, if given)."""
        self._queue("open", exc, suffix=suffix)

    def fail_next_rename(self, exc: OSError | None = None) -> None:
        self._queue("rename", exc)

    def pending(self) -> int:
        """How many injected failures have not fired yet."""
        return sum(len(q) for q in self._faults.values())

    def open_append(self, path: Path, *, create: bool = True) -> AppendHandle:
        fault = self._take("open", path)
        if fault is not None:
            raise fault[0]
        fd = os.open(path, _append_flags(create), 0o644)
        return _FaultyAppendHandle(path, fd, self)

    def open_read(self, path: Path) -> ReadHandle:
        fault = self._take("open", path)
        if fault is not None:
            raise fault[0]
        return super().open_read(path)

    def fsync_dir(self, path: Path) -> None:
        fault = self._take("fsync_dir", path)
        if fault is not None:
            raise fault[0]
        super().fsync_dir(path)

    def rename(self, src: Path, dst: Path) -> None:
        fault = self._take("rename", src)
        if fault is not None:
            raise fault[0]
        super().rename(src, dst)


class _FaultyAppendHandle(AppendHandle):
    __slots__ = ("_fs",)

    def __init__(self, path: Path, fd: int, fs: FaultyFileSystem) -> None:
        super().__init__(path, fd)
        self._fs = fs

    def write(self, data: Buffer) -> None:
        fault = self._fs._take("write", self.path)
        if fault is not None:
            exc, partial = fault
            if partial > 0:
                super().write(memoryview(data)[:partial])
            raise exc
        super().write(data)

    def fsync(self) -> None:
        fault = self._fs._take("fsync", self.path)
        if fault is not None:
            raise fault[0]
        super().fsync()

    def truncate(self, size: int) -> None:
        fault = self._fs._take("truncate", self.path)
        if fault is not None:
            raise fault[0]
        super().truncate(size)


# --------------------------------------------------------------------------------------------
# A fault plan for a whole broker process (tests start the real broker with one)
# --------------------------------------------------------------------------------------------

FAULT_PLAN_ENV = "REBALANCED_FAULT_PLAN"
_FAULT_OPS = ("write", "fsync", "fsync_dir", "truncate", "open", "rename")


def filesystem_from_env(environ: dict[str, str] | None = None) -> FaultyFileSystem | None:
    """The `FaultyFileSystem` the `REBALANCED_FAULT_PLAN` variable describes, else None.

    The plan is a JSON list of rules, each `{"op": "fsync", "path": "__consumer_offsets",
    "times": 1, "after": 0, "armed_by": "/some/file", "errno": "EIO"}` (see `FaultRule`; only
    `op` is required; `times` -1 fails for ever; a write rule may have `partial`). Raises
    `ValueError` on a malformed plan.
    """
    text = (os.environ if environ is None else environ).get(FAULT_PLAN_ENV, "")
    if not text:
        return None
    import json

    rules: list[FaultRule] = []
    for entry in json.loads(text):
        op = entry["op"]
        if op not in _FAULT_OPS:
            raise ValueError(f"{FAULT_PLAN_ENV}: unknown op {op!r}")
        code = getattr(errno, str(entry.get("errno", "EIO")))
        exc = OSError(code, f"{os.strerror(code)} (injected)")
        rules.append(FaultRule(op, exc, path=str(entry.get("path", "")),
                               times=int(entry.get("times", -1)),
                               after=int(entry.get("after", 0)),
                               armed_by=str(entry.get("armed_by", "")),
                               partial=int(entry.get("partial", 0))))
    return FaultyFileSystem(rules)
