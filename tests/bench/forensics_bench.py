"""`make bench-forensics`: the forensics job on 1,000,000 journal events, and the group-log
decode rate on 1,000,000 records.

1. Journal: synthetic events in the broker's exact format (docs/events.md) for 200 groups of
   4-6 members: membership changes with their rebalance events, and a commit stream
   (`offsets_committed`) in between, written as closed journal files. Timed: the whole
   `python -m forensics` run (JVM start included) to the finished report, on local[2], after
   an untimed run on an empty directory (which writes the driver JVM's class-data archive
   where there is none yet, as a user's first run does).
2. Group log: 1,000,000 OffsetCommit records (plus a GroupMetadata record per 1,000) in
   segments written with the broker's own batch and record encoders. Timed: the decoder alone
   on one core, the data source's reader alone (Arrow batches, no Spark), and
   `spark.read.format("consumer_offsets")` on local[2].

3. Live source: N OffsetCommit records committed to the real broker (100 partitions per
   request, by stock librdkafka clients), then read back over the Kafka protocol: the
   data source's reader alone on one core (librdkafka's fetch and the C loop's column
   buffers, no Spark), and
   `spark.read.format("kafka_consumer_offsets")` on local[2] (the broker serving it is
   another process, not counted in the CPU rate).
4. Follow: `--follow --bootstrap-server` (10 s trigger, the default) on the broker while a group
   runs; three more members join one after another, each at a random moment of the
   trigger's cycle, and the time until the report's `rebalances` table has each new
   rebalance is measured (the target: within two trigger intervals).
5. Cluster: the report of section 1 again, submitted with `spark-submit` to a standalone
   master and two one-core workers started from the installed pyspark on loopback.

Usage: python -m tests.bench.forensics_bench [--events N] [--records N] [--keep DIR]
           [--only journal,cluster,group-log,live,follow] [--group-log-only]
           [--cluster-runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from coordinator.group.events import journal_record
from coordinator.grouplog.codec import encode_records
from coordinator.grouplog.records import (
    GroupMemberRecord,
    GroupMetadataKey,
    GroupMetadataRecord,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from storage.record_batch import encode_batch

COMMIT_LINE = ('{"v": 1, "event_type": "offsets_committed", "ts": %d, "group_id": "%s", '
               '"member_id": "%s", "generation": %d, "partitions": %d}\n')
CAUSES = [("member_join", "adding new member %s with group instance id None"),
          ("member_leave", "removing member %s on LeaveGroup; client reason: not provided"),
          ("session_expiry", "removing member %s on heartbeat expiration")]


def write_journal(directory: Path, total: int, groups: int = 200, seed: int = 7) -> int:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    start = 1_790_000_000_000
    state: list[dict[str, Any]] = [
        {"gen": 1, "members": [f"c{g}-{m}" for m in range(rng.randint(4, 6))], "next": 0}
        for g in range(groups)]
    lines: list[str] = []
    files = 0
    ts = start
    written = 0

    def event(payload: dict[str, object]) -> None:
        lines.append(json.dumps(journal_record(payload, ts)) + "\n")

    while written + len(lines) < total:
        g = rng.randrange(groups)
        group = f"group-{g:03d}"
        s = state[g]
        ts += rng.randint(0, 3)
        if rng.random() < 0.012:  # a membership change and its rebalance
            cause, reason = rng.choice(CAUSES)
            if cause == "member_join" or len(s["members"]) < 3:
                cause, reason = CAUSES[0]
                member = f"c{g}-{s['next'] + 100}"
                s["next"] += 1
                s["members"].append(member)
                event({"event": "member_added", "group_id": group, "generation_id": s["gen"],
                       "member_id": member, "group_instance_id": None, "client_id": member,
                       "client_host": f"/10.0.{g % 250}.{len(s['members'])}"})
            else:
                member = s["members"].pop(rng.randrange(len(s["members"])))
                event({"event": "member_removed", "group_id": group,
                       "generation_id": s["gen"], "member_id": member,
                       "group_instance_id": None, "client_id": member,
                       "client_host": f"/10.0.{g % 250}.9",
                       "cause": "leave" if cause == "member_leave" else "session_expiry",
                       "reason": None})
            event({"event": "rebalance_started", "group_id": group, "generation_id": s["gen"],
                   "partition": g % 50, "previous_state": "Stable", "reason": reason % member,
                   "member_id": member, "client_id": member, "client_host": "/10.0.0.1"})
            join_ms = rng.randint(5, 3000)
            ts += join_ms
            s["gen"] += 1
            event({"event": "join_completed", "group_id": group, "generation_id": s["gen"],
                   "protocol_name": "range", "leader_id": s["members"][0],
                   "member_count": len(s["members"]), "duration_ms": join_ms})
            ts += 2
            event({"event": "assignment_received", "group_id": group, "generation_id": s["gen"],
                   "member_id": s["members"][0], "member_count": len(s["members"]),
                   "missing_assignments": 0})
            event({"event": "group_stabilized", "group_id": group, "generation_id": s["gen"],
                   "member_count": len(s["members"]), "duration_ms": join_ms + 2})
        else:
            member = rng.choice(s["members"])
            lines.append(COMMIT_LINE % (ts, group, member, s["gen"], rng.randint(1, 4)))
        if len(lines) >= 100_000:
            files += 1
            (directory / f"events-{ts:013d}-{files:06d}.jsonl").write_text("".join(lines))
            written += len(lines)
            lines = []
    if lines:
        files += 1
        (directory / f"events-{ts:013d}-{files:06d}.jsonl").write_text("".join(lines))
        written += len(lines)
    return written


def write_group_log(data_dir: Path, total: int, partitions: int = 4) -> int:
    written = 0
    per_partition = total // partitions
    for p in range(partitions):
        directory = data_dir / f"__consumer_offsets-{p}"
        directory.mkdir(parents=True, exist_ok=True)
        chunks = []
        offset = 0
        ts = 1_790_000_000_000
        while offset < per_partition:
            records: list[OffsetCommitRecord | GroupMetadataRecord] = []
            for i in range(1000):
                records.append(OffsetCommitRecord(
                    key=OffsetCommitKey(group=f"group-{p}-{i % 20}", topic="orders",
                                        partition=i % 12),
                    value=OffsetCommitValue(offset=offset + i, commit_timestamp=ts + i)))
            records[-1] = GroupMetadataRecord(
                key=GroupMetadataKey(group=f"group-{p}-0"),
                value=GroupMetadataValue(protocol_type="consumer", generation=offset // 1000,
                                         protocol="range", leader="m-0",
                                         current_state_timestamp=ts,
                                         members=tuple(GroupMemberRecord(member_id=f"m-{k}",
                                                                         client_id=f"c-{k}",
                                                                         client_host="/h",
                                                                         session_timeout=10000)
                                                       for k in range(3))))
            for start in range(0, len(records), 100):  # 100 records a batch, like group commit
                chunk = records[start:start + 100]
                chunks.append(encode_batch(encode_records(chunk), ts, offset))
                offset += len(chunk)
            ts += 1000
        (directory / "00000000000000000000.log").write_bytes(b"".join(chunks))
        written += offset
    return written


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument("--group-log-only", action="store_true",
                        help="skip the journal report; measure only the group-log decode")
    parser.add_argument("--only", default="journal,cluster,group-log,live,follow",
                        help="the sections to run, comma-separated")
    parser.add_argument("--cluster-runs", type=int, default=2,
                        help="cluster section: pairs of runs (local[2], then the cluster)")
    args = parser.parse_args()
    sections = {"group-log"} if args.group_log_only else set(args.only.split(","))
    work = args.keep or Path(tempfile.mkdtemp(prefix="forensics-bench-"))
    results: dict[str, object] = {}
    try:
        journal_data = work / "journal-data"
        if sections & {"journal", "cluster"}:
            results["journal_events"] = write_journal(journal_data / "events", args.events)
        if "journal" in sections:
            # A first run on an empty directory, untimed: where the driver JVM's class-data
            # archive does not exist yet (a new machine or install), this run writes it, as
            # any user's first run does; the timed run is a later one.
            (work / "empty").mkdir()
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "forensics", "--data", str(work / "empty"),
                            "--out", str(work / "empty-out"), "--timelines", "0"], check=True)
            results["first_run_empty_wall_s"] = round(time.perf_counter() - started, 1)
            started = time.perf_counter()
            job = subprocess.Popen([sys.executable, "-m", "forensics", "--data",
                                    str(journal_data), "--out", str(work / "journal-out"),
                                    "--timelines", "5"])
            split = _watch_cpu(job)
            if job.wait() != 0:
                raise SystemExit(f"the forensics job failed with status {job.returncode}")
            results["report_wall_s"] = round(time.perf_counter() - started, 1)
            results["report_cpu_s"] = split
        if "cluster" in sections:
            results.update(_report_on_cluster(journal_data, work, args.cluster_runs))
        if "live" in sections:
            results.update(_live_source(work, args.records))
        if "follow" in sections:
            results.update(_follow_latency(work))
        if "group-log" not in sections:
            print(json.dumps(results, indent=1))
            return 0

        log_data = work / "log-data"
        records = write_group_log(log_data, args.records)
        decode_rate, decode_cpu_rate = _decode_one_core(log_data)
        arrow_rate = _arrow_batches_one_core(log_data)
        spark_rate, spark_cpu_rate = _decode_in_spark(log_data, records)
        results.update({
            "group_log_records": records,
            "decode_records_per_s_one_core": round(decode_rate),
            "decode_records_per_cpu_s": round(decode_cpu_rate),
            "decode_c_loop": _c_loop(),
            "arrow_batches_records_per_cpu_s": round(arrow_rate),
            "spark_decode_records_per_s_local2": round(spark_rate),
            "spark_decode_records_per_s_per_core": round(spark_rate / 2),
            "spark_decode_records_per_cpu_s": round(spark_cpu_rate),
        })
        print(json.dumps(results, indent=1))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _report_on_cluster(journal_data: Path, work: Path, runs: int = 2) -> dict[str, object]:
    """The journal report submitted to a standalone master with two one-core workers, as
    README shows it; wall time from spark-submit's start to its exit, and where it goes
    (from Spark's event log: when the application started, when its executors registered,
    when its jobs ran), and its CPU: the spark-submit process tree's (the driver's JVM and
    Python, the timeline renderers) and the workers' (their executors and the executors'
    Python workers, which each worker reaps), less sensitive to the machine's other load than
    wall time. Each cluster run follows a `local[2]` run of the same command, so that each
    ratio compares runs made under the same load."""
    from forensics.package import build
    from tests.forensics.spark_cluster import StandaloneCluster

    zip_path = build(work / "dist" / "forensics.zip")
    cluster = StandaloneCluster(work / "spark-cluster").start()
    walls: list[float] = []
    local_walls: list[float] = []
    phases: list[dict[str, float]] = []
    loads: list[float] = []
    submit_cpu: list[float] = []
    workers_cpu: list[float] = []
    workers = [proc.pid for proc in cluster.procs[1:]]
    try:
        for run in range(runs):
            loads.append(round(os.getloadavg()[0], 1))
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "forensics", "--data", str(journal_data),
                            "--out", str(work / f"local-out-{run}"), "--timelines", "5"],
                           check=True, stdout=subprocess.DEVNULL)
            local_walls.append(round(time.perf_counter() - started, 1))
            events = work / f"cluster-events-{run}"
            events.mkdir()
            before = _children_cpu_s(), _workers_cpu_s(workers)
            started = time.perf_counter()
            started_ms = time.time() * 1000
            done = cluster.submit(["--data", str(journal_data),
                                   "--out", str(work / "cluster-out"), "--timelines", "5"],
                                  zip_path, conf={"spark.eventLog.enabled": "true",
                                                  "spark.eventLog.compress": "false",
                                                  "spark.eventLog.dir": str(events)})
            walls.append(round(time.perf_counter() - started, 1))
            time.sleep(1.0)  # the workers reap their executors once the application is over
            submit_cpu.append(round(_children_cpu_s() - before[0], 1))
            workers_cpu.append(round(_workers_cpu_s(workers) - before[1], 1))
            if done.returncode != 0:
                raise SystemExit(f"spark-submit failed: {done.stderr[-3000:]}")
            phases.append(_phases(events, started_ms))
    finally:
        cluster.stop()
    return {"cluster_report_wall_s": walls, "cluster": "standalone, 2 workers x 1 core",
            "cluster_local_wall_s": local_walls,
            "cluster_over_local": [round(c / n, 2) for c, n in zip(walls, local_walls,
                                                                   strict=True)],
            "cluster_phases_s": phases, "cluster_load_before_pair": loads,
            "cluster_submit_cpu_s": submit_cpu, "cluster_workers_cpu_s": workers_cpu}


def _children_cpu_s() -> float:
    """User + system CPU of this process's reaped children (and theirs)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _workers_cpu_s(workers: list[int]) -> float:
    """The standalone workers' CPU with their reaped children's: the executors they ran."""
    return sum(_stat(Path(f"/proc/{pid}/stat"))[2]
               for pid in workers) / os.sysconf("SC_CLK_TCK")


