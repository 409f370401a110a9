"""The stock-client scenario every packaging of the broker must pass.

One group of three consumers, one per client library (confluent-kafka, kafka-python, aiokafka),
each in its own process, over a 3-partition topic:

* phase `first`: produce 30 records, let the group settle (one partition each), consume them,
  commit, and close;
* (the broker is restarted here, by whoever runs the scenario);
* phase `resume`: the committed offsets are still there, 30 more records are produced, a new
  group of the same three libraries settles and reads exactly those 30: nothing before the
  commit is delivered again.

    python -m tests.scenario.stock_clients --bootstrap HOST:PORT --phase first
    python -m tests.scenario.stock_clients --bootstrap HOST:PORT --phase resume

`make docker-test` runs it from a container against the compose broker and restarts that
between the phases; `tests/packaging` runs it against the installed wheel.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.integration.group_workers import (
    CLIENTS,
    JOIN_TIMEOUT_S,
    ConsumerWorker,
    create_topic,
    exact_split,
    produce,
    wait_until,
    worker_pool,
)

TOPIC = "scenario"
GROUP = "scenario"
PARTITIONS = 3
RECORDS_PER_PHASE = 30
PER_PARTITION = RECORDS_PER_PHASE // PARTITIONS


@dataclass(frozen=True)
class Endpoint:
    """A broker known only by its address (what the worker helpers need of one)."""

    bootstrap: str


def _read_since_last_assignment(worker: ConsumerWorker) -> dict[int, set[int]]:
    """partition -> offsets delivered to the worker since it was last (re)assigned."""
    with worker._lock:
        reports = list(worker.reports)
    last = max((i for i, r in enumerate(reports) if r["ev"] == "assignment"), default=-1)
    delivered: dict[int, set[int]] = {}
    for report in reports[last + 1:]:
        if report["ev"] == "message":
            delivered.setdefault(report["partition"], set()).add(report["offset"])
    return delivered


def _caught_up(workers: list[ConsumerWorker], end_offset: int) -> bool:
    """Split one partition each, and each owner has read its partition up to `end_offset`."""
    if not exact_split(workers, PARTITIONS):
        return False
    for worker in workers:
        delivered = _read_since_last_assignment(worker)
        for partition in worker.assignment or ():
            if end_offset - 1 not in delivered.get(partition, set()):
                return False
    return True


def _run_group(endpoint: Endpoint, log_dir: Path, end_offset: int) -> list[ConsumerWorker]:
    """Three libraries join one group, catch up to `end_offset`, commit and close."""
    with worker_pool(endpoint, log_dir) as spawn:  # type: ignore[arg-type]
        workers = [spawn(client, TOPIC, GROUP, f"scenario-{client}", strategy="range")
                   for client in CLIENTS]
        wait_until(lambda: _caught_up(workers, end_offset), JOIN_TIMEOUT_S * 2,
                   f"three libraries to settle and read up to offset {end_offset}", workers)
        for worker in workers:
            worker.commit()
        for worker in workers:
            worker.close()
        return workers


def committed_offsets(endpoint: Endpoint) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": endpoint.bootstrap})
    request = ConsumerGroupTopicPartitions(
        GROUP, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request])[GROUP].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def phase_first(endpoint: Endpoint, log_dir: Path) -> None:
    create_topic(endpoint, TOPIC, PARTITIONS)  # type: ignore[arg-type]
    produce(endpoint, TOPIC, [f"a{i}" for i in range(RECORDS_PER_PHASE)],  # type: ignore[arg-type]
            PARTITIONS)
    workers = _run_group(endpoint, log_dir, PER_PARTITION)
    values = {v for w in workers for v in w.values()}
    assert values == {f"a{i}" for i in range(RECORDS_PER_PHASE)}, sorted(values)
    assert committed_offsets(endpoint) == dict.fromkeys(range(PARTITIONS), PER_PARTITION)


def phase_resume(endpoint: Endpoint, log_dir: Path) -> None:
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:  # the restarted broker may still be replaying its group log
        try:
            offsets = committed_offsets(endpoint)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert offsets == dict.fromkeys(range(PARTITIONS), PER_PARTITION), offsets
    second = [f"b{i}" for i in range(RECORDS_PER_PHASE)]
    produce(endpoint, TOPIC, second, PARTITIONS)  # type: ignore[arg-type]
    workers = _run_group(endpoint, log_dir, 2 * PER_PARTITION)
    values = {v for w in workers for v in w.values()}
    # Nothing committed before the restart is delivered again, not even during the rebalances.
    assert values == set(second), sorted(values)
    assert committed_offsets(endpoint) == dict.fromkeys(range(PARTITIONS), 2 * PER_PARTITION)


PHASES = {"first": phase_first, "resume": phase_resume}


def run(bootstrap: str, phase: str, log_dir: Path) -> None:
    PHASES[phase](Endpoint(bootstrap), log_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.scenario.stock_clients")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--phase", choices=sorted(PHASES), required=True)
    parser.add_argument("--log-dir", type=Path, help="worker logs (default: a temporary dir)")
    args = parser.parse_args(argv)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="scenario-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        run(args.bootstrap, args.phase, log_dir)
    except AssertionError as exc:
        print(f"scenario phase {args.phase} failed: {exc}", file=sys.stderr)
        return 1
    print(f"scenario phase {args.phase}: ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
