"""The classic groups' connection index: one member per connection is held as a pair, more as a
set, and closing the connection returns each once either way."""

from __future__ import annotations

from coordinator.group.classic.connections import ConnectionIndex


def test_one_member_is_returned_once_on_close() -> None:
    index = ConnectionIndex()
    index.add_member(7, "g", "m-1")
    index.add_member(7, "g", "m-1")  # a later heartbeat on the same connection
    parked, members = index.closed(7)
    assert tuple(parked) == ()
    assert sorted(members) == [("g", "m-1")]
    assert index.closed(7) == ((), ())  # forgotten


def test_members_sharing_a_connection_are_all_returned() -> None:
    index = ConnectionIndex()
    index.add_member(7, "g", "m-1")
    index.add_member(7, "h", "m-2")
    index.add_member(7, "g", "m-1")
    index.add_member(8, "g", "m-3")
    _, members = index.closed(7)
    assert sorted(members) == [("g", "m-1"), ("h", "m-2")]
    _, members = index.closed(8)
    assert sorted(members) == [("g", "m-3")]


def test_a_connection_with_no_member_returns_none() -> None:
    index = ConnectionIndex()
    index.parked(9, "g")
    parked, members = index.closed(9)
    assert tuple(parked) == ("g",)
    assert not members
