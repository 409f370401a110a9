"""Virtual time: the broker's clock moved ahead through the control endpoint fires the timers
due meanwhile, in order, and stock clients see the outcome on their next request."""

from __future__ import annotations

import time

import pytest

from coordinator.testkit import RebalancedBroker
from tests.testkit.clients import PolledConsumer, create_topic


def test_a_45_second_session_expires_through_advance_within_a_second(
        rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    # The application is stuck: its heartbeats go nowhere, as when its process hangs.
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders",
                        **{"session.timeout.ms": 45_000}):
        member = control.wait_for_group("billing", members=1, timeout=30)["members"][0]
        rejoined = control.add_fault(match={"api": "JoinGroup", "group_id": "billing"},
                                     action={"type": "observe"})
        started = time.monotonic()
        control.advance(45_000)
        removed = control.wait_for_member_removed("billing", member_id=member["member_id"],
                                                  cause="session_expiry", timeout=5)
        rejoined.wait(hits=1, timeout=5)  # the client learnt it on its own next heartbeat
        noticed = time.monotonic() - started
        print(f"45 s session expiry via advance, noticed by the client in {noticed * 1000:.0f} ms")
        assert removed["member_id"] == member["member_id"]
        assert noticed <= 1.0, f"the client noticed the expiry after {noticed:.2f} s"


@pytest.mark.rebalanced(settings={"group.initial.rebalance.delay.ms": 60_000})
def test_the_initial_rebalance_delay_passes_at_once(rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    create_topic(rebalanced_broker.bootstrap, "orders")
    with PolledConsumer(rebalanced_broker.bootstrap, "billing", "orders"):
        control.wait_for_group("billing", state="PreparingRebalance", timeout=30)
        time.sleep(0.3)
        assert control.group("billing")["state"] == "PreparingRebalance"  # type: ignore[index]
        control.advance(60_000)
        control.wait_for_group("billing", members=1, timeout=10)


def test_time_never_goes_backwards(rebalanced_broker: RebalancedBroker) -> None:
    control = rebalanced_broker.control
    before = control.now_ms()
    after = control.advance(10_000)
    assert after >= before + 10_000
    with pytest.raises(ValueError, match="ms"):
        control.advance(-1)
