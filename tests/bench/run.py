"""`make bench`: rebalanced side by side with Tansu and librdkafka's mock cluster, in one run.

    python -m tests.bench.run                      # every scenario, every broker
    python -m tests.bench.run --quick              # smaller sizes and shorter windows
    python -m tests.bench.run --only heartbeat --only join-storm
    python -m tests.bench.run --only coordinator --brokers rebalanced,tansu

Every scenario starts a fresh broker per subject (rebalanced on a new temporary data directory),
runs, stops it, and records either its metrics or "n/a (error ...)": a broker that lacks an API,
fails or crashes does not stop the run. Raw results go to bench-results/latest.json and the
tables (also in Markdown) to bench-results/latest.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.bench import coordinator_bench as cb
from tests.bench import dataplane as dp
from tests.bench import legacy_bench as lb
from tests.bench import offsets_bench as ob
from tests.bench import ops_scrape
from tests.bench.brokers import (
    REPO,
    Broker,
    BrokerStartError,
    LibrdkafkaMock,
    Rebalanced,
    Tansu,
    free_port,
    self_cpu_seconds,
    system_busy_seconds,
    tansu_binary,
)
from tests.bench.members import self_check
from tests.bench.report import ROWS, storm_rows, table

SCENARIOS = ("dataplane", "down-conversion", "join-storm", "heartbeat", "leave",
             "session-expiry", "many-groups", "offset-commit", "offset-recovery")
ALIASES = {
    "data": ("dataplane", "down-conversion"),
    "coordinator": ("join-storm", "heartbeat", "leave", "session-expiry", "many-groups"),
    "offsets": ("offset-commit", "offset-recovery"),
}
SUBJECT_TITLES = {
    "rebalanced": "rebalanced",
    "rebalanced-fsync100": "rebalanced (fsync 100 ms)",
    ops_scrape.SUBJECT: "rebalanced (metrics on: /metrics 1/s, page 1/5 s)",
    "tansu": "tansu (memory)",
    "mock": "librdkafka mock",
}
STORM_DELAY_MS = 3000  # Kafka's default group.initial.rebalance.delay.ms


@dataclass
class Params:
    quick: bool
    data: dp.DataPlaneParams = field(default_factory=dp.DataPlaneParams)
    coord: cb.CoordinatorParams = field(default_factory=cb.CoordinatorParams)
    offsets: ob.OffsetParams = field(default_factory=ob.OffsetParams)
    legacy: lb.LegacyParams = field(default_factory=lb.LegacyParams)
    start_repeats: int = 3

    @classmethod
    def make(cls, quick: bool) -> Params:
        p = cls(quick=quick)
        if quick:
            p.data = replace(p.data, messages=200_000, max_seconds=5.0, latency_samples=100,
                             latency_max_seconds=5.0)
            p.coord = replace(p.coord, storm_sizes=(10, 100, 500), heartbeat_seconds=2.0,
                              leave_repeats=3, many_groups=2_000, idle_seconds=3.0,
                              storm_timeout_s=30.0, leave_budget_s=8.0, connect_s=20.0)
            p.offsets = replace(p.offsets, commit_seconds=2.0, recovery_records=200_000,
                                compaction_wait_s=5.0, recovery_commit_max_s=60.0)
            p.start_repeats = 2
            p.legacy = replace(p.legacy, messages=50_000)
        return p


Runner = Callable[[Broker, Params], dict[str, Any]]


def _async(factory: Callable[[Broker, Params], Awaitable[dict[str, Any]]],
           timeout: float) -> Runner:
    def run(broker: Broker, params: Params) -> dict[str, Any]:
        return run_async(asyncio.wait_for(factory(broker, params), timeout))

    return run


def run_async(coro: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)  # type: ignore[arg-type]


def _with_client_cpu(fn: Runner) -> Runner:
    def run(broker: Broker, params: Params) -> dict[str, Any]:
        cpu0, t0 = self_cpu_seconds(), time.monotonic()
        result = fn(broker, params)
        result.setdefault("client_cpu_pct",
                          (self_cpu_seconds() - cpu0) / (time.monotonic() - t0) * 100)
        return result

    return run


def _part(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One part of a multi-part scenario: its metrics, or its error."""
    try:
        return fn()
    except Exception as exc:
        return {"error": describe(exc)}


def scenario_dataplane(broker: Broker, params: Params) -> dict[str, Any]:
    out: dict[str, Any] = {}
    topic = "bench-data"
    out["topic"] = dp.ensure_topic(broker, topic, 1)

    def produce() -> dict[str, Any]:
        return _with_client_cpu(lambda b, p: dp.produce_throughput(b, topic, p.data))(
            broker, params)

    out["produce"] = _part(produce)
    delivered = out["produce"].get("messages", 0) + 1  # plus the warm-up message
    out["consume"] = _part(lambda: _with_client_cpu(
        lambda b, p: dp.consume_throughput(b, topic, delivered, p.data))(broker, params))

    def latency() -> dict[str, Any]:
        dp.ensure_topic(broker, "bench-latency", 1)
        return dp.wakeup_latency(broker, "bench-latency", params.data)

    out["latency"] = _part(latency)
    return out


