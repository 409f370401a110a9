"""The exactly-once checker: a consume-transform-produce application (confluent-kafka, one
process per instance) is SIGKILLed at random points and restarted, the broker is SIGKILLed and
restarted on the same data directory, and at the end a read_committed reader of the output sees
every input record exactly once, no record of an aborted transaction, and the group's committed
offsets at the input's end.

The kill schedule comes from one seed (`EOS_SEED`, default 26), so a failing schedule can be
replayed; the seed is in the failure message. Kill points are the application's own steps:
between transactions (after `committed`) and inside one (after `begun`, `produced` or
`offsets`, so while records, offsets or the commit are in flight)."""

from __future__ import annotations

import os
import queue
import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.integration.workers import eos_app

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("EOS_SEED", "26"))
PARTITIONS = 2
RECORDS = 1000
KILL_POINTS = ("committed", "begun", "produced", "offsets")
STEP_TIMEOUT = 8.0
APP_SCRIPT = Path(eos_app.__file__)
AIOKAFKA_APP_SCRIPT = APP_SCRIPT.with_name("eos_app_aiokafka.py")


class App:
    """One application process, its output lines read by a thread into a queue."""

    def __init__(self, script: Path, bootstrap: str, run: int, seed: int, log_dir: Path) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        with open(log_dir / f"app-{run}.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(script), "--bootstrap", bootstrap, "--run", str(run),
                 "--seed", str(seed), "--records", str(RECORDS)],
                stdout=subprocess.PIPE, stderr=log, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_for(self, wanted: set[str], timeout: float) -> str | None:
        """The first line in `wanted`, `done` or an `error`; None if the process ended or the
        time ran out first."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            if line in wanted or line == "done" or line.startswith("error"):
                return line
        return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@dataclass
class Tally:
    app_kills: Counter[str] = field(default_factory=Counter)
    broker_kills: int = 0
    app_errors: int = 0
    runs: int = 0


def prepare(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
              for t in (eos_app.INPUT, eos_app.OUTPUT)]
    for future in admin.create_topics(topics).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(eos_app.INPUT, value=f"r{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(15) == 0


def write_an_aborted_transaction(bootstrap: str) -> int:
    """Records in the output that a read_committed reader must never see, whatever the kills
    leave: one aborted transaction of another producer."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-checker"})
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(eos_app.OUTPUT, key=f"aborted:{i}".encode(), value=b"aborted",
                         partition=i % PARTITIONS)
    assert producer.flush(15) == 0
    producer.abort_transaction(15)
    return 10


