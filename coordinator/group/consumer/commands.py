"""Commands and outcomes of the consumer group APIs (ConsumerGroupHeartbeat, -Describe)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from coordinator.group.consumer.member import Assignment
from coordinator.group.result import RequestRef

__all__ = [
    "ConsumerGroupDescribe",
    "ConsumerGroupDescribeOutcome",
    "ConsumerGroupHeartbeat",
    "ConsumerGroupHeartbeatOutcome",
    "DescribedConsumerGroup",
    "DescribedConsumerMember",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupHeartbeat:
    """None in an optional field means "unchanged since the last heartbeat" (Kafka)."""

    ref: RequestRef
    api_version: int
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # TopicPartitions: what the member owns now
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupHeartbeatOutcome:
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged, not sent


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupDescribe:
    ref: RequestRef
    api_version: int
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    # (topic id, topic name, partitions)
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]
    target_assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConsumerGroup:
    group_id: str
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
    authorized_operations: int = -(2**31)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupDescribeOutcome:
    groups: tuple[DescribedConsumerGroup, ...]
