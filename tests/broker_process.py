"""Start the real broker as a child process on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    def __init__(self, data_dir: Path, port: int | None = None,
                 command: list[str] | None = None,
                 settings: Mapping[str, str] | None = None) -> None:
        """`command` starts another build of the broker (an installed `rebalanced` script);
        by default the source tree's `python -m coordinator` runs. `settings` are broker
        settings by their dotted names (`--name value` flags)."""
        self.data_dir = data_dir
        self.command = command
        self.port = port or free_port()
        self.settings = {"group.initial.rebalance.delay.ms": "0", **(settings or {})}
        self.flags: list[str] = []  # extra command-line flags, e.g. ["--repair"]
        self.env: dict[str, str] = {}  # extra environment variables of the broker process
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> BrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [*(self.command or [sys.executable, "-m", "coordinator"]),
                "--log.dirs", str(self.data_dir),
                "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}"]
        for key, value in self.settings.items():
            args += [f"--{key}", str(value)]
        args += self.flags
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        # An installed broker runs outside the source tree, so that only the wheel's modules
        # can be imported.
        cwd = self.data_dir if self.command else Path(__file__).resolve().parent.parent
        env = {**os.environ, **self.env} if self.env else None
        self.proc = subprocess.Popen(args, stdout=log_file, stderr=log_file, cwd=cwd, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("broker did not start")

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""
