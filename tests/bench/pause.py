"""`make bench-pause`: how long a consumer group stops consuming when one consumer dies.

    python -m tests.bench.pause                 # every case, rebalanced and Tansu side by side
    python -m tests.bench.pause --quick         # SIGKILL per library plus one graceful close
    python -m tests.bench.pause --brokers rebalanced --only kill

The classic failover scenario with real client processes: a producer at 100 messages/s (one
thread of this process, round-robin over a 20-partition topic, each value "<seq> <sent time>"),
two consumers of one library in their own processes (`tests/bench/pause_consumer.py`,
committing asynchronously), then one consumer is SIGKILLed (or closed gracefully, or - static
membership - SIGKILLed and restarted with the same group.instance.id) and a replacement is
started at once. Timings: session 6 s / heartbeat 1 s, and each library's defaults (librdkafka
and kafka-python 45 s / 3 s, aiokafka 10 s / 3 s). rebalanced runs with its default settings
(including the 3 s initial rebalance delay of a new group).

One case uses the consumer group protocol (confluent-kafka `group.protocol=consumer`, KIP-848) at
the broker's defaults (session 45 s, heartbeat interval 5 s); Tansu has no KIP-848 groups, so
that row is rebalanced's alone.

Per run, over the time from the kill to the end of producing:

* delay: worst produce->consume delay of the messages produced after the kill;
* gap: longest time with nothing consumed by the group;
* paused: total of the gaps longer than 250 ms (the normal gap at 100 msg/s is ~10-50 ms);
* lost (must be 0): acknowledged messages never consumed; dup: messages consumed twice;
* reb: rebalances the surviving consumer went through (assignment callbacks after the kill);
* for rebalanced, from its journal: when the dead member was removed after the kill, and the
  join and sync phases of the rebalances that followed (the broker's own part of the pause).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.brokers import REPO, Broker, Rebalanced, Tansu
from tests.bench.dataplane import ensure_topic

PARTITIONS = 20
RATE = 100  # messages per second
PAUSE_GAP_S = 0.25
STEADY_S = 3.0
MIN_WINDOW_S = 8.0
DRAIN_S = 15.0


@dataclass(frozen=True)
class Case:
    client: str  # confluent | kafka-python | aiokafka
    strategy: str  # range | cooperative-sticky | consumer-protocol (KIP-848)
    stop: str  # kill | close | static-restart
    timing: str  # "6s/1s" | "defaults"

    @property
    def label(self) -> str:
        return f"{self.stop}, {self.client}, {self.strategy}, {self.timing}"

    @property
    def max_window_s(self) -> float:
        return 30.0 if self.timing == "6s/1s" else 75.0


def cases(quick: bool) -> list[Case]:
    fast = "6s/1s"
    if quick:
        return [Case("kafka-python", "range", "kill", fast),
                Case("confluent", "range", "kill", fast),
                Case("aiokafka", "range", "kill", fast),
                Case("confluent", "cooperative-sticky", "kill", fast),
                Case("confluent", "range", "close", fast), *KIP848_CASES]
    out = []
    for client, strategies in (("kafka-python", ("range", "cooperative-sticky")),
                               ("confluent", ("range", "cooperative-sticky")),
                               ("aiokafka", ("range",))):
        for strategy in strategies:
            for stop in ("kill", "close"):
                out.append(Case(client, strategy, stop, fast))
    out.append(Case("confluent", "range", "static-restart", fast))
    out.append(Case("kafka-python", "range", "static-restart", fast))
    for client, strategy in (("confluent", "range"), ("confluent", "cooperative-sticky"),
                             ("kafka-python", "range"), ("aiokafka", "range")):
        out.append(Case(client, strategy, "kill", "defaults"))
    out.extend(KIP848_CASES)
    return out


# group.protocol=consumer: the broker's session (45 s) and heartbeat interval (5 s) apply.
# Tansu has no ConsumerGroupHeartbeat, so only rebalanced runs these.
KIP848_CASES = [Case("confluent", "consumer-protocol", "kill", "defaults")]


# -- the producer -------------------------------------------------------------------------------


class PacedProducer:
    """RATE messages/s on a schedule, round-robin over the partitions, on a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2,
                                   "acks": "all", "error_cb": lambda e: None})
        self._topic = topic
        self.sent: dict[int, float] = {}
        self.acked: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _on_delivery(self, seq: int) -> Callable[[Any, Any], None]:
        def delivered(err: Any, _msg: Any) -> None:
            if err is None:
                self.acked.add(seq)

        return delivered

    def _run(self) -> None:
        started = time.monotonic()
        seq = 0
        while not self._stop.is_set():
            wait = started + seq / RATE - time.monotonic()
            if wait > 0:
                self._producer.poll(wait)
                continue
            now = time.time()
            self.sent[seq] = now
            self._producer.produce(self._topic, f"{seq} {now:.4f}".encode(),
                                   partition=seq % PARTITIONS,
                                   on_delivery=self._on_delivery(seq))
            self._producer.poll(0)
            seq += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(15)


# -- the consumers ------------------------------------------------------------------------------


