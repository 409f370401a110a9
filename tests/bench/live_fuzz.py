"""Live fuzz: random and mutated frames against a running broker while a real group consumes.

    python -m tests.bench.live_fuzz --frames 1000000 --seconds 600      # what `make fuzz` runs
    python -m tests.bench.live_fuzz --frames 20000 --seconds 60

A broker is started on a free loopback port with a 3-partition topic. A producer writes to it
continuously and a consumer group of the three stock client libraries (each in its own process)
consumes it. Frames are built from valid requests of every API the broker advertises (bodies
drawn from kio's Hypothesis strategies, with group ids and topic names pinned to a few values so
that valid requests cannot create unbounded state), then mutated: flipped bytes, truncated
bodies, spliced-in huge array counts, wrong versions, junk tails, and bad size prefixes.

`--processes` fuzzing processes make their frames while the broker starts and the group forms,
then each drives `--connections` sockets with epoll. They are load generators, not part of the
system under test, so they run at the lowest CPU priority (SCHED_IDLE, else nice 19): they use
only the CPU that the broker, the group and the producer leave. On each connection a process
sends `--batch` frames at once, followed by a sentinel ApiVersions request, and reopens it as
soon as the broker closes it.
Only frames the broker is known to have read are counted (`frames_read_by_broker`): a whole
batch when the sentinel is answered, else the answered frames plus the one that closed the
connection. The run ends after `--frames` such frames or `--seconds`.

How the group fares (a stall is anything over 100 ms):
* `group_longest_gap_ms`: the longest time between two records consumed by the group (any
  member, taken from the consumers' own monotonic clocks) while the producer keeps producing a
  record every 5 ms, and `produce_to_consume_*_ms`, how long records took from `produce()` to a
  consumer;
* `heartbeat_*_ms`: a member of a separate group heartbeats every 20 ms; each round trip;
* `group_rebalances_during_fuzz`, from the broker's journal.
The broker's RSS and open descriptors are sampled every 5 s, with the time its event-loop thread
spent runnable but waiting for a CPU (`runqueue_wait_ms`, from /proc/PID/schedstat); its CPU time
over the window is reported, and when each stall over 100 ms happened (`*_at`, seconds into the
window).

Why each stall happened, from the broker's own event-loop lag monitor (its `event loop lagged`
lines, logged here from `--lag-warn-ms` up): `stalls` lists every heartbeat and gap over 100 ms
with the loop's lags overlapping it (their sum and largest) and what the loop's thread did
meanwhile: its CPU (`busy_ms`, of which `gc_ms` and `gc_gen2_ms` in collections) and its wait
for a CPU (`runqueue_wait_ms`). A stall's `cause` is `broker` when the loop lagged for at least
half the stall and its thread ran more than it waited (the broker's own work held it),
`machine` when the loop lagged as long while its thread mostly waited for a CPU, `rig` when a
collection in this process (which runs the probe and the producer) covered half of it, and
`outside the broker` otherwise (the loop was on time for most of the stall: the client's side
was held). This process freezes what it loaded to build the corpus (Hypothesis and every kio
schema, ~100,000 objects) before the window, so that its own full collections stay short.
`broker_gc_pauses` gives the broker's collections per generation (count, total time, and the
objects found in garbage cycles) from /metrics.
Exits non-zero if the broker died, logged a traceback, or the group rebalanced.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import errno
import gc
import io
import itertools
import json
import multiprocessing
import os
import random
import select
import socket
import struct
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any

from tests.broker_process import BrokerProcess, free_port
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
PROBE_GROUP = "live-probe"
STALL_MS = 100.0
SAMPLE_S = 5.0
WARMUP_S = 60.0
BATCH_TIMEOUT_S = 1.0
# APIs whose valid requests change the topic set: left out, so that a mutated-but-valid
# request cannot delete the group's topic or create thousands of others.
EXCLUDED_APIS = {19, 20, 37}
_PINNED_STRINGS = {"group_id": "fuzz-group", "topic": "fuzz-topic", "name": "fuzz-topic",
                   "member_id": "", "group_instance_id": None, "transactional_id": None}


def _pin(value: Any) -> Any:
    """Pin ids and names so that valid requests touch a few groups and no real topic."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes: dict[str, Any] = {}
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
    from kio.index import UnknownEntity, load_request_schema
    from kio.serial import entity_writer
    from kio.static.primitive import Records

    from tests.served import served_versions

    st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
    warnings.simplefilter("ignore", NonInteractiveExampleWarning)
    corpus: list[bytes] = []
    for key, (lo, hi) in sorted(served_versions().items()):
        if key in EXCLUDED_APIS:
            continue
        for version in range(lo, hi + 1):
            try:
                cls: Any = load_request_schema(key, version)
            except UnknownEntity:
                continue  # an old version served by the broker's own legacy codec
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


