"""One group consumer in its own process, driven over stdin, reporting as JSON lines on stdout.

Run as a script: `python group_consumer.py --client confluent --bootstrap HOST:PORT --topic T
--group G`. It subscribes and polls until told otherwise. Reports, one JSON object a line:

* `{"ev": "started"}` once subscribed;
* `{"ev": "assigned" | "revoked" | "lost", "partitions": [...]}` from the rebalance callbacks
  (for an incremental protocol only the partitions that changed), each followed by
  `{"ev": "assignment", "partitions": [...]}`, the partitions owned from then on;
* `{"ev": "message", "partition": p, "offset": o, "value": "..."}` per record;
* `{"ev": "committed"}` after a synchronous commit of the consumed positions;
* `{"ev": "closed"}` after a graceful close, just before exiting;
* `{"ev": "error", "error": "..."}` for anything the client reports.

Every report also carries `t`, the monotonic clock when it was written.

Commands, one a line on stdin: `commit`, `close`. End of input closes too.

kafka-python 3.0.12 can abandon a rejoin that its own metadata check started (the leader
assigned with an empty metadata snapshot, then learnt the partitions): if a `poll()` times out
while that JoinGroup/SyncGroup round is in flight, the next `poll()` re-evaluates
`need_rejoin()`, which turned false when the leader computed the new assignment, and never
awaits the round again. The member keeps heartbeating disabled and its session expires. The
worker therefore fetches the topic's metadata before the first poll; with `--cold-metadata` it
does not, and polls with a long timeout while it owns no partition instead, so that a poll
rarely ends inside that rejoin.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

STRATEGY_NAMES = ("range", "roundrobin", "cooperative-sticky")


def emit(ev: str, **fields: Any) -> None:
    # `t`: CLOCK_MONOTONIC, the same clock in every process on the machine, so that a load
    # generator can line up when each consumer of a group received its records.
    sys.stdout.write(json.dumps({"ev": ev, "t": round(time.monotonic(), 4), **fields}) + "\n")
    sys.stdout.flush()


class Ownership:
    """The partitions this consumer owns, as the rebalance callbacks report them."""

    def __init__(self) -> None:
        self.owned: set[int] = set()

    def assigned(self, partitions: Iterable[int], incremental: bool) -> None:
        parts = sorted(partitions)
        if not incremental:
            self.owned.clear()
        self.owned |= set(parts)
        emit("assigned", partitions=parts)
        emit("assignment", partitions=sorted(self.owned))

    def revoked(self, partitions: Iterable[int], how: str = "revoked") -> None:
        parts = sorted(partitions)
        self.owned -= set(parts)
        emit(how, partitions=parts)
        emit("assignment", partitions=sorted(self.owned))


def command_reader() -> queue.Queue[str]:
    commands: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            if line.strip():
                commands.put(line.strip())
        commands.put("close")

    threading.Thread(target=read, daemon=True).start()
    return commands


def next_command(commands: queue.Queue[str]) -> str | None:
    try:
        return commands.get_nowait()
    except queue.Empty:
        return None


# -- confluent-kafka -----------------------------------------------------------------------------


def run_confluent(args: argparse.Namespace, commands: queue.Queue[str]) -> None:
    from confluent_kafka import Consumer, KafkaException

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "session.timeout.ms": args.session_ms,
        "heartbeat.interval.ms": args.heartbeat_ms,
        "max.poll.interval.ms": max(args.session_ms, args.rebalance_ms),
        "partition.assignment.strategy": args.strategy,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "error_cb": lambda error: emit("error", error=str(error)),
    }
    if args.group_protocol == "consumer":
        # KIP-848: the broker sets the session timeout and heartbeat interval and assigns.
        for classic_only in ("session.timeout.ms", "heartbeat.interval.ms",
                             "partition.assignment.strategy"):
            del config[classic_only]
        config["group.protocol"] = "consumer"
        if args.remote_assignor:
            config["group.remote.assignor"] = args.remote_assignor
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    if args.debug:
        config["debug"] = "cgrp,protocol"
    consumer = Consumer(config)
    owned = Ownership()
    incremental = args.strategy == "cooperative-sticky" or args.group_protocol == "consumer"

    def on_assign(c: Any, partitions: list[Any]) -> None:
        owned.assigned((p.partition for p in partitions), incremental)

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        owned.revoked(p.partition for p in partitions)

    def on_lost(c: Any, partitions: list[Any]) -> None:
        owned.revoked((p.partition for p in partitions), "lost")

    # A topic starting with "^" is a regex subscription (sent to the broker under KIP-848).
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit("started")
    while True:
        command = next_command(commands)
        if command == "close":
            consumer.close()
            emit("closed")
            return
        if command == "commit":
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                emit("error", error=f"commit: {exc}")
            else:
                emit("committed")
        message = consumer.poll(0.1)
        if message is None:
            continue
        if message.error() is not None:
            emit("error", error=str(message.error()))
            continue
        emit("message", partition=message.partition(), offset=message.offset(),
             value=(message.value() or b"").decode(), topic=message.topic())


# -- kafka-python --------------------------------------------------------------------------------


def run_kafka_python(args: argparse.Namespace, commands: queue.Queue[str]) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {"range": RangePartitionAssignor,
                "roundrobin": RoundRobinPartitionAssignor,
                "cooperative-sticky": CooperativeStickyAssignor}[args.strategy]
    # Under KIP-429 the listener hears only about the partitions that change.
    incremental = args.strategy == "cooperative-sticky"
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        group_instance_id=args.instance_id or None,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        max_poll_interval_ms=max(args.session_ms, args.rebalance_ms),
        partition_assignment_strategy=[assignor],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    owned = Ownership()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            owned.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            owned.assigned((tp.partition for tp in assigned), incremental)

    consumer.subscribe([args.topic], listener=Listener())
    if not args.cold_metadata:
        # Refresh metadata before the first poll joins: otherwise kafka-python's leader assigns
        # with an empty metadata snapshot and rejoins once the partitions are known, and
        # kafka-python 3.0.12 can abandon such a metadata-driven rejoin (module docstring).
        consumer.topics()
    emit("started")
    while True:
        command = next_command(commands)
        if command == "close":
            consumer.close()
            emit("closed")
            return
        if command == "commit":
            consumer.commit()
            emit("committed")
        # Cold, owning nothing: the metadata-driven rejoin is due; do not time out inside it.
        timeout_ms = 5000 if args.cold_metadata and not owned.owned else 100
        for tp, records in consumer.poll(timeout_ms=timeout_ms).items():
            for record in records:
                emit("message", partition=tp.partition, offset=record.offset,
                     value=(record.value or b"").decode())


# -- aiokafka ------------------------------------------------------------------------------------


def run_aiokafka(args: argparse.Namespace, commands: queue.Queue[str]) -> None:
    asyncio.run(_run_aiokafka(args, commands))


async def _run_aiokafka(args: argparse.Namespace, commands: queue.Queue[str]) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {"range": RangePartitionAssignor,
                "roundrobin": RoundRobinPartitionAssignor}[args.strategy]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.client_id,
        group_instance_id=args.instance_id or None,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        max_poll_interval_ms=max(args.session_ms, args.rebalance_ms),
        rebalance_timeout_ms=args.rebalance_ms,
        partition_assignment_strategy=(assignor,),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    owned = Ownership()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            owned.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            owned.assigned((tp.partition for tp in assigned), incremental=False)

    await consumer.start()
    consumer.subscribe([args.topic], listener=Listener())
    emit("started")
    while True:
        command = next_command(commands)
        if command == "close":
            await consumer.stop()
            emit("closed")
            return
        if command == "commit":
            await consumer.commit()
            emit("committed")
        batches = await consumer.getmany(timeout_ms=100)
        for tp, records in batches.items():
            for record in records:
                emit("message", partition=tp.partition, offset=record.offset,
                     value=(record.value or b"").decode())


RUNNERS: dict[str, Callable[[argparse.Namespace, queue.Queue[str]], None]] = {
    "confluent": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=sorted(RUNNERS), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--strategy", choices=STRATEGY_NAMES, default="range")
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--rebalance-ms", type=int, default=10000)
    parser.add_argument("--cold-metadata", action="store_true",
                        help="kafka-python: subscribe without fetching the topic's metadata first")
    parser.add_argument("--debug", action="store_true", help="client debug logs on stderr")
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic",
                        help="confluent: the KIP-848 consumer protocol with `consumer`")
    parser.add_argument("--remote-assignor", default="",
                        help="confluent, consumer protocol: group.remote.assignor")
    args = parser.parse_args()
    if args.debug:
        import logging

        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                            format="%(asctime)s %(threadName)s %(name)s %(message)s")
    RUNNERS[args.client](args, command_reader())


if __name__ == "__main__":
    main()