class ConsumerProcess:
    def __init__(self, broker: Broker, case: Case, topic: str, group: str, name: str,
                 log_dir: Path, instance_id: str = "") -> None:
        args = [sys.executable, "-m", "tests.bench.pause_consumer", "--client", case.client,
                "--bootstrap", broker.bootstrap, "--topic", topic, "--group", group,
                "--client-id", name, "--strategy", case.strategy]
        if case.timing == "6s/1s":
            args += ["--session-ms", "6000", "--heartbeat-ms", "1000"]
        if instance_id:
            args += ["--instance-id", instance_id]
        self.name = name
        self._stderr = open(log_dir / f"pause-{name}.log", "ab")  # noqa: SIM115 - closed in reap
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, cwd=REPO, text=True, bufsize=1)
        self.consumed: list[tuple[int, float]] = []
        self.assigned: list[tuple[float, int]] = []  # (time, partitions owned after)
        self.owned = 0
        self.closed_at: float | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if not parts:
                continue
            with contextlib.suppress(ValueError, IndexError):
                if parts[0] == "M":
                    self.consumed.append((int(parts[1]), float(parts[2])))
                elif parts[0] == "A":
                    self.owned = int(parts[2])
                    self.assigned.append((float(parts[1]), self.owned))
                elif parts[0] == "V":
                    self.owned = int(parts[2])
                elif parts[0] == "C":
                    self.closed_at = float(parts[1])

    def last_consumed_at(self) -> float:
        return self.consumed[-1][1] if self.consumed else 0.0

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def close(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write("close\n")
            self.proc.stdin.flush()

    def reap(self) -> None:
        self.kill()
        self._reader.join(5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


# -- one run ------------------------------------------------------------------------------------


@dataclass
class Run:
    delay_s: float | None = None
    gap_s: float | None = None
    paused_s: float | None = None
    lost: int | None = None
    duplicated: int | None = None
    survivor_rebalances: int | None = None
    removed_after_ms: int | None = None  # rebalanced's journal: kill -> member_removed
    join_ms: list[int] = field(default_factory=list)
    sync_ms: list[int] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)  # journal events, ms after the kill
    error: str = ""


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_case(broker: Broker, case: Case, workdir: Path) -> Run:
    topic, group = "pause", "pause-group"
    ensure_topic(broker, topic, PARTITIONS)
    producer = PacedProducer(broker.bootstrap, topic)
    consumers: list[ConsumerProcess] = []
    static = case.stop == "static-restart"
    try:
        producer.start()
        consumers = [ConsumerProcess(broker, case, topic, group, f"c{i}", workdir,
                                     instance_id=f"static-{i}" if static else "")
                     for i in range(2)]
        survivor, victim = consumers

        def steady() -> bool:
            now = time.time()
            return (all(c.owned for c in consumers)
                    and sum(c.owned for c in consumers) == PARTITIONS
                    and all(now - c.last_consumed_at() < 1.0 for c in consumers))

        _wait(steady, 120, "both consumers to own partitions and consume")
        time.sleep(STEADY_S)
        killed_at = time.time()
        if case.stop == "close":
            victim.close()
        else:
            victim.kill()
        replacement = ConsumerProcess(broker, case, topic, group, "c2", workdir,
                                      instance_id="static-1" if static else "")
        consumers.append(replacement)

        def caught_up() -> bool:
            now = time.time()
            seen = {s for c in consumers for s, _ in c.consumed}
            due = [s for s, t in list(producer.sent.items()) if t < now - 1.0]
            return (time.time() - killed_at >= MIN_WINDOW_S and bool(replacement.owned)
                    and bool(survivor.owned) and all(s in seen for s in due))

        with contextlib.suppress(TimeoutError):
            _wait(caught_up, case.max_window_s, "the group to catch up")
        produced_until = time.time()
        producer.stop()
        acked = set(producer.acked)
        with contextlib.suppress(TimeoutError):
            _wait(lambda: acked <= {s for c in consumers for s, _ in c.consumed}, DRAIN_S,
                  "the group to drain")
        run = measure(producer, consumers, survivor, killed_at, produced_until)
        if isinstance(broker, Rebalanced):
            journal_timings(broker, run, killed_at)
        return run
    finally:
        for consumer in consumers:
            consumer.reap()
        with contextlib.suppress(Exception):
            producer.stop()


def measure(producer: PacedProducer, consumers: list[ConsumerProcess],
            survivor: ConsumerProcess, killed_at: float, produced_until: float) -> Run:
    first: dict[int, float] = {}
    total = 0
    for consumer in consumers:
        for seq, at in consumer.consumed:
            total += 1
            if seq not in first or at < first[seq]:
                first[seq] = at
    after_kill = [s for s, t in producer.sent.items() if t >= killed_at and s in producer.acked]
    delays = [first[s] - producer.sent[s] for s in after_kill if s in first]
    times = sorted(at for c in consumers for _, at in c.consumed
                   if killed_at <= at <= produced_until)
    edges = [killed_at, *times, produced_until]
    gaps = [b - a for a, b in itertools.pairwise(edges)]
    return Run(
        delay_s=max(delays) if delays else None,
        gap_s=max(gaps),
        paused_s=sum(g for g in gaps if g > PAUSE_GAP_S),
        lost=len(producer.acked - set(first)),
        duplicated=total - len(first),
        survivor_rebalances=sum(1 for at, _ in survivor.assigned if at >= killed_at),
    )


def journal_timings(broker: Rebalanced, run: Run, killed_at: float) -> None:
    """The broker's own part of the pause, from its event journal."""
    journal = broker.data_dir / "events"  # docs/events.md: closed files, then the active one
    paths = [*sorted(journal.glob("events-*.jsonl")), journal / ".events-active.jsonl"]
    with contextlib.suppress(OSError):
        events = [json.loads(line) for path in paths if path.exists()
                  for line in path.read_text().splitlines() if line.strip()]
        after = [e for e in events if e["ts"] >= killed_at * 1000 - 5]
        removed = [e for e in after if e["event_type"] == "member_removed"]
        if removed:
            run.removed_after_ms = int(removed[0]["ts"] - killed_at * 1000)
        run.join_ms = [e["duration_ms"] for e in after if e["event_type"] == "join_completed"]
        joins = {e["generation"]: e["ts"] for e in after if e["event_type"] == "join_completed"}
        run.sync_ms = [e["ts"] - joins[e["generation"]] for e in after
                       if e["event_type"] == "group_stabilized" and e["generation"] in joins]
        run.timeline = [f'{e["ts"] - killed_at * 1000:+.0f} {e["event_type"]} '
                        f'{e.get("cause") or e.get("client_id") or ""}'.strip()
                        for e in after if e["event_type"] != "offsets_committed"]


def make_broker(name: str, workdir: Path) -> Broker:
    if name == "rebalanced":
        # Its defaults, including Kafka's 3 s initial delay: it must not add to the pause.
        return Rebalanced(workdir, {"group.initial.rebalance.delay.ms": "3000"})
    return Tansu(workdir)


def run_all(selected: list[Case], brokers: list[str], workdir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for case in selected:
        results[case.label] = {"case": asdict(case)}
        for name in brokers:
            if case.strategy == "consumer-protocol" and name != "rebalanced":
                results[case.label][name] = asdict(Run(error="no KIP-848 consumer groups"))
                continue
            broker = make_broker(name, workdir)
            started = time.monotonic()
            try:
                broker.start()
                run = run_case(broker, case, workdir)
            except Exception as exc:  # one failed run must not stop the others
                run = Run(error=f"{type(exc).__name__}: {exc}"[:300])
            finally:
                broker.cleanup()
            results[case.label][name] = asdict(run)
            print(f"{case.label:52s} {name:10s} {_brief(run)}  "
                  f"({time.monotonic() - started:.0f} s)", flush=True)
    return results


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _brief(run: Run) -> str:
    if run.error:
        return f"error: {run.error}"
    return (f"delay {_s(run.delay_s)} gap {_s(run.gap_s)} paused {_s(run.paused_s)} "
            f"lost {run.lost} dup {run.duplicated} reb {run.survivor_rebalances}")


def _cells(run: dict[str, Any] | None) -> list[str]:
    if run is None:
        return ["-"] * 6
    if run["error"]:
        return ["n/a (" + run["error"][:60] + ")"] + [""] * 5
    return [_s(run["delay_s"]), _s(run["gap_s"]), _s(run["paused_s"]), str(run["lost"]),
            str(run["duplicated"]), str(run["survivor_rebalances"])]


def render(results: dict[str, Any], brokers: list[str]) -> str:
    """Markdown: one row per case, each broker's six numbers side by side."""
    metrics = ["delay s", "gap s", "paused s", "lost", "dup", "reb"]
    head = ["case (stop, client, assignor, session/heartbeat)"]
    for name in brokers:
        head += [f"{name} {m}" for m in metrics]
    if "rebalanced" in brokers:
        head += ["rebalanced: removed after ms", "join ms", "sync ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, by_broker in results.items():
        row = [label]
        for name in brokers:
            row += _cells(by_broker.get(name))
        ours = by_broker.get("rebalanced")
        if ours is not None:
            removed = ours.get("removed_after_ms")
            row += ["-" if removed is None else str(removed),
                    " ".join(str(v) for v in ours.get("join_ms", [])) or "-",
                    " ".join(str(v) for v in ours.get("sync_ms", [])) or "-"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.pause", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="SIGKILL per library + one close")
    parser.add_argument("--brokers", default="rebalanced,tansu")
    parser.add_argument("--only", default="", help="run only cases whose label contains this")
    parser.add_argument("--out", default="bench-results/pause.json", type=Path)
    args = parser.parse_args(argv)
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    for name in brokers:
        if name not in ("rebalanced", "tansu"):
            parser.error(f"unknown broker {name!r}")
    selected = [c for c in cases(args.quick) if args.only in c.label]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-pause-") as tmp:
        results = run_all(selected, brokers, Path(tmp))
    table = render(results, brokers)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    args.out.with_suffix(".md").write_text(table + "\n")
    print()
    print(table)
    print(f"\n{len(selected)} cases, {time.monotonic() - started:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