def scenario_join_storm(broker: Broker, params: Params) -> dict[str, Any]:
    """Storms of growing size into one broker; once a size fails or is slow, larger ones skip."""
    out: dict[str, Any] = {}
    skip_reason = ""
    timeout = params.coord.storm_timeout_s
    for size in params.coord.storm_sizes:
        if skip_reason:
            out[str(size)] = {"na": skip_reason}
            continue
        out[str(size)] = _part(lambda size=size: run_async(asyncio.wait_for(  # type: ignore[misc]
            cb.join_storm(broker, size, params.coord), timeout + 30)))
        result = out[str(size)]
        if not broker.alive():
            skip_reason = "skipped: the broker exited"
        elif "error" in result:
            skip_reason = f"skipped: the {size}-member storm failed"
        else:
            # Linear extrapolation of the time past the broker's own waits; skip a size that
            # would not finish inside the limit anyway (it only burns the time budget).
            bigger = [n for n in params.coord.storm_sizes if n > size]
            if bigger:
                expected_s = (result["deliberate_wait_ms"]
                              + result["overhead_ms"] * bigger[0] / size) / 1000
                if expected_s > timeout:
                    skip_reason = (f"skipped: {size} members took "
                                   f"{result['overhead_ms'] / 1000:.1f} s past the waits")
    return out


SCENARIO_RUNNERS: dict[str, Runner] = {
    "dataplane": scenario_dataplane,
    # Fetch v0-v3 against v4 over the same data; rebalanced only (the peers are 4.x brokers).
    "down-conversion": lambda b, p: lb.down_conversion(b, p.legacy),
    "join-storm": scenario_join_storm,
    "heartbeat": _with_client_cpu(_async(lambda b, p: cb.heartbeat_throughput(b, p.coord), 120)),
    "leave": _async(lambda b, p: cb.leave_rebalance(b, p.coord), 240),
    "session-expiry": _async(lambda b, p: cb.session_expiry(b, p.coord), 120),
    "many-groups": _async(lambda b, p: cb.many_groups(b, p.coord), 240),
    "offset-commit": _with_client_cpu(_async(lambda b, p: ob.commit_throughput(b, p.offsets),
                                             120)),
}


def subjects_for(scenario: str, brokers: list[str]) -> list[str]:
    if scenario in ("offset-recovery", "down-conversion"):
        return ["rebalanced"] if "rebalanced" in brokers else []
    subjects = list(brokers)
    if scenario == "offset-commit" and "rebalanced" in brokers:
        subjects.insert(subjects.index("rebalanced") + 1, "rebalanced-fsync100")
    if scenario in ops_scrape.SCENARIOS and "rebalanced" in brokers:
        subjects.insert(subjects.index("rebalanced") + 1, ops_scrape.SUBJECT)
    return subjects


def make_broker(subject: str, scenario: str, workdir: Path) -> Broker:
    if subject.startswith("rebalanced"):
        settings: dict[str, str] = {}
        if scenario == "join-storm":
            settings["group.initial.rebalance.delay.ms"] = str(STORM_DELAY_MS)
        if subject == "rebalanced-fsync100":
            settings["offsets.commit.fsync"] = "100"
        elif scenario == "offset-commit":
            settings["offsets.commit.fsync"] = "always"
        if subject == ops_scrape.SUBJECT:
            settings["metrics.listener"] = f"127.0.0.1:{free_port()}"
        return Rebalanced(workdir, settings)
    if subject == "tansu":
        return Tansu(workdir)
    if subject == "mock":
        return LibrdkafkaMock(workdir)
    raise ValueError(subject)


def describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, TimeoutError) and not str(exc):
        text = "timed out"
    return re.sub(r"\s+", " ", text)[:400]


_LOG_PROBLEM = re.compile(r'"level":\s*"(error|critical|warning|exception)"|^Traceback')


def log_problems(broker: Broker, limit: int = 8) -> list[str]:
    """Warning/error lines of the broker log, each traceback kept whole (up to 40 lines)."""
    try:
        lines = broker.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Traceback"):
            end = i + 1
            while end < len(lines) and end - i < 40 and (
                    lines[end].startswith((" ", "\t", "During handling", "The above"))
                    or not lines[end].strip()):
                end += 1
            block = lines[i:end + 1]  # the indented frames and the exception line
            found.append("\n".join(block)[:4000])
            i = end + 1
            continue
        if _LOG_PROBLEM.search(line):
            found.append(line[:2000])
        i += 1
    return found[:limit] + ([f"... {len(found) - limit} more"] if len(found) > limit else [])


