"""A scripted run of the real broker with stock consumers, recorded for the forensics job.

One confluent-kafka (librdkafka) consumer group on a 6-partition topic, each consumer in its
own process, every live consumer committing twice a second:

1. `early-a` and `early-b` start (dynamic members);
2. `static-s` joins with `group.instance.id` `static-0`;
3. `late-joiner` joins last;
4. `early-b` closes gracefully (LeaveGroup);
5. `early-a` is SIGKILLed (its closed connection removes it after the disconnect grace);
6. `static-s` is SIGKILLed and restarted as `static-s2` with the same instance id: the broker
   replaces the member in place, without a rebalance.

`record(work_dir)` leaves the broker's `log.dirs` (journal and group log) in
`work_dir / "data"` and returns what the report must say. Run as a script to record into a
directory: `python -m tests.forensics.scenario DIR`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.broker_process import BrokerProcess
from tests.integration.group_workers import (
    JOIN_TIMEOUT_S,
    ConsumerWorker,
    create_topic,
    produce,
    settled,
    wait_until,
    worker_pool,
)

GROUP = "orders-billing"
TOPIC = "orders"
PARTITIONS = 6
SESSION_MS = 6000  # the broker's minimum: the SIGKILLed member expires quickly
CLIENT = "confluent"


@dataclass
class Expected:
    """Each rebalance after the first joins, as (cause, culprit client id)."""

    rebalances: list[tuple[str, str]] = field(default_factory=list)
    static_restart: tuple[str, str] = ("", "")  # (group.instance.id, client id of the new one)


class Committer:
    """Produces a few records and asks every live worker to commit every 0.5 s, without waiting
    for the answer (a consumer with nothing new consumed has nothing to commit)."""

    def __init__(self, broker: BrokerProcess) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
        self.workers: list[ConsumerWorker] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Committer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        sequence = 0
        while not self._stop.wait(0.5):
            for partition in range(PARTITIONS):
                sequence += 1
                self._producer.produce(TOPIC, value=f"order-{sequence}".encode(),
                                       partition=partition)
            self._producer.flush(5)
            for worker in list(self.workers):
                if not worker.stopped and worker.proc.poll() is None:
                    with contextlib.suppress(OSError, ValueError):  # it is going away
                        worker.send("commit")


def record(work_dir: Path) -> Expected:
    broker = BrokerProcess(work_dir / "data", settings={"journal.segment.ms": "2000"}).start()
    expected = Expected()
    try:
        create_topic(broker, TOPIC, PARTITIONS)
        produce(broker, TOPIC, (f"order-{i}" for i in range(600)), PARTITIONS)
        with worker_pool(broker, work_dir) as spawn, Committer(broker) as committer:
            def start(name: str, **options: object) -> ConsumerWorker:
                worker = spawn(CLIENT, TOPIC, GROUP, name, session_ms=SESSION_MS, **options)
                committer.workers.append(worker)
                return worker

            def live() -> list[ConsumerWorker]:
                return [w for w in committer.workers if not w.stopped]

            def settle(what: str) -> None:
                wait_until(settled(broker, GROUP, live(), PARTITIONS), JOIN_TIMEOUT_S, what,
                           live(), broker)

            start("early-a")
            start("early-b")
            settle("two consumers to split the topic")
            static = start("static-s", instance_id="static-0")
            settle("the static member to join")
            expected.rebalances.append(("member_join", "static-s"))
            time.sleep(1.0)  # commits in a stable group, so gaps stand out
            start("late-joiner")
            settle("the late joiner to join")
            expected.rebalances.append(("member_join", "late-joiner"))
            time.sleep(1.0)
            early_b = next(w for w in live() if w.name == "early-b")
            early_b.close()
            settle("the rest to rebalance after the graceful close")
            expected.rebalances.append(("member_leave", "early-b"))
            time.sleep(1.0)
            early_a = next(w for w in live() if w.name == "early-a")
            early_a.kill()
            settle("the rest to rebalance after the SIGKILLed member's connection closed")
            expected.rebalances.append(("disconnect", "early-a"))
            time.sleep(1.0)
            static.kill()
            restarted = start("static-s2", instance_id="static-0")
            wait_until(lambda: restarted.assignment is not None, JOIN_TIMEOUT_S,
                       "the restarted static member to get its assignment", [restarted], broker)
            expected.static_restart = ("static-0", "static-s2")
            time.sleep(1.0)
    finally:
        broker.stop()
    return expected


if __name__ == "__main__":
    target = Path(sys.argv[1]).resolve()
    target.mkdir(parents=True, exist_ok=True)
    print(record(target))
