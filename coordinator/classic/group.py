"""A classic group: plain data and the small queries the per-API modules share.

Mutation policy: fields are changed by `join.py`, `sync.py`, `heartbeat.py`, `leave.py` and
`rebalance.py` only; this module keeps the member/static-member/leader bookkeeping consistent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from coordinator.classic.member import ClassicGroupMember
from coordinator.classic.state import GroupState, can_rebalance, transition_to
from coordinator.records import GroupMemberRecord, GroupMetadataValue

__all__ = ["ClassicGroup", "InitialJoin"]


@dataclass(slots=True)
class InitialJoin:
    """Kafka `InitialDelayedJoin`: the delay of the current step and what may still follow."""

    delay_ms: int
    remaining_ms: int


@dataclass(slots=True, kw_only=True)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # KIP-394: member ids handed out with MEMBER_ID_REQUIRED, with their expiry deadline.
    pending_members: dict[str, int] = field(default_factory=dict)
    # Members that got the JoinGroup answer of this generation but have not synced yet.
    pending_sync_members: set[str] = field(default_factory=set)
    new_member_added: bool = False
    initial_join: InitialJoin | None = None
    join_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None
    rebalance_started_ms: int | None = None

    # -- queries ------------------------------------------------------------------------------

    def is_state(self, state: GroupState) -> bool:
        return self.state is state

    def can_rebalance(self) -> bool:
        return can_rebalance(self.state)

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return all(m.is_awaiting_join for m in self.members.values()) and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members (Kafka `rebalanceTimeoutMs`)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        counts = Counter(p.name for m in self.members.values() for p in m.protocols)
        return {name for name, n in counts.items() if n == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        """Could a member with these protocols join? Empty groups take any non-empty set."""
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and bool(protocol_names)
        return self.protocol_type == protocol_type and bool(
            protocol_names & self.candidate_protocols()
        )

    def select_protocol(self) -> str:
        """Each member votes for its first supported candidate; most votes wins.

        Ties go to the protocol that received its first vote earliest (member insertion order),
        so the choice is deterministic; Kafka leaves ties to HashMap order.
        """
        assert self.members, "cannot select a protocol for an empty group"
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda name: votes[name])  # Counter keeps first-seen order

    # -- bookkeeping --------------------------------------------------------------------------

    def add_member(self, member: ClassicGroupMember) -> None:
        assert member.member_id not in self.members
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self.static_members
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)

    def remove_member(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        return member

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        transition_to(self, target, now_ms)

    def snapshot(self) -> GroupMetadataValue:
        """The group as Kafka persists it (`newGroupMetadataRecord`)."""
        protocol = self.protocol_name
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=protocol,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp_ms,
            members=tuple(
                GroupMemberRecord(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout=m.rebalance_timeout_ms,
                    session_timeout=m.session_timeout_ms,
                    subscription=m.metadata(protocol) if protocol is not None else b"",
                    assignment=m.assignment,
                )
                for m in self.members.values()
            ),
        )
