"""Consumers of clients beyond the Python ones and kafka-go, for the compatibility checks
(docs/compatibility.md): sarama (Go, Debian's `golang-github-shopify-sarama-dev`), kafkajs
(Node.js, from npm) and kcat (librdkafka's command-line consumer, Debian's `kcat`). Each runs
in its own process and reports like the kafka-go worker (`ProcessWorker`).

`make install` installs them where it can (root with apt, npm); anything missing makes its
tests skip, saying what to install.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.kafkago import (
    GOPATH_ROOT,
    ProcessWorker,
    WorkerBuildError,
    build_go_program,
    flags,
)

WORKERS = Path(__file__).resolve().parent / "workers"
REPO = Path(__file__).resolve().parents[2]
SARAMA_SOURCE = GOPATH_ROOT / "src" / "github.com" / "Shopify" / "sarama"
# Where `make install` puts kafkajs (npm); KAFKAJS_NODE_PATH names another node_modules.
KAFKAJS_PREFIX = REPO / ".venv" / "kafkajs"


def build_sarama_worker(build_dir: Path, cache_dir: Path | None = None) -> Path:
    # sarama imports DataDog/zstd, a cgo binding of libzstd.
    return build_go_program(WORKERS / "sarama" / "main.go", SARAMA_SOURCE,
                            "golang-github-shopify-sarama-dev", build_dir, cgo=True,
                            cache_dir=cache_dir)


def sarama_version() -> str:
    """The Debian package's upstream version (the sources do not carry one)."""
    done = subprocess.run(["dpkg-query", "-W", "-f=${Version}",
                           "golang-github-shopify-sarama-dev"],
                          capture_output=True, text=True, check=False)
    return done.stdout.split("-")[0] if done.returncode == 0 else "unknown"


class SaramaWorker(ProcessWorker):
    """Options: `session_ms`, `heartbeat_ms` (absent: sarama's 10 s / 3 s), `client_id`."""

    def __init__(self, binary: Path, bootstrap: str, topic: str, group: str, name: str,
                 log_dir: Path, **options: Any) -> None:
        args = [str(binary), "-bootstrap", bootstrap, "-topic", topic, "-group", group,
                *flags(options, "-")]
        super().__init__(f"sarama {sarama_version()}", args, name, log_dir)


def kafkajs_node_path() -> Path:
    """The node_modules holding kafkajs; WorkerBuildError saying what is missing otherwise."""
    if shutil.which("node") is None:
        raise WorkerBuildError("no `node` on PATH (Debian: apt-get install nodejs)")
    configured = os.environ.get("KAFKAJS_NODE_PATH")
    modules = Path(configured) if configured else KAFKAJS_PREFIX / "node_modules"
    if not (modules / "kafkajs" / "package.json").exists():
        raise WorkerBuildError(f"kafkajs is not in {modules} (`make install`, or npm install "
                               "kafkajs and set KAFKAJS_NODE_PATH)")
    return modules


def kafkajs_version(modules: Path) -> str:
    return str(json.loads((modules / "kafkajs" / "package.json").read_text())["version"])


class KafkajsWorker(ProcessWorker):
    """Options: `session_ms`, `heartbeat_ms` (absent: kafkajs' 30 s / 3 s), `client_id`."""

    def __init__(self, modules: Path, bootstrap: str, topic: str, group: str, name: str,
                 log_dir: Path, **options: Any) -> None:
        args = ["node", str(WORKERS / "kafkajs" / "worker.js"), "--bootstrap", bootstrap,
                "--topic", topic, "--group", group, *flags(options, "--")]
        super().__init__(f"kafkajs {kafkajs_version(modules)}", args, name, log_dir,
                         env={"NODE_PATH": str(modules)})


# kcat's own lines: the records as `-f` formats them, and (on stderr, merged) its rebalance
# notices, "% Group G rebalanced (memberid M): assigned: T [0], T [3]" / "revoked: ...".
KCAT_RECORD = re.compile(r"^@@ (\d+) (\d+) (-?\d+) (.*)$")
KCAT_REBALANCE = re.compile(r"rebalanced \(memberid (\S+)\): (assigned|revoked): ?(.*)$")
KCAT_PARTITION = re.compile(r"\[(\d+)\]")


def kcat_version() -> str:
    if shutil.which("kcat") is None:
        raise WorkerBuildError("no `kcat` on PATH (Debian: apt-get install kcat)")
    done = subprocess.run(["kcat", "-V"], capture_output=True, text=True, check=False)
    found = re.search(r"Version (\S+) .*librdkafka (\S+)", done.stdout + done.stderr)
    return f"{found.group(1)} (librdkafka {found.group(2)})" if found else "unknown"


class KcatWorker(ProcessWorker):
    """kcat's balanced consumer (`-G`), auto-committing; its output turned into reports.

    Options: `session_ms`, `heartbeat_ms` (absent: librdkafka's 45 s / 3 s)."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, log_dir: Path,
                 **options: Any) -> None:
        # Not `-o beginning`: with -G it would override the committed offsets.
        kcat = ["kcat", "-b", bootstrap, "-G", group, "-u", "-f", r"@@ %p %o %T %s\n",
                "-X", f"client.id={name}", "-X", "auto.offset.reset=earliest",
                "-X", "enable.partition.eof=false"]
        if options.get("session_ms"):
            kcat += ["-X", f"session.timeout.ms={options['session_ms']}"]
        if options.get("heartbeat_ms"):
            kcat += ["-X", f"heartbeat.interval.ms={options['heartbeat_ms']}"]
        kcat.append(topic)
        # stderr into stdout: the rebalance notices are how kcat tells its assignment.
        args = ["sh", "-c", 'exec "$@" 2>&1', "kcat", *kcat]
        super().__init__(f"kcat {kcat_version()}", args, name, log_dir)

    def _read(self) -> None:
        import time

        assert self.proc.stdout is not None
        owned: set[int] = set()
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("% Reached end of topic"):
                continue  # kcat's own notice, whatever enable.partition.eof says
            report: dict[str, Any]
            at = time.time()
            if record := KCAT_RECORD.match(line):
                report = {"ev": "message", "partition": int(record.group(1)),
                          "offset": int(record.group(2)), "ts": int(record.group(3)),
                          "value": record.group(4), "at": at}
            elif notice := KCAT_REBALANCE.search(line):
                partitions = {int(p) for p in KCAT_PARTITION.findall(notice.group(3))}
                owned = owned | partitions if notice.group(2) == "assigned" else owned - partitions
                with self._lock:
                    self.reports.append({"ev": "joined", "member_id": notice.group(1),
                                         "at": at})
                report = {"ev": "assignment", "partitions": sorted(owned), "at": at}
            else:
                report = {"ev": "error", "error": line, "at": at}
            with self._lock:
                self.reports.append(report)