# The last frame of every batch: ApiVersions v0 with a correlation id that no mutation of the
# corpus frames (correlation id 1, at most three flipped bits) can reach. Its answer proves the
# broker read every frame before it; responses on a connection come back in request order.
SENTINEL_CORRELATION = 0x5E471E1D
_SENTINEL_BODY = struct.pack(">hhih", 18, 0, SENTINEL_CORRELATION, 4) + b"fuzz"
SENTINEL = struct.pack(">i", len(_SENTINEL_BODY)) + _SENTINEL_BODY
_SENTINEL_ID = SENTINEL[4 + 4:4 + 8]
_LINGER_RESET = struct.pack("ii", 1, 0)


@dataclasses.dataclass
class Tally:
    """What one fuzzing process did. `frames_read` counts only frames the broker is known to
    have read: a whole batch once its sentinel is answered; otherwise the frames answered,
    plus the one that made the broker close the connection."""

    frames_read: int = 0
    frames_written: int = 0
    responses: int = 0
    batches_completed: int = 0
    closed_by_broker: int = 0
    batch_timeouts: int = 0
    connect_failures: int = 0
    connections_opened: int = 0
    pregenerate_s: float = 0.0
    cpu_s: float = 0.0  # this process's CPU time while fuzzing


class _Conn:
    __slots__ = ("buffer", "connecting", "deadline", "in_batch", "pending", "responses", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.connecting = True
        self.buffer = b""
        self.pending = b""  # bytes of the batch not yet accepted by the socket
        self.in_batch = 0
        self.responses = 0
        self.deadline = 0.0


def lowest_priority() -> str:
    """Run this process only on CPU nobody else wants: SCHED_IDLE, else nice 19."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        os.nice(19 - os.nice(0))
        return "nice 19"


def fuzz_worker(port: int, corpus: list[bytes], seed: int, share: int, connections: int,
                batch: int, batch_timeout_s: float, go: Any, seconds: float,
                progress: Any, results: Any) -> None:
    """One fuzzing process: `connections` sockets driven by epoll, each sending batches of
    `batch` pre-generated frames plus the sentinel, reopened as soon as the broker closes it.

    Sockets close with SO_LINGER 0 (a reset), so that neither side keeps hundreds of
    thousands of connections in TIME_WAIT during a long run. A load generator: it runs at the
    lowest CPU priority, so that it cannot take the CPU of what it measures.
    """
    priority = lowest_priority()
    rng = random.Random(seed)
    tally = Tally()
    began = time.monotonic()
    # Most mutated frames close the connection, so a batch usually costs one to two frames;
    # a pool of 1.6 frames per frame to be read rarely runs dry, and then more are made.
    pool = [mutate(rng, rng.choice(corpus)) for _ in range(int(share * 1.6) + batch)]
    tally.pregenerate_s = round(time.monotonic() - began, 1)
    next_frame = 0
    go.wait()
    cpu_at_start = time.process_time()
    stop_at = time.monotonic() + seconds
    address = ("127.0.0.1", port)
    poller = select.epoll()
    open_conns: dict[int, _Conn] = {}

    def take(count: int) -> list[bytes]:
        nonlocal next_frame
        if next_frame + count > len(pool):
            pool.extend(mutate(rng, rng.choice(corpus)) for _ in range(10_000))
        frames = pool[next_frame:next_frame + count]
        for i in range(next_frame, next_frame + count):
            pool[i] = b""  # let the memory go
        next_frame += count
        return frames

    def open_one() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        err = sock.connect_ex(address)
        if err not in (0, errno.EINPROGRESS):
            tally.connect_failures += 1
            sock.close()
            return
        conn = _Conn(sock)
        conn.deadline = time.monotonic() + 10
        open_conns[sock.fileno()] = conn
        poller.register(sock.fileno(), select.EPOLLOUT)
        tally.connections_opened += 1

    def drop(conn: _Conn) -> None:
        fd = conn.sock.fileno()
        poller.unregister(fd)
        del open_conns[fd]
        conn.sock.close()

    def write_pending(conn: _Conn) -> bool:
        """False if the broker has closed the connection."""
        try:
            sent = conn.sock.send(conn.pending)
        except BlockingIOError:
            sent = 0
        except OSError:
            return False
        conn.pending = conn.pending[sent:]
        poller.modify(conn.sock.fileno(),
                      select.EPOLLIN | (select.EPOLLOUT if conn.pending else 0))
        return True

    def start_batch(conn: _Conn) -> bool:
        frames = take(batch)
        conn.in_batch = len(frames)
        conn.responses = 0
        conn.pending = b"".join(frames) + SENTINEL
        conn.deadline = time.monotonic() + batch_timeout_s
        tally.frames_written += len(frames)
        return write_pending(conn)

    def closed(conn: _Conn) -> None:
        tally.closed_by_broker += 1
        tally.responses += conn.responses
        tally.frames_read += min(conn.in_batch, conn.responses + 1)
        drop(conn)

    def wanted() -> bool:
        return tally.frames_read < share and time.monotonic() < stop_at

    for _ in range(connections):
        open_one()
    last_progress = 0.0
    while open_conns:
        for fd, events in poller.poll(0.05):
            conn = open_conns.get(fd)
            if conn is None:
                continue
            if conn.connecting:
                if events & (select.EPOLLERR | select.EPOLLHUP) or conn.sock.getsockopt(
                        socket.SOL_SOCKET, socket.SO_ERROR):
                    tally.connect_failures += 1
                    drop(conn)
                    continue
                conn.connecting = False
                if not start_batch(conn):
                    closed(conn)
                continue
            if events & select.EPOLLOUT and conn.pending and not write_pending(conn):
                closed(conn)
                continue
            if not events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                continue
            try:
                data = conn.sock.recv(1 << 18)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                closed(conn)
                continue
            buffer = conn.buffer + data
            at = 0
            batch_done = False
            while len(buffer) - at >= 8:
                (size,) = struct.unpack_from(">i", buffer, at)
                if len(buffer) - at - 4 < size:
                    break
                if buffer[at + 4:at + 8] == _SENTINEL_ID:
                    batch_done = True
                else:
                    conn.responses += 1
                at += 4 + size
            conn.buffer = buffer[at:]
            if batch_done:
                tally.batches_completed += 1
                tally.responses += conn.responses
                tally.frames_read += conn.in_batch
                conn.in_batch = 0
                conn.buffer = b""
                if not wanted():
                    drop(conn)
                elif not start_batch(conn):
                    closed(conn)
        now = time.monotonic()
        for conn in [c for c in open_conns.values() if c.deadline < now]:
            # A parked request (a valid JoinGroup or Fetch) holds the answers behind it.
            tally.batch_timeouts += 1
            tally.frames_read += min(conn.in_batch, conn.responses)
            tally.responses += conn.responses
            drop(conn)
        while wanted() and len(open_conns) < connections:
            open_one()
        if now - last_progress > 0.5:
            progress.value = tally.frames_read
            last_progress = now
    progress.value = tally.frames_read
    tally.cpu_s = round(time.process_time() - cpu_at_start, 1)
    results.put({**dataclasses.asdict(tally), "priority": priority})


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
        # Monotonic clock when record `i` (its value is `str(i)`) was handed to the client.
        self.produced_at: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        while not self.stopping.is_set():
            self.produced_at.append(time.monotonic())
            producer.produce(self.topic, value=str(self.sent).encode(),
                             partition=self.sent % self.partitions)
            self.sent += 1
            producer.poll(0)
            time.sleep(self.pause_s)
        producer.flush(30)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def runqueue_wait_ms(pid: int) -> float:
    """How long the process's main thread has waited, runnable, for a CPU (schedstat)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e6


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def heartbeat_probe(port: int, ready: asyncio.Event, stop: asyncio.Event,
                          latencies: list[float], errors: list[int],
                          slow: list[tuple[float, float]]) -> None:
    """A member of its own group heartbeating every 20 ms: each answer's round trip."""
    from tests.bench.members import Member
    from tests.bench.wire import Connection

    conn = await Connection.open("127.0.0.1", port)
    member = Member(conn, PROBE_GROUP, session_ms=30_000, rebalance_ms=30_000, topic=TOPIC)
    await member.join_and_sync(time.monotonic() + 60)
    ready.set()
    try:
        while not stop.is_set():
            started = time.perf_counter()
            code = await member.heartbeat(30)
            latencies.append((time.perf_counter() - started) * 1000)
            if latencies[-1] > STALL_MS:
                slow.append((time.monotonic(), latencies[-1]))
            if code:
                errors.append(code)
            await asyncio.sleep(0.02)
    finally:
        await conn.close()


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def consumption(workers: list[Any], producer: Producer, since: float,
                until: float, long_gaps_out: list[tuple[float, float]]) -> dict[str, Any]:
    """The group's view of the fuzz window: the longest gap between two records consumed by
    the group (any member, the consumers' own clocks) and how long records took from
    `produce()` to a consumer. The gaps over 100 ms are added to `long_gaps_out`."""
    received = sorted((r["t"], r["value"]) for w in workers for r in w.of("message")
                      if since <= r["t"] <= until)
    times = [since] + [t for t, _ in received] + [until]
    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(times)]
    long_gaps = [{"t_s": round(a - since, 1), "ms": round((b - a) * 1000, 1)}
                 for a, b in itertools.pairwise(times) if (b - a) * 1000 > STALL_MS]
    long_gaps_out.extend((a, b) for a, b in itertools.pairwise(times)
                         if (b - a) * 1000 > STALL_MS)
    latencies = []
    for t, value in received:
        index = int(value)
        if index < len(producer.produced_at):
            latencies.append((t - producer.produced_at[index]) * 1000)
    return {
        "records_consumed_in_window": len(received),
        "group_longest_gap_ms": round(max(gaps), 1),
        "group_gaps_over_100ms": sum(1 for g in gaps if g > STALL_MS),
        "group_gaps_over_100ms_at": long_gaps[:30],
        "produce_to_consume_p50_ms": round(percentile(latencies, 0.5), 1),
        "produce_to_consume_p99_ms": round(percentile(latencies, 0.99), 1),
        "produce_to_consume_max_ms": round(max(latencies, default=0.0), 1),
    }


