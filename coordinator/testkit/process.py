"""`RebalancedBroker`: a broker in its own process on a free loopback port, for one test.

Started either through the warm parent (`zygote.py`, shared by the test process: a fork of a
parent that has imported the broker already) or, with `warm=False`, as a fresh
`python -m coordinator`. Either way the broker is a real, separate process speaking Kafka's
protocol on 127.0.0.1; the test talks to it with any client, and to its control endpoint
through `broker.control`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

# Settings that make a broker quick to start and quick to answer in a test: no initial
# rebalance delay, one group-log partition (fifty would be fifty directories to create).
TEST_SETTINGS: dict[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "log.format": "json",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Zygote:
    """The test process's one warm parent (started on first use, or early by `prewarm`)."""

    _lock = threading.Lock()
    _instance: _Zygote | None = None

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coordinator.testkit.zygote"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._ready = False

    @classmethod
    def shared(cls) -> _Zygote:
        with cls._lock:
            if cls._instance is None or cls._instance.proc.poll() is not None:
                cls._instance = _Zygote()
            return cls._instance

    def _wait_ready(self) -> None:
        if self._ready:
            return
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the broker launcher did not start: {line!r}")
        self._ready = True

    def fork(self, argv: list[str], log_path: Path, cwd: Path) -> int:
        with self._lock:
            self._wait_ready()
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(
                {"argv": argv, "log": str(log_path), "cwd": str(cwd)}) + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline().strip()
        if not answer.isdigit():
            raise RuntimeError(f"the broker launcher refused: {answer}")
        return int(answer)


def prewarm() -> None:
    """Start the warm parent now (it takes the broker's import time, once), so that the first
    broker a test asks for starts as fast as the others."""
    _Zygote.shared()


class RebalancedBroker:
    """A broker for a test. Use as a context manager (sync or async) or `start()`/`stop()`.

    `settings` are broker settings by their Kafka names (they override `TEST_SETTINGS`);
    `control` enables the test control endpoint (faults, virtual time, waiters) on a loopback
    port with a random token, reachable through `.control`."""

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *,
                 settings: Mapping[str, Any] | None = None, control: bool = True,
                 warm: bool = True, port: int | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(
            tempfile.mkdtemp(prefix="rebalanced-"))
        self.port = port or free_port()
        self.settings = {**TEST_SETTINGS,
                         **{k: str(v) for k, v in (settings or {}).items()}}
        self.warm = warm
        self.control_enabled = control
        self.control_port: int | None = None
        self.control_token = secrets.token_hex(16) if control else None
        self.pid: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self.log_path = self.data_dir / "broker.log"
        self._control: Any = None

    @property
    def bootstrap(self) -> str:
        """`host:port` for the clients' `bootstrap.servers`."""
        return f"127.0.0.1:{self.port}"

    @property
    def control(self) -> Any:
        """The control handle (`coordinator.testkit.control.Control`)."""
        if self._control is None:
            if self.control_port is None or self.control_token is None:
                raise RuntimeError("this broker was started without the control endpoint")
            from coordinator.testkit.control import Control

            self._control = Control(f"http://127.0.0.1:{self.control_port}",
                                    self.control_token)
        return self._control

    def argv(self) -> list[str]:
        args = ["--log.dirs", str(self.data_dir / "data"),
                "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}"]
        settings = dict(self.settings)
        if self.control_enabled:
            self.control_port = self.control_port or free_port()
            settings["test.control.listener"] = f"127.0.0.1:{self.control_port}"
            settings["test.control.token"] = str(self.control_token)
        for key, value in settings.items():
            args += [f"--{key}", value]
        return args

    def start(self, timeout: float = 20.0) -> RebalancedBroker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = self.argv()
        if self.warm:
            self.pid = _Zygote.shared().fork(argv, self.log_path, Path.cwd())
        else:
            self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop()
            self._proc = subprocess.Popen([sys.executable, "-m", "coordinator", *argv],
                                          stdout=self._log_file, stderr=self._log_file,
                                          start_new_session=True)
            self.pid = self._proc.pid
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise RuntimeError(f"the broker exited at start: {self.log_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
                if self.control_port is not None:
                    with socket.create_connection(("127.0.0.1", self.control_port),
                                                  timeout=0.2):
                        pass
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError("the broker did not start in time: "
                                       f"{self.log_text()[-2000:]}") from None
                time.sleep(0.005)

    @property
    def running(self) -> bool:
        if self.pid is None:
            return False
        if self._proc is not None:
            return self._proc.poll() is None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    @property
    def exit_code(self) -> int | None:
        """The exit status of a broker started with `warm=False` once it has exited; None
        while it runs (a broker forked from the warm parent has no status to read here)."""
        return None if self._proc is None else self._proc.poll()

    def _wait_gone(self, timeout: float) -> bool:
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + timeout
        while self.running:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, as an orchestrator stops it: the broker closes its logs and exits."""
        if self.running:
            assert self.pid is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            if not self._wait_gone(timeout):
                self.kill()
        self._cleanup()

    def kill(self) -> None:
        """SIGKILL: the broker dies mid-flight, as in a crash."""
        if self.running:
            assert self.pid is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self._wait_gone(5.0)

    def _cleanup(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._control is not None:
            self._control.close()
            self._control = None

    def remove_data(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> RebalancedBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        self.remove_data()

    async def __aenter__(self) -> RebalancedBroker:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.to_thread(self.stop)
        self.remove_data()
