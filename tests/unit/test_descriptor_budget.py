"""The open-file limit shared between topic partitions and Kafka connections, with the group
log's descriptors set aside first."""

from __future__ import annotations

from coordinator.runtime.broker import connection_limit, descriptor_share, partition_limit


def test_descriptors_are_shared_with_the_group_log_set_aside() -> None:
    # nofile 1024, 50 group-log partitions: 100 + 64 set aside, 430 each for partitions and
    # connections.
    assert descriptor_share(50, 1024) == 430
    assert partition_limit(-1, 50, 1024) == 430
    assert partition_limit(5, 50, 1024) == 5  # configured: as configured
    assert connection_limit(2**31 - 1, 50, 1024) == 430
    assert connection_limit(100, 50, 1024) == 100
    assert 430 + 430 + 2 * 50 + 64 <= 1024
