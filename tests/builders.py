"""Commands with defaults for every field, so a test names only what it is about.

The `ref` is a placeholder; `GroupTestContext.send` gives every command a fresh one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from coordinator.group import commands as c
from coordinator.group.result import RequestRef

PLACEHOLDER = RequestRef(0, 0)
CONSUMER = "consumer"


def protocols(*names: str, metadata: bytes = b"meta") -> tuple[c.Protocol, ...]:
    return tuple(c.Protocol(name=n, metadata=metadata) for n in names)


@dataclass
class JoinGroupBuilder:
    group: str = "g"
    member: str = ""
    instance_id: str | None = None
    version: int = 5
    session_ms: int = 10_000
    rebalance_ms: int = 30_000
    protocol_type: str = CONSUMER
    offered: tuple[c.Protocol, ...] = field(default_factory=lambda: protocols("range"))
    client_id: str = "client"
    client_host: str = "/127.0.0.1"
    reason: str | None = None

    def member_id(self, member_id: str) -> JoinGroupBuilder:
        return replace(self, member=member_id)

    def group_instance_id(self, instance_id: str | None) -> JoinGroupBuilder:
        return replace(self, instance_id=instance_id)

    def api_version(self, version: int) -> JoinGroupBuilder:
        return replace(self, version=version)

    def session_timeout_ms(self, ms: int) -> JoinGroupBuilder:
        return replace(self, session_ms=ms)

    def rebalance_timeout_ms(self, ms: int) -> JoinGroupBuilder:
        return replace(self, rebalance_ms=ms)

    def with_protocols(self, *offered: c.Protocol) -> JoinGroupBuilder:
        return replace(self, offered=tuple(offered))

    def build(self) -> c.JoinGroup:
        return c.JoinGroup(
            ref=PLACEHOLDER,
            api_version=self.version,
            group_id=self.group,
            member_id=self.member,
            group_instance_id=self.instance_id,
            session_timeout_ms=self.session_ms,
            rebalance_timeout_ms=self.rebalance_ms,
            protocol_type=self.protocol_type,
            protocols=self.offered,
            reason=self.reason,
            client_id=self.client_id,
            client_host=self.client_host,
        )


def sync(
    member_id: str,
    generation_id: int,
    *,
    group: str = "g",
    assignments: dict[str, bytes] | None = None,
    instance_id: str | None = None,
    version: int = 3,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
) -> c.SyncGroup:
    return c.SyncGroup(
        ref=PLACEHOLDER,
        api_version=version,
        group_id=group,
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=tuple((assignments or {}).items()),
    )


def heartbeat(
    member_id: str, generation_id: int, *, group: str = "g", instance_id: str | None = None
) -> c.Heartbeat:
    return c.Heartbeat(
        ref=PLACEHOLDER,
        api_version=3,
        group_id=group,
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=instance_id,
    )


def leave(
    *members: str | tuple[str, str | None], group: str = "g", version: int = 3
) -> c.LeaveGroup:
    identities = tuple(
        c.LeaveMember(member_id=m[0], group_instance_id=m[1])
        if isinstance(m, tuple)
        else c.LeaveMember(member_id=m)
        for m in members
    )
    return c.LeaveGroup(ref=PLACEHOLDER, api_version=version, group_id=group, members=identities)


def describe(*group_ids: str, version: int = 5) -> c.DescribeGroups:
    return c.DescribeGroups(ref=PLACEHOLDER, api_version=version, group_ids=group_ids)


def list_groups(
    *, states: frozenset[str] = frozenset(), types: frozenset[str] = frozenset(), version: int = 5
) -> c.ListGroups:
    return c.ListGroups(
        ref=PLACEHOLDER, api_version=version, states_filter=states, types_filter=types
    )
