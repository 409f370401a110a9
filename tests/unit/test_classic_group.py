"""ClassicGroup's tally-backed queries: protocol support, the vote and its tie-break, parking."""

from __future__ import annotations

import copy
import pickle

import pytest

from coordinator.group.classic.group import NO_ENTRIES, ClassicGroup
from coordinator.group.classic.member import ClassicGroupMember, Parked
from coordinator.group.classic.state import GroupState
from coordinator.group.result import RequestRef
from tests.builders import protocols


def member(member_id: str, *offered: str, instance: str | None = None) -> ClassicGroupMember:
    return ClassicGroupMember(
        member_id=member_id,
        group_instance_id=instance,
        client_id="c",
        client_host="/h",
        rebalance_timeout_ms=30_000,
        session_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=protocols(*offered),
    )


def group_of(*members: ClassicGroupMember) -> ClassicGroup:
    group = ClassicGroup(group_id="g", state=GroupState.PREPARING_REBALANCE)
    for m in members:
        group.add_member(m)
    return group


def test_most_votes_win() -> None:
    group = group_of(member("a", "rr", "range"), member("b", "range", "rr"), member("c", "range"))
    assert group.candidate_protocols() == {"range"}
    assert group.select_protocol() == "range"


def test_a_tie_goes_to_the_protocol_voted_first_in_member_order() -> None:
    group = group_of(member("a", "rr", "range"), member("b", "range", "rr"), member("c", "rr"))
    group.remove_member("c")  # now rr and range are both candidates
    assert group.select_protocol() == "rr"
    group.update_member(
        group.members["a"],
        protocols=protocols("range", "rr"),
        rebalance_timeout_ms=1,
        session_timeout_ms=1,
    )
    assert group.select_protocol() == "range"


def test_a_tie_is_broken_again_after_a_voter_leaves() -> None:
    group = group_of(
        member("a", "rr", "range"), member("b", "range", "rr"), member("d", "rr", "range")
    )
    assert group.select_protocol() == "rr"  # two votes to one
    group.remove_member("a")
    assert group.select_protocol() == "range"  # one each: b voted before d


def test_a_replaced_static_member_votes_last() -> None:
    group = group_of(member("a", "rr", "range", instance="i"), member("b", "range", "rr"))
    assert group.select_protocol() == "rr"
    group.replace_member("a", member("a2", "rr", "range", instance="i"))
    assert list(group.members) == ["b", "a2"]
    assert group.select_protocol() == "range"


def test_a_repeated_protocol_name_is_supported_by_one_member() -> None:
    group = group_of(member("a", "range", "range"))
    assert group.candidate_protocols() == {"range"}
    assert group.supports_protocols("consumer", {"range"})
    group.add_member(member("b", "rr"))
    assert group.candidate_protocols() == set()
    assert not group.supports_protocols("consumer", {"range"})


def test_rebalance_timeout_is_the_longest_of_the_members() -> None:
    group = group_of(member("a", "range"), member("b", "range"))
    group.update_member(
        group.members["b"],
        protocols=protocols("range"),
        rebalance_timeout_ms=90_000,
        session_timeout_ms=1,
    )
    assert group.rebalance_timeout_ms() == 90_000
    group.remove_member("b")
    assert group.rebalance_timeout_ms() == 30_000
    group.remove_member("a")
    assert group.rebalance_timeout_ms() == 0


def test_all_members_joined_counts_parked_joins_and_pending_members() -> None:
    a, b = member("a", "range"), member("b", "range")
    group = group_of(a, b)
    group.park_join(a, Parked(RequestRef(1, 1)))
    assert group.num_awaiting_join() == 1 and not group.has_all_members_joined()
    group.park_join(b, Parked(RequestRef(2, 2)))
    assert group.has_all_members_joined()
    group.add_pending_member("c", 0)
    assert not group.has_all_members_joined()
    group.pop_pending_member("c")
    assert group.unpark_join(a) is not None
    assert group.num_awaiting_join() == 1


def test_forget_connection_only_detaches_that_connections_requests() -> None:
    a, b = member("a", "range"), member("b", "range")
    group = group_of(a, b)
    group.park_join(a, Parked(RequestRef(1, 1)))
    group.park_sync(a, Parked(RequestRef(1, 2)))
    group.park_join(b, Parked(RequestRef(2, 3)))
    group.forget_connection(1)
    assert a.awaiting_join is not None and a.awaiting_join.ref is None
    assert a.awaiting_sync is not None and a.awaiting_sync.ref is None
    assert b.awaiting_join is not None and b.awaiting_join.ref == RequestRef(2, 3)
    assert group.num_awaiting_join() == 2  # a still counts as having rejoined


def test_small_groups_share_one_empty_mapping_until_they_need_their_own() -> None:
    """A group's static, pending and pending-sync members are the shared `NO_ENTRIES` while
    empty (no dict per group), a dict of the group's own while they have entries, and the
    shared one again once emptied."""
    one, other = group_of(member("a", "range")), group_of(member("b", "range"))
    for group in (one, other):
        assert group.static_members is NO_ENTRIES
        assert group.pending_members is NO_ENTRIES
        assert group.pending_sync_members is NO_ENTRIES
    one.add_pending_member("p", 5)
    one.add_pending_sync("a")
    assert one.pending_members == {"p": 5} and one.pending_sync_members == {"a": None}
    assert other.pending_members is NO_ENTRIES and other.pending_sync_members is NO_ENTRIES
    assert one.pop_pending_member("p") == 5 and one.pop_pending_member("p") is None
    one.discard_pending_sync("a")
    assert one.pending_members is NO_ENTRIES and one.pending_sync_members is NO_ENTRIES
    static = group_of(member("s", "range", instance="i"))
    assert static.static_members == {"i": "s"}
    static.remove_member("s")
    assert static.static_members is NO_ENTRIES
    with pytest.raises(TypeError):
        NO_ENTRIES["x"] = 1  # type: ignore[index]
    assert copy.deepcopy(one).pending_members is NO_ENTRIES
    assert pickle.loads(pickle.dumps(NO_ENTRIES)) is NO_ENTRIES
