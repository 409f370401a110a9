"""`metrics.listener` with a consumer group (KIP-848, confluent-kafka `group.protocol=consumer`):
two members split the partitions, one leaves; /metrics and the page show it over real HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess, free_port
from tests.integration.group_workers import group_events
from tests.integration.test_consumer_groups import CONSUMER_GROUP_SETTINGS
from tests.integration.test_ops_endpoint import _Page, get, samples

pytestmark = pytest.mark.integration

TOPIC = "orders"
GROUP = "fulfilment"


def wait_for(condition: object, members: list[Consumer], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        for member in members:
            member.poll(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def handed_over(tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[BrokerProcess, str]]:
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("ops-consumer") / "data",
                           settings={**CONSUMER_GROUP_SETTINGS,
                                     "metrics.listener": f"127.0.0.1:{metrics_port}"}).start()
    members: list[Consumer] = []
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 4, 1)])[TOPIC].result(30)
        for i in range(2):
            member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                               "group.protocol": "consumer", "client.id": f"picker-{i}",
                               "enable.auto.commit": False})
            member.subscribe([TOPIC])
            members.append(member)
            wait_for(lambda n=i + 1: sum(len(m.assignment()) for m in members) == 4
                     and all(m.assignment() for m in members[:n]), members,
                     f"{i + 1} member(s) to split the partitions")
        members[0].close()  # leaves (member epoch -1): the survivor takes everything
        survivor = members[1:]
        wait_for(lambda: len(survivor[0].assignment()) == 4, survivor,
                 "the survivor to own every partition")
        members = survivor
        yield broker, f"http://127.0.0.1:{metrics_port}"
    finally:
        for member in members:
            member.close()
        broker.stop()


def test_metrics_count_the_consumer_group_and_its_rebalances(
        handed_over: tuple[BrokerProcess, str]) -> None:
    values = samples(get(handed_over[1] + "/metrics")[2])
    k = "kafka_server_group_coordinator_metrics_"
    assert values[(k + "group_count", (("protocol", "consumer"),))] == 1
    assert values[(k + "group_count", (("protocol", "classic"),))] == 0
    assert values[(k + "consumer_group_count", (("state", "stable"),))] == 1
    assert values[(k + "consumer_group_rebalance_total", ())] >= 3
    consumer = ("protocol", "consumer")
    assert values[("rebalanced_rebalances_total", (("cause", "member_join"), consumer))] >= 2
    assert values[("rebalanced_rebalances_total", (("cause", "member_leave"), consumer))] == 1
    assert values[("rebalanced_members_removed_total", (("cause", "leave"), consumer))] == 1
    total = (("group", GROUP), ("phase", "total"))
    assert values[("rebalanced_rebalance_duration_seconds_count", total)] >= 2
    assert values[("rebalanced_seconds_since_last_rebalance", (("group", GROUP),))] >= 0
    assert sum(v for (name, labels), v in values.items()
               if name == "rebalanced_requests_total"
               and ("api", "ConsumerGroupHeartbeat") in labels) >= 3


def test_the_page_shows_the_consumer_group_and_why_it_last_rebalanced(
        handed_over: tuple[BrokerProcess, str]) -> None:
    status, _, body = get(handed_over[1] + "/")
    assert status == 200
    page = _Page()
    page.feed(body)
    text = page.sections[GROUP]
    assert "Stable" in text
    assert any("consumer group (KIP-848)" in t for t in text)
    assert "picker-1" in text  # the survivor, in the members table
    assert f"{TOPIC}-0, {TOPIC}-1, {TOPIC}-2, {TOPIC}-3" in text  # everything is its now
    assert "member_leave" in text  # the cause of the last rebalance
    assert any("member removed (leave)" in t for t in text)  # and the reason
    assert any(t.startswith("picker-0 on ") for t in text)  # the member that left, and host


def test_the_journal_names_the_group_type_of_shared_events(
        handed_over: tuple[BrokerProcess, str]) -> None:
    broker, _ = handed_over
    deadline = time.monotonic() + 30
    removed: list[dict[str, object]] = []
    while not removed and time.monotonic() < deadline:
        removed = group_events(broker, GROUP, "member_removed")
        if not removed:
            time.sleep(0.1)  # the journal is flushed every 100 ms
    assert [(e["group_type"], e["cause"]) for e in removed] == [("consumer", "leave")]
    added = group_events(broker, GROUP, "member_added")
    assert len(added) == 2 and all(e["group_type"] == "consumer" for e in added)
