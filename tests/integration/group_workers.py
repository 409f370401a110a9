"""Group consumers in child processes (`workers/group_consumer.py`) and the broker's event journal.

A `ConsumerWorker` is one consumer of one client library in its own process: the test reads
what it reports (assignments, messages) and can close it gracefully or SIGKILL it. `wait_until`
polls a condition with a generous deadline that only exists to turn a hang into a failure.
With `GROUP_WORKER_DEBUG=1` in the environment the workers log their clients' debug output
to the `worker-<name>.log` files next to the broker log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from tests.broker_process import BrokerProcess

if TYPE_CHECKING:
    # The scenario image runs these workers without the broker's package installed.
    from coordinator.testkit.process import RebalancedBroker

# Our own broker process, or the test kit's (its journal is read through the control handle).
AnyBroker: TypeAlias = "BrokerProcess | RebalancedBroker"

WORKER_SCRIPT = Path(__file__).resolve().parent / "workers" / "group_consumer.py"
CLIENTS = ("confluent", "kafka-python", "aiokafka")

# Hang detectors, not performance expectations.
JOIN_TIMEOUT_S = 45.0


class ConsumerWorker:
    def __init__(self, broker: AnyBroker, client: str, topic: str, group: str, name: str,
                 log_dir: Path, **options: Any) -> None:
        self.client = client
        self.name = name
        self.instance_id: str | None = options.get("instance_id")
        args = [sys.executable, str(WORKER_SCRIPT), "--client", client,
                "--bootstrap", broker.bootstrap, "--topic", topic, "--group", group,
                "--client-id", name]
        for key, value in options.items():
            flag = f"--{key.replace('_', '-')}"
            if value is True:
                args.append(flag)
            elif value is not None and value is not False:
                args += [flag, str(value)]
        if os.environ.get("GROUP_WORKER_DEBUG"):
            args.append("--debug")  # client debug logs in the worker-*.log files
        self.stderr_path = log_dir / f"worker-{name}.log"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in reap()
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, bufsize=1,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.reports: list[dict[str, Any]] = []
        self.stopped = False  # closed or killed on purpose
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                report = json.loads(line)
            except ValueError:
                report = {"ev": "garbage", "line": line}
            with self._lock:
                self.reports.append(report)

    # -- what it reported --------------------------------------------------------------------

    def of(self, ev: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.reports if r["ev"] == ev]

    @property
    def assignment(self) -> frozenset[int] | None:
        """The partitions owned now; None before the first assignment."""
        found = self.of("assignment")
        return frozenset(found[-1]["partitions"]) if found else None

    def values(self) -> list[str]:
        return [m["value"] for m in self.of("message")]

    def describe(self) -> str:
        with self._lock:
            tail = [r for r in self.reports if r["ev"] != "message"][-12:]
        stderr = self.stderr_path.read_text(errors="replace")[-1500:]
        return (f"{self.name} ({self.client}) exit={self.proc.poll()} reports={tail}\n"
                f"stderr tail: {stderr}")

    # -- control -----------------------------------------------------------------------------

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def commit(self) -> None:
        count = len(self.of("committed"))
        self.send("commit")
        wait_until(lambda: len(self.of("committed")) > count, 30, f"{self.name} commit",
                   [self])

    def close(self, timeout: float = 30.0) -> None:
        """Graceful close (LeaveGroup for a dynamic member), waiting for the process to end."""
        self.stopped = True
        self.send("close")
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{self.name} did not close: {self.describe()}") from exc
        self._reader.join(5)
        assert self.of("closed"), self.describe()

    def kill(self) -> None:
        self.stopped = True
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def reap(self) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


def wait_until(condition: Callable[[], bool], timeout: float, what: str,
               workers: Iterable[ConsumerWorker] = (), broker: AnyBroker | None = None,
               ) -> None:
    workers = list(workers)
    deadline = time.monotonic() + timeout
    crashed: list[ConsumerWorker] = []
    while time.monotonic() < deadline and not crashed:
        if condition():
            return
        crashed = [w for w in workers if not w.stopped and w.proc.poll() is not None]
        time.sleep(0.05)
    if crashed:
        what = f"{what}, but {', '.join(w.name for w in crashed)} exited"
    details = "\n".join(w.describe() for w in workers)
    if broker is not None:
        details += "\nbroker log tail:\n" + broker.log_text()[-3000:]
    raise AssertionError(f"timed out waiting for {what}\n{details}")


@contextmanager
def worker_pool(broker: AnyBroker, log_dir: Path) -> Iterator[Callable[..., ConsumerWorker]]:
    """A factory of workers; every worker still running at the end is killed."""
    started: list[ConsumerWorker] = []

    def spawn(client: str, topic: str, group: str, name: str, **options: Any) -> ConsumerWorker:
        worker = ConsumerWorker(broker, client, topic, group, name, log_dir, **options)
        started.append(worker)
        return worker

    try:
        yield spawn
    finally:
        for worker in started:
            worker.reap()


# -- the group as the consumers see it -----------------------------------------------------------


def exact_split(workers: Iterable[ConsumerWorker], partitions: int) -> bool:
    """Every partition owned by exactly one worker, and the load spread evenly."""
    owned = [w.assignment for w in workers]
    if any(a is None for a in owned):
        return False
    sets = [a for a in owned if a is not None]
    counts = sorted(len(a) for a in sets)
    flat = [p for a in sets for p in a]
    return (sorted(flat) == list(range(partitions))
            and counts[-1] - counts[0] <= 1)


# -- the broker's event journal ------------------------------------------------------------------


def group_events(broker: AnyBroker, group: str, event: str | None = None
                 ) -> list[dict[str, Any]]:
    if not isinstance(broker, BrokerProcess):
        # The kit keeps the group's journal records in memory, with the journal's field names.
        return [record for record in broker.control.events(group)
                if event is None or record.get("event_type") == event]
    journal = broker.data_dir / "events"
    if not journal.exists():
        return []
    # Closed files in name (= time) order, then the active one.
    paths = [*sorted(journal.glob("events-*.jsonl")), journal / ".events-active.jsonl"]
    lines = [line for path in paths if path.exists()
             for line in path.read_text(encoding="utf-8").splitlines()]
    found = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line being written
        if record.get("group_id", record.get("group")) != group:
            continue
        if event is None or record.get("event_type") == event:
            found.append(record)
    return found


def stable_with(broker: AnyBroker, group: str, members: int) -> bool:
    """The group's latest membership event is a stabilization with `members` members."""
    relevant = [e for e in group_events(broker, group) if e["event_type"] in (
        "rebalance_started", "group_stabilized", "member_added", "member_removed",
        "join_completed", "group_empty")]
    return bool(relevant) and relevant[-1]["event_type"] == "group_stabilized" and (
        relevant[-1]["num_members"] == members)


def settled(broker: AnyBroker, group: str, workers: list[ConsumerWorker],
            partitions: int) -> Callable[[], bool]:
    """Broker Stable with exactly these workers, and their assignments split the topic."""
    return lambda: stable_with(broker, group, len(workers)) and exact_split(workers, partitions)


# -- topics ----------------------------------------------------------------------------------------


def create_topic(broker: AnyBroker, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)])
    futures[name].result(10)


def produce(broker: AnyBroker, topic: str, values: Iterable[str], partitions: int) -> None:
    """Values round-robin over the partitions, in order within each."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % partitions)
    assert producer.flush(30) == 0
