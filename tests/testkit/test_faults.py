"""Fault rules on a real broker, driven from Python, HTTP and the CLI, seen by stock clients."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient

from coordinator.testkit import RebalancedBroker
from tests.testkit.clients import PolledConsumer, create_topic


def test_a_delayed_metadata_answer_arrives_that_much_later(
        rebalanced_broker: RebalancedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": rebalanced_broker.bootstrap})
    admin.list_topics(timeout=10)  # connected
    fault = rebalanced_broker.control.add_fault(
        match={"api": "Metadata"}, action={"type": "delay", "ms": 400}, trigger={"type": "once"})
    started = time.monotonic()
    admin.list_topics(timeout=10)
    assert time.monotonic() - started >= 0.4
    assert fault.hits == 1


def test_a_dropped_connection_is_retried_by_the_client(
        rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    fault = control.add_fault(match={"api": "JoinGroup", "group_id": "billing"},
                              action={"type": "drop"}, trigger={"type": "nth", "n": 1})
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders"):
        control.wait_for_group("billing", members=1, timeout=30)
    assert fault.hits == 1  # and the group formed all the same: the client joined again


def test_an_error_answer_on_a_heartbeat_makes_the_member_rejoin(
        rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders"):
        group = control.wait_for_group("billing", members=1, timeout=30)
        observed = control.add_fault(match={"api": "Heartbeat", "group_id": "billing"},
                                     action={"type": "observe"})
        observed.wait(hits=2)
        fault = control.add_fault(
            match={"api": "Heartbeat", "group_id": "billing"},
            action={"type": "error", "error_code": "REBALANCE_IN_PROGRESS"},
            trigger={"type": "once"})
        fault.wait()
        stabilized = control.wait_for_rebalance("billing",
                                                after_generation=group["generation_id"])
        assert stabilized["generation"] == group["generation_id"] + 1


def test_expire_and_rebalance_now(rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders"):
        group = control.wait_for_group("billing", members=1, timeout=30)
        control.rebalance("billing")
        control.wait_for_rebalance("billing", after_generation=group["generation_id"])
        member = control.wait_for_group("billing", members=1)["members"][0]["member_id"]
        control.expire_member("billing", member)
        removed = control.wait_for_member_removed("billing", member_id=member,
                                                  cause="session_expiry")
        assert removed["member_id"] == member
        # The client finds out on its next heartbeat and joins again as a new member.
        rejoined = control.wait_for_group("billing", members=1, timeout=30)
        assert rejoined["members"][0]["member_id"] != member


def _http(broker: RebalancedBroker, method: str, path: str, body: object = None,
          token: str | None = None) -> tuple[int, dict[str, object]]:
    connection = http.client.HTTPConnection("127.0.0.1", broker.control_port, timeout=10)
    try:
        connection.request(method, path, body=None if body is None else json.dumps(body),
                           headers={"Authorization": f"Bearer {token or broker.control_token}"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_bad_rules_are_refused_with_the_field_they_name(
        rebalanced_broker: RebalancedBroker) -> None:
    status, answer = _http(rebalanced_broker, "POST", "/faults",
                           {"match": {"api": "Heartbeat"}, "action": {"type": "explode"}})
    assert status == 400 and answer["field"] == "action.type"
    status, answer = _http(rebalanced_broker, "POST", "/faults",
                           {"match": {"api": "Produce"},
                            "action": {"type": "error", "error_code": 27}})
    assert status == 400 and answer["field"] == "match.api"  # could never be answered
    with pytest.raises(ValueError, match=r"trigger\.n"):
        rebalanced_broker.control.add_fault(action={"type": "drop"},
                                            trigger={"type": "times", "n": 0})
    status, _ = _http(rebalanced_broker, "GET", "/faults", token="wrong")
    assert status == 401
    assert rebalanced_broker.control.faults() == []


def test_the_cli_adds_lists_and_removes_rules(rebalanced_broker: RebalancedBroker) -> None:
    env_args = ["--control", f"http://127.0.0.1:{rebalanced_broker.control_port}",
                "--token", str(rebalanced_broker.control_token)]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "coordinator", "faults", *env_args, *args],
                              capture_output=True, text=True, timeout=30)

    added = cli("add", '{"match": {"api": "Heartbeat"}, "action": {"type": "observe"}}')
    assert added.returncode == 0, added.stderr
    rule_id = json.loads(added.stdout)["id"]
    listed = cli("list")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [rule_id]
    bad = cli("add", '{"action": {"type": "delay", "ms": -1}}')
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "rebalanced faults: action.ms: expected an integer >= 0, got -1"]
    assert cli("remove", str(rule_id)).returncode == 0
    assert cli("list").stdout == ""


def test_without_the_switch_there_is_no_control_endpoint(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with RebalancedBroker(tmp_path / "plain", control=False) as broker:
        assert "test control" not in broker.log_text()
        with pytest.raises(RuntimeError, match="without the control endpoint"):
            broker.control.faults()


@pytest.mark.parametrize(("settings", "problem"), [
    ({"test.control.listener": "127.0.0.1:0"}, "needs test.control.token"),
    ({"test.control.listener": "0.0.0.0:0", "test.control.token": "t"},
     "is not a loopback address"),
])
def test_unsafe_control_settings_stop_the_start(tmp_path, settings, problem) -> None:  # type: ignore[no-untyped-def]
    args = [sys.executable, "-m", "coordinator", "--log.dirs", str(tmp_path),
            "--listeners", "PLAINTEXT://127.0.0.1:0"]
    for key, value in settings.items():
        args += [f"--{key}", value]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert problem in done.stderr


def test_a_held_sync_group_is_answered_once_released(
        rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    held = control.add_fault(match={"api": "SyncGroup", "group_id": "billing"},
                             action={"type": "hold"}, trigger={"type": "once"})
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders"):
        held.wait(hits=1, timeout=30)
        time.sleep(0.3)
        assert control.group("billing")["state"] == "CompletingRebalance"  # type: ignore[index]
        assert held.state()["held"] == 1
        assert held.release() == 1
        control.wait_for_group("billing", members=1, timeout=10)


def test_a_commit_whose_group_log_write_fails_is_retried_by_the_client(
        rebalanced_broker: RebalancedBroker) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    consumer = KafkaConsumer(bootstrap_servers=rebalanced_broker.bootstrap,
                             group_id="billing", enable_auto_commit=False)
    try:
        partition = TopicPartition("orders", 0)
        consumer.commit({partition: OffsetAndMetadata(1, "", -1)})
        commits = control.add_fault(match={"api": "OffsetCommit"}, action={"type": "observe"})
        control.fail_group_log(times=1)
        consumer.commit({partition: OffsetAndMetadata(2, "", -1)})
        # The write failed, the commit was answered with an error, the client sent it again.
        assert commits.matches == 2
        assert consumer.committed(partition) == 2
        assert rebalanced_broker.running
    finally:
        consumer.close()
    with pytest.raises(ValueError, match="times"):
        control.fail_group_log(times=0)


def test_a_consumer_protocol_group_is_waited_for_too(
        rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders",
                        **{"group.protocol": "consumer", "heartbeat.interval.ms": None,
                           "session.timeout.ms": None}):
        group = control.wait_for_group("billing", members=1, timeout=30)
        assert group["type"] == "consumer"