def _phases(events: Path, submitted_ms: float) -> dict[str, float]:
    """Seconds after spark-submit started: the application's start, each executor's
    registration, the first job's start, the last job's end, the application's end; and the
    jobs' own time (the sum of each job's start to end)."""
    found: dict[str, float] = {}
    jobs: dict[int, float] = {}
    busy = 0.0
    # Spark 4 writes a directory per application, its events in `events_N_...` files.
    for log in sorted(events.rglob("events_*")):
        for line in log.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerApplicationStart":
                found["application_started"] = event["Timestamp"]
            elif kind == "SparkListenerExecutorAdded":
                found[f"executor_{event['Executor ID']}_registered"] = event["Timestamp"]
            elif kind == "SparkListenerJobStart":
                jobs[event["Job ID"]] = event["Submission Time"]
                found.setdefault("first_job_started", event["Submission Time"])
            elif kind == "SparkListenerJobEnd":
                found["last_job_ended"] = event["Completion Time"]
                busy += (event["Completion Time"] - jobs.get(event["Job ID"],
                                                             event["Completion Time"])) / 1000
            elif kind == "SparkListenerApplicationEnd":
                found["application_ended"] = event["Timestamp"]
    phases = {name: round((at - submitted_ms) / 1000, 1) for name, at in found.items()}
    phases["jobs_s"] = round(busy, 1)
    return phases


