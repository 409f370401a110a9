"""ACLs on the transactional APIs, as Kafka's KafkaApis checks them, on a real broker with the
standard authorizer: each request sent over raw frames by an authenticated principal (SASL
PLAIN), so each error code is seen as the broker answers it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.bench import wire
from tests.broker_process import BrokerProcess
from tests.sasl_acl_broker import client_config, login, start_acl_broker

pytestmark = pytest.mark.integration
PROJECT = Path(__file__).resolve().parents[2]

TID = "alice-app"
NONE = 0
TOPIC_DENIED = 29
GROUP_DENIED = 30
TXN_DENIED = 53
NOT_ATTEMPTED = 55


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_acl_broker(tmp_path_factory.mktemp("txnacls") / "data")
    admin = AdminClient(client_config(process, "admin"))
    for future in admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)
                                       for name in ("t-data", "w-data")]).values():
        future.result(15)

    def allow(resource: ResourceType, name: str, operation: AclOperation,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL,
              principal: str = "User:alice") -> AclBinding:
        return AclBinding(resource, name, pattern, principal, "*", operation,
                          AclPermissionType.ALLOW)

    futures = admin.create_acls([
        allow(ResourceType.TRANSACTIONAL_ID, "alice-", AclOperation.WRITE,
              ResourcePatternType.PREFIXED),
        allow(ResourceType.GROUP, "alice-group", AclOperation.READ),
        # "t-" topics: written and read by alice; "w-" topics: only described by anyone.
        allow(ResourceType.TOPIC, "t-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        allow(ResourceType.TOPIC, "t-", AclOperation.READ, ResourcePatternType.PREFIXED),
        allow(ResourceType.TOPIC, "w-", AclOperation.DESCRIBE, ResourcePatternType.PREFIXED,
              "User:*"),
    ])
    for future in futures.values():
        future.result(15)
    try:
        yield process
    finally:
        process.stop()
    assert "Traceback" not in process.log_path.read_text(errors="replace")


@pytest.fixture
async def alice(broker: BrokerProcess) -> AsyncIterator[wire.Connection]:
    conn = await login(broker, "alice")
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def bob(broker: BrokerProcess) -> AsyncIterator[wire.Connection]:
    conn = await login(broker, "bob")
    try:
        yield conn
    finally:
        await conn.close()


def by_partition(response: Any) -> dict[tuple[str, int], int]:
    return {(topic.name, p.partition_index): p.partition_error_code.value
            for topic in response.results_by_topic_v3_and_below
            for p in topic.results_by_partition}


def txn_offsets(response: Any) -> dict[tuple[str, int], int]:
    return {(topic.name, p.partition_index): p.error_code.value
            for topic in response.topics for p in topic.partitions}


async def test_the_transactional_apis_check_kafkas_acls(
        broker: BrokerProcess, alice: wire.Connection, bob: wire.Connection) -> None:
    init = await alice.call(22, 4, {"transactional_id": TID, "transaction_timeout": 60_000,
                                    "producer_id": -1, "producer_epoch": -1})
    assert init.error_code.value == NONE
    producer = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}

    def add(topics: dict[str, list[int]]) -> dict[str, Any]:
        return {"v3_and_below_transactional_id": TID,
                "v3_and_below_producer_id": init.producer_id,
                "v3_and_below_producer_epoch": init.producer_epoch,
                "v3_and_below_topics": [{"name": n, "partitions": p}
                                        for n, p in topics.items()]}

    # AddPartitionsToTxn: the transactional id first, then WRITE on each topic; one refusal
    # fails the whole request.
    assert set(by_partition(await bob.call(24, 3, add({"t-data": [0]}))).values()) == {
        TXN_DENIED}
    mixed = by_partition(await alice.call(24, 3, add(
        {"t-data": [0], "w-data": [0], "__consumer_offsets": [0]})))
    assert mixed == {("t-data", 0): NOT_ATTEMPTED, ("w-data", 0): TOPIC_DENIED,
                     ("__consumer_offsets", 0): TOPIC_DENIED}
    assert by_partition(await alice.call(24, 3, add({"t-data": [0]}))) == {("t-data", 0): NONE}

    # AddOffsetsToTxn: the transactional id, then READ on the group.
    offsets = {"transactional_id": TID, **producer}
    assert (await bob.call(25, 3, {**offsets, "group_id": "alice-group"})
            ).error_code.value == TXN_DENIED
    assert (await alice.call(25, 3, {**offsets, "group_id": "other"})
            ).error_code.value == GROUP_DENIED
    assert (await alice.call(25, 3, {**offsets, "group_id": "alice-group"})
            ).error_code.value == NONE

    # TxnOffsetCommit: the transactional id, the group, then READ on each topic: the
    # refused topic is answered TOPIC_AUTHORIZATION_FAILED, the allowed one committed.
    def commit(group: str) -> dict[str, Any]:
        return {"transactional_id": TID, "group_id": group, **producer, "generation_id": -1,
                "member_id": "", "group_instance_id": None, "topics": [
                    {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                   "committed_leader_epoch": -1,
                                                   "committed_metadata": ""}]}
                    for name in ("t-data", "w-data")]}

    assert set(txn_offsets(await bob.call(28, 3, commit("alice-group"))).values()) == {
        TXN_DENIED}
    assert set(txn_offsets(await alice.call(28, 3, commit("other"))).values()) == {
        GROUP_DENIED}
    assert txn_offsets(await alice.call(28, 3, commit("alice-group"))) == {
        ("t-data", 0): NONE, ("w-data", 0): TOPIC_DENIED}

    # DescribeTransactions: DESCRIBE on each id (implied by WRITE); only the topics the
    # principal may describe.
    hidden = await bob.call(65, 0, {"transactional_ids": [TID]})
    assert [s.error_code.value for s in hidden.transaction_states] == [TXN_DENIED]
    shown = await alice.call(65, 0, {"transactional_ids": ["bob-app", TID]})
    first, second = shown.transaction_states
    assert (first.transactional_id, first.error_code.value) == ("bob-app", TXN_DENIED)
    assert (second.error_code.value, second.transaction_state) == (NONE, "Ongoing")
    assert [t.topic for t in second.topics] == ["t-data"]  # not __consumer_offsets
    admin = await login(broker, "admin")
    try:
        everything = await admin.call(65, 0, {"transactional_ids": [TID]})
        assert sorted(t.topic for t in everything.transaction_states[0].topics) == [
            "__consumer_offsets", "t-data"]
        listed = await admin.call(66, 1, {"state_filters": [], "producer_id_filters": [],
                                          "duration_filter": -1})
        assert TID in {s.transactional_id for s in listed.transaction_states}
    finally:
        await admin.close()

    # ListTransactions: only the ids the principal may describe.
    for conn, sees in ((alice, True), (bob, False)):
        listed = await conn.call(66, 1, {"state_filters": [], "producer_id_filters": [],
                                         "duration_filter": -1})
        assert listed.error_code.value == NONE
        assert (TID in {s.transactional_id for s in listed.transaction_states}) is sees

    # EndTxn: WRITE on the transactional id.
    end = {"transactional_id": TID, **producer, "committed": True}
    assert (await bob.call(26, 3, end)).error_code.value == TXN_DENIED
    assert (await alice.call(26, 3, end)).error_code.value == NONE

    expected = {("TRANSACTIONAL_ID", "WRITE", TID), ("TRANSACTIONAL_ID", "DESCRIBE", TID),
                ("TOPIC", "WRITE", "w-data"), ("TOPIC", "READ", "w-data"),
                ("GROUP", "READ", "other")}
    deadline = time.monotonic() + 10  # the journal is written every 100 ms
    while not expected <= journal_denials(broker) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert expected <= journal_denials(broker)


def journal_denials(broker: BrokerProcess) -> set[tuple[str, str, str]]:
    directory: Path = broker.data_dir / "events"
    found = set()
    for path in [*sorted(directory.glob("events-*.jsonl")),
                 directory / ".events-active.jsonl"]:
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record.get("event_type") == "authorization_denied":
                    found.add((record["resource_type"], record["operation"],
                               record["resource_name"]))
    return found


def run(broker: BrokerProcess, config: Path, *argv: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "coordinator", *argv, "--bootstrap-server",
         f"127.0.0.1:{broker.env['SASL_PORT']}", "--command-config", str(config)],
        capture_output=True, text=True, timeout=60, cwd=PROJECT, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def properties(tmp_path: Path, user: str) -> Path:
    config = tmp_path / f"{user}.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule"
                      f' required username="{user}" password="{user}-secret";\n')
    return config


async def test_the_commands_grant_and_show_a_transactional_id_over_sasl(
        broker: BrokerProcess, alice: wire.Connection, tmp_path: Path) -> None:
    tid = "alice-shared"
    init = await alice.call(22, 4, {"transactional_id": tid, "transaction_timeout": 60_000,
                                    "producer_id": -1, "producer_epoch": -1})
    assert init.error_code.value == NONE
    admin, bob = properties(tmp_path, "admin"), properties(tmp_path, "bob")
    run(broker, admin, "acls", "add", "--allow-principal", "User:bob", "--operation",
        "Describe", "--transactional-id", tid)
    granted = json.loads(run(broker, admin, "acls", "list", "--json", "--transactional-id",
                             tid))
    assert [(r["resource"], r["principal"], r["operation"]) for r in granted] == [
        (f"TRANSACTIONAL_ID:{tid}", "User:bob", "DESCRIBE")]
    shown = json.loads(run(broker, bob, "transactions", "describe", tid, "--json"))
    assert (shown["state"], shown["producer_id"]) == ("Empty", init.producer_id)
    listed = {r["transactional_id"] for r in json.loads(
        run(broker, bob, "transactions", "list", "--json"))}
    assert tid in listed and TID not in listed
