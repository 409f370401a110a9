"""Soak: group churn, commits, producers and fetchers against one broker for a bounded time.

    python -m tests.bench.soak --minutes 10          # what `make soak` runs
    python -m tests.bench.soak --minutes 2 --sample-seconds 15

For `--minutes`: a producer writes to a 6-partition topic; consumers of the three stock client
libraries (each in its own process) join one group, consume and commit, and every few seconds
one more joins, one leaves gracefully, or one is SIGKILLed (its session then expires); a
committer commits explicit offsets for another group and remembers every commit the broker
acknowledged. The broker's RSS and open file descriptors are sampled every `--sample-seconds`.
At the end the broker is SIGKILLed and restarted, and every acknowledged commit must be there.

Reports the samples and: RSS growth after the warm-up (the first sample after the first
`--warmup-seconds`), file-descriptor growth, membership churn done, commits acknowledged and
lost. Exits non-zero on a lost commit, a dead broker, or RSS growth above `--max-rss-growth`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.bench.live_fuzz import Producer, rss_mb
from tests.broker_process import BrokerProcess
from tests.integration.group_workers import CLIENTS, ConsumerWorker, create_topic, worker_pool

TOPIC = "soak"
PARTITIONS = 6
GROUP = "soak-consumers"
COMMIT_GROUP = "soak-commits"
MAX_MEMBERS = 4


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Committer(threading.Thread):
    """Commits explicit, increasing offsets; `acked` holds the last acknowledged per partition."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.acked: dict[int, int] = {}
        self.failed = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": COMMIT_GROUP,
                             "enable.auto.commit": False})
        offset = 0
        while not self.stopping.is_set():
            offset += 1
            partition = offset % PARTITIONS
            try:
                consumer.commit(offsets=[TopicPartition(TOPIC, partition, offset)],
                                asynchronous=False)
            except KafkaException:
                self.failed += 1
                continue
            self.acked[partition] = offset
            time.sleep(0.005)
        consumer.close()


def committed(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        COMMIT_GROUP, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    deadline = time.monotonic() + 60
    while True:
        try:
            result = admin.list_consumer_group_offsets([request])[COMMIT_GROUP].result(30)
            return {tp.partition: tp.offset for tp in result.topic_partitions}
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run(minutes: float, sample_seconds: float, warmup_seconds: float, seed: int,
        work_dir: Path) -> dict[str, Any]:
    rng = random.Random(seed)
    broker = BrokerProcess(work_dir / "data")
    broker.start(timeout=30)
    assert broker.proc is not None
    samples: list[dict[str, float]] = []
    churn = {"joined": 0, "left": 0, "killed": 0, "commits_by_members": 0}
    report: dict[str, Any] = {}
    try:
        create_topic(broker, TOPIC, PARTITIONS)
        producer = Producer(broker.bootstrap, TOPIC, PARTITIONS, pause_s=0.01)
        committer = Committer(broker.bootstrap)
        producer.start()
        committer.start()
        started = time.monotonic()
        next_sample = started
        with worker_pool(broker, work_dir) as spawn:
            members: list[ConsumerWorker] = []
            serial = 0
            while time.monotonic() - started < minutes * 60:
                if broker.proc.poll() is not None:
                    raise RuntimeError("the broker died")
                now = time.monotonic()
                if now >= next_sample:
                    samples.append({"t_s": round(now - started), "rss_mb": rss_mb(broker.proc.pid),
                                    "fds": open_fds(broker.proc.pid)})
                    next_sample += sample_seconds
                members = [m for m in members if not m.stopped]
                action = rng.random()
                if len(members) < 2 or (action < 0.4 and len(members) < MAX_MEMBERS):
                    client = rng.choice(CLIENTS)
                    serial += 1
                    members.append(spawn(client, TOPIC, GROUP, f"soak-{client}-{serial}"))
                    churn["joined"] += 1
                elif action < 0.6:
                    member = rng.choice(members)
                    member.send("commit")
                    churn["commits_by_members"] += 1
                elif action < 0.8:
                    member = rng.choice(members)
                    try:
                        member.close(timeout=60)
                        churn["left"] += 1
                    except AssertionError:
                        member.kill()
                        churn["killed"] += 1
                else:
                    rng.choice(members).kill()
                    churn["killed"] += 1
                time.sleep(rng.uniform(2, 6))
            producer.stopping.set()
            committer.stopping.set()
            producer.join(30)
            committer.join(30)
        samples.append({"t_s": round(time.monotonic() - started),
                        "rss_mb": rss_mb(broker.proc.pid), "fds": open_fds(broker.proc.pid)})
        acked = dict(committer.acked)
        # A crash never loses an acknowledged commit.
        broker.kill()
        broker.start(timeout=60)
        found = committed(broker.bootstrap)
        lost = {p: (o, found.get(p)) for p, o in acked.items() if found.get(p) != o}
        after_warmup = [s for s in samples if s["t_s"] >= warmup_seconds] or samples
        base = after_warmup[0]
        report = {
            "minutes": minutes,
            "samples": samples,
            "rss_growth_after_warmup_pct": round(
                (max(s["rss_mb"] for s in after_warmup) - base["rss_mb"]) / base["rss_mb"] * 100,
                1),
            "rss_last_vs_warmup_pct": round(
                (samples[-1]["rss_mb"] - base["rss_mb"]) / base["rss_mb"] * 100, 1),
            "fds_first_after_warmup": base["fds"],
            "fds_last": samples[-1]["fds"],
            "churn": churn,
            "records_produced": producer.sent,
            "commits_acknowledged_last": acked,
            "commit_failures_retried": committer.failed,
            "lost_commits": lost,
            "tracebacks_in_broker_log": broker.log_text().count("Traceback"),
        }
    finally:
        broker.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.soak")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sample-seconds", type=float, default=60.0)
    parser.add_argument("--warmup-seconds", type=float, default=60.0)
    parser.add_argument("--max-rss-growth", type=float, default=5.0, help="percent")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        report = run(args.minutes, args.sample_seconds, args.warmup_seconds, args.seed,
                     Path(tmp))
    print(json.dumps(report, indent=2))
    ok = (not report["lost_commits"]
          and report["rss_last_vs_warmup_pct"] <= args.max_rss_growth)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
