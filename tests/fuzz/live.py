"""Live fuzz: random and mutated frames against a running broker while a real group consumes.

    python -m tests.fuzz.live --frames 1000000 --seconds 600
    python -m tests.fuzz.live --frames 20000 --seconds 60          # what `make fuzz` runs

A broker is started on a free loopback port with a 3-partition topic. A producer writes to it
continuously and a consumer group of the three stock client libraries (each in its own process)
consumes it. Meanwhile `--connections` fuzzing connections send frames built from valid requests
of every API the broker advertises (bodies drawn from kio's Hypothesis strategies, with group ids
and topic names pinned to a few values so that valid requests cannot create unbounded state),
then mutated: flipped bytes, truncated bodies, spliced-in huge array counts, wrong versions,
junk tails, and bad size prefixes. A connection the broker closes is reopened.

A probe connection sends ApiVersions every 20 ms and records each round trip: a round trip over
100 ms is a stall. At the end it reports frames sent, responses, connections closed by the broker
on bad input, probe stalls, rebalances of the consumer group during the fuzz (from the journal),
records produced and consumed, and the broker's RSS sampled every 5 s; and exits non-zero if the
broker died, the group rebalanced, or the group stopped consuming.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import json
import random
import struct
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from tests.broker_process import BrokerProcess
from tests.integration.group_workers import (
    CLIENTS,
    JOIN_TIMEOUT_S,
    create_topic,
    exact_split,
    group_events,
    wait_until,
    worker_pool,
)

TOPIC = "live"
GROUP = "live-consumers"
PARTITIONS = 3
STALL_MS = 100.0
# APIs whose valid requests change the topic set: left out, so that a mutated-but-valid
# request cannot delete the group's topic or create thousands of others.
EXCLUDED_APIS = {19, 20, 37}
_PINNED_STRINGS = {"group_id": "fuzz-group", "topic": "fuzz-topic", "name": "fuzz-topic",
                   "member_id": "", "group_instance_id": None, "transactional_id": None}


def _pin(value: Any) -> Any:
    """Pin ids and names so that valid requests touch a few groups and no real topic."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            current = getattr(value, f.name)
            if f.name in _PINNED_STRINGS and (current is None or isinstance(current, str)):
                pinned = _PINNED_STRINGS[f.name]
                if pinned is None and "None" not in str(f.type):
                    pinned = f"fuzz-{f.name}"
                changes[f.name] = pinned
            elif isinstance(current, tuple):
                changes[f.name] = tuple(_pin(v) for v in current[:4])
            elif dataclasses.is_dataclass(current):
                changes[f.name] = _pin(current)
        return dataclasses.replace(value, **changes)
    return value


