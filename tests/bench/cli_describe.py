"""`rebalanced groups describe` on a group with 1,000 partitions: wall time, end to end.

    python -m tests.bench.cli_describe [--partitions 1000] [--repeats 5]

Starts a broker, creates a topic with that many partitions, produces one record to each, lets a
consumer join (so every partition has an owner) and commit every partition, then runs the
command as an operator would (a new process each time) and reports the median and the worst.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.cli_describe")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rebalanced-bench-") as workdir:
        broker = BrokerProcess(Path(workdir) / "data").start()
        try:
            bootstrap = broker.bootstrap
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("wide", args.partitions, 1)])["wide"].result(60)
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
            for p in range(args.partitions):
                producer.produce("wide", b"v", partition=p)
            producer.flush(60)
            member = Consumer({"bootstrap.servers": bootstrap, "group.id": "wide-group",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False})
            member.subscribe(["wide"])
            deadline = time.monotonic() + 60
            while len(member.assignment()) < args.partitions and time.monotonic() < deadline:
                member.poll(0.2)
            member.commit(offsets=[TopicPartition("wide", p, 0) for p in range(args.partitions)],
                          asynchronous=False)
            timings = []
            command = str(Path(sys.executable).with_name("rebalanced"))  # as operators run it
            for _ in range(args.repeats):
                started = time.monotonic()
                done = subprocess.run(
                    [command, "groups", "describe", "wide-group", "--bootstrap-server",
                     bootstrap], capture_output=True, text=True,
                    timeout=60, cwd=REPO)
                timings.append(time.monotonic() - started)
                rows = len(done.stdout.splitlines()) - 1
                assert done.returncode == 0 and rows == args.partitions, (rows, done.stderr)
                member.poll(0.1)  # keep the member alive between runs
            member.close()
        finally:
            broker.stop()
    print(f"groups describe, {args.partitions} partitions, {args.repeats} runs: median "
          f"{statistics.median(timings):.3f} s, worst {max(timings):.3f} s "
          f"(a new process each run, Python start-up included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