def _follow_latency(work: Path, interval_s: float = 10.0, samples: int = 3
                    ) -> dict[str, object]:
    """Seconds from a new member's join (its assignment) to the report's `rebalances` table
    showing the rebalance, with `--follow` at its default 10 s interval on the live broker:
    `samples` members join one after another, each at a random moment of the trigger's
    cycle (the worst case is a join just after a micro-batch read the offsets: one interval
    plus one micro-batch)."""
    import pyarrow.parquet as pq

    from tests.broker_process import BrokerProcess
    from tests.forensics.test_live import _Member, _until
    from tests.integration.group_workers import create_topic, produce

    broker = BrokerProcess(work / "follow-broker" / "data").start()
    out = work / "follow-out"
    members: list[Any] = []
    job = None
    latencies: list[float] = []
    rng = random.Random(11)
    try:
        create_topic(broker, "orders", 4)
        produce(broker, "orders", (f"o-{n}" for n in range(40)), 4)
        members.append(_Member(broker.bootstrap, "billing", "first"))
        members[0].start()
        _until(lambda: members[0].committed >= 10, 60, "the first member's commits")
        job = subprocess.Popen(
            [sys.executable, "-m", "forensics", "--bootstrap-server", broker.bootstrap,
             "--out", str(out), "--timelines", "0", "--follow", "--interval", str(interval_s)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert job.stdout is not None
        job.stdout.readline()  # the first micro-batch's report
        # One more micro-batch (new commits) first: the measured ones are warm refreshes, as
        # every refresh after a follower's first minute is.
        produce(broker, "orders", (f"w-{n}" for n in range(8)), 4)
        job.stdout.readline()
        for n in range(samples):
            time.sleep(rng.uniform(0, interval_s))
            known = pq.read_table(out / "rebalances").num_rows
            members.append(_Member(broker.bootstrap, "billing", f"joiner-{n}"))
            members[-1].start()
            newcomer = members[-1]
            _until(lambda m=newcomer: m.assigned, 60, "the new member's assignment")
            joined = time.perf_counter()  # the rebalance's GroupMetadata record is written
            deadline = joined + 20 * interval_s
            while time.perf_counter() < deadline:
                try:
                    if pq.read_table(out / "rebalances").num_rows > known:
                        break
                except OSError:
                    pass  # the directory is being replaced
                time.sleep(0.1)
            latencies.append(round(time.perf_counter() - joined, 1))
    finally:
        if job is not None:
            job.terminate()
            job.wait(60)
        for member in members:
            member.finish()
        broker.stop()
    return {"follow_interval_s": interval_s, "follow_new_rebalance_in_report_s": latencies,
            "follow_worst_s": max(latencies) if latencies else None}


def _live_source(work: Path, records: int) -> dict[str, object]:
    """Records per CPU second of the live reader on one core, and per second of wall and
    of Spark's CPU on local[2], reading `records` commits back from the real broker."""
    from confluent_kafka import Consumer, TopicPartition

    from forensics.datasource import LIVE_FORMAT_NAME, register_live
    from forensics.grouplog import CommitColumns
    from forensics.live import OFFSETS_TOPIC, LiveSource, plan, read_range_chunks
    from forensics.session import get_session
    from tests.broker_process import BrokerProcess
    from tests.integration.group_workers import create_topic

    broker = BrokerProcess(work / "live-broker" / "data").start()
    try:
        create_topic(broker, "orders", 100)
        consumers = [Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"group-{g}",
                               "enable.auto.commit": False}) for g in range(8)]
        committed = 0
        while committed < records:
            for consumer in consumers:
                consumer.commit(offsets=[TopicPartition("orders", p, committed + 1)
                                         for p in range(100)], asynchronous=False)
                committed += 100
        for consumer in consumers:
            consumer.close()
        ranges = plan(broker.bootstrap, OFFSETS_TOPIC, {})
        total = sum(r.records for r in ranges)
        cpu_started = time.process_time()
        read = sum(chunk.rows if isinstance(chunk, CommitColumns) else len(chunk)
                   for r in ranges
                   for chunk in read_range_chunks(broker.bootstrap, OFFSETS_TOPIC, {}, r))
        one_core = read / (time.process_time() - cpu_started)

        spark = get_session("local[2]")
        register_live(spark)
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm_pid = jvm.java.lang.ProcessHandle.current().pid()
        source = LiveSource(broker.bootstrap, OFFSETS_TOPIC, {}, tuple(ranges))
        frame = spark.read.format(LIVE_FORMAT_NAME).options(**source.options()).load()
        frame.select("offset").limit(1).collect()  # start the Python workers
        runs = []
        for _ in range(5):
            cpu_started_s = _process_tree_cpu_s(jvm_pid)
            started = time.perf_counter()
            count = frame.select("offset", "group_id", "commit_timestamp").count()
            elapsed = time.perf_counter() - started
            cpu = _process_tree_cpu_s(jvm_pid) - cpu_started_s
            assert count == total, (count, total)
            runs.append((count / elapsed, count / cpu if cpu > 0 else 0.0))
        best = max(runs)
        spark.stop()
    finally:
        broker.stop()
    return {"live_records": total, "live_read_records_per_cpu_s_one_core": round(one_core),
            "live_spark_records_per_s_local2": round(best[0]),
            "live_spark_records_per_s_per_core": round(best[0] / 2),
            "live_spark_records_per_cpu_s": round(best[1]),
            "live_spark_runs_records_per_s": [round(wall) for wall, _ in runs],
            "live_spark_runs_records_per_cpu_s": [round(cpu) for _, cpu in runs]}


