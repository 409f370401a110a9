"""The fixtures and the context manager start a real broker that stock clients use."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from coordinator.testkit import RebalancedBroker


def test_the_fixture_serves_a_stock_client(rebalanced_broker: RebalancedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": rebalanced_broker.bootstrap})
    metadata = admin.list_topics(timeout=10)
    assert metadata.cluster_id
    assert rebalanced_broker.running


def test_the_module_broker_is_shared(rebalanced_broker_module: RebalancedBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=rebalanced_broker_module.bootstrap)
    try:
        assert admin.list_topics() == ["__consumer_offsets"]
    finally:
        admin.close()


async def test_the_async_fixture(async_rebalanced_broker: RebalancedBroker) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=async_rebalanced_broker.bootstrap)
    await admin.start()
    try:
        assert await admin.list_consumer_groups() == []
    finally:
        await admin.close()


@pytest.mark.rebalanced(settings={"group.max.session.timeout.ms": 123456})
def test_a_marker_sets_the_brokers_settings(rebalanced_broker: RebalancedBroker) -> None:
    assert "--group.max.session.timeout.ms" in rebalanced_broker.argv()


@pytest.mark.parametrize("warm", [True, False])
def test_the_context_manager_stops_the_broker_and_removes_its_data(warm: bool) -> None:
    with RebalancedBroker(warm=warm) as broker:
        pid, data_dir = broker.pid, broker.data_dir
        assert broker.running and data_dir.exists()
    assert not broker.running and pid is not None
    assert not data_dir.exists()


def test_two_brokers_start_apart_and_a_crashed_one_is_noticed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with RebalancedBroker(tmp_path / "a") as first, RebalancedBroker(tmp_path / "b") as second:
        assert first.port != second.port
        second.kill()
        deadline = time.monotonic() + 5
        while second.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not second.running and first.running
