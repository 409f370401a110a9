"""`rebalanced transactions ...`: kafka-transactions.sh's list and describe for any
Kafka-compatible broker, over ListTransactions and DescribeTransactions.

    rebalanced transactions list [--state STATE ...] [--producer-id ID ...] [--duration-ms MS]
    rebalanced transactions describe TRANSACTIONAL_ID

confluent-kafka's Python AdminClient has neither call, so they go through kafka-python's admin
client, as `rebalanced groups delete-offsets` does. `list` asks every broker of the cluster (each
coordinates a share of the transactional ids), `describe` the transactional id's coordinator.
Columns follow Kafka's tool; `--json` prints one JSON document instead of a table. A mistake in
the options prints one line and exits 2; a failure (an unreachable broker, an unknown id, a
refused request) prints one `rebalanced transactions: error: ...` line and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from coordinator.cli.admin import (
    AdminError,
    kafka_python_admin,
    kafka_python_error_text,
    split_bootstrap,
)
from coordinator.cli.arguments import OneLineParser, connection_arguments, required_subcommands
from coordinator.cli.security import CommandError, client_config

PROG = "rebalanced transactions"
# The broker's Docker image leaves the admin clients out: the broker never imports them.
_MISSING_CLIENT = ("kafka-python is not installed (the broker's Docker image leaves it out): run "
                   "this command where `pip install .` installed it, against the broker's "
                   "published port")
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "PrepareEpochFence")


def argument_parser() -> argparse.ArgumentParser:
    common = connection_arguments(timeout_s=5.0)
    parser = OneLineParser(prog=PROG, allow_abbrev=False,
                           description="List and describe transactions, like Kafka's "
                                       "kafka-transactions.sh, over the Kafka protocol.")
    commands = required_subcommands(parser, "command", "COMMAND")
    listing = commands.add_parser("list", parents=[common], allow_abbrev=False,
                                  help="list transactional ids and their states")
    listing.add_argument("--state", action="append", choices=STATES, metavar="STATE",
                         help=f"only these states (repeatable): {', '.join(STATES)}")
    listing.add_argument("--producer-id", action="append", type=int, metavar="ID",
                         help="only these producer ids (repeatable)")
    listing.add_argument("--duration-ms", type=int, metavar="MS",
                         help="only transactions running for longer than this")
    describe = commands.add_parser("describe", parents=[common], allow_abbrev=False,
                                   help="one transactional id's transaction")
    describe.add_argument("transactional_id", metavar="TRANSACTIONAL_ID")
    return parser


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def _state(value: Any) -> str:
    return str(getattr(value, "value", value))


def cmd_list(client: Any, args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    try:
        by_broker = client.list_transactions(
            state_filters=args.state, producer_id_filters=args.producer_id,
            duration_filter_ms=args.duration_ms)
    except KafkaError as exc:
        raise AdminError(f"listing transactions failed: {kafka_python_error_text(exc)}"
                         ) from None
    rows = sorted((t.transactional_id, broker_id, t.producer_id, _state(t.state))
                  for broker_id, listings in by_broker.items() for t in listings)
    if args.json:
        print(json.dumps([{"transactional_id": tid, "coordinator": broker_id,
                           "producer_id": pid, "state": state}
                          for tid, broker_id, pid, state in rows], indent=2))
    else:
        print(_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"),
                     rows))
    return 0


def cmd_describe(client: Any, args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    tid = args.transactional_id
    try:
        described = client.describe_transactions([tid])[tid]
    except KafkaError as exc:
        raise AdminError(f"describing transaction {tid!r} failed: "
                         f"{kafka_python_error_text(exc)}") from None
    start = described.transaction_start_time_ms
    # Kafka's tool prints the start and the duration of the current transaction only.
    running = start >= 0 and _state(described.state) in ("Ongoing", "PrepareCommit",
                                                           "PrepareAbort")
    duration = int(time.time() * 1000) - start if running else None
    partitions = sorted(f"{tp.topic}-{tp.partition}" for tp in described.topic_partitions)
    document = {
        "coordinator": described.coordinator_id, "transactional_id": tid,
        "producer_id": described.producer_id, "producer_epoch": described.producer_epoch,
        "state": _state(described.state),
        "transaction_timeout_ms": described.transaction_timeout_ms,
        "transaction_start_time_ms": start if start >= 0 else None,
        "transaction_duration_ms": duration, "topic_partitions": partitions}
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(_table(
        ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
         "TopicPartitions"),
        [(described.coordinator_id, tid, described.producer_id, described.producer_epoch,
          _state(described.state), described.transaction_timeout_ms,
          start if running else "None", duration if duration is not None else "None",
          ",".join(partitions))]))
    return 0


COMMANDS = {"list": cmd_list, "describe": cmd_describe}


def main(argv: Sequence[str]) -> int:
    args = argument_parser().parse_args(list(argv))
    client: Any = None
    try:
        if args.command == "list" and args.duration_ms is not None and args.duration_ms < 0:
            raise _UsageError("--duration-ms must be 0 or more")
        try:
            security = client_config(args.command_config)
        except CommandError as exc:
            raise AdminError(str(exc)) from None
        split_bootstrap(args.bootstrap_server)
        try:
            import kafka  # noqa: F401
        except ImportError:
            raise AdminError(_MISSING_CLIENT) from None
        client = kafka_python_admin(args.bootstrap_server, args.timeout, security,
                                    "rebalanced-transactions")
        return COMMANDS[args.command](client, args)
    except _UsageError as exc:
        print(f"{PROG}: error: {exc} (see --help)", file=sys.stderr)
        return 2
    except AdminError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if client is not None:
            client.close()


class _UsageError(Exception):
    pass
