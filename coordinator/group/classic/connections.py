"""Which connection carried what, for the classic groups: parked requests and members' own.

Disconnect-fast failover (`rebalance.py`) needs to know, when a connection closes, which
JoinGroup or SyncGroup was parked on it and which dynamic members counted it as their own; and,
when a JoinGroup or SyncGroup arrives, whether its connection carried one before (a client that
keeps its connection, unlike kafka-go's one connection per request). This index answers those
three questions; the groups themselves stay in `ClassicGroups`.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["ConnectionIndex"]


class ConnectionIndex:
    def __init__(self) -> None:
        # connection id -> groups where a request of that connection may be parked: the group
        # id itself while there is one (nearly always: a consumer's coordinator connection
        # serves one group), a set beyond that. Entries live until the connection closes.
        self._parked_by_connection: dict[int, str | set[str]] = {}
        # connection id -> (group id, member id) of dynamic members whose requests came on it:
        # the pair itself while there is one (nearly always: a set costs 216 bytes, per
        # connection of every idle member), a set beyond that. An entry is stale once the
        # member moved to another connection (checked on close).
        self.members_by_connection: dict[int, tuple[str, str] | set[tuple[str, str]]] = {}
        # Connections that have carried a JoinGroup or SyncGroup: a later one on the same
        # connection makes it the member's own (a client that keeps it); the first does not
        # (kafka-go opens a connection per JoinGroup and SyncGroup and closes it once answered).
        self.group_request_connections: set[int] = set()

    def add_member(self, connection_id: int, group_id: str, member_id: str) -> None:
        index = self.members_by_connection
        members = index.get(connection_id)
        if members is None:
            index[connection_id] = (group_id, member_id)
        elif isinstance(members, tuple):
            if members != (group_id, member_id):
                index[connection_id] = {members, (group_id, member_id)}
        else:
            members.add((group_id, member_id))

    def parked(self, connection_id: int, group_id: str) -> None:
        """A JoinGroup or SyncGroup of `group_id` is parked on the connection."""
        index = self._parked_by_connection
        groups = index.get(connection_id)
        if groups is None:
            index[connection_id] = group_id
        elif isinstance(groups, str):
            if groups != group_id:
                index[connection_id] = {groups, group_id}
        else:
            groups.add(group_id)

    def closed(self, connection_id: int) -> tuple[tuple[str, ...] | set[str],
                                                  Collection[tuple[str, str]]]:
        """Forget the connection: (the groups where it may have parked a request, the
        members that counted it as theirs)."""
        self.group_request_connections.discard(connection_id)
        parked = self._parked_by_connection.pop(connection_id, ())
        members = self.members_by_connection.pop(connection_id, ())
        return ((parked,) if isinstance(parked, str) else parked,
                (members,) if isinstance(members, tuple) and members else members)
