"""Group ACLs on a real broker with the standard authorizer, driven by librdkafka: a consumer
group works for the principal allowed to READ it and gets GROUP_AUTHORIZATION_FAILED
otherwise; DescribeGroups answers each group on its own; the ACLs are made and read with the
admin API by a super user, and refused to others."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.bench import wire
from tests.broker_process import BrokerProcess, free_port
from tests.sasl_acl_broker import client_config, login, start_acl_broker

pytestmark = pytest.mark.integration
PROJECT = Path(__file__).resolve().parents[2]



@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    root = tmp_path_factory.mktemp("acls")
    metrics = free_port()
    broker = start_acl_broker(root / "data", {"metrics.listener": f"127.0.0.1:{metrics}"})
    broker.env["METRICS_PORT"] = str(metrics)
    admin = AdminClient(client_config(broker, "admin"))
    futures = admin.create_acls([
        AclBinding(ResourceType.GROUP, "billing-", ResourcePatternType.PREFIXED, "User:alice",
                   "*", AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "billing-secret", ResourcePatternType.LITERAL,
                   "User:alice", "*", AclOperation.ALL, AclPermissionType.DENY),
        # Every user may read (and so describe) the tests' topics, none may write them;
        # "w-" topics may only be described.
        AclBinding(ResourceType.TOPIC, "t-", ResourcePatternType.PREFIXED, "User:*", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "w-", ResourcePatternType.PREFIXED, "User:*", "*",
                   AclOperation.DESCRIBE, AclPermissionType.ALLOW),
    ])
    for future in futures.values():
        future.result(timeout=15)
    try:
        yield broker
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_path.read_text(errors="replace")


def _consume(broker: BrokerProcess, user: str, group: str, topic: str) -> KafkaError | int:
    """The committed offset after reading one message, or the error the group got."""
    consumer = Consumer({**client_config(broker, user), "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    return error
                continue
            consumer.commit(message=message, asynchronous=False)
            committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
            return int(committed[0].offset)
        raise AssertionError("neither a message nor an authorization error")
    finally:
        consumer.close()


def test_a_group_works_only_for_the_principal_allowed_to_read_it(
        acl_broker: BrokerProcess) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    producer = Producer(client_config(acl_broker, "admin"))
    producer.produce(topic, value=b"x")
    assert producer.flush(15) == 0
    assert _consume(acl_broker, "alice", "billing-1", topic) == 1
    for user, group in (("bob", "billing-1"), ("alice", "other"), ("alice", "billing-secret")):
        outcome = _consume(acl_broker, user, group, topic)
        assert isinstance(outcome, KafkaError), (user, group)
        assert outcome.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    log = acl_broker.log_path.read_text(errors="replace")
    assert "authorization denied" in log and "User:bob" in log


def _journal_events(broker: BrokerProcess, event_type: str) -> list[dict[str, Any]]:
    directory = broker.data_dir / "events"
    found = []
    for path in [*sorted(directory.glob("*.jsonl")), directory / ".events-active.jsonl"]:
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record.get("event_type") == event_type:
                    found.append(record)
    return found


def test_a_denial_is_a_journal_event_and_a_metric(acl_broker: BrokerProcess) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    group = f"denied-{uuid.uuid4().hex[:8]}"
    producer = Producer(client_config(acl_broker, "admin"))
    producer.produce(topic, value=b"x")
    assert producer.flush(15) == 0
    outcome = _consume(acl_broker, "bob", group, topic)
    assert isinstance(outcome, KafkaError)
    deadline = time.monotonic() + 10
    mine: list[dict[str, Any]] = []
    while not mine and time.monotonic() < deadline:
        time.sleep(0.2)  # the journal is written every 100 ms
        mine = [e for e in _journal_events(acl_broker, "authorization_denied")
                if e.get("group_id") == group]
    assert mine, "no authorization_denied event for the group"
    event = mine[0]
    assert event["v"] == 1 and isinstance(event["ts"], int)
    assert event["principal"] == "User:bob"
    assert event["client_host"].lstrip("/") == "127.0.0.1"  # as member events name it
    assert event["resource_type"] == "GROUP" and event["resource_name"] == group
    assert event["operation"] in ("READ", "DESCRIBE")
    assert event["decided_by"]
    assert "bob-secret" not in json.dumps(mine)
    url = f"http://127.0.0.1:{acl_broker.env['METRICS_PORT']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as page:
        text = page.read().decode()
    counted = [line for line in text.splitlines()
               if line.startswith("rebalanced_authorization_denied_total{")
               and 'resource_type="GROUP"' in line]
    assert counted and sum(float(line.rsplit(" ", 1)[1]) for line in counted) >= 1
    assert 'api="CreateAcls"' in text  # the fixture's CreateAcls, by name


def test_topics_need_write_to_produce_and_describe_to_be_seen(
        acl_broker: BrokerProcess) -> None:
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _: Any) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer(client_config(acl_broker, "alice"))
    producer.produce(f"t-{uuid.uuid4().hex[:8]}", value=b"x", on_delivery=delivered)
    producer.flush(15)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # A topic alice may not describe is not auto-created for her, and not listed.
    admin = AdminClient(client_config(acl_broker, "alice"))
    hidden = f"hidden-{uuid.uuid4().hex[:8]}"
    metadata = admin.list_topics(hidden, timeout=10)
    error = metadata.topics[hidden].error
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    super_admin = AdminClient(client_config(acl_broker, "admin"))
    assert hidden not in super_admin.list_topics(timeout=10).topics
    assert all(name.startswith("t-") or name == "__consumer_offsets"
               for name in admin.list_topics(timeout=10).topics)
    # Creating and deleting topics: CREATE (on the cluster or the topic), DELETE.
    existing = f"t-{uuid.uuid4().hex[:8]}"
    super_admin.create_topics([NewTopic(existing, 1)])[existing].result(timeout=15)
    for future in (admin.create_topics([NewTopic(f"t-{uuid.uuid4().hex[:8]}", 1)]),
                   admin.delete_topics([existing])):
        with pytest.raises(KafkaException) as failure:
            next(iter(future.values())).result(timeout=15)
        assert failure.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert existing in super_admin.list_topics(timeout=10).topics


def test_fetching_needs_read_on_the_topic(acl_broker: BrokerProcess) -> None:
    topic = f"w-{uuid.uuid4().hex[:8]}"
    producer = Producer(client_config(acl_broker, "admin"))
    producer.produce(topic, value=b"x")
    assert producer.flush(15) == 0
    consumer = Consumer({**client_config(acl_broker, "alice"), "group.id": "billing-w",
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0)])
    deadline = time.monotonic() + 20
    seen: list[int] = []
    try:
        while time.monotonic() < deadline and not seen:
            message = consumer.poll(0.5)
            if message is not None:
                error = message.error()
                assert error is not None, "alice may only describe w- topics"
                if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    seen.append(error.code())
    finally:
        consumer.close()
    assert seen == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_describe_groups_answers_each_group_on_its_own(acl_broker: BrokerProcess) -> None:
    admin = AdminClient(client_config(acl_broker, "alice"))
    futures = admin.describe_consumer_groups(["billing-1", "other"],
                                             include_authorized_operations=True)
    described = futures["billing-1"].result(timeout=15)
    # alice may READ billing-* (which implies DESCRIBE), not DELETE.
    assert set(described.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    with pytest.raises(KafkaException) as failure:
        futures["other"].result(timeout=15)
    assert failure.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_acls_are_read_by_a_super_user_and_refused_to_others(acl_broker: BrokerProcess) -> None:
    # None matches any name, principal and host (the stubs say str).
    anything: Any = None
    everything = AclBindingFilter(ResourceType.ANY, anything, ResourcePatternType.ANY,
                                  anything, anything, AclOperation.ANY, AclPermissionType.ANY)
    admin = AdminClient(client_config(acl_broker, "admin"))
    found = admin.describe_acls(everything).result(timeout=15)
    assert {(b.name, b.permission_type) for b in found} == {
        ("billing-", AclPermissionType.ALLOW), ("billing-secret", AclPermissionType.DENY),
        ("t-", AclPermissionType.ALLOW), ("w-", AclPermissionType.ALLOW)}
    # librdkafka hands a DescribeAcls error back as an empty list: asked over raw frames.
    assert asyncio.run(_describe_acls_as_bob(acl_broker)) == 31  # CLUSTER_AUTHORIZATION_FAILED


async def _describe_acls_as_bob(broker: BrokerProcess) -> int:
    conn = await login(broker, "bob")
    try:
        described = await conn.call(29, 3, {
            "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1})
        return int(described.error_code.value)
    finally:
        await conn.close()


def _cli(broker: BrokerProcess, config: Path, *argv: str, stdin: str = "") -> str:
    result = subprocess.run(
        [sys.executable, "-m", "coordinator", *argv, "--bootstrap-server",
         f"127.0.0.1:{broker.env['SASL_PORT']}", "--command-config", str(config)],
        input=stdin, capture_output=True, text=True, timeout=60, cwd=PROJECT)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_acls_and_users_commands_over_a_secured_listener(acl_broker: BrokerProcess,
                                                             tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule"
                      ' required username="admin" password="admin-secret";\n')
    _cli(acl_broker, config, "acls", "add", "--allow-principal", "User:dave", "--operation",
         "Read", "--operation", "Describe", "--group", "team-", "--resource-pattern-type",
         "prefixed")
    listed = json.loads(_cli(acl_broker, config, "acls", "list", "--json", "--group",
                             "team-a", "--resource-pattern-type", "match"))
    assert sorted((row["principal"], row["operation"]) for row in listed) == [
        ("User:dave", "DESCRIBE"), ("User:dave", "READ")]
    assert "2 ACL(s) removed" in _cli(
        acl_broker, config, "acls", "remove", "--allow-principal", "User:dave", "--operation",
        "Read", "--operation", "Describe", "--group", "team-", "--resource-pattern-type",
        "prefixed")
    added = _cli(acl_broker, config, "users", "scram", "add", "--user", "erin",
                 "--mechanism", "SCRAM-SHA-256", "--iterations", "4096", stdin="erin-secret\n")
    assert "erin-secret" not in added
    users = json.loads(_cli(acl_broker, config, "users", "scram", "list", "--json"))
    assert {"user": "erin", "mechanism": "SCRAM-SHA-256", "iterations": 4096} in users


def test_the_groups_commands_take_a_commandclient_config(acl_broker: BrokerProcess,
                                                   tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule"
                      ' required username="admin" password="admin-secret";\n')
    topic = f"t-{uuid.uuid4().hex[:8]}"
    producer = Producer(client_config(acl_broker, "admin"))
    producer.produce(topic, value=b"x")
    assert producer.flush(15) == 0
    assert _consume(acl_broker, "admin", "cli-group", topic) == 1
    groups = json.loads(_cli(acl_broker, config, "groups", "list", "--json"))
    assert "cli-group" in json.dumps(groups)
    _cli(acl_broker, config, "groups", "delete-offsets", "cli-group", "--topic", topic)


async def _commit_as_alice(broker: BrokerProcess, group: str, topics: list[str],
                           version: int) -> dict[str, int]:
    conn = await login(broker, "alice")
    try:
        committed = await conn.call(8, version, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time": -1, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                "committed_leader_epoch": -1,
                                                "committed_metadata": None}]}
                for topic in topics]})
        return {t.name: int(t.partitions[0].error_code.value) for t in committed.topics}
    finally:
        await conn.close()


@pytest.mark.parametrize("version", [7, 9])  # v9: the hand-read, hand-answered fast path
def test_a_commit_needs_read_on_each_topic(acl_broker: BrokerProcess, version: int) -> None:
    readable, described = f"t-{uuid.uuid4().hex[:8]}", f"w-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client_config(acl_broker, "admin"))
    for future in admin.create_topics([NewTopic(readable, 1), NewTopic(described, 1)]).values():
        future.result(timeout=15)
    errors = asyncio.run(_commit_as_alice(acl_broker, "billing-c", [readable, described],
                                          version))
    assert errors == {readable: 0, described: 29}  # TOPIC_AUTHORIZATION_FAILED
    # A group alice may not read: every partition is GROUP_AUTHORIZATION_FAILED.
    errors = asyncio.run(_commit_as_alice(acl_broker, "other", [readable, described], version))
    assert errors == {readable: 30, described: 30}


async def _delete_offsets_as(broker: BrokerProcess, user: str, group: str,
                             topics: list[str]) -> tuple[int, dict[str, int]]:
    conn = await wire.Connection.open("127.0.0.1", int(broker.env["SASL_PORT"]))
    try:
        assert (await conn.call(17, 1, {"mechanism": "PLAIN"})).error_code.value == 0
        auth = f"\0{user}\0{user}-secret".encode()
        assert (await conn.call(36, 2, {"auth_bytes": auth})).error_code.value == 0
        reply = await conn.call(47, 0, {"group_id": group, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0}]} for topic in topics]})
        return int(reply.error_code.value), {
            t.name: int(t.partitions[0].error_code.value) for t in reply.topics}
    finally:
        await conn.close()


def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic(
        acl_broker: BrokerProcess) -> None:
    readable, described = f"t-{uuid.uuid4().hex[:8]}", f"w-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client_config(acl_broker, "admin"))
    futures = admin.create_acls([AclBinding(
        ResourceType.GROUP, "cleanup", ResourcePatternType.LITERAL, "User:bob", "*",
        AclOperation.DELETE, AclPermissionType.ALLOW)])
    for future in futures.values():
        future.result(timeout=15)
    try:
        for future in admin.create_topics([NewTopic(readable, 1),
                                           NewTopic(described, 1)]).values():
            future.result(timeout=15)
        top, errors = asyncio.run(_delete_offsets_as(acl_broker, "bob", "cleanup",
                                                     [readable, described]))
        assert errors[described] == 29 and errors.get(readable) != 29
        top, errors = asyncio.run(_delete_offsets_as(acl_broker, "alice", "billing-1",
                                                     [readable]))
        assert top == 30  # alice may read billing-*, not delete it
    finally:
        cleanup = AclBindingFilter(ResourceType.GROUP, "cleanup", ResourcePatternType.LITERAL,
                                   "User:bob", "*", AclOperation.DELETE,
                                   AclPermissionType.ALLOW)
        for future in admin.delete_acls([cleanup]).values():
            future.result(timeout=15)


def test_offset_fetch_shows_only_the_topics_the_principal_may_describe(
        acl_broker: BrokerProcess) -> None:
    readable, hidden = f"t-{uuid.uuid4().hex[:8]}", f"x-{uuid.uuid4().hex[:8]}"
    group = f"billing-{uuid.uuid4().hex[:8]}"
    producer = Producer(client_config(acl_broker, "admin"))
    for topic in (readable, hidden):
        producer.produce(topic, value=b"x")
    assert producer.flush(15) == 0
    committer = Consumer({**client_config(acl_broker, "admin"), "group.id": group,
                          "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(readable, 0, 1), TopicPartition(hidden, 0, 1)],
                         asynchronous=False)
    finally:
        committer.close()

    reader = Consumer({**client_config(acl_broker, "alice"), "group.id": group,
                       "enable.auto.commit": False})
    try:
        answered = reader.committed([TopicPartition(readable, 0), TopicPartition(hidden, 0)],
                                    timeout=10)
    finally:
        reader.close()
    by_topic = {tp.topic: tp for tp in answered}
    assert by_topic[readable].offset == 1 and by_topic[readable].error is None
    hidden_error = by_topic[hidden].error
    assert hidden_error is not None
    assert hidden_error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # All the group's offsets: the hidden topic is left out, as Kafka filters it.
    admin = AdminClient(client_config(acl_broker, "alice"))
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    offsets = listed[group].result(timeout=15)
    assert {tp.topic for tp in offsets.topic_partitions} == {readable}
    super_admin = AdminClient(client_config(acl_broker, "admin"))
    everything = super_admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(timeout=15)
    assert {tp.topic for tp in everything.topic_partitions} == {readable, hidden}


async def _fetch_as_alice(broker: BrokerProcess, group: str, topics: list[str] | None,
                          version: int) -> dict[str, int]:
    conn = await login(broker, "alice")
    try:
        fetched = await conn.call(9, version, {
            "group_id": group, "require_stable": False,
            "topics": None if topics is None else [
                {"name": topic, "partition_indexes": [0]} for topic in topics]})
        return {t.name: int(t.partitions[0].error_code.value) for t in fetched.topics}
    finally:
        await conn.close()


@pytest.mark.parametrize("version", [1, 7])  # the one-group forms, before v8's groups
def test_offset_fetch_of_one_group_checks_each_topic(acl_broker: BrokerProcess,
                                                     version: int) -> None:
    readable, hidden = f"t-{uuid.uuid4().hex[:8]}", f"x-{uuid.uuid4().hex[:8]}"
    group = f"billing-{uuid.uuid4().hex[:8]}"
    producer = Producer(client_config(acl_broker, "admin"))
    for topic in (readable, hidden):
        producer.produce(topic, value=b"x")
    assert producer.flush(15) == 0
    committer = Consumer({**client_config(acl_broker, "admin"), "group.id": group,
                          "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(readable, 0, 1), TopicPartition(hidden, 0, 1)],
                         asynchronous=False)
    finally:
        committer.close()
    named = asyncio.run(_fetch_as_alice(acl_broker, group, [readable, hidden], version))
    assert named == {readable: 0, hidden: int(KafkaError.TOPIC_AUTHORIZATION_FAILED)}
    if version >= 2:  # null topics (all of the group's) from v2
        assert asyncio.run(_fetch_as_alice(acl_broker, group, None, version)) == {readable: 0}


async def _metadata_as_alice(broker: BrokerProcess, topics: list[str]) -> Any:
    conn = await login(broker, "alice")
    try:
        return await conn.call(3, 10, {
            "topics": [{"name": topic, "topic_id": None} for topic in topics],
            "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True})
    finally:
        await conn.close()


def test_metadata_reports_the_authorized_operations(acl_broker: BrokerProcess) -> None:
    readable, described = f"t-{uuid.uuid4().hex[:8]}", f"w-{uuid.uuid4().hex[:8]}"
    hidden = f"x-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client_config(acl_broker, "admin"))
    for future in admin.create_topics([NewTopic(name, 1) for name in (
            readable, described, hidden)]).values():
        future.result(timeout=15)
    answer = asyncio.run(_metadata_as_alice(acl_broker, [readable, described, hidden]))
    by_name = {t.name: t for t in answer.topics}
    read, describe = 1 << int(AclOperation.READ.value), 1 << int(AclOperation.DESCRIBE.value)
    assert by_name[readable].topic_authorized_operations == read | describe
    assert by_name[described].topic_authorized_operations == describe
    assert by_name[hidden].error_code.value == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert answer.cluster_authorized_operations == 0  # no cluster ACL for alice


async def _init_producer_id(broker: BrokerProcess, user: str,
                            transactional_id: str | None) -> int:
    conn = await wire.Connection.open("127.0.0.1", int(broker.env["SASL_PORT"]))
    try:
        assert (await conn.call(17, 1, {"mechanism": "PLAIN"})).error_code.value == 0
        reply = await conn.call(36, 2, {"auth_bytes": f"\0{user}\0{user}-secret".encode()})
        assert reply.error_code.value == 0
        answer = await conn.call(22, 4, {"transactional_id": transactional_id,
                                         "transaction_timeout": 60000, "producer_id": -1,
                                         "producer_epoch": -1})
        return int(answer.error_code.value)
    finally:
        await conn.close()


def test_init_producer_id_needs_write_on_a_topic_or_the_transactional_id(
        acl_broker: BrokerProcess) -> None:
    # alice may read and describe topics but write none: no idempotent producer, as Kafka.
    assert asyncio.run(_init_producer_id(acl_broker, "alice", None)) == int(
        KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    assert asyncio.run(_init_producer_id(acl_broker, "alice", "tx-alice")) == int(
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    admin = AdminClient(client_config(acl_broker, "admin"))
    for future in admin.create_acls([AclBinding(
            ResourceType.TOPIC, "bobs-", ResourcePatternType.PREFIXED, "User:bob", "*",
            AclOperation.WRITE, AclPermissionType.ALLOW)]).values():
        future.result(timeout=15)
    # WRITE on some topic is enough for an idempotent producer (KIP-679).
    assert asyncio.run(_init_producer_id(acl_broker, "bob", None)) == 0
    assert asyncio.run(_init_producer_id(acl_broker, "admin", None)) == 0
    denials = [e for e in _journal_events(acl_broker, "authorization_denied")
               if e["resource_type"] == "TRANSACTIONAL_ID"]
    deadline = time.monotonic() + 10
    while not denials and time.monotonic() < deadline:
        time.sleep(0.2)
        denials = [e for e in _journal_events(acl_broker, "authorization_denied")
                   if e["resource_type"] == "TRANSACTIONAL_ID"]
    assert denials and denials[0]["resource_name"] == "tx-alice"