def read_output(bootstrap: str, isolation: str) -> list[tuple[str, str]]:
    """Every (key, value) of the output up to its end, as a reader with `isolation` sees it."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eos-reader-{isolation}",
                       "enable.auto.commit": False, "enable.partition.eof": True,
                       "isolation.level": isolation})
    reader.assign([TopicPartition(eos_app.OUTPUT, p, 0) for p in range(PARTITIONS)])
    records: list[tuple[str, str]] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is None:
                continue
            partition, key, value = message.partition(), message.key(), message.value()
            assert partition is not None
            if (error := message.error()) is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(partition)
                continue
            at_end.discard(partition)
            assert key is not None and value is not None
            records.append((key.decode(), value.decode()))
    finally:
        reader.close()
    assert len(at_end) == PARTITIONS, "the output's end was not reached"
    return records


def committed_offsets(bootstrap: str) -> list[int]:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": eos_app.GROUP,
                       "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        return [tp.offset for tp in reader.committed(
            [TopicPartition(eos_app.INPUT, p) for p in range(PARTITIONS)], timeout=15)]
    finally:
        reader.close()


def restart_broker(broker: BrokerProcess, tally: Tally) -> BrokerProcess:
    broker.kill()
    tally.broker_kills += 1
    return BrokerProcess(broker.data_dir, port=broker.port).start()


@pytest.mark.parametrize(("script", "app_kills", "broker_kills"), [
    pytest.param(APP_SCRIPT, 22, 4, id="confluent-kafka"),
    pytest.param(AIOKAFKA_APP_SCRIPT, 22, 4, id="aiokafka"),
])
def test_every_input_is_output_exactly_once_across_application_and_broker_kills(
        tmp_path: Path, script: Path, app_kills: int, broker_kills: int) -> None:
    rng = random.Random(SEED)
    broker = BrokerProcess(tmp_path / "data").start()
    tally = Tally()
    try:
        prepare(broker.bootstrap)
        injected_aborts = write_an_aborted_transaction(broker.bootstrap)
        broker_kill_at = set(rng.sample(range(app_kills), broker_kills))
        while sum(tally.app_kills.values()) < app_kills:
            tally.runs += 1
            app = App(script, broker.bootstrap, tally.runs, rng.randrange(1 << 30), tmp_path)
            point = rng.choice(KILL_POINTS)
            nth = rng.randint(1, 3)
            try:
                kill_index = sum(tally.app_kills.values())
                if kill_index in broker_kill_at:
                    # The broker dies under the running application, which either rides
                    # it out or fails and is restarted; then the application is killed too.
                    broker_kill_at.discard(kill_index)
                    line = app.wait_for({f"{point} {nth}"}, STEP_TIMEOUT)
                    broker = restart_broker(broker, tally)
                    point = rng.choice(KILL_POINTS)
                    nth += rng.randint(1, 2)
                    if line is None or line == "done" or line.startswith("error"):
                        tally.app_errors += line is not None and line.startswith("error")
                        continue
                line = app.wait_for({f"{point} {nth}"}, STEP_TIMEOUT)
                assert line != "done", f"input exhausted after {tally.app_kills} (seed {SEED})"
                if line is None or line.startswith("error"):
                    tally.app_errors += 1
                    continue
                app.kill()
                tally.app_kills[point] += 1
            finally:
                app.kill()
        for _ in range(5):  # the last instance runs to the end
            tally.runs += 1
            app = App(script, broker.bootstrap, tally.runs, rng.randrange(1 << 30), tmp_path)
            try:
                line = app.wait_for(set(), 30)
            finally:
                app.kill()
            if line == "done":
                break
            tally.app_errors += 1
        else:
            raise AssertionError(f"the application never finished (seed {SEED}): {tally}")

        committed = read_output(broker.bootstrap, "read_committed")
        everything = read_output(broker.bootstrap, "read_uncommitted")
        counts = Counter(key for key, _ in committed)
        expected = {f"{i % PARTITIONS}:{i // PARTITIONS}" for i in range(RECORDS)}
        duplicates = sum(n - 1 for n in counts.values())
        lost = expected - set(counts)
        assert (duplicates, len(lost)) == (0, 0), \
            f"seed {SEED}: {duplicates} duplicates, {len(lost)} lost; {tally}"
        assert set(counts) == expected
        # Transactions are all or nothing: every transaction a read_committed reader sees
        # part of, it sees whole; the rest of the log is aborted records, never shown.
        by_transaction: defaultdict[str, set[str]] = defaultdict(set)
        for key, tag in everything:
            by_transaction[tag].add(key)
        for tag, keys in _group(committed).items():
            assert keys == by_transaction[tag], f"seed {SEED}: transaction {tag} seen in part"
        aborted = len(everything) - len(committed)
        assert aborted >= injected_aborts
        assert committed_offsets(broker.bootstrap) == [
            len(range(p, RECORDS, PARTITIONS)) for p in range(PARTITIONS)]
        print(f"exactly-once checker, {script.stem}, seed {SEED}: {RECORDS} records, "
              f"{tally.runs} runs, "
              f"application kills {dict(tally.app_kills)}, {tally.broker_kills} broker kills, "
              f"{tally.app_errors} application errors, {aborted} aborted records hidden "
              f"({injected_aborts} of them the checker's own)")
        assert tally.broker_kills == broker_kills
    finally:
        broker.kill()


def _group(records: list[tuple[str, str]]) -> dict[str, set[str]]:
    grouped: defaultdict[str, set[str]] = defaultdict(set)
    for key, tag in records:
        grouped[tag].add(key)
    return grouped
