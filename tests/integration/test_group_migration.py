"""Online migration with real clients: classic consumers in a group (one confluent-kafka, one
kafka-python; eager `range` or cooperative `cooperative-sticky`), then a confluent-kafka
`group.protocol=consumer` one joins; the group becomes a consumer group with its classic members
still in, everyone keeps consuming and the partitions are split without duplicates. When the
consumer-protocol member leaves, the group goes back to the classic type.

Each consumer runs in its own process (`workers/group_consumer.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.integration.group_workers import (
    ConsumerWorker,
    exact_split,
    group_events,
    produce,
    wait_until,
    worker_pool,
)
from tests.integration.group_workers import create_topic as make_topic
from tests.integration.test_consumer_groups import CONSUMER_GROUP_SETTINGS

PARTITIONS = 6
TOPIC = "migrating"
GROUP = "migrating"
TIMEOUT_S = 45.0  # hang detector only

pytestmark = pytest.mark.integration


def consumed_once(workers: list[ConsumerWorker], values: set[str]) -> bool:
    seen = [v for w in workers for v in w.values() if v in values]
    return set(seen) == values


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_consumer_protocol_member_joins_a_classic_group_and_leaves_again(
        tmp_path: Path, strategy: str) -> None:
    broker = BrokerProcess(tmp_path / "data", settings=CONSUMER_GROUP_SETTINGS).start()
    try:
        make_topic(broker, TOPIC, PARTITIONS)
        with worker_pool(broker, tmp_path) as spawn:
            classic = [spawn(client, TOPIC, GROUP, f"classic{i}", strategy=strategy)
                       for i, client in enumerate(("confluent", "kafka-python"))]
            wait_until(lambda: exact_split(classic, PARTITIONS), TIMEOUT_S,
                       "the classic members to split", classic, broker)
            first = {f"first-{i}" for i in range(60)}
            produce(broker, TOPIC, sorted(first), PARTITIONS)
            wait_until(lambda: consumed_once(classic, first), TIMEOUT_S,
                       "the classic members to consume", classic, broker)
            for worker in classic:
                worker.commit()

            before = {w.name: (w.assignment, len(w.of("revoked"))) for w in classic}
            modern = spawn("confluent", TOPIC, GROUP, "modern", group_protocol="consumer")
            everyone = [*classic, modern]
            wait_until(lambda: exact_split(everyone, PARTITIONS), TIMEOUT_S,
                       "the three members to split", everyone, broker)
            assert not any(w.of("lost") for w in everyone)
            for worker in classic:
                owned, revocations = before[worker.name]
                kept = worker.assignment
                assert kept is not None and owned is not None and kept < owned
                if strategy == "cooperative-sticky":
                    # Only what moved to the newcomer was revoked: kept partitions never stopped.
                    revoked = {p for r in worker.of("revoked")[revocations:]
                               for p in r["partitions"]}
                    assert revoked == owned - kept, (worker.name, revoked, owned, kept)
            second = {f"second-{i}" for i in range(60)}
            produce(broker, TOPIC, sorted(second), PARTITIONS)
            wait_until(lambda: consumed_once(everyone, second), TIMEOUT_S,
                       "everyone to consume", everyone, broker)
            for worker in everyone:
                assert any(v in second for v in worker.values()), worker.describe()
            values = [v for w in everyone for v in w.values()]
            assert len(values) == len(set(values)), "a record was consumed twice"

            modern.close()
            wait_until(lambda: exact_split(classic, PARTITIONS), TIMEOUT_S,
                       "the classic members to take everything back", classic, broker)
            third = {f"third-{i}" for i in range(30)}
            produce(broker, TOPIC, sorted(third), PARTITIONS)
            wait_until(lambda: consumed_once(classic, third), TIMEOUT_S,
                       "the classic members to consume again", classic, broker)
        wait_until(lambda: len(group_events(broker, GROUP, "group_converted")) == 2, 10,
                   "the journal")
        converted = group_events(broker, GROUP, "group_converted")
        assert [(e["direction"], e["num_members"]) for e in converted] == [
            ("upgrade", 2), ("downgrade", 2)]
    finally:
        broker.stop()