def loop_lags(log_text: str, wall_minus_monotonic: float) -> list[dict[str, Any]]:
    """The broker's `event loop lagged` lines, placed on this machine's monotonic clock (the
    one the consumers and the probe use): each covers `start`..`end`, from the timer's previous
    run to the late one."""
    lags = []
    for line in log_text.splitlines():
        if '"event loop lagged"' not in line:
            continue
        try:
            record = json.loads(line)
            end = (datetime.datetime.fromisoformat(record["timestamp"]).timestamp()
                   - wall_minus_monotonic)
        except (ValueError, KeyError):
            continue
        record["end"] = end
        record["start"] = end - record["interval_ms"] / 1000
        lags.append(record)
    return lags


class RigPauses:
    """This process's own collections: it runs the heartbeat probe and the producer, so a long
    one holds both, and the group's records with them."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float]] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        now = time.monotonic()
        if phase == "start":
            self._started = now
        elif now - self._started > 0.005:
            self.pauses.append((self._started, now))


def attribute(kind: str, start: float, end: float, lags: list[dict[str, Any]],
              rig_pauses: list[tuple[float, float]], window_start: float) -> dict[str, Any]:
    """One stall, and what held it. `broker`: the broker's loop lagged for at least half the
    stall and its thread ran more than it waited for a CPU; `machine`: the loop lagged as long
    while its thread mostly waited for a CPU; `rig`: a collection in this process (the probe's
    and the producer's) covered at least half of it; `outside the broker`: none of these (the
    loop was on time for most of the stall: the client's side was held)."""
    during = [lag for lag in lags if lag["start"] < end and lag["end"] > start]
    stall_ms = (end - start) * 1000
    lagged_ms = sum(lag["lag_ms"] for lag in during)
    busy_ms = sum(lag["busy_ms"] for lag in during)
    waited_ms = sum(lag["runqueue_wait_ms"] or 0.0 for lag in during)
    rig_ms = sum(max(0.0, min(b, end) - max(a, start)) for a, b in rig_pauses) * 1000
    if lagged_ms >= stall_ms / 2:
        cause = "broker" if busy_ms >= waited_ms else "machine"
    elif rig_ms >= stall_ms / 2:
        cause = "rig"
    else:
        cause = "outside the broker"
    return {"kind": kind, "t_s": round(start - window_start, 1), "ms": round(stall_ms, 1),
            "cause": cause, "loop_lag_ms": round(lagged_ms, 1),
            "loop_lag_max_ms": round(max((lag["lag_ms"] for lag in during), default=0.0), 1),
            "busy_ms": round(busy_ms, 1), "runqueue_wait_ms": round(waited_ms, 1),
            "gc_ms": round(sum(lag["gc_ms"] for lag in during), 1),
            "gc_gen2_ms": round(sum(lag["gc_gen2_ms"] for lag in during), 1),
            "rig_gc_ms": round(rig_ms, 1)}


def scrape(url: str) -> dict[str, Any]:
    """The broker's collector pauses and largest loop lag, from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=30).read().decode()
    pauses: dict[str, dict[str, float]] = {}
    lag_max = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("rebalanced_gc_pause_seconds_"):
                kind = sample.name.rsplit("_", 1)[1]
                if kind in ("count", "sum"):
                    pauses.setdefault(sample.labels["generation"], {})[kind] = sample.value
            elif sample.name == "rebalanced_gc_collected_objects_total":
                pauses.setdefault(sample.labels["generation"], {})["garbage"] = sample.value
            elif sample.name == "rebalanced_event_loop_lag_max_seconds":
                lag_max = sample.value
    return {"broker_gc_pauses": {
        generation: {"collections": int(p.get("count", 0)),
                     "total_ms": round(p.get("sum", 0.0) * 1000, 1),
                     "cyclic_garbage_objects": int(p.get("garbage", 0))}
        for generation, p in sorted(pauses.items())},
        "broker_loop_lag_max_since_start_ms": None if lag_max is None
        else round(lag_max * 1000, 1)}


def run(frames: int, seconds: float, processes: int, connections: int, batch: int, seed: int,
        per_schema: int, work_dir: Path, lag_warn_ms: int = 20) -> dict[str, Any]:
    began = time.monotonic()
    corpus = build_corpus(per_schema, seed)
    report: dict[str, Any] = {"corpus_frames": len(corpus),
                              "corpus_s": round(time.monotonic() - began, 1)}
    metrics_port = free_port()
    broker = BrokerProcess(work_dir / "data", settings={
        "auto.create.topics.enable": "false", "loop.lag.warn.ms": str(lag_warn_ms),
        "metrics.listener": f"127.0.0.1:{metrics_port}"})
    wall_minus_monotonic = time.time() - time.monotonic()
    # The fuzzing processes make their frames while the broker starts and the group forms.
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    results = context.Queue()
    progress = [context.Value("q", 0) for _ in range(processes)]
    fuzzers = [context.Process(
        target=fuzz_worker, daemon=True,
        args=(broker.port, corpus, seed * 1000 + i, frames // processes + (i < frames % processes),
              connections, batch, BATCH_TIMEOUT_S, go, seconds, progress[i], results))
        for i in range(processes)]
    for fuzzer in fuzzers:
        fuzzer.start()
    broker.start(timeout=30)
    assert broker.proc is not None
    pid = broker.proc.pid
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
            consumed_before = len({v for w in workers for v in w.values()})
            samples: list[dict[str, float]] = []
            latencies: list[float] = []
            heartbeat_errors: list[int] = []
            window: list[float] = []
            broker_cpu: list[float] = []
            slow: list[tuple[float, float]] = []
            waits: list[float] = []
            gaps: list[tuple[float, float]] = []

            # The corpus left Hypothesis and every kio schema in this process: ~100,000 objects
            # that a full collection walks in ~115 ms, holding the probe and the producer (and
            # so the group's records). They live until the end: out of the collector's way.
            gc.collect()
            gc.freeze()
            rig = RigPauses()
            gc.callbacks.append(rig)

            async def supervise() -> None:
                ready, stop = asyncio.Event(), asyncio.Event()
                probe = asyncio.create_task(heartbeat_probe(broker.port, ready, stop,
                                                            latencies, heartbeat_errors, slow))
                await asyncio.wait_for(ready.wait(), 60)
                window.append(time.monotonic())
                broker_cpu.append(cpu_seconds(pid))
                waits.append(runqueue_wait_ms(pid))
                go.set()
                next_sample = 0.0
                next_line = time.monotonic() + 30
                while any(f.is_alive() for f in fuzzers):
                    await asyncio.sleep(0.2)
                    now = time.monotonic()
                    if broker.proc is None or broker.proc.poll() is not None:
                        raise RuntimeError("the broker died")
                    if now >= next_sample:
                        waited = runqueue_wait_ms(pid)
                        samples.append({"t_s": round(now - window[0]), "rss_mb": rss_mb(pid),
                                        "fds": open_fds(pid),
                                        "runqueue_wait_ms": round(waited - waits[-1])})
                        waits.append(waited)
                        next_sample = now + SAMPLE_S
                    if now >= next_line:
                        done = sum(p.value for p in progress)
                        print(f"{now - window[0]:.0f} s: {done} frames read, "
                              f"{done / (now - window[0]):.0f}/s, rss {samples[-1]['rss_mb']:.1f}"
                              f" MB, heartbeat max {max(latencies, default=0):.1f} ms",
                              file=sys.stderr, flush=True)
                        next_line = now + 30
                window.append(time.monotonic())
                broker_cpu.append(cpu_seconds(pid))
                stop.set()
                await probe

            try:
                asyncio.run(supervise())
            except RuntimeError as exc:
                report["error"] = str(exc)
            finally:
                gc.callbacks.remove(rig)
            if len(window) < 2:
                window.append(time.monotonic())
            elapsed = window[1] - window[0]
            tallies = [results.get(timeout=30) for _ in fuzzers if not results.empty()
                       or any(f.exitcode == 0 for f in fuzzers)]
            priorities = sorted({t.pop("priority") for t in tallies})
            totals = {k: sum(t[k] for t in tallies) for k in tallies[0]} if tallies else {}
            alive = broker.proc.poll() is None
            if alive:
                report.update(scrape(f"http://127.0.0.1:{metrics_port}/metrics"))
            samples.append({"t_s": round(time.monotonic() - window[0]), "rss_mb": rss_mb(pid),
                            "fds": open_fds(pid)} if alive else {})
            producer.stopping.set()
            producer.join(30)
            # The group keeps up: everything produced during the run gets consumed.
            if alive:
                wait_until(lambda: len({v for w in workers for v in w.values()})
                           >= producer.sent, 60, "the group to consume everything", workers,
                           broker)
            consumed = len({v for w in workers for v in w.values()})
            warm = [s for s in samples if s and s["t_s"] >= WARMUP_S] or [s for s in samples if s]
            lags = [lag for lag in loop_lags(broker.log_text(), wall_minus_monotonic)
                    if window[0] <= lag["end"] and lag["start"] <= window[1]]
            group = consumption(workers, producer, window[0], window[1], gaps)
            stalls = sorted(
                [attribute("heartbeat", t - ms / 1000, t, lags, rig.pauses, window[0])
                 for t, ms in slow]
                + [attribute("group gap", a, b, lags, rig.pauses, window[0]) for a, b in gaps],
                key=lambda stall: stall["t_s"])
            report.update({
                "broker_alive": alive,
                "seconds": round(elapsed, 1),
                "fuzz_processes": processes,
                "fuzz_priority": ", ".join(priorities),
                "connections_per_process": connections,
                "frames_per_batch": batch,
                "frames_read_by_broker": totals.get("frames_read", 0),
                "frames_read_per_s": round(totals.get("frames_read", 0) / elapsed),
                **{k: v for k, v in totals.items() if k != "frames_read"},
                "broker_cpu_s": round(broker_cpu[-1] - broker_cpu[0], 1)
                if len(broker_cpu) == 2 else None,
                "bad_input_warnings": broker.log_text().count("connection closed on bad input"),
                "tracebacks_in_broker_log": broker.log_text().count("Traceback"),
                "heartbeats": len(latencies),
                "heartbeat_errors": len(heartbeat_errors),
                "heartbeat_p50_ms": round(percentile(latencies, 0.5), 1),
                "heartbeat_p99_ms": round(percentile(latencies, 0.99), 1),
                "heartbeat_max_ms": round(max(latencies, default=0.0), 1),
                "heartbeats_over_100ms": sum(1 for v in latencies if v > STALL_MS),
                "heartbeats_over_100ms_at": [{"t_s": round(t - window[0], 1), "ms": round(ms, 1)}
                                             for t, ms in slow[:30]],
                # Time the broker's event-loop thread was ready to run but waited for a CPU:
                # a stall that lines up with a large wait is the machine's, not the broker's.
                "broker_runqueue_wait_s": round((waits[-1] - waits[0]) / 1000, 1)
                if waits else None,
                "broker_runqueue_wait_max_ms_per_5s": max(
                    (x.get("runqueue_wait_ms", 0) for x in samples if x), default=0),
                **group,
                "stalls": stalls[:60],
                "stalls_by_cause": {cause: sum(1 for s in stalls if s["cause"] == cause)
                                    for cause in ("broker", "machine", "rig",
                                                  "outside the broker")},
                "rig_gc_pauses_over_5ms": len(rig.pauses),
                "rig_gc_pause_max_ms": round(max((b - a for a, b in rig.pauses), default=0.0)
                                             * 1000, 1),
                "loop_lags_over_warn": len(lags),
                "loop_lag_warn_ms": lag_warn_ms,
                "loop_lag_max_ms": max((lag["lag_ms"] for lag in lags), default=0.0),
                "loop_lags_over_100ms": {cause: sum(1 for lag in lags if lag["lag_ms"] > STALL_MS
                                                    and lag["cause"] == cause)
                                         for cause in ("broker", "machine")},
                "loop_gc_gen2_max_ms": max((lag["gc_gen2_ms"] for lag in lags), default=0.0),
                "group_rebalances_during_fuzz": len(group_events(
                    broker, GROUP, "rebalance_started")) - rebalances_before,
                "records_produced": producer.sent,
                "records_consumed_during_and_after": consumed - consumed_before,
                "records_consumed_distinct": consumed,
                "rss_mb_first": samples[0]["rss_mb"] if samples else None,
                "rss_mb_max": max((s["rss_mb"] for s in samples if s), default=None),
                "rss_mb_after_warmup": warm[0]["rss_mb"] if warm else None,
                "rss_mb_last": samples[-1].get("rss_mb") if samples else None,
                "fds_min": min((s["fds"] for s in samples if s), default=None),
                "fds_max": max((s["fds"] for s in samples if s), default=None),
                "samples": [s for s in samples if s][::max(1, len(samples) // 40)],
            })
    finally:
        go.set()
        for fuzzer in fuzzers:
            fuzzer.join(10)
            if fuzzer.is_alive():
                fuzzer.kill()
        broker.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.live_fuzz")
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--processes", type=int, default=2, help="fuzzing processes")
    parser.add_argument("--connections", type=int, default=16, help="per fuzzing process")
    parser.add_argument("--batch", type=int, default=4,
                        help="frames pipelined per batch, before the sentinel")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--per-schema", type=int, default=4,
                        help="valid bodies drawn per (api, version) for the corpus")
    parser.add_argument("--lag-warn-ms", type=int, default=20,
                        help="the broker logs event-loop lags from this many ms (loop.lag.warn.ms)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="live-fuzz-") as tmp:
        report = run(args.frames, args.seconds, args.processes, args.connections, args.batch,
                     args.seed, args.per_schema, Path(tmp), args.lag_warn_ms)
    print(json.dumps(report, indent=2))
    ok = (report.get("broker_alive") and not report.get("error")
          and report.get("group_rebalances_during_fuzz") == 0
          and report.get("tracebacks_in_broker_log") == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
