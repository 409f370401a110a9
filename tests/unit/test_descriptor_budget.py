"""The open-file limit shared between topic segment files and Kafka connections, with the group
log's descriptors set aside first."""

from __future__ import annotations

from coordinator.runtime.broker import (
    connection_limit,
    descriptor_share,
    open_segments_limit,
    partition_limit,
)


def test_descriptors_are_shared_with_the_group_log_set_aside() -> None:
    # nofile 1024, 50 group-log partitions: 100 + 64 set aside, connections get at most half
    # of the rest, segment files what connections and the ops port leave.
    assert descriptor_share(50, 1024) == 430
    assert connection_limit(2**31 - 1, 50, 1024) == 430
    assert connection_limit(100, 50, 1024) == 100
    assert open_segments_limit(-1, 50, 2**31 - 1, 32, 1024) == 1024 - 164 - 430 - 32
    assert open_segments_limit(-1, 50, 100, 0, 1024) == 1024 - 164 - 100
    assert open_segments_limit(7, 50, 100, 0, 1024) == 7  # configured: as configured
    assert open_segments_limit(-1, 50, 2**31 - 1, 32, 100) == 0  # the budget's floor applies


def test_partitions_are_no_longer_bounded_by_descriptors() -> None:
    assert partition_limit(-1) == 2**31 - 1
    assert partition_limit(5) == 5
