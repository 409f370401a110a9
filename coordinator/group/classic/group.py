"""A classic group: plain data and the small queries the per-API modules share.

Mutation policy: fields are changed by `join.py`, `sync.py`, `heartbeat.py`, `leave.py` and
`rebalance.py` only; this module keeps the member/static-member/leader bookkeeping consistent.

Tallies
-------
Every JoinGroup asks whether the group supports the member's protocols and whether everyone
has rejoined; a rebalance needs the longest rebalance timeout and the protocol vote. Answering
by scanning the members made a join storm quadratic (5,000 members: 25 million member visits
in the join phase), so the group keeps running tallies over `members`, as Kafka's
`ClassicGroup` does (`supportedProtocols`, `numMembersAwaitingJoin`):

* `_protocol_support`: protocol name -> members supporting it (a repeated name counts once);
* `_num_awaiting_join`: members with a parked JoinGroup;
* `_rebalance_timeouts`: rebalance timeout -> members with it;
  these two only from `_TALLY_FROM` members (None below; the queries then scan the few
  members): two Counters cost 456 bytes in each of many small groups. Once kept, they go again
  when the group falls below half of that, so that a group near the line does not recount
  every time a member comes and goes;
* `_votes`: protocol name -> members voting for it among the candidates `_votes_for`; None
  until `select_protocol` first needs it, and again whenever the candidate set changes. Groups
  under `_TALLY_VOTES_FROM` members never keep it: recounting a few members costs less than
  the ~500 bytes the tally holds in every one of many small groups.

Likewise `_parked_by_connection` indexes the parked JoinGroup/SyncGroup requests by connection,
so that a closed connection costs its own requests, not a visit to every member; groups under
`_INDEX_PARKED_FROM` members never keep it (None) and a closed connection visits their few
members: the index cost each one-member group a dict, and each request it parked a key table
(160 bytes), allocated in a join storm in between the groups' long-lived objects.

They change in `add_member`, `restore_member`, `remove_member`, `replace_member`,
`update_member`, `park_join`/`unpark_join` and `park_sync`/`unpark_sync` only, so once a member
is in the group its tallied fields (`protocols`, `rebalance_timeout_ms`, `awaiting_join`,
`awaiting_sync`) are assigned nowhere else. `tests/property/test_group_tallies.py` compares
the tallies with a recount after random operations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator.group.classic.member import ClassicGroupMember, Parked
from coordinator.group.classic.state import GroupState, can_rebalance, transition_to
from coordinator.group.commands import Protocol
from coordinator.group.result import RequestRef
from coordinator.grouplog.records import GroupMemberRecord, GroupMetadataValue

__all__ = ["ClassicGroup", "InitialJoin"]

_TALLY_FROM = 16  # members; see the module docstring


class _NoEntries(dict[str, Any]):
    """The empty mapping every group shares (`ClassicGroup`): a dict for reads at C speed that
    refuses to be changed, and copies as itself."""

    __slots__ = ()

    def _refuse(self, *_: object, **__: object) -> Any:
        raise TypeError("NO_ENTRIES is shared by every group and never changes")

    __setitem__ = __delitem__ = pop = popitem = clear = update = setdefault = _refuse
    __ior__ = _refuse

    def __copy__(self) -> _NoEntries:
        return self

    def __deepcopy__(self, memo: object) -> _NoEntries:
        return self

    def __reduce__(self) -> str:
        return "NO_ENTRIES"


NO_ENTRIES: Mapping[str, Any] = _NoEntries()
_TALLY_VOTES_FROM = 16  # members; see the module docstring
_INDEX_PARKED_FROM = 16  # members; see the module docstring


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
    # The three below are read anywhere and changed by this class's methods only. Empty, each
    # is the shared read-only `NO_ENTRIES` (an empty dict cost 64 bytes, three in every one of
    # many small groups); a dict while it has entries.
    # Instance id -> member id.
    static_members: Mapping[str, str] = field(default_factory=lambda: NO_ENTRIES)
    # KIP-394: member ids handed out with MEMBER_ID_REQUIRED, with their expiry deadline.
    pending_members: Mapping[str, int] = field(default_factory=lambda: NO_ENTRIES)
    # Members that got the JoinGroup answer of this generation but have not synced yet (keys).
    pending_sync_members: Mapping[str, None] = field(default_factory=lambda: NO_ENTRIES)
    new_member_added: bool = False
    initial_join: InitialJoin | None = None
    join_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None
    rebalance_started_ms: int | None = None
    # Tallies over `members` (module docstring); assigned by the bookkeeping methods only.
    _protocol_support: Counter[str] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _num_awaiting_join: int = field(default=0, init=False, repr=False, compare=False)
    _rebalance_timeouts: Counter[int] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _votes: Counter[str] | None = field(default=None, init=False, repr=False, compare=False)
    _votes_for: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    # The members' parked requests by connection id, so that a closed connection is forgotten
    # without visiting every member: the request itself while it is its connection's only one
    # (a member has one connection and parks one request at a time), a dict by ref when more.
    # A one-entry dict per parked request cost 224 bytes, and a join storm parks one for every
    # member at once, in between the groups' long-lived objects.
    _parked_by_connection: dict[int, Parked | dict[RequestRef, Parked]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self._num_awaiting_join = sum(
            1 for member in self.members.values() if member.awaiting_join is not None)
        if len(self.members) >= _TALLY_FROM:
            self._recount_tallies()
        self._fit_parked_index()

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
        return self._num_awaiting_join

    def has_all_members_joined(self) -> bool:
        return self._num_awaiting_join == len(self.members) and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members (Kafka `rebalanceTimeoutMs`)."""
        timeouts = self._rebalance_timeouts
        if timeouts is None:
            return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        return max(timeouts, default=0)

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        # Each candidate is supported by every member, so by the first one in particular.
        first = next(iter(self.members.values()), None)
        if first is None:
            return set()
        support = self._protocol_support
        if support is None:
            others = [m.supported_protocols() for m in self.members.values()]
            return {n for n in first.supported_protocols() if all(n in o for o in others)}
        size = len(self.members)
        return {n for n in first.supported_protocols() if support[n] == size}

    def supports_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        """Could a member with these protocols join? Empty groups take any non-empty set."""
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and bool(protocol_names)
        size = len(self.members)
        if self.protocol_type != protocol_type or size == 0:
            return False
        support = self._protocol_support
        if support is None:
            return bool(protocol_names & self.candidate_protocols())
        return any(support[name] == size for name in protocol_names)

    def select_protocol(self) -> str:
        """Each member votes for its first supported candidate; most votes wins.

        Ties go to the protocol that received its first vote earliest (member insertion order),
        so the choice is deterministic; Kafka leaves ties to HashMap order. The votes are
        tallied; only a tie walks the members again.
        """
        assert self.members, "cannot select a protocol for an empty group"
        candidates = frozenset(self.candidate_protocols())
        votes = self._votes
        if votes is None or self._votes_for != candidates:
            votes = Counter(m.vote(candidates) for m in self.members.values())
            if len(self.members) >= _TALLY_VOTES_FROM:
                self._votes, self._votes_for = votes, candidates
        most = max(votes.values())
        tied = {name for name, n in votes.items() if n == most}
        if len(tied) == 1:
            return tied.pop()
        return next(v for m in self.members.values() if (v := m.vote(candidates)) in tied)

    # -- bookkeeping --------------------------------------------------------------------------

    def add_member(self, member: ClassicGroupMember) -> None:
        assert member.member_id not in self.members
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self.static_members
            self._set_static(member.group_instance_id, member.member_id)
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pop_pending_member(member.member_id)
        self._tally(member, 1)
        self._check_votes()
        self._index_parked(member.awaiting_join, member.awaiting_sync)
        self._fit_parked_index()

    def restore_member(self, member: ClassicGroupMember) -> None:
        """A member read back from the group log, as persisted: no leader or type inference."""
        assert member.member_id not in self.members
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self._set_static(member.group_instance_id, member.member_id)
        self._tally(member, 1)
        self._check_votes()
        self._fit_parked_index()

    def remove_member(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._tally(member, -1)
            self._check_votes()
            self._unindex_parked(member.awaiting_join, member.awaiting_sync)
            self._fit_parked_index()
            if member.group_instance_id is not None:
                self.static_members = _without(self.static_members, member.group_instance_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pop_pending_member(member_id)
        self.discard_pending_sync(member_id)
        return member

    def replace_member(self, old_member_id: str, new: ClassicGroupMember) -> ClassicGroupMember:
        """A static member's new id (KIP-345): `new` takes over the old member's instance id,
        leadership and pending sync, and goes last in member order. Returns the old member."""
        assert new.member_id not in self.members
        assert new.group_instance_id is not None
        old = self.members.pop(old_member_id)
        assert old.group_instance_id == new.group_instance_id
        self._tally(old, -1)
        self._unindex_parked(old.awaiting_join, old.awaiting_sync)
        self.members[new.member_id] = new
        self._tally(new, 1)
        self._check_votes()
        self._index_parked(new.awaiting_join, new.awaiting_sync)
        if self.leader_id == old_member_id:
            self.leader_id = new.member_id
        if old_member_id in self.pending_sync_members:
            self.discard_pending_sync(old_member_id)
            self.add_pending_sync(new.member_id)
        self._set_static(new.group_instance_id, new.member_id)
        return old

    # -- the pending members and the static members' index -----------------------------------

    def add_pending_member(self, member_id: str, deadline_ms: int) -> None:
        pending = self.pending_members
        if pending is NO_ENTRIES:
            pending = self.pending_members = {}
        pending[member_id] = deadline_ms  # type: ignore[index]  # a dict unless NO_ENTRIES

    def pop_pending_member(self, member_id: str) -> int | None:
        """Forget a KIP-394 id; its deadline if it was pending."""
        deadline = self.pending_members.get(member_id)
        if deadline is not None:
            self.pending_members = _without(self.pending_members, member_id)
        return deadline

    def clear_pending_members(self) -> None:
        self.pending_members = NO_ENTRIES

    def add_pending_sync(self, member_id: str) -> None:
        pending = self.pending_sync_members
        if pending is NO_ENTRIES:
            pending = self.pending_sync_members = {}
        pending[member_id] = None  # type: ignore[index]  # a dict unless NO_ENTRIES

    def discard_pending_sync(self, member_id: str) -> None:
        if member_id in self.pending_sync_members:
            self.pending_sync_members = _without(self.pending_sync_members, member_id)

    def clear_pending_sync(self) -> None:
        self.pending_sync_members = NO_ENTRIES

    def _set_static(self, instance_id: str, member_id: str) -> None:
        static = self.static_members
        if static is NO_ENTRIES:
            static = self.static_members = {}
        static[instance_id] = member_id  # type: ignore[index]  # a dict unless NO_ENTRIES

    def update_member(
        self,
        member: ClassicGroupMember,
        *,
        protocols: tuple[Protocol, ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
    ) -> None:
        """A rejoining member's protocols and timeouts (Kafka `ClassicGroup.updateMember`)."""
        assert self.members.get(member.member_id) is member
        self._tally(member, -1)
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self._tally(member, 1)
        self._check_votes()

    def park_join(self, member: ClassicGroupMember, parked: Parked) -> None:
        """`member` has rejoined: its JoinGroup waits for the join phase to complete."""
        assert self.members.get(member.member_id) is member
        assert member.awaiting_join is None, "answer the parked JoinGroup first"
        member.awaiting_join = parked
        self._num_awaiting_join += 1
        self._index_parked(parked)

    def unpark_join(self, member: ClassicGroupMember) -> Parked | None:
        """Take `member`'s parked JoinGroup (to answer it), if it has one."""
        parked, member.awaiting_join = member.awaiting_join, None
        if parked is not None:
            assert self.members.get(member.member_id) is member
            self._num_awaiting_join -= 1
            self._unindex_parked(parked)
        return parked

    def park_sync(self, member: ClassicGroupMember, parked: Parked) -> None:
        """`member`'s SyncGroup waits for the leader's assignment."""
        assert self.members.get(member.member_id) is member
        assert member.awaiting_sync is None, "answer the parked SyncGroup first"
        member.awaiting_sync = parked
        self._index_parked(parked)

    def unpark_sync(self, member: ClassicGroupMember) -> Parked | None:
        """Take `member`'s parked SyncGroup (to answer it), if it has one."""
        parked, member.awaiting_sync = member.awaiting_sync, None
        if parked is not None:
            assert self.members.get(member.member_id) is member
            self._unindex_parked(parked)
        return parked

    def forget_connection(self, connection_id: int) -> list[ClassicGroupMember]:
        """The connection closed: its parked requests stay parked (the members still count as
        having joined or synced), but nobody is answered. Returns the members that had a
        request parked on it."""
        index = self._parked_by_connection
        if index is None:  # a small group: visit its members
            found = []
            for member in self.members.values():
                on_it = [parked for parked in (member.awaiting_join, member.awaiting_sync)
                         if parked is not None and parked.ref is not None
                         and parked.ref.connection_id == connection_id]
                for parked in on_it:
                    parked.ref = None
                if on_it:
                    found.append(member)
            return found
        held = index.pop(connection_id, None)
        if held is None:
            return []
        requests = list(held.values()) if isinstance(held, dict) else [held]
        for parked in requests:
            parked.ref = None
        ids = {id(parked) for parked in requests}
        return [m for m in self.members.values()
                if id(m.awaiting_join) in ids or id(m.awaiting_sync) in ids]

    def _fit_parked_index(self) -> None:
        """Keep the parked index in groups of `_INDEX_PARKED_FROM` members or more only."""
        large = len(self.members) >= _INDEX_PARKED_FROM
        if large and self._parked_by_connection is None:
            self._parked_by_connection = {}
            for member in self.members.values():
                self._index_parked(member.awaiting_join, member.awaiting_sync)
        elif not large and self._parked_by_connection is not None:
            self._parked_by_connection = None

    def _index_parked(self, *requests: Parked | None) -> None:
        index = self._parked_by_connection
        if index is None:
            return
        for parked in requests:
            if parked is not None and parked.ref is not None:
                connection_id = parked.ref.connection_id
                held = index.get(connection_id)
                if held is None:
                    index[connection_id] = parked
                elif isinstance(held, dict):
                    held[parked.ref] = parked
                elif held.ref != parked.ref:
                    index[connection_id] = {held.ref: held, parked.ref: parked}  # type: ignore[dict-item]
                else:
                    index[connection_id] = parked

    def _unindex_parked(self, *requests: Parked | None) -> None:
        index = self._parked_by_connection
        if index is None:
            return
        for parked in requests:
            if parked is None or parked.ref is None:
                continue
            connection_id = parked.ref.connection_id
            held = index.get(connection_id)
            if held is None:
                continue
            if isinstance(held, dict):
                held.pop(parked.ref, None)
                if len(held) == 1:
                    index[connection_id] = next(iter(held.values()))
                    continue
                if held:
                    continue
            elif held.ref != parked.ref:
                continue
            del index[connection_id]
            if not index:
                # An emptied dict keeps its grown table (as in `add_member`).
                index = self._parked_by_connection = {}

    def _tally(self, member: ClassicGroupMember, sign: int) -> None:
        """Count `member` in (+1) or out of (-1) every tally. Called with `member` in `members`
        when counting in."""
        support = self._protocol_support
        timeouts = self._rebalance_timeouts
        if support is None or timeouts is None:
            if sign > 0 and len(self.members) >= _TALLY_FROM:
                self._recount_tallies()  # `member` included
        elif sign < 0 and len(self.members) < _TALLY_FROM // 2:
            self._protocol_support = self._rebalance_timeouts = None
        else:
            for name in member.supported_protocols():
                support[name] += sign
                if not support[name]:
                    del support[name]
            timeouts[member.rebalance_timeout_ms] += sign
            if not timeouts[member.rebalance_timeout_ms]:
                del timeouts[member.rebalance_timeout_ms]
        if member.awaiting_join is not None:
            self._num_awaiting_join += sign
        votes = self._votes
        if votes is None:
            return
        vote = member.preferred(self._votes_for)
        if vote is None:
            self._votes = None
            return
        votes[vote] += sign
        if not votes[vote]:
            del votes[vote]

    def _recount_tallies(self) -> None:
        members = self.members.values()
        self._protocol_support = Counter(
            name for m in members for name in m.supported_protocols())
        self._rebalance_timeouts = Counter(m.rebalance_timeout_ms for m in members)

    def _check_votes(self) -> None:
        """After a change: if the candidates moved, any member's vote may have; recount later."""
        if self._votes is not None and self._votes_for != self.candidate_protocols():
            self._votes = None

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        transition_to(self, target, now_ms)

    def snapshot(self, assignment: Mapping[str, bytes] | None = None) -> GroupMetadataValue:
        """The group as Kafka persists it (`newGroupMetadataRecord`), with `assignment` in
        place of the members' current ones when given (the leader's, not yet durable)."""
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
                    assignment=(
                        m.assignment if assignment is None else assignment.get(m.member_id, b"")
                    ),
                )
                for m in self.members.values()
            ),
        )


def group_from_record(group_id: str, value: GroupMetadataValue) -> ClassicGroup:
    """A group as its record left it (replay): with members it is Stable at its generation,
    as Kafka loads it; without, Empty. Session deadlines are the caller's to arm."""
    state = GroupState.STABLE if value.members else GroupState.EMPTY
    group = ClassicGroup(
        group_id=group_id,
        state=state,
        previous_state=state,
        state_timestamp_ms=value.current_state_timestamp,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        leader_id=value.leader,
    )
    for m in value.members:
        group.restore_member(ClassicGroupMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout,
            session_timeout_ms=m.session_timeout,
            protocol_type=value.protocol_type,
            protocols=(Protocol(name=value.protocol or "", metadata=m.subscription),),
            assignment=m.assignment,
        ))
    return group


def _without(entries: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """`entries` with `key` removed in place; `NO_ENTRIES` once empty (an emptied dict keeps
    its grown table)."""
    if key in entries:
        del entries[key]  # type: ignore[attr-defined]  # present: a dict
    return entries if entries else NO_ENTRIES
