"""`rebalanced groups ...` against the real broker with real confluent-kafka consumers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOPIC = "orders"
PARTITIONS = 3
PER_PARTITION = 10


def groups_cli(broker: BrokerProcess | None, *args: str, bootstrap: str | None = None
               ) -> subprocess.CompletedProcess[str]:
    server = bootstrap or (broker.bootstrap if broker else "")
    return subprocess.run(
        [sys.executable, "-m", "coordinator", "groups", *args, "--bootstrap-server", server],
        capture_output=True, text=True, timeout=60, cwd=REPO)


def cli_json(broker: BrokerProcess, *args: str) -> Any:
    done = groups_cli(broker, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rebalanced groups: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("cli") / "data"
    broker = BrokerProcess(data).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(PARTITIONS * PER_PARTITION):
            producer.produce(TOPIC, f"m{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(30) == 0
        yield broker
    finally:
        broker.stop()


def consumer(broker: BrokerProcess, group: str, client_id: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "client.id": client_id, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 500})


def wait_assigned(c: Consumer, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c.poll(0.2)
        if c.assignment():
            return
    raise AssertionError("the consumer was never assigned partitions")


def test_describe_lag_members_and_reset_of_a_stopped_group(live: BrokerProcess) -> None:
    group = "billing"
    member = consumer(live, group, "billing-app")
    member.subscribe([TOPIC])
    wait_assigned(member)
    # Commit 4, 7 and 10 on the three partitions: lag 6, 3 and 0.
    commits = {0: 4, 1: 7, 2: 10}
    member.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in commits.items()],
                  asynchronous=False)

    described = cli_json(live, "describe", group)
    assert described["state"] == "Stable"
    rows = {r["partition"]: r for r in described["partitions"]}
    assert {p: r["current_offset"] for p, r in rows.items()} == commits
    assert {p: r["log_end_offset"] for p, r in rows.items()} == {0: 10, 1: 10, 2: 10}
    assert {p: r["lag"] for p, r in rows.items()} == {0: 6, 1: 3, 2: 0}
    assert {r["client_id"] for r in rows.values()} == {"billing-app"}
    assert all(r["host"] and r["consumer_id"] for r in rows.values())

    table = groups_cli(live, "describe", group)
    assert table.returncode == 0, table.stderr
    header = table.stdout.splitlines()[0].split()
    assert header == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                      "CONSUMER-ID", "HOST", "CLIENT-ID"]

    members = cli_json(live, "describe", group, "--members")["members"]
    assert [(m["client_id"], m["partitions"]) for m in members] == [("billing-app", 3)]
    state = cli_json(live, "describe", group, "--state")
    assert (state["state"], state["members"], state["assignment_strategy"]) == (
        "Stable", 1, "range")
    assert group in {g["group"] for g in cli_json(live, "list")}

    # Refused while the group has a member; nothing moves.
    refused = groups_cli(live, "reset-offsets", group, "--all-topics", "--to-earliest",
                         "--execute")
    assert "inactive" in one_line_error(refused)

    member.close()  # leaves the group: Empty
    dry = cli_json(live, "reset-offsets", group, "--topic", f"{TOPIC}:0,1", "--shift-by", "-3")
    assert not dry["executed"]
    assert {r["partition"]: r["new_offset"] for r in dry["partitions"]} == {0: 1, 1: 4}
    after_dry = cli_json(live, "describe", group)["partitions"]
    assert {r["partition"]: r["current_offset"] for r in after_dry} == commits

    done = cli_json(live, "reset-offsets", group, "--topic", f"{TOPIC}:0,1", "--shift-by", "-3",
                    "--execute")
    assert done["executed"]
    after = {r["partition"]: r["current_offset"] for r in cli_json(live, "describe",
                                                                     group)["partitions"]}
    assert after == {0: 1, 1: 4, 2: 10}

    # A restarted consumer resumes at the reset offsets.
    restarted = consumer(live, group, "billing-app")
    restarted.subscribe([TOPIC])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(first) < 2 and time.monotonic() < deadline:
        message = restarted.poll(0.5)
        if message is not None and not message.error():
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            first.setdefault(partition, offset)
    restarted.close()
    assert first == {0: 1, 1: 4}


def test_reset_to_earliest_and_delete_offsets_and_group(live: BrokerProcess) -> None:
    group = "audit"
    member = consumer(live, group, "audit-app")
    member.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    member.commit(offsets=[TopicPartition(TOPIC, p, 5) for p in range(PARTITIONS)],
                  asynchronous=False)
    member.close()
    reset = cli_json(live, "reset-offsets", group, "--all-topics", "--to-latest", "--execute")
    assert {r["new_offset"] for r in reset["partitions"]} == {PER_PARTITION}
    deleted = cli_json(live, "delete-offsets", group, "--topic", f"{TOPIC}:2")
    assert deleted["partitions"] == [{"topic": TOPIC, "partition": 2, "status": "Successful"}]
    remaining = cli_json(live, "describe", group)["partitions"]
    assert sorted(r["partition"] for r in remaining) == [0, 1]
    assert cli_json(live, "delete", group) == [{"group": group, "status": "Deleted"}]
    assert "does not exist" in one_line_error(groups_cli(live, "describe", group))


def test_mistakes_are_one_line_and_nonzero(live: BrokerProcess) -> None:
    assert "does not exist" in one_line_error(groups_cli(live, "describe", "no-such-group"))
    started = time.monotonic()
    unreachable = groups_cli(None, "list", "--timeout", "2",
                             bootstrap=f"127.0.0.1:{free_port()}")
    assert "cannot reach" in one_line_error(unreachable)
    assert time.monotonic() - started < 30
    group = "stopped"
    member = consumer(live, group, "stopped-app")
    member.assign([TopicPartition(TOPIC, 0, 0)])
    member.commit(offsets=[TopicPartition(TOPIC, 0, 2)], asynchronous=False)
    member.close()
    assert "to-datetime" in one_line_error(groups_cli(
        live, "reset-offsets", group, "--all-topics", "--to-datetime", "yesterday"))
    assert "by-duration" in one_line_error(groups_cli(
        live, "reset-offsets", group, "--all-topics", "--by-duration", "1h"))
    assert "does not exist" in one_line_error(groups_cli(
        live, "reset-offsets", group, "--topic", "missing-topic", "--to-earliest", "--execute"))
    assert "out of range" in one_line_error(groups_cli(
        live, "reset-offsets", group, "--topic", TOPIC, "--to-offset", "11", "--execute"))
    # Nothing was written by the refused resets (all or nothing).
    rows = cli_json(live, "describe", group)["partitions"]
    assert [(r["partition"], r["current_offset"]) for r in rows] == [(0, 2)]
    assert "invalid --topic" in one_line_error(groups_cli(
        live, "reset-offsets", group, "--topic", f"{TOPIC}:x", "--to-earliest"))
    usage = groups_cli(live, "reset-offsets", group, "--to-earliest")
    assert usage.returncode == 2 and len(usage.stderr.strip().splitlines()) == 1
    # Option mistakes are usage errors (exit 2), found before any broker is asked.
    for args in (("describe", ""), ("delete-offsets", "", "--topic", TOPIC),
                 ("reset-offsets", "", "--topic", TOPIC, "--to-earliest"), ("delete", "g", ""),
                 ("list", "--timeout", "-1"), ("list", "--timeout", "0"),
                 ("reset-offsets", group, "--topic", TOPIC, "--to-offset", "-1")):
        mistake = groups_cli(live, *args)
        assert mistake.returncode == 2, (args, mistake.stderr)
        (line,) = mistake.stderr.strip().splitlines()
        assert line.startswith("rebalanced groups") and ": error: " in line
