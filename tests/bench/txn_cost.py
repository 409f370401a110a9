"""Broker CPU of a transaction against the same work without one, and of read_committed Fetch
against read_uncommitted, side by side on one broker in alternating rounds.

    python -m tests.bench.txn_cost --rounds 4 --seconds 3

Every request is sent at the version librdkafka 2.16 sends (Produce v10, InitProducerId v4,
AddPartitionsToTxn v0, AddOffsetsToTxn v0, TxnOffsetCommit v3, EndTxn v1, OffsetCommit v9,
Fetch v16), by `--workers` closed-loop connections, each with its own partition, producer and
group:

* `txn`: one InitProducerId with a transactional.id, then per unit AddPartitionsToTxn, a Produce
  of one transactional batch of 10 records (acks=-1), AddOffsetsToTxn, TxnOffsetCommit of one
  partition and EndTxn (commit);
* `plain`: one InitProducerId without a transactional.id (an idempotent producer), then per unit
  a Produce of one idempotent batch of 10 records (acks=-1) and an OffsetCommit of one partition;
* `fetch`: Fetch of one partition from offsets spread over the transactional topic (committed
  transactions only, no aborts), `read_uncommitted` against `read_committed`, 1 MiB per
  partition as librdkafka's default `max.partition.fetch.bytes`.

Broker CPU is the broker process's utime + stime (/proc) per unit; the broker's settings are its
defaults (the group log and the transaction log fsync every write). A Produce, AddPartitionsToTxn
or AddOffsetsToTxn answered CONCURRENT_TRANSACTIONS (the previous transaction's markers are being
written) is sent again, as clients do; those retries are counted and their cost is the
transaction's. Prints a Markdown table with the medians and ratios, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import random
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crc32c import crc32c

from storage.record_batch import encode_batch
from storage.transactions import TRANSACTIONAL
from tests.bench import wire
from tests.bench.brokers import Rebalanced
from tests.bench.commit_load import _run

TXN_TOPIC = "txn-out"
PLAIN_TOPIC = "plain-out"
INPUT_TOPIC = "in"
RECORDS_PER_BATCH = 10
CONCURRENT_TRANSACTIONS = 51
_MS = datetime.timedelta(milliseconds=1)
_BATCH_SEQUENCE = struct.Struct(">i")


@dataclass
class Counters:
    units: int = 0
    retries: int = 0


def producer_batch(producer_id: int, epoch: int, transactional: bool) -> bytearray:
    """A batch of 10 records of 100 bytes from an idempotent producer (sequence 0)."""
    data = bytearray(encode_batch(
        [(f"k{i}".encode(), b"v" * 100) for i in range(RECORDS_PER_BATCH)],
        int(time.time() * 1000)))
    struct.pack_into(">h", data, 21, TRANSACTIONAL if transactional else 0)
    struct.pack_into(">qhi", data, 43, producer_id, epoch, 0)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return data


class ProduceFrame:
    """A pre-encoded Produce v10 request whose batch's base sequence moves on per send."""

    def __init__(self, topic: str, partition: int, batch: bytearray,
                 transactional_id: str | None) -> None:
        self.frame = wire.encode(0, 10, {
            "transactional_id": transactional_id, "acks": -1, "timeout": 30_000 * _MS,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": bytes(batch)}]}]})
        self.at = bytes(self.frame).index(bytes(batch))
        self.size = len(batch)
        self.sequence = 0

    def next(self) -> bytearray:
        at = self.at
        _BATCH_SEQUENCE.pack_into(self.frame, at + 53, self.sequence)
        self.sequence += RECORDS_PER_BATCH
        crc = crc32c(bytes(self.frame[at + 21:at + self.size]))
        struct.pack_into(">I", self.frame, at + 17, crc)
        return self.frame


def _error(frame: bytes, api_key: int, version: int) -> int:
    reply = wire.decode(api_key, version, frame)
    if api_key == 0:
        return int(reply.responses[0].partition_responses[0].error_code.value)
    if api_key == 24:
        return int(reply.results_by_topic_v3_and_below[0].results_by_partition[0]
                   .partition_error_code.value)
    if api_key in (8, 28):
        return int(reply.topics[0].partitions[0].error_code.value)
    return int(reply.error_code.value)


async def _send(conn: wire.Connection, api_key: int, version: int, frame: bytearray,
                counters: Counters) -> None:
    while True:
        error = _error(await conn.send_raw(frame), api_key, version)
        if error == 0:
            return
        if error != CONCURRENT_TRANSACTIONS:
            raise wire.WireError(f"api {api_key} v{version}: error {error}")
        counters.retries += 1
        await asyncio.sleep(0.001)


async def txn_worker(port: int, index: int) -> Callable[[Counters], Awaitable[None]]:
    conn = await wire.Connection.open("127.0.0.1", port)
    txn_id, group = f"bench-tx-{index}", f"bench-tx-group-{index}"
    init = await conn.call(22, 4, {"transactional_id": txn_id, "transaction_timeout": 60_000 * _MS,
                                   "producer_id": -1, "producer_epoch": -1})
    pid, epoch = init.producer_id, init.producer_epoch
    add_partitions = wire.encode(24, 0, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": TXN_TOPIC, "partitions": [index]}]})
    produce = ProduceFrame(TXN_TOPIC, index, producer_batch(pid, epoch, True), txn_id)
    add_offsets = wire.encode(25, 0, {"transactional_id": txn_id, "producer_id": pid,
                                      "producer_epoch": epoch, "group_id": group})
    offsets = wire.encode(28, 3, {
        "transactional_id": txn_id, "group_id": group, "producer_id": pid,
        "producer_epoch": epoch, "generation_id": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": INPUT_TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 1000, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    end = wire.encode(26, 1, {"transactional_id": txn_id, "producer_id": pid,
                              "producer_epoch": epoch, "committed": True})

    async def unit(counters: Counters) -> None:
        await _send(conn, 24, 0, add_partitions, counters)
        await _send(conn, 0, 10, produce.next(), counters)
        await _send(conn, 25, 0, add_offsets, counters)
        await _send(conn, 28, 3, offsets, counters)
        await _send(conn, 26, 1, end, counters)
        counters.units += 1

    return unit


async def plain_worker(port: int, index: int) -> Callable[[Counters], Awaitable[None]]:
    conn = await wire.Connection.open("127.0.0.1", port)
    group = f"bench-plain-group-{index}"
    init = await conn.call(22, 4, {"transactional_id": None, "transaction_timeout": 60_000 * _MS,
                                   "producer_id": -1, "producer_epoch": -1})
    produce = ProduceFrame(PLAIN_TOPIC, index,
                           producer_batch(init.producer_id, init.producer_epoch, False), None)
    commit = wire.encode(8, 9, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": INPUT_TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 1000, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})

    async def unit(counters: Counters) -> None:
        await _send(conn, 0, 10, produce.next(), counters)
        await _send(conn, 8, 9, commit, counters)
        counters.units += 1

    return unit


async def fetch_worker(port: int, index: int, topic_id: Any, end_offset: int,
                       isolation: int) -> Callable[[Counters], Awaitable[None]]:
    conn = await wire.Connection.open("127.0.0.1", port)
    rng = random.Random(index)
    frames = [wire.encode(1, 16, {
        "replica_id": -1, "max_wait": 500 * _MS, "min_bytes": 1, "max_bytes": 52_428_800,
        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic_id": topic_id, "partitions": [{
            "partition": index, "current_leader_epoch": -1,
            "fetch_offset": rng.randrange(max(end_offset, 1)), "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""}) for _ in range(64)]
    turn = 0

    async def unit(counters: Counters) -> None:
        nonlocal turn
        await conn.send_raw(frames[turn % len(frames)])
        turn += 1
        counters.units += 1

    return unit


async def timed(broker: Rebalanced, units: list[Callable[[Counters], Awaitable[None]]],
                seconds: float) -> dict[str, float]:
    counters = Counters()
    stop = time.monotonic() + seconds

    async def loop(unit: Callable[[Counters], Awaitable[None]]) -> None:
        while time.monotonic() < stop:
            await unit(counters)

    stats = broker.stats()
    cpu0 = stats.cpu_seconds()
    await asyncio.gather(*(loop(u) for u in units))
    cpu = stats.cpu_seconds() - cpu0
    return {"cpu_us": cpu / max(counters.units, 1) * 1e6, "units": counters.units,
            "retries": counters.retries}


async def bench(broker: Rebalanced, workers: int, rounds: int,
                seconds: float) -> dict[str, list[dict[str, float]]]:
    assert broker.port is not None
    admin = await wire.Connection.open("127.0.0.1", broker.port)
    await wire.group_log_loaded(admin)
    created = await admin.call(19, 7, {"topics": [
        {"name": name, "num_partitions": workers, "replication_factor": 1, "assignments": [],
         "configs": []} for name in (TXN_TOPIC, PLAIN_TOPIC, INPUT_TOPIC)],
        "timeout": 5000 * _MS, "validate_only": False})
    assert all(t.error_code.value == 0 for t in created.topics), created
    txn = [await txn_worker(broker.port, i) for i in range(workers)]
    plain = [await plain_worker(broker.port, i) for i in range(workers)]
    await timed(broker, txn, 0.5)  # warm-up: connections, partitions, the groups' first writes
    await timed(broker, plain, 0.5)
    results: dict[str, list[dict[str, float]]] = {
        "txn": [], "plain": [], "read_committed": [], "read_uncommitted": []}
    for r in range(rounds):
        for name in (("txn", "plain") if r % 2 == 0 else ("plain", "txn")):
            results[name].append(await timed(broker, txn if name == "txn" else plain, seconds))
            print(f"  round {r + 1} {name}: {results[name][-1]}", file=sys.stderr, flush=True)
    metadata = await admin.call(3, 12, {"topics": [{"topic_id": None, "name": TXN_TOPIC}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
    topic_id = metadata.topics[0].topic_id
    listed = await admin.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TXN_TOPIC, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    end_offset = int(listed.topics[0].partitions[0].offset)
    fetchers = {level: [await fetch_worker(broker.port, i, topic_id, end_offset, isolation)
                        for i in range(workers)]
                for level, isolation in (("read_uncommitted", 0), ("read_committed", 1))}
    await timed(broker, fetchers["read_committed"], 0.5)
    for r in range(rounds):
        order = ("read_uncommitted", "read_committed")
        for name in (order if r % 2 == 0 else order[::-1]):
            results[name].append(await timed(broker, fetchers[name], seconds))
            print(f"  round {r + 1} {name}: {results[name][-1]}", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.txn_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="txn-cost-") as workdir:
        broker = Rebalanced(Path(workdir))
        broker.start()
        try:
            results = _run(bench(broker, args.workers, args.rounds, args.seconds))
        finally:
            broker.cleanup()
    median = {name: statistics.median(r["cpu_us"] for r in runs)
              for name, runs in results.items()}
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average after the run: {load}; {args.workers} workers, {args.rounds} rounds "
          f"of {args.seconds:g} s\n")
    print("| unit | broker CPU per unit, median (µs) | rounds (µs) | units per round |")
    print("|---|---|---|---|")
    labels = {"txn": "transaction: 10 records + offset commit",
              "plain": "idempotent produce of 10 records + OffsetCommit",
              "read_uncommitted": "Fetch v16, read_uncommitted",
              "read_committed": "Fetch v16, read_committed"}
    for name, runs in results.items():
        values = ", ".join(f"{r['cpu_us']:.0f}" for r in runs)
        units = ", ".join(f"{r['units']:.0f}" for r in runs)
        print(f"| {labels[name]} | {median[name]:.0f} | {values} | {units} |")
    retries = sum(r["retries"] for r in results["txn"])
    print(f"\ntransaction / plain: {median['txn'] / median['plain']:.2f}x (target ≤ 3x); "
          f"CONCURRENT_TRANSACTIONS retries: {retries:.0f}")
    print(f"read_committed / read_uncommitted: "
          f"{median['read_committed'] / median['read_uncommitted']:.2f}x (target ≤ 1.2x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
