"""Operators see transactions, against a real broker process: a confluent-kafka transactional
producer's transactions as kafka-python's admin client (DescribeTransactions,
ListTransactions) and `rebalanced transactions` show them, the journal's transaction events and
`/metrics`; a TxnOffsetCommit to a new group makes the group exist at once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.errors import TransactionalIdNotFoundError

from tests.broker_process import BrokerProcess, free_port

pytestmark = pytest.mark.integration
PROJECT = Path(__file__).resolve().parents[2]
TOPIC = "t"
TID = "ops-app"
GROUP = "ops-group"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    metrics = free_port()
    process = BrokerProcess(tmp_path_factory.mktemp("txnops") / "data",
                            settings={"metrics.listener": f"127.0.0.1:{metrics}",
                                      "metrics.cache.ms": "0"})
    process.env["METRICS_PORT"] = str(metrics)
    process.start()
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, num_partitions=2,
                                                replication_factor=1)]).values():
        future.result(10)
    try:
        yield process
    finally:
        process.stop()
    assert "Traceback" not in process.log_path.read_text(errors="replace")


def producer(broker: BrokerProcess, tid: str = TID) -> Producer:
    made = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                     "transaction.timeout.ms": 30_000})
    made.init_transactions(15)
    return made


def admin(broker: BrokerProcess) -> Any:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)


def cli(broker: BrokerProcess, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator", "transactions", *argv,
         "--bootstrap-server", broker.bootstrap], cwd=PROJECT, capture_output=True,
        text=True, timeout=60, check=False)


def journal(broker: BrokerProcess, prefix: str = "transaction_") -> list[dict[str, Any]]:
    directory = broker.data_dir / "events"
    found = []
    for path in [*sorted(directory.glob("events-*.jsonl")),
                 directory / ".events-active.jsonl"]:
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if str(record.get("event_type", "")).startswith(prefix):
                    found.append(record)
    return found


def wait_for_journal(broker: BrokerProcess, count: int, tid: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        events = [e for e in journal(broker) if e["transactional_id"] == tid]
        if len(events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.1)


def test_describe_list_and_the_cli_follow_a_transaction(broker: BrokerProcess) -> None:
    app = producer(broker)
    client = admin(broker)
    try:
        empty = client.describe_transactions([TID])[TID]
        assert (empty.state.value, empty.transaction_start_time_ms,
                empty.topic_partitions) == ("Empty", -1, set())
        assert empty.transaction_timeout_ms == 30_000

        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP})
        app.begin_transaction()
        before = int(time.time() * 1000)
        app.produce(TOPIC, value=b"a", partition=0)
        app.produce(TOPIC, value=b"b", partition=1)
        app.flush(15)
        app.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)],
                                        consumer.consumer_group_metadata(), 15)
        consumer.close()

        # The group the TxnOffsetCommit named exists at once, Empty, while its offset pends.
        groups_admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        listed = groups_admin.list_consumer_groups(request_timeout=10).result(15)
        assert GROUP in {g.group_id for g in listed.valid}

        ongoing = client.describe_transactions([TID])[TID]
        assert ongoing.state.value == "Ongoing"
        assert before - 5_000 <= ongoing.transaction_start_time_ms <= int(time.time() * 1000)
        partitions = {(tp.topic, tp.partition) for tp in ongoing.topic_partitions}
        assert {(TOPIC, 0), (TOPIC, 1)} < partitions
        assert any(topic == "__consumer_offsets" for topic, _ in partitions)

        def listed_ids(**filters: Any) -> set[str]:
            return {t.transactional_id for listings in client.list_transactions(
                **filters).values() for t in listings}

        assert TID in listed_ids(state_filters=["Ongoing"])
        assert TID not in listed_ids(state_filters=["CompleteCommit", "Empty"])
        assert TID in listed_ids(producer_id_filters=[ongoing.producer_id])
        assert TID not in listed_ids(producer_id_filters=[ongoing.producer_id + 1])
        assert TID not in listed_ids(duration_filter_ms=3_600_000)
        assert TID in listed_ids(duration_filter_ms=0, state_filters=["Ongoing"])

        shown = cli(broker, "describe", TID, "--json")
        assert shown.returncode == 0, shown.stderr
        document = json.loads(shown.stdout)
        assert document["state"] == "Ongoing" and document["producer_id"] == ongoing.producer_id
        assert f"{TOPIC}-0" in document["topic_partitions"]
        assert document["transaction_duration_ms"] >= 0
        table = cli(broker, "list", "--state", "Ongoing")
        assert table.returncode == 0, table.stderr
        assert table.stdout.splitlines()[0].split() == [
            "TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        assert any(line.split()[0] == TID and line.split()[-1] == "Ongoing"
                   for line in table.stdout.splitlines()[1:])

        app.commit_transaction(15)
        done = client.describe_transactions([TID])[TID]
        assert (done.state.value, done.topic_partitions) == ("CompleteCommit", set())
        assert TID in listed_ids(state_filters=["CompleteCommit"])

        app.begin_transaction()
        app.produce(TOPIC, value=b"c", partition=0)
        app.flush(15)
        app.abort_transaction(15)

        with pytest.raises(TransactionalIdNotFoundError):
            client.describe_transactions(["nobody"])
    finally:
        client.close()

    events = wait_for_journal(broker, 4, TID)
    assert [e["event_type"] for e in events] == [
        "transaction_begun", "transaction_committed", "transaction_begun",
        "transaction_aborted"]
    begun, committed, _, aborted = events
    assert begun["producer_id"] == committed["producer_id"] == ongoing.producer_id
    assert begun["transaction_timeout_ms"] == 30_000
    assert committed["group_ids"] == [GROUP] and committed["reason"] == "client"
    assert committed["partition_count"] == 3 and committed["duration_ms"] >= 0
    assert aborted["reason"] == "client" and aborted["group_ids"] == []


def test_a_new_producer_instance_fences_the_open_transaction(broker: BrokerProcess) -> None:
    old = producer(broker, "fenced-app")
    old.begin_transaction()
    old.produce(TOPIC, value=b"x", partition=0)
    old.flush(15)
    producer(broker, "fenced-app")  # the same transactional id, a new instance
    events = wait_for_journal(broker, 2, "fenced-app")
    assert [(e["event_type"], e.get("reason")) for e in events] == [
        ("transaction_begun", None), ("transaction_aborted", "fenced")]


def test_metrics_count_transactions_by_outcome_and_reason(broker: BrokerProcess) -> None:
    app = producer(broker, "metrics-app")
    app.begin_transaction()
    app.produce(TOPIC, value=b"m", partition=1)
    app.flush(15)

    def scrape() -> dict[str, float]:
        url = f"http://127.0.0.1:{broker.env['METRICS_PORT']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("rebalanced_transactions_")}

    opened = scrape()
    assert opened["rebalanced_transactions_open"] >= 1
    app.commit_transaction(15)
    after = scrape()
    assert after["rebalanced_transactions_open"] == opened["rebalanced_transactions_open"] - 1
    committed = 'rebalanced_transactions_completed_total{outcome="committed"}'
    assert after[committed] == opened[committed] + 1
    assert 'rebalanced_transactions_completed_total{outcome="aborted"}' in after


def test_the_cli_reports_mistakes_and_failures_in_one_line(broker: BrokerProcess) -> None:
    unknown = cli(broker, "describe", "nobody")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.count("\n") == 1
    assert unknown.stderr.startswith("rebalanced transactions: error: describing transaction")
    assert "TransactionalIdNotFound" in unknown.stderr
    bad_state = cli(broker, "list", "--state", "Sleeping")
    assert bad_state.returncode == 2 and bad_state.stderr.count("\n") == 1
    bad_duration = cli(broker, "list", "--duration-ms", "-5")
    assert bad_duration.returncode == 2 and bad_duration.stderr.count("\n") == 1
    unreachable = subprocess.run(
        [sys.executable, "-m", "coordinator", "transactions", "list", "--bootstrap-server",
         f"127.0.0.1:{free_port()}", "--timeout", "1"], cwd=PROJECT, capture_output=True,
        text=True, timeout=60, check=False)
    assert unreachable.returncode == 1 and unreachable.stderr.count("\n") == 1
    assert "cannot reach a broker" in unreachable.stderr


def test_forensics_finds_a_rebalance_during_an_open_transaction(broker: BrokerProcess) -> None:
    """The journal a real broker wrote, through the forensics job's reader and rules (no
    Spark): a member joins while a transaction that commits offsets to the group is open."""
    from forensics import journal_pass
    from forensics.journal_chunks import journal_files, read_file

    group = "eos-group"

    def member() -> Consumer:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 10_000})
        consumer.subscribe([TOPIC])
        return consumer

    def poll_until(consumers: list[Consumer], done: Any) -> None:
        deadline = time.monotonic() + 30
        while not done():
            assert time.monotonic() < deadline, "the group did not settle"
            for consumer in consumers:
                consumer.poll(0.1)

    first = member()
    poll_until([first], lambda: len(first.assignment()) == 2)
    app = producer(broker, "eos-app")
    app.begin_transaction()
    app.produce(TOPIC, value=b"in flight", partition=0)
    app.flush(15)
    second = member()  # joins while the transaction is open: a rebalance
    poll_until([first, second], lambda: len(first.assignment()) == 1
               and len(second.assignment()) == 1)
    # Explicit offsets: librdkafka leaves out offsets that are not valid yet (a position not
    # fetched), and with none left it does not add the group to the transaction at all.
    offsets = [TopicPartition(tp.topic, tp.partition, 1) for tp in first.assignment()]
    app.send_offsets_to_transaction(offsets, first.consumer_group_metadata(), 15)
    app.commit_transaction(15)
    second.close()
    first.close()
    wait_for_journal(broker, 2, "eos-app")

    lines: list[tuple[int, str, int, str]] = []
    for path in journal_files(broker.data_dir / "events"):
        for row in read_file(path).to_pylist():
            if row["group_id"] == group:
                lines += [(e["ts"], e["file"], e["row"], e["line"]) for e in row["events"]]
    events = [json.loads(text) for *_, text in sorted(lines)]
    assert any(e["event_type"] == "transaction_committed" for e in events)
    rebalances = journal_pass.analyse_group(group, events, []).tables["rebalances"]
    during = [r for r in rebalances if r["transactions_open"]]
    assert during, rebalances
    assert all(r["transactional_ids"] == ["eos-app"] for r in during)
    assert any(r["cause"] == "member_join" for r in during)
