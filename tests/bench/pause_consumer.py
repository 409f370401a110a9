"""One consumer of the pause benchmark in its own process (`tests/bench/pause.py` drives it).

    python -m tests.bench.pause_consumer --client confluent --bootstrap H:P --topic T --group G

It subscribes, consumes and commits asynchronously about once a second (a synchronous commit
would block the poll loop during a rebalance and measure the client, not the broker). Reports on
stdout, one line each, times in seconds since the epoch:

    M <seq> <time>          a record was handed to the application (value "<seq> <sent time>")
    A <time> <owned>        partitions assigned; <owned> partitions owned from then on
    V <time> <owned>        partitions revoked or lost; <owned> still owned
    C <time>                closed gracefully (after the `close` command on stdin)

`--session-ms 0` keeps the library's default session timeout and heartbeat interval.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

COMMIT_EVERY_S = 1.0


class Reporter:
    def __init__(self) -> None:
        self.owned: set[int] = set()
        self.closing = threading.Event()
        self._out = sys.stdout

    def message(self, value: bytes | None) -> None:
        seq = (value or b"-1 0").split(b" ", 1)[0].decode()
        self._out.write(f"M {seq} {time.time():.4f}\n")

    def assigned(self, partitions: Iterable[int], incremental: bool) -> None:
        if not incremental:
            self.owned.clear()
        self.owned |= set(partitions)
        self._line(f"A {time.time():.4f} {len(self.owned)}")

    def revoked(self, partitions: Iterable[int]) -> None:
        self.owned -= set(partitions)
        self._line(f"V {time.time():.4f} {len(self.owned)}")

    def flush(self) -> None:
        self._out.flush()

    def _line(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()

    def closed(self) -> None:
        self._line(f"C {time.time():.4f}")


def _watch_stdin(reporter: Reporter) -> None:
    for line in sys.stdin:
        if line.strip() == "close":
            break
    reporter.closing.set()


def run_confluent(args: argparse.Namespace, reporter: Reporter) -> None:
    from confluent_kafka import Consumer

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "client.id": args.client_id,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    }
    # "consumer-protocol": KIP-848, the broker assigns (no client assignor, the session and
    # heartbeat interval are the broker's) and hands partitions over incrementally.
    modern = args.strategy == "consumer-protocol"
    if modern:
        config["group.protocol"] = "consumer"
    else:
        config["partition.assignment.strategy"] = args.strategy
    if args.session_ms and not modern:
        config["session.timeout.ms"] = args.session_ms
        config["heartbeat.interval.ms"] = args.heartbeat_ms
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)
    incremental = modern or args.strategy == "cooperative-sticky"
    consumer.subscribe(
        [args.topic],
        on_assign=lambda c, ps: reporter.assigned((p.partition for p in ps), incremental),
        on_revoke=lambda c, ps: reporter.revoked(p.partition for p in ps),
        on_lost=lambda c, ps: reporter.revoked(p.partition for p in ps))
    last_commit = time.monotonic()
    while not reporter.closing.is_set():
        for message in consumer.consume(100, 0.1):
            if message.error() is None:
                reporter.message(message.value())
        reporter.flush()
        if time.monotonic() - last_commit >= COMMIT_EVERY_S and reporter.owned:
            last_commit = time.monotonic()
            with contextlib.suppress(Exception):  # nothing consumed yet in this generation
                consumer.commit(asynchronous=True)
    consumer.close()
    reporter.closed()


def run_kafka_python(args: argparse.Namespace, reporter: Reporter) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    assignor = (CooperativeStickyAssignor if args.strategy == "cooperative-sticky"
                else RangePartitionAssignor)
    incremental = args.strategy == "cooperative-sticky"
    timing: dict[str, Any] = {}
    if args.session_ms:
        timing = {"session_timeout_ms": args.session_ms,
                  "heartbeat_interval_ms": args.heartbeat_ms}
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.client_id,
        group_instance_id=args.instance_id or None, partition_assignment_strategy=[assignor],
        enable_auto_commit=False, auto_offset_reset="earliest", **timing)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            reporter.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            reporter.assigned((tp.partition for tp in assigned), incremental)

    consumer.subscribe([args.topic], listener=Listener())
    consumer.topics()  # metadata before the first join (see the integration worker's notes)
    last_commit = time.monotonic()
    while not reporter.closing.is_set():
        for records in consumer.poll(timeout_ms=100).values():
            for record in records:
                reporter.message(record.value)
        reporter.flush()
        if time.monotonic() - last_commit >= COMMIT_EVERY_S and reporter.owned:
            last_commit = time.monotonic()
            consumer.commit_async()
    consumer.close()
    reporter.closed()


def run_aiokafka(args: argparse.Namespace, reporter: Reporter) -> None:
    asyncio.run(_run_aiokafka(args, reporter))


async def _run_aiokafka(args: argparse.Namespace, reporter: Reporter) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener

    timing: dict[str, Any] = {}
    if args.session_ms:
        timing = {"session_timeout_ms": args.session_ms,
                  "heartbeat_interval_ms": args.heartbeat_ms}
    # aiokafka's commit is a coroutine: its auto-commit task commits in the background, which
    # is the asynchronous commit this library offers.
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.client_id,
        group_instance_id=args.instance_id or None, enable_auto_commit=True,
        auto_commit_interval_ms=int(COMMIT_EVERY_S * 1000), auto_offset_reset="earliest",
        **timing)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            reporter.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            reporter.assigned((tp.partition for tp in assigned), False)

    await consumer.start()
    consumer.subscribe([args.topic], listener=Listener())
    while not reporter.closing.is_set():
        batches = await consumer.getmany(timeout_ms=100)
        for records in batches.values():
            for record in records:
                reporter.message(record.value)
        reporter.flush()
    await consumer.stop()
    reporter.closed()


RUNNERS: dict[str, Callable[[argparse.Namespace, Reporter], None]] = {
    "confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=sorted(RUNNERS), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--strategy", default="range")
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--session-ms", type=int, default=0)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    args = parser.parse_args()
    reporter = Reporter()
    threading.Thread(target=_watch_stdin, args=(reporter,), daemon=True).start()
    RUNNERS[args.client](args, reporter)
    sys.stdout.flush()
    os._exit(0)  # do not wait for client threads that linger after close


if __name__ == "__main__":
    main()
