"""A classic group member: plain data plus the requests parked on its behalf."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from coordinator.group.commands import Protocol
from coordinator.group.result import RequestRef

__all__ = ["ClassicGroupMember", "Parked"]


@dataclass(slots=True)
class Parked:
    """A JoinGroup or SyncGroup waiting for the rebalance to move on.

    `ref` becomes None when the client's connection closes: the member still counts as
    having joined (Kafka keeps the callback of a muted socket too), but nobody is answered.
    """

    ref: RequestRef | None


@dataclass(slots=True, kw_only=True)
class ClassicGroupMember:
    """One member of a classic group.

    `protocols`, `rebalance_timeout_ms`, `awaiting_join` and `awaiting_sync` feed the group's
    tallies: once the member is in a group, change them only through
    `ClassicGroup.update_member`, `park_join`/`unpark_join` and `park_sync`/`unpark_sync`.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: bytes = b""
    awaiting_join: Parked | None = None
    awaiting_sync: Parked | None = None
    # Until its first JoinGroup completes, a member cannot heartbeat: its deadline is the
    # new-member join timeout and being parked does not keep it alive.
    is_new: bool = False
    # Liveness: the deadline lives here; the wheel holds `heartbeat_armed_ms` and re-arms
    # when it fires early (STYLE §6). None: no deadline (parked members are alive).
    session_deadline_ms: int | None = None
    heartbeat_armed_ms: int | None = None
    # Disconnect-fast failover (dynamic members only, `rebalance.py`): the connection of the
    # member's latest accepted Heartbeat or OffsetCommit, the other open connections that
    # carried one earlier (None while there are none: nearly always), and while none is open,
    # when the member will be removed.
    connection_id: int | None = None
    other_connections: set[int] | None = None
    disconnect_deadline_ms: int | None = None
    # The connection on which the member's latest Heartbeat was told to rejoin: a client may
    # close it on purpose to rejoin on another (kafka-go does), which is no sign of death.
    rejoin_told_on: int | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def protocol_names(self) -> list[str]:
        return [p.name for p in self.protocols]

    def supported_protocols(self) -> set[str]:
        """The protocol names, each once (a client may repeat one; it is still one vote)."""
        return {p.name for p in self.protocols}

    def metadata(self, protocol_name: str) -> bytes:
        for p in self.protocols:
            if p.name == protocol_name:
                return p.metadata
        raise AssertionError(f"member {self.member_id} does not support {protocol_name}")

    def matches(self, protocols: tuple[Protocol, ...]) -> bool:
        """Same protocols, same order, same metadata bytes (Kafka `MemberMetadata.matches`)."""
        return self.protocols == protocols

    def vote(self, candidates: AbstractSet[str]) -> str:
        """The member's most preferred protocol among `candidates`."""
        preferred = self.preferred(candidates)
        if preferred is None:
            raise AssertionError(f"member {self.member_id} supports none of {set(candidates)}")
        return preferred

    def preferred(self, candidates: AbstractSet[str]) -> str | None:
        """The first of the member's protocols that is in `candidates`, if any."""
        for p in self.protocols:
            if p.name in candidates:
                return p.name
        return None

    def is_connected(self) -> bool:
        """A connection that carried an accepted Heartbeat or OffsetCommit for it is open."""
        return self.connection_id is not None or bool(self.other_connections)

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka `MemberMetadata.hasSatisfiedHeartbeat`, evaluated when the deadline passes."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync
