"""The group's running tallies always equal a recount from the members.

`ClassicGroup` answers "does the group support these protocols", "has everyone rejoined", "the
longest rebalance timeout" and "which protocol wins the vote" from tallies it keeps as members
come, go, change protocols and park or answer their requests. Random sequences of those
operations, straight on the group, are checked against the member-scanning definitions after
every step, as is the index of parked requests by connection; `test_group_state_machine.py`
runs the same check through whole requests.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from coordinator.group.classic import group as group_module
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.member import ClassicGroupMember, Parked
from coordinator.group.classic.state import GroupState
from coordinator.group.result import RequestRef
from tests.builders import protocols

SLOTS = 6
PROTOCOL_LISTS = [
    ("range",),
    ("roundrobin",),
    ("range", "roundrobin"),
    ("roundrobin", "range"),
    ("sticky", "range", "roundrobin"),
    ("range", "range"),  # a repeated name still counts once
]
TIMEOUTS = [1_000, 5_000, 30_000]


def check_tallies(group: ClassicGroup) -> None:
    """Every tally-backed answer of `group` equals the same answer computed from scratch."""
    members = list(group.members.values())
    support = Counter(name for m in members for name in {p.name for p in m.protocols})
    candidates = {name for name, n in support.items() if n == len(members)}
    # Kept from `_TALLY_FROM` members until the group falls below half of that.
    kept = group._protocol_support is not None
    assert (group._rebalance_timeouts is not None) == kept
    assert kept or len(members) < group_module._TALLY_FROM
    assert not kept or len(members) >= group_module._TALLY_FROM // 2
    if kept:
        assert group._protocol_support == support
        assert group._rebalance_timeouts == Counter(m.rebalance_timeout_ms for m in members)
    assert group.candidate_protocols() == candidates
    assert group.rebalance_timeout_ms() == max((m.rebalance_timeout_ms for m in members), default=0)
    awaiting = sum(1 for m in members if m.awaiting_join is not None)
    assert group.num_awaiting_join() == awaiting
    everyone = awaiting == len(members) and not group.pending_members
    assert group.has_all_members_joined() == everyone
    parked: dict[int, dict[RequestRef, int]] = {}
    for m in members:
        for request in (m.awaiting_join, m.awaiting_sync):
            if request is not None and request.ref is not None:
                parked.setdefault(request.ref.connection_id, {})[request.ref] = id(request)
    index = group._parked_by_connection
    assert (index is None) == (len(members) < group_module._INDEX_PARKED_FROM)
    if index is not None:
        indexed = {
            connection: ({ref: id(request) for ref, request in held.items()}
                         if isinstance(held, dict) else {held.ref: id(held)})
            for connection, held in index.items()
        }
        # A connection's only parked request is held bare, never in a one-entry dict.
        assert all(len(held) > 1 for held in index.values() if isinstance(held, dict))
        assert indexed == parked
    if group._votes is not None:
        assert group._votes_for == candidates
        assert group._votes == Counter(m.vote(candidates) for m in members)
    for names in ({"range"}, {"roundrobin"}, {"sticky", "other"}, {"other"}):
        supported = group.state is GroupState.EMPTY or (
            group.protocol_type == "consumer" and bool(members) and bool(names & candidates)
        )
        assert group.supports_protocols("consumer", names) == supported, (names, candidates)
    if candidates:
        votes = Counter(m.vote(candidates) for m in members)  # first-seen order breaks ties
        assert group.select_protocol() == max(votes, key=lambda name: votes[name])


class TallyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Not Empty: an Empty group takes any protocols without asking the tallies.
        self.group = ClassicGroup(
            group_id="g", protocol_type="consumer", state=GroupState.PREPARING_REBALANCE
        )
        self.ids = [f"m{slot}" for slot in range(SLOTS)]  # the slot's current member id
        self.renames = 0
        self.refs = iter(range(1_000_000))

    def member(self, slot: int) -> ClassicGroupMember | None:
        return self.group.members.get(self.ids[slot])

    @rule(
        slot=st.integers(0, SLOTS - 1),
        offered=st.sampled_from(PROTOCOL_LISTS),
        timeout=st.sampled_from(TIMEOUTS),
        parked=st.booleans(),
        static=st.booleans(),
    )
    def add(
        self, slot: int, offered: tuple[str, ...], timeout: int, parked: bool, static: bool
    ) -> None:
        if self.member(slot) is not None:
            return
        self.group.add_member(
            ClassicGroupMember(
                member_id=self.ids[slot],
                group_instance_id=f"i{slot}" if static else None,
                client_id="c",
                client_host="/h",
                rebalance_timeout_ms=timeout,
                session_timeout_ms=10_000,
                protocol_type="consumer",
                protocols=protocols(*offered),
                awaiting_join=Parked(RequestRef(slot, next(self.refs))) if parked else None,
            )
        )

    @rule(slot=st.integers(0, SLOTS - 1))
    def remove(self, slot: int) -> None:
        self.group.remove_member(self.ids[slot])

    @rule(slot=st.integers(0, SLOTS - 1))
    def replace(self, slot: int) -> None:
        """A static member rejoins under a new id: it moves to the end of member order."""
        old = self.member(slot)
        if old is None or old.group_instance_id is None:
            return
        self.renames += 1
        new_id = f"m{slot}-{self.renames}"
        new = ClassicGroupMember(
            member_id=new_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
        )
        self.group.unpark_join(old)
        self.group.unpark_sync(old)
        self.group.replace_member(self.ids[slot], new)
        self.ids[slot] = new_id

    @rule(
        slot=st.integers(0, SLOTS - 1),
        offered=st.sampled_from(PROTOCOL_LISTS),
        timeout=st.sampled_from(TIMEOUTS),
    )
    def update(self, slot: int, offered: tuple[str, ...], timeout: int) -> None:
        member = self.member(slot)
        if member is not None:
            self.group.update_member(
                member,
                protocols=protocols(*offered),
                rebalance_timeout_ms=timeout,
                session_timeout_ms=member.session_timeout_ms,
            )

    @rule(slot=st.integers(0, SLOTS - 1))
    def park(self, slot: int) -> None:
        member = self.member(slot)
        if member is not None and member.awaiting_join is None:
            self.group.park_join(member, Parked(RequestRef(slot, next(self.refs))))

    @rule(slot=st.integers(0, SLOTS - 1))
    def unpark(self, slot: int) -> None:
        member = self.member(slot)
        if member is not None:
            self.group.unpark_join(member)

    @rule(slot=st.integers(0, SLOTS - 1), connection=st.integers(0, 2))
    def park_sync(self, slot: int, connection: int) -> None:
        member = self.member(slot)
        if member is not None and member.awaiting_sync is None:
            self.group.park_sync(member, Parked(RequestRef(connection, next(self.refs))))

    @rule(slot=st.integers(0, SLOTS - 1))
    def unpark_sync(self, slot: int) -> None:
        member = self.member(slot)
        if member is not None:
            self.group.unpark_sync(member)

    @rule(connection=st.integers(0, SLOTS - 1))
    def close(self, connection: int) -> None:
        def on_it(m: ClassicGroupMember) -> list[Parked]:
            return [p for p in (m.awaiting_join, m.awaiting_sync)
                    if p is not None and p.ref is not None and p.ref.connection_id == connection]

        expected = [m for m in self.group.members.values() if on_it(m)]
        assert self.group.forget_connection(connection) == expected
        assert not [m for m in self.group.members.values() if on_it(m)]

    @rule(pending=st.booleans())
    def pending_member(self, pending: bool) -> None:
        if pending:
            self.group.add_pending_member("pending", 0)
        else:
            self.group.pop_pending_member("pending")

    @precondition(lambda self: bool(self.group.candidate_protocols()))
    @rule()
    def select(self) -> None:
        """Fill the vote tally, so that later steps keep it up to date incrementally."""
        self.group.select_protocol()

    @invariant()
    def tallies_match_a_recount(self) -> None:
        check_tallies(self.group)


TallyMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestGroupTallies = TallyMachine.TestCase


class IndexedTallyMachine(TallyMachine):
    """The same with groups of 3 members or more keeping the parked index and the tallies (16
    in the broker; the tallies go below 2), so that both are built, kept up to date and dropped
    as the group grows and shrinks."""

    def __init__(self) -> None:
        self.saved_thresholds = group_module._INDEX_PARKED_FROM, group_module._TALLY_FROM
        group_module._INDEX_PARKED_FROM = group_module._TALLY_FROM = 3
        super().__init__()

    def teardown(self) -> None:
        group_module._INDEX_PARKED_FROM, group_module._TALLY_FROM = self.saved_thresholds


IndexedTallyMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40,
                                                 deadline=None)
TestGroupTalliesIndexed = IndexedTallyMachine.TestCase
