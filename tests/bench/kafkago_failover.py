"""The failover scenario of the seeds' field report, with its own client: kafka-go 0.2.1.

    python -m tests.bench.kafkago_failover              # both timings, 3 runs each
    python -m tests.bench.kafkago_failover --runs 1 --only defaults

A producer at 100 messages/s (round-robin over a 20-partition topic, each value
"<seq> <sent time>", `tests/bench/pause.py`'s `PacedProducer`), two kafka-go consumers in their
own processes (`tests/integration/workers/kafkago`, built offline against Debian's
`golang-github-segmentio-kafka-go-dev`), a steady period, then one consumer is SIGKILLed and a
replacement started at once. Two timings: kafka-go's defaults (MaxWait 10 s, heartbeat 3 s,
session 30 s) and session 6 s / heartbeat 1 s (MaxWait 10 s). Every consumer keeps kafka-go's
default client id, as an application does: all of them look alike to the broker.

Per run:

* delay: worst produce->consume delay of the records produced after the kill;
* lost (must be 0): acknowledged records never consumed; dup: records consumed twice;
* disconnect removals of live members (must be 0): `disconnect` removals, in the broker's
  journal, of any member but the killed one, before or after the kill;
* removals before and after the kill, by cause, and how the killed member was removed and when.

rebalanced runs with its default settings (including the 3 s initial rebalance delay).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tests.bench.pause import PARTITIONS, PacedProducer
from tests.integration.group_workers import create_topic, group_events
from tests.integration.kafkago import KafkaGoWorker, ProcessWorker, WorkerBuildError, build_worker

TOPIC = "seed"
GROUP = "seed-group"
DRAIN_S = 15.0

Spawn = Callable[[str, str, str], ProcessWorker]  # (topic, group, name) -> a started consumer


class BrokerUnderTest(Protocol):
    """What the scenario needs of a broker: where to connect (and, read when it has one, the
    `data_dir` whose journal counts the removals: rebalanced's)."""

    @property
    def bootstrap(self) -> str: ...


@dataclass(frozen=True)
class Timing:
    label: str
    session_ms: int  # 0: kafka-go's default (30 s)
    heartbeat_ms: int  # 0: kafka-go's default (3 s)
    max_wait_ms: int = 0  # 0: kafka-go's default (10 s)

    @property
    def session_s(self) -> float:
        return (self.session_ms or 30_000) / 1000

    @property
    def heartbeat_s(self) -> float:
        return (self.heartbeat_ms or 3_000) / 1000


DEFAULTS = Timing("defaults (MaxWait 10 s, heartbeat 3 s, session 30 s)", 0, 0)
FAST = Timing("session 6 s, heartbeat 1 s (MaxWait 10 s)", 6_000, 1_000)
TIMINGS = (DEFAULTS, FAST)


@dataclass
class Outcome:
    delay_s: float | None = None  # worst produce->consume delay of what was produced after kill
    lost: int | None = None
    duplicated: int | None = None
    removals_before_kill: dict[str, int] = field(default_factory=dict)
    removals_after_kill: dict[str, int] = field(default_factory=dict)
    live_member_disconnects: int | None = None  # `disconnect` removals of members not killed
    victim_removed_by: str | None = None  # the killed member's member_removed cause
    victim_removed_after_ms: int | None = None
    removals: list[str] = field(default_factory=list)  # "<ms after the kill> <cause> <member>"
    error: str = ""  # the run did not get as far as measuring


def removals_by_cause(events: list[dict[str, Any]]) -> dict[str, int]:
    return dict(Counter(e["cause"] for e in events if e["event_type"] == "member_removed"))


def _wait(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def _owned(worker: ProcessWorker) -> frozenset[int]:
    return worker.assignment or frozenset()


def _consumed(worker: ProcessWorker) -> list[tuple[int, float]]:
    """(seq, wall-clock time handed to the application) of every record the worker read."""
    out = []
    for report in worker.of("message"):
        with contextlib.suppress(ValueError, IndexError):
            out.append((int(report["value"].split(" ", 1)[0]), float(report["at"])))
    return out


def kafkago_consumers(broker: BrokerUnderTest, binary: Path, workdir: Path,
                      timing: Timing) -> Spawn:
    options = {"session_ms": timing.session_ms or None,
               "heartbeat_ms": timing.heartbeat_ms or None,
               "max_wait_ms": timing.max_wait_ms or None}
    return lambda topic, group, name: KafkaGoWorker(binary, broker.bootstrap, topic, group,
                                                    name, workdir, **options)


def run_scenario(broker: BrokerUnderTest, consumer: Spawn, timing: Timing, steady_s: float,
                 min_window_s: float) -> Outcome:
    """The seed's scenario once, with the consumers `consumer(topic, group, name)` starts;
    every process it starts is ended before it returns."""
    create_topic(broker, TOPIC, PARTITIONS)  # type: ignore[arg-type]  # needs only bootstrap
    producer = PacedProducer(broker.bootstrap, TOPIC)
    workers: list[ProcessWorker] = []

    def spawn(name: str) -> ProcessWorker:
        worker = consumer(TOPIC, GROUP, name)
        workers.append(worker)
        return worker

    def journal() -> list[dict[str, Any]]:
        if getattr(broker, "data_dir", None) is None:
            return []  # a peer broker keeps no journal
        return group_events(broker, GROUP)  # type: ignore[arg-type]  # needs only data_dir

    outcome = Outcome()
    try:
        producer.start()
        survivor, victim = spawn("c0"), spawn("c1")

        def steady() -> bool:
            now = time.time()
            return (all(_owned(w) for w in (survivor, victim))
                    and len(_owned(survivor) | _owned(victim)) == PARTITIONS
                    and all(now - (_consumed(w) or [(0, 0.0)])[-1][1] < 1.0
                            for w in (survivor, victim)))

        # Joining takes a heartbeat interval or two, plus the broker's initial delay.
        if not _wait(steady, 30 + 4 * timing.heartbeat_s):
            outcome.error = ("the two consumers never split the topic and consumed; removals: "
                             f"{removals_by_cause(journal())}")
            return outcome
        time.sleep(steady_s)
        killed_at = time.time()
        victim_ids = set(victim.member_ids())
        victim.kill()
        replacement = spawn("c2")

        def caught_up() -> bool:
            now = time.time()
            seen = {s for w in workers for s, _ in _consumed(w)}
            due = [s for s, t in list(producer.sent.items()) if t < now - 1.0]
            return (now - killed_at >= min_window_s and bool(_owned(replacement))
                    and bool(_owned(survivor)) and all(s in seen for s in due))

        _wait(caught_up, min_window_s + timing.session_s + 30)
        producer.stop()
        acked = set(producer.acked)
        _wait(lambda: acked <= {s for w in workers for s, _ in _consumed(w)}, DRAIN_S)

        first: dict[int, float] = {}
        total = 0
        for worker in workers:
            for seq, at in _consumed(worker):
                total += 1
                if seq not in first or at < first[seq]:
                    first[seq] = at
        after_kill = [s for s, t in producer.sent.items() if t >= killed_at and s in acked]
        delays = [first[s] - producer.sent[s] for s in after_kill if s in first]
        outcome.delay_s = max(delays) if delays else None
        outcome.lost = len(acked - set(first))
        outcome.duplicated = total - len(first)
        events = journal()
        kill_ms = killed_at * 1000
        outcome.removals_before_kill = removals_by_cause([e for e in events if e["ts"] < kill_ms])
        outcome.removals_after_kill = removals_by_cause([e for e in events if e["ts"] >= kill_ms])
        outcome.live_member_disconnects = sum(
            1 for e in events if e["event_type"] == "member_removed"
            and e["cause"] == "disconnect" and e["member_id"] not in victim_ids)
        outcome.removals = [f'{e["ts"] - kill_ms:+.0f} ms {e["cause"]} {e["member_id"]}'
                            + (" (killed)" if e["member_id"] in victim_ids else "")
                            for e in events if e["event_type"] == "member_removed"]
        for event in events:
            if (event["event_type"] == "member_removed" and event["ts"] >= kill_ms
                    and event["member_id"] in victim_ids):
                outcome.victim_removed_by = event["cause"]
                outcome.victim_removed_after_ms = int(event["ts"] - kill_ms)
                break
        return outcome
    finally:
        for worker in workers:
            worker.reap()
        with contextlib.suppress(Exception):
            producer.stop()


# -- the benchmark --------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _causes(counts: dict[str, int]) -> str:
    return ", ".join(f"{cause} {n}" for cause, n in sorted(counts.items())) or "none"


def brief(outcome: Outcome) -> str:
    if outcome.error:
        return f"error: {outcome.error}"
    return (f"delay {_s(outcome.delay_s)} s, lost {outcome.lost}, dup {outcome.duplicated}; "
            f"disconnect removals of live members {outcome.live_member_disconnects}; "
            f"removed before the kill: {_causes(outcome.removals_before_kill)}; after: "
            f"{_causes(outcome.removals_after_kill)}; killed member removed by "
            f"{outcome.victim_removed_by} after {outcome.victim_removed_after_ms} ms")


def render(results: dict[str, list[Outcome]]) -> str:
    head = ["broker: kafka-go 0.2.1 timing", "runs", "worst delay s", "lost", "dup",
            "disconnect removals of live members", "killed member removed by (ms)",
            "removals after the kill"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, outcomes in results.items():
        ok = [o for o in outcomes if not o.error]
        delays = [o.delay_s for o in ok if o.delay_s is not None]
        after: Counter[str] = Counter()
        for o in ok:
            after.update(o.removals_after_kill)
        row = [label, f"{len(ok)}/{len(outcomes)}", _s(max(delays) if delays else None),
               str(sum(o.lost or 0 for o in ok)), str(sum(o.duplicated or 0 for o in ok)),
               str(sum(o.live_member_disconnects or 0 for o in ok)),
               " ".join(f"{o.victim_removed_by} ({o.victim_removed_after_ms})" for o in ok)
               or "-", _causes(dict(after))]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from tests.bench.brokers import Broker, Rebalanced, Tansu

    parser = argparse.ArgumentParser(prog="python -m tests.bench.kafkago_failover",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per timing")
    parser.add_argument("--only", default="", help="only timings whose label contains this")
    parser.add_argument("--steady", type=float, default=10.0,
                        help="seconds of steady consumption before the kill")
    parser.add_argument("--window", type=float, default=10.0,
                        help="seconds of producing after the kill, at least")
    parser.add_argument("--out", default="bench-results/kafkago_failover.json", type=Path)
    parser.add_argument("--brokers", default="rebalanced,tansu",
                        help="comma-separated: rebalanced, tansu (the peer, in memory; it keeps "
                             "no journal, so its removal columns are empty)")
    args = parser.parse_args(argv)
    kinds = {"rebalanced": lambda workdir: Rebalanced(
                 workdir, {"group.initial.rebalance.delay.ms": "3000"}),
             "tansu": Tansu}
    chosen = [name.strip() for name in args.brokers.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in kinds]
    if unknown or not chosen:
        parser.error(f"--brokers: unknown {', '.join(unknown) or '(none)'}; "
                     f"choose from {', '.join(kinds)}")
    timings = [t for t in TIMINGS if args.only in t.label]
    started = time.monotonic()
    results: dict[str, list[Outcome]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-kafkago-") as tmp:
        workdir = Path(tmp)
        try:
            binary = build_worker(workdir)
        except WorkerBuildError as exc:
            print(f"cannot run: {exc}", file=sys.stderr)
            return 2
        for timing in timings:
            for run in range(args.runs):
                for name in chosen:  # the brokers alternate, run by run
                    label = f"{name}: {timing.label}"
                    broker: Broker = kinds[name](workdir)
                    began = time.monotonic()
                    try:
                        broker.start()
                        outcome = run_scenario(
                            broker, kafkago_consumers(broker, binary, workdir, timing), timing,
                            args.steady, args.window)
                    except Exception as exc:  # one failed run must not stop the others
                        outcome = Outcome(error=f"{type(exc).__name__}: {exc}"[:300])
                    finally:
                        broker.cleanup()
                    results.setdefault(label, []).append(outcome)
                    print(f"{label} run {run + 1}: {brief(outcome)} "
                          f"({time.monotonic() - began:.0f} s)", flush=True)
    table = render(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({k: [asdict(o) for o in v] for k, v in results.items()},
                                   indent=2))
    print()
    print(table)
    print(f"\n{sum(len(v) for v in results.values())} runs, "
          f"{time.monotonic() - started:.0f} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