def run_subject(scenario: str, subject: str, params: Params, workdir: Path,
                incidents: list[dict[str, Any]]) -> dict[str, Any]:
    if scenario == "offset-recovery":
        try:
            return run_async(asyncio.wait_for(ob.recovery(workdir, params.offsets), 900))
        except Exception as exc:
            return {"error": describe(exc)}
    broker = make_broker(subject, scenario, workdir)
    started = time.monotonic()
    try:
        broker.start()
    except BrokerStartError as exc:
        return {"error": f"did not start: {describe(exc)}"}
    result: dict[str, Any]
    busy0, self0, broker0 = system_busy_seconds(), self_cpu_seconds(), _cpu(broker)
    t0 = time.monotonic()
    scraper = None
    result_scrapes: dict[str, int] = {}
    if subject == ops_scrape.SUBJECT and isinstance(broker, Rebalanced):
        scraper = ops_scrape.Scraper(f"http://{broker.settings['metrics.listener']}").__enter__()
    try:
        result = SCENARIO_RUNNERS[scenario](broker, params)
    except Exception as exc:
        result = {"error": describe(exc)}
        if os.environ.get("BENCH_TRACEBACK"):
            traceback.print_exc()
    finally:
        if scraper is not None:
            scraper.__exit__()
            result_scrapes = {"scrapes": scraper.scrapes, "scrape_errors": scraper.errors}
        alive = broker.alive()
        code = broker.exit_code()
        broker1 = _cpu(broker)
        busy1, self1, t1 = system_busy_seconds(), self_cpu_seconds(), time.monotonic()
        broker.cleanup()
    result["wall_s"] = time.monotonic() - started
    result.update(result_scrapes)
    if broker0 is not None and broker1 is not None:
        # CPU not charged to this broker or the load generator: other processes on the machine,
        # plus kernel work (loopback softirq) not charged to any process. High values from
        # other processes make the numbers of this run less trustworthy.
        other = (busy1 - busy0) - (self1 - self0) - (broker1 - broker0)
        result["other_cpu_pct"] = max(other, 0.0) / max(t1 - t0, 1e-9) * 100
    if not alive:
        message = f"broker exited (code {code}) during the scenario"
        result.setdefault("error", message)
        incidents.append({"scenario": scenario, "subject": subject, "event": message,
                          "log_tail": broker.log_tail(30)})
    if isinstance(broker, Rebalanced):
        problems = log_problems(broker)
        if problems:
            incidents.append({"scenario": scenario, "subject": subject,
                              "event": "problems in the broker log", "lines": problems})
    return result


def _cpu(broker: Broker) -> float | None:
    try:
        return broker.stats().cpu_seconds() if broker.alive() else None
    except OSError:
        return None


def start_time_results(brokers: list[str], params: Params, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for subject in brokers:
        if subject == "mock":
            out[subject] = {"na": "in-process mock"}
            continue
        try:
            out[subject] = dp.start_time(lambda s=subject: make_broker(s, "start", workdir),
                                         params.start_repeats)
        except Exception as exc:
            out[subject] = {"error": describe(exc)}
    return out


def environment() -> dict[str, Any]:
    def cmd(*args: str) -> str:
        try:
            return subprocess.run(args, capture_output=True, text=True, timeout=10,
                                  cwd=REPO).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    import confluent_kafka

    tansu = tansu_binary()
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "rebalanced_commit": cmd("git", "rev-parse", "--short", "HEAD"),
        "rebalanced_worktree_dirty": bool(cmd("git", "status", "--porcelain", "--",
                                              "protocol", "coordinator", "storage")),
        "tansu": cmd(str(tansu), "--version") if tansu else "missing",
        "librdkafka": confluent_kafka.libversion()[0],
        "confluent_kafka": str(confluent_kafka.version()),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", default=[], metavar="SCENARIO",
                        help=f"run only these (repeatable, comma-separated): "
                             f"{', '.join(SCENARIOS)}, or {', '.join(ALIASES)}")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter windows")
    parser.add_argument("--brokers", default="rebalanced,tansu,mock",
                        help="comma-separated subset of rebalanced,tansu,mock")
    parser.add_argument("--out", default="bench-results/latest.json", type=Path)
    args = parser.parse_args(argv)
    chosen: list[str] = []
    for item in args.only:
        for name in filter(None, (s.strip() for s in item.split(","))):
            names = ALIASES.get(name, (name,))
            for n in names:
                if n not in SCENARIOS:
                    parser.error(f"unknown scenario {n!r}; choose from {', '.join(SCENARIOS)}")
                if n not in chosen:
                    chosen.append(n)
    args.scenarios = [s for s in SCENARIOS if s in chosen] if chosen else list(SCENARIOS)
    args.broker_list = [b.strip() for b in args.brokers.split(",") if b.strip()]
    for b in args.broker_list:
        if b not in ("rebalanced", "tansu", "mock"):
            parser.error(f"unknown broker {b!r}")
    return args


