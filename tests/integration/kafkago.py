"""The kafka-go 0.2.1 consumer worker (`workers/kafkago/main.go`): its offline build, and a
`ConsumerWorker` that runs it.

kafka-go 0.2.1 is the Go client of the seeds' field report. Debian packages it
(`golang-github-segmentio-kafka-go-dev`, source under `/usr/share/gocode`) with Go itself
(`golang-go`); `make install` installs both where it runs as root with apt. The worker is built
in GOPATH mode against those sources only: no module proxy, no network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.integration.group_workers import ConsumerWorker

WORKER_SOURCE = Path(__file__).resolve().parent / "workers" / "kafkago" / "main.go"
GOPATH_ROOT = Path("/usr/share/gocode")
KAFKA_GO_SOURCE = GOPATH_ROOT / "src" / "github.com" / "segmentio" / "kafka-go"
KAFKA_GO_VERSION = "0.2.1"


class WorkerBuildError(RuntimeError):
    """Go or kafka-go is missing, or the worker did not compile; the message says which."""


def build_go_program(source: Path, library: Path, apt_package: str, build_dir: Path,
                     cgo: bool = False, cache_dir: Path | None = None) -> Path:
    """Compile the Go program `source` (one file, importing `library` from the Debian Go
    sources) into `build_dir`, offline, and return the binary's path. `cache_dir` is Go's
    build cache (default: inside `build_dir`), to share the compiled packages between builds."""
    go = shutil.which("go")
    if go is None:
        raise WorkerBuildError("no `go` on PATH (Debian: apt-get install golang-go)")
    if not library.is_dir():
        raise WorkerBuildError(f"{library.name} is not under {GOPATH_ROOT} (Debian: apt-get "
                               f"install {apt_package})")
    binary = build_dir / f"{source.parent.name}-worker"
    env = {
        **os.environ,
        "GO111MODULE": "off",  # GOPATH mode: imports resolve from the Debian sources
        "GOPATH": f"{GOPATH_ROOT}{os.pathsep}{build_dir / 'gopath'}",
        "GOPROXY": "off",
        "GOFLAGS": "",
        "GOCACHE": str(cache_dir or build_dir / "go-cache"),
        "CGO_ENABLED": "1" if cgo else "0",
    }
    done = subprocess.run([go, "build", "-o", str(binary), str(source)], env=env,
                          cwd=build_dir, capture_output=True, text=True, timeout=300,
                          check=False)
    if done.returncode != 0:
        raise WorkerBuildError(f"go build failed: {done.stderr.strip()[-1500:]}")
    return binary


def build_worker(build_dir: Path, cache_dir: Path | None = None) -> Path:
    """The kafka-go worker, compiled into `build_dir`."""
    return build_go_program(WORKER_SOURCE, KAFKA_GO_SOURCE,
                            "golang-github-segmentio-kafka-go-dev", build_dir,
                            cache_dir=cache_dir)


class ProcessWorker(ConsumerWorker):
    """A consumer process of a client other than the Python ones, speaking the JSON reports of
    `workers/kafkago/main.go` (`ConsumerWorker`'s, plus `joined` and each report's `at`)."""

    def __init__(self, client: str, args: list[str], name: str, log_dir: Path,
                 env: dict[str, str] | None = None) -> None:
        # ConsumerWorker's state, with another program as the process.
        self.client = client
        self.name = name
        self.instance_id = None
        self.stderr_path = log_dir / f"worker-{name}.log"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in reap()
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, bufsize=1,
                                     env=None if env is None else {**os.environ, **env})
        self.reports: list[dict[str, Any]] = []
        self.stopped = False
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def member_ids(self) -> list[str]:
        """Every member id the coordinator gave this worker, oldest first."""
        ids: list[str] = []
        for joined in self.of("joined"):
            if joined["member_id"] not in ids:
                ids.append(joined["member_id"])
        return ids

    def committed_offsets(self) -> dict[int, int]:
        """The next offset of every partition this worker committed, latest commit winning."""
        offsets: dict[int, int] = {}
        for report in self.of("committed"):
            offsets.update({int(p): o for p, o in report["offsets"].items()})
        return offsets


def flags(options: dict[str, Any], prefix: str) -> list[str]:
    """`session_ms=6000` as `[prefix + "session-ms", "6000"]`; None values left out."""
    out: list[str] = []
    for key, value in options.items():
        if value is not None:
            out += [prefix + key.replace("_", "-"), str(value)]
    return out


class KafkaGoWorker(ProcessWorker):
    """One kafka-go consumer process.

    Options: `session_ms`, `heartbeat_ms`, `max_wait_ms` (0 or absent: kafka-go's defaults,
    30 s / 3 s / 10 s), `commit_ms`, `client_id` (absent: kafka-go's default client id, the
    same for every worker)."""

    def __init__(self, binary: Path, bootstrap: str, topic: str, group: str, name: str,
                 log_dir: Path, **options: Any) -> None:
        args = [str(binary), "-bootstrap", bootstrap, "-topic", topic, "-group", group,
                *flags(options, "-")]
        super().__init__(f"kafka-go {KAFKA_GO_VERSION}", args, name, log_dir)
