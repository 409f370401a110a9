"""A consumer group member: its subscription and where it stands in reconciliation."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.records import ClassicMemberMetadata, TopicAssignment

__all__ = [
    "LEAVE_GROUP_EPOCH",
    "LEAVE_GROUP_STATIC_EPOCH",
    "Assignment",
    "ConsumerGroupMember",
    "MemberState",
    "assignment_from_record",
    "assignment_to_record",
]

LEAVE_GROUP_EPOCH = -1
LEAVE_GROUP_STATIC_EPOCH = -2  # a static member leaving for a while (it will come back)

# topic id -> partitions; treated as immutable
Assignment = Mapping[uuid.UUID, frozenset[int]]


class MemberState(enum.IntEnum):
    """Kafka's `MemberState`; the values are what the CurrentMemberAssignment record stores."""

    STABLE = 0  # reconciled to the target assignment epoch
    UNREVOKED_PARTITIONS = 1  # must give up `pending_revocation` before it moves on
    UNRELEASED_PARTITIONS = 2  # waits for partitions others still own
    UNKNOWN = 127


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # Set for a member that speaks the classic protocol (JoinGroup/SyncGroup) in this group.
    classic: ClassicMemberMetadata | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def subscription_equals(self, other: ConsumerGroupMember) -> bool:
        """Same MemberMetadata record (what a ConsumerGroupMemberMetadataValue holds)."""
        return (
            self.instance_id == other.instance_id
            and self.rack_id == other.rack_id
            and self.client_id == other.client_id
            and self.client_host == other.client_host
            and self.subscribed_topic_names == other.subscribed_topic_names
            and self.subscribed_topic_regex == other.subscribed_topic_regex
            and self.rebalance_timeout_ms == other.rebalance_timeout_ms
            and self.server_assignor == other.server_assignor
            and self.classic == other.classic
        )

    def assignment_equals(self, other: ConsumerGroupMember) -> bool:
        """Same CurrentMemberAssignment record."""
        return (
            self.member_epoch == other.member_epoch
            and self.previous_member_epoch == other.previous_member_epoch
            and self.state == other.state
            and _same(self.assigned, other.assigned)
            and _same(self.pending_revocation, other.pending_revocation)
        )

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch


def _same(a: Assignment, b: Assignment) -> bool:
    return {t: p for t, p in a.items() if p} == {t: p for t, p in b.items() if p}


def assignment_to_record(assignment: Assignment) -> TopicAssignment:
    return tuple(sorted((t, tuple(sorted(p))) for t, p in assignment.items() if p))


def assignment_from_record(assignment: TopicAssignment) -> dict[uuid.UUID, frozenset[int]]:
    return {t: frozenset(p) for t, p in assignment if p}


def partition_count(assignment: Assignment) -> int:
    return sum(len(p) for p in assignment.values())