def _decode_one_core(data_dir: Path) -> tuple[float, float]:
    """Records per second of wall time and per second of this process's CPU time (on a
    shared machine the second is the rate of one core)."""
    from forensics.grouplog import decode_segment, find_segments

    started = time.perf_counter()
    cpu_started = time.process_time()
    count = 0
    for path, partition in find_segments(data_dir):
        for _ in decode_segment(path, partition):
            count += 1
    return (count / (time.perf_counter() - started),
            count / (time.process_time() - cpu_started))


def _arrow_batches_one_core(data_dir: Path) -> float:
    """Records per CPU second of the data source's reader alone (decode and Arrow record
    batches, what a Spark task runs in Python), without Spark."""
    from forensics.datasource import ConsumerOffsetsReader

    reader = ConsumerOffsetsReader(str(data_dir))
    cpu_started = time.process_time()
    count = sum(batch.num_rows for partition in reader.partitions()
                for batch in reader.read(partition))
    return count / (time.process_time() - cpu_started)


def _c_loop() -> bool:
    from forensics import grouplog

    return grouplog._speedups is not None


def _decode_in_spark(data_dir: Path, expected: int, runs: int = 3) -> tuple[float, float]:
    """Records per second of wall time (best of `runs`, the Python workers already started),
    and per CPU second of the whole local[2] Spark (the JVM, its Python daemon and workers)
    in that run: on a shared machine the second is the rate of one core."""
    from forensics.datasource import FORMAT_NAME, register
    from forensics.session import get_session

    spark = get_session("local[2]")
    register(spark)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm_pid = jvm.java.lang.ProcessHandle.current().pid()
    frame = spark.read.format(FORMAT_NAME).load(str(data_dir))
    frame.select("offset").limit(1).collect()  # start the Python workers
    best = (0.0, 0.0)
    for _ in range(runs):
        cpu_started = _process_tree_cpu_s(jvm_pid)
        started = time.perf_counter()
        count = frame.select("offset", "group_id", "commit_timestamp").count()
        elapsed = time.perf_counter() - started
        cpu = _process_tree_cpu_s(jvm_pid) - cpu_started
        assert count == expected, (count, expected)
        best = max(best, (count / elapsed, count / cpu if cpu > 0 else 0.0))
    spark.stop()
    return best