def build_corpus(per_schema: int, seed: int) -> list[bytes]:
    """Valid request frames (size prefix excluded) for every advertised (key, version)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.errors import NonInteractiveExampleWarning
    from kio.index import load_request_schema
    from kio.serial import entity_writer
    from kio.static.primitive import Records

    from coordinator.dataplane.api_versions import SUPPORTED

    st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
    warnings.simplefilter("ignore", NonInteractiveExampleWarning)
    corpus: list[bytes] = []
    for key, (lo, hi) in sorted(SUPPORTED.items()):
        if key in EXCLUDED_APIS:
            continue
        for version in range(lo, hi + 1):
            cls = load_request_schema(key, version)
            header_cls = cls.__header_schema__
            bodies: list[Any] = []

            @settings(max_examples=per_schema, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck), deadline=None)
            @given(st.from_type(cls))
            def collect(body: Any) -> None:
                bodies.append(body)  # noqa: B023 - run at once, inside this iteration

            collect()
            for body in bodies:
                try:
                    pinned = _pin(body)
                    buffer = io.BytesIO()
                    entity_writer(header_cls)(buffer, header_cls(
                        request_api_key=key, request_api_version=version,
                        correlation_id=1, client_id="fuzz"))
                    entity_writer(cls)(buffer, pinned)
                except Exception:
                    continue  # a pinned value the schema does not accept at this version
                corpus.append(buffer.getvalue())
    random.Random(seed).shuffle(corpus)
    return corpus


_HUGE_COUNTS = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x07",
                b"\x80\x80\x80\x80\x08", b"\x00\x10\x00\x00"]


def mutate(rng: random.Random, body: bytes) -> bytes:
    """A framed request: usually a mutated valid body, sometimes a bad frame outright."""
    roll = rng.random()
    if roll < 0.02:
        return struct.pack(">i", rng.choice([-1, -(2**31), 2**31 - 1, 200 << 20]))
    if roll < 0.05:
        return struct.pack(">i", 0)
    data = bytearray(body)
    if roll < 0.10:
        data = bytearray(rng.randbytes(rng.randint(0, 64)))
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        if kind < 0.35 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind < 0.5 and len(data) > 8:
            del data[rng.randint(8, len(data) - 1):]
        elif kind < 0.7 and len(data) > 8:
            at = rng.randint(8, len(data))
            data[at:at] = rng.choice(_HUGE_COUNTS)
        elif kind < 0.8 and len(data) >= 4:
            struct.pack_into(">h", data, 2, rng.randint(-1, 20))
        elif kind < 0.9:
            data += rng.randbytes(rng.randint(1, 16))
        elif len(data) > 10:
            at = rng.randint(8, len(data) - 1)
            del data[at:at + rng.randint(1, 8)]
    return struct.pack(">i", len(data)) + bytes(data)


@dataclasses.dataclass
class Tally:
    frames: int = 0
    responses: int = 0
    closed_by_broker: int = 0
    connect_failures: int = 0


async def fuzz_connection(port: int, corpus: list[bytes], seed: int, tally: Tally,
                          stop_at: float, frame_budget: list[int]) -> None:
    rng = random.Random(seed)
    while time.monotonic() < stop_at and frame_budget[0] > 0:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            tally.connect_failures += 1
            await asyncio.sleep(0.05)
            continue
        try:
            while time.monotonic() < stop_at and frame_budget[0] > 0:
                frame_budget[0] -= 1
                tally.frames += 1
                writer.write(mutate(rng, rng.choice(corpus)))
                # One frame at a time: wait for its answer or the close, so every frame sent
                # is a frame the broker read. Produce acks=0 and similar get no answer; a short
                # timeout moves on to the next frame on the same connection.
                try:
                    head = await asyncio.wait_for(reader.readexactly(4), 0.2)
                except TimeoutError:
                    continue
                (size,) = struct.unpack(">i", head)
                await asyncio.wait_for(reader.readexactly(size), 5)
                tally.responses += 1
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            tally.closed_by_broker += 1
        finally:
            writer.close()


async def probe(port: int, stop_at: float, latencies: list[float]) -> None:
    from coordinator.cli.healthcheck import api_versions_request

    request = api_versions_request()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            writer.write(request)
            (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))
            await reader.readexactly(size)
            latencies.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.02)
    finally:
        writer.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Producer(threading.Thread):
    """A confluent-kafka producer writing a counter round-robin over the partitions."""

    def __init__(self, bootstrap: str, topic: str = TOPIC, partitions: int = PARTITIONS,
                 pause_s: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.pause_s = pause_s
        self.sent = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        while not self.stopping.is_set():
            producer.produce(self.topic, value=str(self.sent).encode(),
                             partition=self.sent % self.partitions)
            self.sent += 1
            producer.poll(0)
            time.sleep(self.pause_s)
        producer.flush(30)


def run(frames: int, seconds: float, connections: int, seed: int, per_schema: int,
        work_dir: Path) -> dict[str, Any]:
    corpus = build_corpus(per_schema, seed)
    broker = BrokerProcess(work_dir / "data", **{"auto.create.topics.enable": "false"})
    broker.start(timeout=30)
    report: dict[str, Any] = {"corpus_frames": len(corpus)}
    try:
        create_topic(broker, TOPIC, PARTITIONS)
        producer = Producer(broker.bootstrap)
        producer.start()
        with worker_pool(broker, work_dir) as spawn:
            workers = [spawn(client, TOPIC, GROUP, f"live-{client}", strategy="range")
                       for client in CLIENTS]
            wait_until(lambda: exact_split(workers, PARTITIONS) and all(w.values()
                                                                        for w in workers),
                       JOIN_TIMEOUT_S * 2, "the group to settle and consume", workers, broker)
            time.sleep(2)  # past the last rebalance's journal lines
            rebalances_before = len(group_events(broker, GROUP, "rebalance_started"))
            consumed_before = sum(len(w.values()) for w in workers)
            assert broker.proc is not None
            pid = broker.proc.pid
            rss = [rss_mb(pid)]
            tally = Tally()
            latencies: list[float] = []
            started = time.monotonic()
            stop_at = started + seconds

            async def fuzz() -> None:
                budget = [frames]
                tasks = [asyncio.create_task(fuzz_connection(broker.port, corpus, seed + i,
                                                             tally, stop_at, budget))
                         for i in range(connections)]
                tasks.append(asyncio.create_task(probe(broker.port, stop_at, latencies)))

                async def sample() -> None:
                    while not all(t.done() for t in tasks[:-1]):
                        await asyncio.sleep(5)
                        if broker.proc is None or broker.proc.poll() is not None:
                            raise RuntimeError("the broker died")
                        rss.append(rss_mb(pid))
                sampler = asyncio.create_task(sample())
                await asyncio.gather(*tasks[:-1])
                sampler.cancel()
                await asyncio.gather(tasks[-1], return_exceptions=True)

            try:
                asyncio.run(fuzz())
            except RuntimeError as exc:
                report["error"] = str(exc)
            elapsed = time.monotonic() - started
            alive = broker.proc.poll() is None
            producer.stopping.set()
            producer.join(30)
            # The group keeps up: everything produced during the run gets consumed.
            if alive:
                wait_until(lambda: len({v for w in workers for v in w.values()})
                           >= producer.sent, 60, "the group to consume everything", workers,
                           broker)
            consumed = len({v for w in workers for v in w.values()})
            report.update({
                "broker_alive": alive,
                "seconds": round(elapsed, 1),
                "frames_sent": tally.frames,
                "frames_per_s": round(tally.frames / elapsed),
                "responses": tally.responses,
                "connections_closed_by_broker": tally.closed_by_broker,
                "bad_input_warnings": broker.log_text().count("connection closed on bad input"),
                "tracebacks_in_broker_log": broker.log_text().count("Traceback"),
                "probe_round_trips": len(latencies),
                "probe_max_ms": round(max(latencies, default=0.0), 1),
                "probe_stalls_over_100ms": sum(1 for v in latencies if v > STALL_MS),
                "group_rebalances_during_fuzz": len(group_events(
                    broker, GROUP, "rebalance_started")) - rebalances_before,
                "records_produced": producer.sent,
                "records_consumed_during_and_after": consumed - consumed_before,
                "records_consumed_distinct": consumed,
                "rss_mb_first": round(rss[0], 1),
                "rss_mb_max": round(max(rss), 1),
                "rss_mb_last": round(rss[-1], 1),
                "rss_mb_every_5s": [round(v, 1) for v in rss],
            })
    finally:
        broker.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.live")
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-schema", type=int, default=4,
                        help="valid bodies drawn per (api, version) for the corpus")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="live-fuzz-") as tmp:
        report = run(args.frames, args.seconds, args.connections, args.seed, args.per_schema,
                     Path(tmp))
    print(json.dumps(report, indent=2))
    ok = (report.get("broker_alive") and not report.get("error")
          and report.get("group_rebalances_during_fuzz") == 0
          and report.get("tracebacks_in_broker_log") == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
