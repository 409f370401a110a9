"""Disconnect-fast failover with the consumer group protocol (KIP-848): three confluent-kafka
`group.protocol=consumer` consumers, each in its own process; one is SIGKILLed and the
survivors own every partition long before the 45 s consumer session timeout would fence it.

The broker keeps Kafka's default `group.consumer.session.timeout.ms` (45 s) and
`group.member.disconnect.grace.ms` (1 s); only the heartbeat interval is lowered (500 ms) so
the survivors hear of the new assignment quickly.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.integration.group_workers import (
    create_topic,
    exact_split,
    group_events,
    wait_until,
    worker_pool,
)

PARTITIONS = 6
TOPIC = "failover"
GROUP = "failover"
JOIN_TIMEOUT_S = 45.0  # hang detector only
SESSION_TIMEOUT_S = 45.0
# Grace 1 s + a heartbeat interval or two + reconciliation: about 2 s; generous for a loaded
# machine and still far below the session timeout.
TAKEOVER_BOUND_S = 15.0

pytestmark = pytest.mark.integration


def test_survivors_take_over_a_sigkilled_member_well_before_its_session_timeout(
        tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", settings={
        "group.consumer.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.heartbeat.interval.ms": "100",
    }).start()
    try:
        create_topic(broker, TOPIC, PARTITIONS)
        with worker_pool(broker, tmp_path) as spawn:
            workers = [spawn("confluent", TOPIC, GROUP, f"m{i}", group_protocol="consumer")
                       for i in range(3)]
            wait_until(lambda: exact_split(workers, PARTITIONS), JOIN_TIMEOUT_S,
                       "three members to split", workers, broker)
            victim = workers.pop(1)
            victim.kill()
            killed_at = time.monotonic()
            wait_until(lambda: exact_split(workers, PARTITIONS), TAKEOVER_BOUND_S,
                       "the survivors to take over before the session timeout", workers, broker)
            takeover_s = time.monotonic() - killed_at
            print(f"takeover after SIGKILL: {takeover_s:.2f} s")
        assert takeover_s < TAKEOVER_BOUND_S < SESSION_TIMEOUT_S
        wait_until(lambda: bool(group_events(broker, GROUP, "member_removed")), 10,
                   "the journal")
        removed = group_events(broker, GROUP, "member_removed")
        assert [e["cause"] for e in removed] == ["disconnect"]
    finally:
        broker.stop()