def _watch_cpu(job: subprocess.Popen[bytes]) -> dict[str, float]:
    """Where a run's CPU goes, sampled from /proc until `job` exits: the driver JVM's task
    threads, its JIT compiler threads and the rest of it, the Python workers Spark starts
    (its daemon and their workers, children of the JVM), and the other Python processes (the
    command and its timeline renderers). A thread's last sample stands for its total, so the
    figures miss at most the last interval before the JVM exits."""
    tick = os.sysconf("SC_CLK_TCK")
    jvm_threads: dict[int, tuple[str, int]] = {}
    python = workers = 0.0
    while job.poll() is None:
        processes = _processes()
        jvm = next((pid for pid, (_, name, _) in processes.items()
                    if name == "java" and _in_tree(pid, job.pid, processes)), None)
        if jvm is not None:
            for task in Path(f"/proc/{jvm}/task").iterdir():
                try:
                    _, name, ticks = _stat(task / "stat", children=False)
                except (OSError, ValueError):
                    continue
                jvm_threads[int(task.name)] = (name, ticks)
            jvm_tree = _process_tree_cpu_s(jvm, processes)
            python = _process_tree_cpu_s(job.pid, processes) - jvm_tree
            try:
                own = _stat(Path(f"/proc/{jvm}/stat"), children=False)[2] / tick
                workers = jvm_tree - own
            except (OSError, ValueError):
                pass
        time.sleep(0.5)
    split = {"jvm_tasks": 0.0, "jvm_jit": 0.0, "jvm_other": 0.0}
    for name, ticks in jvm_threads.values():
        kind = ("jvm_jit" if "CompilerThre" in name
                else "jvm_tasks" if name.startswith("Executor task") else "jvm_other")
        split[kind] += ticks / tick
    split["python_workers"] = workers
    split["python"] = python
    return {k: round(v, 1) for k, v in split.items()}