def render(results: dict[str, Any], scenarios: list[str], params: Params,
           markdown: bool) -> str:
    parts: list[str] = []
    for scenario in scenarios:
        by_subject = results.get(scenario, {})
        subjects = [(s, SUBJECT_TITLES[s]) for s in by_subject]
        if not subjects:
            continue
        rows = storm_rows(params.coord.storm_sizes) if scenario == "join-storm" else \
            ROWS[scenario]
        if markdown:
            parts.append(f"### {scenario}\n")
        parts.append(table(scenario, rows, subjects, by_subject, markdown))
        parts.append("")
    return "\n".join(parts)


def _terminate(signum: int, _frame: Any) -> None:
    # Unwind normally so every broker this run started is stopped by its `finally`.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    args = parse_args(argv)
    params = Params.make(args.quick)
    self_check()
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        need = params.coord.many_groups + 1000
        if hard < need and "many-groups" in args.scenarios:
            print(f"warning: open-file limit {hard} < {need}; many-groups may fail",
                  file=sys.stderr)
    except (ImportError, ValueError, OSError):
        pass
    workdir = Path(tempfile.mkdtemp(prefix="rebalanced-bench-"))
    incidents: list[dict[str, Any]] = []
    results: dict[str, Any] = {}
    began = time.monotonic()
    print(f"benchmarks: {', '.join(args.scenarios)} | brokers: {', '.join(args.broker_list)}"
          f"{' | quick' if args.quick else ''}", flush=True)
    try:
        for scenario in args.scenarios:
            results[scenario] = {}
            if scenario == "dataplane":
                starts = start_time_results(args.broker_list, params, workdir)
            for subject in subjects_for(scenario, args.broker_list):
                t0 = time.monotonic()
                print(f"  {scenario:<16} {subject:<20}", end="", flush=True)
                result = run_subject(scenario, subject, params, workdir, incidents)
                if scenario == "dataplane":
                    result["start"] = starts.get(subject, {"error": "not run"})
                results[scenario][subject] = result
                status = f"error: {result['error'][:100]}" if "error" in result else "ok"
                print(f" {time.monotonic() - t0:6.1f}s  {status}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.monotonic() - began
    document = {
        "environment": environment(),
        "command": " ".join(["python -m tests.bench.run", *(argv or sys.argv[1:])]),
        "quick": args.quick,
        "elapsed_s": elapsed,
        "params": {"data": asdict(params.data), "coordinator": asdict(params.coord),
                   "offsets": asdict(params.offsets), "legacy": asdict(params.legacy),
                   "start_repeats": params.start_repeats,
                   "join_storm_initial_delay_ms": STORM_DELAY_MS},
        "notes": {
            "mock_cpu": LibrdkafkaMock.cpu_note,
            "ratios": "rebalanced value / peer value; ↑ rows: >1 is better for rebalanced, "
                      "↓ rows: <1 is better",
        },
        "results": results,
        "metrics_overhead": ops_scrape.overhead(results),
        "incidents": incidents,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print()
    print(render(results, args.scenarios, params, markdown=False))
    md_path = args.out.with_suffix(".md")
    md_path.write_text(render(results, args.scenarios, params, markdown=True))
    busy = [(sc, su, r["other_cpu_pct"]) for sc, by in results.items()
            for su, r in by.items() if isinstance(r, dict) and r.get("other_cpu_pct", 0) > 15]
    if busy:
        print("CPU not charged to the broker or the load generator (other processes, kernel "
              "softirq); high values mean a busy machine and less reliable numbers:")
        for sc, su, pct in busy:
            print(f"  {sc} / {su}: {pct:.0f}% of a core")
    if incidents:
        print("incidents:")
        for incident in incidents:
            print(f"  [{incident['scenario']} / {incident['subject']}] {incident['event']}")
            for line in incident.get("lines", [])[:3]:
                print(f"      {line[:300]}")
    for scenario, cost in document["metrics_overhead"].items():
        print(f"metrics.listener on vs off, {scenario}: broker CPU {cost['off_us']:.2f} -> "
              f"{cost['on_us']:.2f} µs/op ({cost['overhead_pct']:+.1f} %), "
              f"{cost['scrapes']} scrapes")
    print(f"\nraw results: {args.out}  tables: {md_path}  ({elapsed:.0f}s)")
    print(f"mock CPU/RSS: {LibrdkafkaMock.cpu_note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
