"""Group actions on consumer-protocol (KIP-848) groups, the declarative `when` predicate, and
the bad input the rule format refuses, on a real broker with stock clients."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest

from coordinator.testkit import RebalancedBroker
from coordinator.testkit.control import ControlError
from tests.testkit.clients import PolledConsumer, create_topic
from tests.testkit.test_faults import _http

# librdkafka's KIP-848 consumer: the session settings are the broker's, not the client's.
CONSUMER_PROTOCOL: dict[str, Any] = {"group.protocol": "consumer",
                                     "heartbeat.interval.ms": None, "session.timeout.ms": None}


def test_a_consumer_group_member_expires_now_and_the_client_comes_back(
        rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders", **CONSUMER_PROTOCOL):
        group = control.wait_for_group("billing", members=1, timeout=30)
        assert group["type"] == "consumer"
        member = group["members"][0]["member_id"]
        control.expire_member("billing", member)
        removed = control.wait_for_member_removed("billing", member_id=member,
                                                  cause="session_expiry")
        assert removed["member_id"] == member
        # The fenced client finds out on its next heartbeat and joins again at epoch 0: the
        # group epoch moves past the one it was fenced in.
        deadline = time.monotonic() + 30
        while True:
            now = control.group("billing")
            if (now is not None and len(now["members"]) == 1
                    and now["generation_id"] > group["generation_id"] + 1):
                break
            assert time.monotonic() < deadline, now
            time.sleep(0.05)
        with pytest.raises(ControlError, match="no such member"):
            control.expire_member("billing", "not-a-member")


def test_a_consumer_group_has_no_forced_rebalance(rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders", **CONSUMER_PROTOCOL):
        group = control.wait_for_group("billing", members=1, timeout=30)
        with pytest.raises(ControlError, match="no forced rebalance"):
            control.rebalance("billing")
        assert control.group("billing")["generation_id"] == group["generation_id"]  # type: ignore[index]


def test_an_expire_session_rule_fences_a_consumer_protocol_member(
        rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders", **CONSUMER_PROTOCOL):
        member = control.wait_for_group("billing", members=1, timeout=30)["members"][0]
        fault = control.add_fault(match={"api": "ConsumerGroupHeartbeat", "group_id": "billing"},
                                  action={"type": "expire_session"}, trigger={"type": "once"})
        fault.wait(timeout=30)
        control.wait_for_member_removed("billing", member_id=member["member_id"],
                                        cause="session_expiry")
        control.wait_for_group("billing", members=1, timeout=30)


def test_a_predicate_acts_only_once_the_group_is_so(rebalanced_broker: RebalancedBroker) -> None:
    """Observe heartbeats only while the group is Stable with two members: none arrive while
    one consumer is in it, they count once the second joined."""
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    watched = control.add_fault(
        match={"api": "Heartbeat", "group_id": "billing"}, action={"type": "observe"},
        when={"group_state": "Stable", "members_at_least": 2, "generation_at_least": 1})
    assert watched.rule["when"] == {"group_state": "Stable", "members_at_least": 2,
                                    "generation_at_least": 1}
    everything = control.add_fault(match={"api": "Heartbeat", "group_id": "billing"},
                                   action={"type": "observe"})
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders"):
        control.wait_for_group("billing", members=1, timeout=30)
        everything.wait(hits=3)
        assert watched.matches == 0 and watched.hits == 0
        with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders"):
            control.wait_for_group("billing", members=2, timeout=30)
            watched.wait(hits=2)
            # Both counts from one reading: heartbeats keep arriving between two readings.
            state = watched.state()
            assert state["matches"] == state["hits"]


def test_a_predicate_with_an_error_answer_forces_a_rejoin_in_a_given_generation(
        rebalanced_broker: RebalancedBroker) -> None:
    """"Once the group reached generation 2, answer one heartbeat REBALANCE_IN_PROGRESS": the
    group goes through its first rebalance untouched, then the rule fires once."""
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders"):
        first = control.wait_for_group("billing", members=1, timeout=30)["generation_id"]
        fault = control.add_fault(
            match={"api": "Heartbeat", "group_id": "billing"},
            action={"type": "error", "error_code": "REBALANCE_IN_PROGRESS"},
            trigger={"type": "once"},
            when={"group_state": "Stable", "generation_at_least": first + 1})
        time.sleep(0.6)  # heartbeats go by in the first generation
        assert fault.hits == 0
        control.rebalance("billing")
        control.wait_for_rebalance("billing", after_generation=first)
        fault.wait(timeout=30)
        control.wait_for_rebalance("billing", after_generation=first + 1)


def test_a_malformed_predicate_is_refused_three_ways(
        rebalanced_broker: RebalancedBroker) -> None:
    status, answer = _http(rebalanced_broker, "POST", "/faults",
                           {"action": {"type": "observe"}, "when": {"group_state": "Sleeping"}})
    assert status == 400 and answer["field"] == "when.group_state"
    with pytest.raises(ValueError, match=r"when\.members_at_least"):
        rebalanced_broker.control.add_fault(action={"type": "observe"},
                                            when={"members_at_least": "two"})
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "faults",
         "--control", f"http://127.0.0.1:{rebalanced_broker.control_port}",
         "--token", str(rebalanced_broker.control_token), "add",
         json.dumps({"action": {"type": "observe"}, "when": {"colour": "red"}})],
        capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "rebalanced faults: when.colour: unknown field (known: group_state, group_type, "
        "generation_at_least, generation_at_most, members_at_least, members_at_most)"]
    assert rebalanced_broker.control.faults() == []


@pytest.mark.parametrize(("rule", "field"), [
    # An error answer on an API that has none, a group action or a predicate on a request that
    # names no group, bounds that exclude each other, a forced rebalance of a consumer group.
    ({"match": {"api": "Produce"}, "action": {"type": "error", "error_code": 27}}, "match.api"),
    ({"match": {"api": "Metadata"}, "action": {"type": "expire_session"}}, "match.api"),
    ({"match": {"api": "Fetch"}, "action": {"type": "observe"},
      "when": {"group_state": "Stable"}}, "match.api"),
    ({"action": {"type": "observe"},
      "when": {"generation_at_least": 5, "generation_at_most": 4}}, "when.generation_at_most"),
    ({"match": {"api": "ConsumerGroupHeartbeat"}, "action": {"type": "rebalance"}},
     "match.api"),
])
def test_a_rule_that_can_never_match_is_reported_not_kept(
        rebalanced_broker: RebalancedBroker, rule: dict[str, Any], field: str) -> None:
    status, answer = _http(rebalanced_broker, "POST", "/faults", rule)
    assert status == 400, answer
    assert answer["field"] == field
    assert "error" in answer
    assert rebalanced_broker.control.faults() == []


def test_a_broker_without_the_switch_takes_no_fault_from_anywhere(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Without `test.control.listener` there is no endpoint to send a rule to: the CLI aimed at
    the broker's own port gets no control answer, and the broker still serves Kafka."""
    from confluent_kafka.admin import AdminClient

    with RebalancedBroker(tmp_path / "plain", control=False) as broker:
        port = broker.bootstrap.rpartition(":")[2]
        done = subprocess.run(
            [sys.executable, "-m", "coordinator", "faults", "--control",
             f"http://127.0.0.1:{port}", "--token", "guess", "add",
             json.dumps({"action": {"type": "drop"}})],
            capture_output=True, text=True, timeout=30)
        assert done.returncode == 1, done.stderr
        assert broker.control_port is None
        assert "fault rule added" not in broker.log_text()
        assert AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