def _stat(path: Path, children: bool = True) -> tuple[int, str, int]:
    """Parent pid, name, and user + system CPU ticks (with reaped children's unless
    `children` is false) of a /proc/PID/stat or /proc/PID/task/TID/stat file. A thread's
    file carries its process's reaped children too: read threads with `children` false."""
    stat = path.read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    last = 15 if children else 13  # utime stime [cutime cstime]
    return int(fields[1]), name, sum(int(x) for x in fields[11:last])


def _processes() -> dict[int, tuple[int, str, int]]:
    """Every live process: pid -> `_stat`."""
    found: dict[int, tuple[int, str, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found[int(entry)] = _stat(Path(f"/proc/{entry}/stat"))
            except (OSError, ValueError):
                continue
    return found


def _in_tree(pid: int, root: int, processes: dict[int, tuple[int, str, int]]) -> bool:
    while pid > 1 and pid != root:
        pid = processes[pid][0] if pid in processes else 0
    return pid == root


def _process_tree_cpu_s(root: int,
                        processes: dict[int, tuple[int, str, int]] | None = None) -> float:
    """User + system CPU seconds of `root` and its live descendants, including the children
    they have reaped (Linux /proc)."""
    processes = _processes() if processes is None else processes
    ticks = sum(cpu for pid, (_, _, cpu) in processes.items() if _in_tree(pid, root, processes))
    return ticks / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    raise SystemExit(main())
