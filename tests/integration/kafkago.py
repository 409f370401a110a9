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


def build_worker(build_dir: Path) -> Path:
    """Compile the worker into `build_dir` and return the binary's path."""
    go = shutil.which("go")
    if go is None:
        raise WorkerBuildError("no `go` on PATH (Debian: apt-get install golang-go)")
    if not KAFKA_GO_SOURCE.is_dir():
        raise WorkerBuildError(f"kafka-go is not under {GOPATH_ROOT} (Debian: apt-get install "
                               "golang-github-segmentio-kafka-go-dev)")
    binary = build_dir / "kafkago-worker"
    env = {
        **os.environ,
        "GO111MODULE": "off",  # GOPATH mode: imports resolve from the Debian sources
        "GOPATH": f"{GOPATH_ROOT}{os.pathsep}{build_dir / 'gopath'}",
        "GOPROXY": "off",
        "GOFLAGS": "",
        "GOCACHE": str(build_dir / "cache"),
        "CGO_ENABLED": "0",
    }
    done = subprocess.run([go, "build", "-o", str(binary), str(WORKER_SOURCE)], env=env,
                          cwd=build_dir, capture_output=True, text=True, timeout=300,
                          check=False)
    if done.returncode != 0:
        raise WorkerBuildError(f"go build failed: {done.stderr.strip()[-1500:]}")
    return binary


class KafkaGoWorker(ConsumerWorker):
    """One kafka-go consumer process; reads the same reports as the Python workers.

    Options: `session_ms`, `heartbeat_ms`, `max_wait_ms` (0 or absent: kafka-go's defaults,
    30 s / 3 s / 10 s), `commit_ms`, `client_id` (absent: kafka-go's default client id, the
    same for every worker)."""

    def __init__(self, binary: Path, bootstrap: str, topic: str, group: str, name: str,
                 log_dir: Path, **options: Any) -> None:
        # ConsumerWorker's state, with the Go binary as the process.
        self.client = f"kafka-go {KAFKA_GO_VERSION}"
        self.name = name
        self.instance_id = None
        args = [str(binary), "-bootstrap", bootstrap, "-topic", topic, "-group", group]
        for key, value in options.items():
            if value is not None:
                args += [f"-{key.replace('_', '-')}", str(value)]
        self.stderr_path = log_dir / f"worker-{name}.log"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in reap()
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, bufsize=1)
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
