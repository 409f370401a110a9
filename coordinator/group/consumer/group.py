"""A consumer group's state, changed only by applying its records (live and on replay alike).

The heartbeat logic (`heartbeat.py`) decides which records to write; `apply` folds each record
into the group, so the state after a request and the state rebuilt from the log by replay are
the same by construction. Derived indexes (static members, partition owners) are kept here.

State, as Kafka's `ConsumerGroup.maybeUpdateGroupState`: Empty without members, Assigning while
the group epoch is ahead of the target assignment epoch, Reconciling while a member is not yet
at the target epoch, else Stable.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from coordinator.group.consumer.member import (
    Assignment,
    ConsumerGroupMember,
    MemberState,
    assignment_from_record,
)
from coordinator.grouplog.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    SubscribedTopicMetadata,
)

__all__ = ["ConsumerGroup", "ConsumerGroupState", "TopicImage", "TopicInfo"]


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class TopicImage:
    """The broker's topics as the coordinator last saw them; `version` changes with them."""

    version: int = 0
    by_name: Mapping[str, TopicInfo] = field(default_factory=dict)

    def name_of(self, topic_id: uuid.UUID) -> str:
        for info in self.by_name.values():
            if info.topic_id == topic_id:
                return info.name
        return ""


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target
    # (topic id, partition) -> epoch of the member that owns it (assigned or still revoking)
    owners: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    subscription_metadata: dict[str, SubscribedTopicMetadata] = field(default_factory=dict)
    # The topic image version the subscription metadata was last checked against.
    metadata_version: int = -1
    # Deadlines live here; the wheel only holds wake-ups (see `heartbeat.py`).
    session_deadlines: dict[str, int] = field(default_factory=dict)
    rebalance_deadlines: dict[str, tuple[int, int]] = field(default_factory=dict)  # epoch, ms
    # Classic-protocol members: the JoinGroup or SyncGroup they owe, by when
    # (`classic_members.py`): member id -> ("join" | "sync", deadline ms).
    classic_deadlines: dict[str, tuple[str, int]] = field(default_factory=dict)
    # Disconnect-fast failover of dynamic members (`disconnect.py`): the connection of each
    # member's latest accepted heartbeat or commit, other open connections that carried one
    # earlier (rare), and the fencing deadline of those left with no open connection.
    connections: dict[str, int] = field(default_factory=dict)
    other_connections: dict[str, set[int]] = field(default_factory=dict)
    disconnect_deadlines: dict[str, int] = field(default_factory=dict)
    exists: bool = False  # has a ConsumerGroupMetadata record (False: created by a request)
    # Why the group epoch last moved: the journal's reason for the next target assignment.
    epoch_reason: str = ""

    # -- reading ---------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owner_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.owners.get((topic_id, partition), -1)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def preferred_assignor(self, default: str) -> str:
        """The most common assignor the members asked for (Kafka), else `default`."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor is not None:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda name: counts[name])

    # -- applying records ------------------------------------------------------------------

    def apply(self, record: ConsumerGroupRecord) -> None:
        key, value = record.key, record.value
        match key:
            case ConsumerGroupMetadataKey():
                if isinstance(value, ConsumerGroupMetadataValue):
                    self.group_epoch = value.epoch
                    self.exists = True
            case ConsumerGroupPartitionMetadataKey():
                if isinstance(value, ConsumerGroupPartitionMetadataValue):
                    self.subscription_metadata = {t.topic_name: t for t in value.topics}
                else:
                    self.subscription_metadata = {}
            case ConsumerGroupMemberMetadataKey():
                self._apply_member_metadata(key.member_id, value)
            case ConsumerGroupTargetAssignmentMetadataKey():
                if isinstance(value, ConsumerGroupTargetAssignmentMetadataValue):
                    self.assignment_epoch = value.assignment_epoch
            case ConsumerGroupTargetAssignmentMemberKey():
                if isinstance(value, ConsumerGroupTargetAssignmentMemberValue):
                    self.target[key.member_id] = assignment_from_record(value.topic_partitions)
                else:
                    self.target.pop(key.member_id, None)
            case ConsumerGroupCurrentMemberAssignmentKey():
                self._apply_current_assignment(key.member_id, value)

    def _apply_member_metadata(self, member_id: str, value: object) -> None:
        old = self.members.get(member_id)
        if not isinstance(value, ConsumerGroupMemberMetadataValue):
            if old is not None:
                self._forget_owners(old)
                del self.members[member_id]
                if old.instance_id is not None and self.static_members.get(
                        old.instance_id) == member_id:
                    del self.static_members[old.instance_id]
            self.session_deadlines.pop(member_id, None)
            self.rebalance_deadlines.pop(member_id, None)
            self.classic_deadlines.pop(member_id, None)
            self.connections.pop(member_id, None)
            self.other_connections.pop(member_id, None)
            self.disconnect_deadlines.pop(member_id, None)
            return
        base = old or ConsumerGroupMember(member_id=member_id)
        member = replace(
            base,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=value.subscribed_topic_names,
            subscribed_topic_regex=value.subscribed_topic_regex,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor,
            classic=value.classic_member_metadata,
        )
        self.members[member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member_id

    def _apply_current_assignment(self, member_id: str, value: object) -> None:
        old = self.members.get(member_id)
        if old is None:
            if not isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
                return
            old = ConsumerGroupMember(member_id=member_id)
        self._forget_owners(old)
        if not isinstance(value, ConsumerGroupCurrentMemberAssignmentValue):
            member = replace(old, member_epoch=0, previous_member_epoch=0,
                             state=MemberState.STABLE, assigned={}, pending_revocation={})
        else:
            try:
                state = MemberState(value.state)
            except ValueError:
                state = MemberState.UNKNOWN
            member = replace(
                old,
                member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                state=state,
                assigned=assignment_from_record(value.assigned_partitions),
                pending_revocation=assignment_from_record(value.partitions_pending_revocation),
            )
        self.members[member_id] = member
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    self.owners[(topic_id, p)] = member.member_epoch

    def _forget_owners(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                for p in partitions:
                    if self.owners.get((topic_id, p)) == member.member_epoch:
                        del self.owners[(topic_id, p)]
