"""Disconnect-fast failover for consumer groups, as the classic groups have it
(`classic/rebalance.py`).

A dynamic member, whether it speaks ConsumerGroupHeartbeat or the classic protocol, remembers
the connection of its latest request (`group.connections`). When that connection closes (the
process died, or the broker closed it on bad input), the member is fenced
`group.member.disconnect.grace.ms` later with cause `disconnect` unless a request for it arrives
on any connection meanwhile. Fencing bumps the group epoch, so its partitions go to the others
through the ordinary target assignment. A client that lives on and reconnects within the grace
costs nothing; one that stays away longer costs one epoch bump, as a session expiry would, only
sooner. Static members (instance id) are meant to come back and keep the session timeout.

Timer: `("consumer-disconnect", group_id, member_id)`, deadline in `group.disconnect_deadlines`.
"""

from __future__ import annotations

from coordinator.group import events as ev
from coordinator.group.consumer.classic_members import classic_key
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.heartbeat import ConsumerEnv, disconnect_key, fence_member

__all__ = ["note_request", "on_disconnect_deadline", "start_disconnect_grace"]


def note_request(env: ConsumerEnv, group: ConsumerGroup, member_id: str,
                 connection_id: int) -> bool:
    """A request for `member_id` arrived on `connection_id`: it is alive, any grace ends.
    True when the member's connection changed (the caller indexes the new one)."""
    if (group.connections.get(member_id) == connection_id
            and member_id not in group.disconnect_deadlines):
        return False  # nearly every heartbeat: same connection, no grace running
    member = group.members.get(member_id)
    if member is None or member.instance_id is not None or env.config.disconnect_grace_ms < 0:
        return False
    if group.disconnect_deadlines.pop(member_id, None) is not None:
        env.result.cancel(disconnect_key(group.group_id, member_id))
    if group.connections.get(member_id) == connection_id:
        return False
    group.connections[member_id] = connection_id
    return True


def start_disconnect_grace(env: ConsumerEnv, group: ConsumerGroup, member_id: str,
                           connection_id: int) -> None:
    """`connection_id` closed; it matters only if it carried the member's latest request."""
    if group.connections.get(member_id) != connection_id:
        return  # the member moved to another connection (or is gone)
    del group.connections[member_id]
    member = group.members.get(member_id)
    grace = env.config.disconnect_grace_ms
    if member is None or member.instance_id is not None or grace < 0:
        return
    deadline = env.now_ms + grace
    group.disconnect_deadlines[member_id] = deadline
    env.result.schedule(disconnect_key(group.group_id, member_id), deadline)


def on_disconnect_deadline(env: ConsumerEnv, group: ConsumerGroup, member_id: str) -> None:
    """The grace passed with no request for the member: fence it as a session expiry would."""
    deadline = group.disconnect_deadlines.get(member_id)
    member = group.members.get(member_id)
    if deadline is None or member is None:
        return
    if deadline > env.now_ms:
        env.result.schedule(disconnect_key(group.group_id, member_id), deadline)
        return
    del group.disconnect_deadlines[member_id]
    if group.classic_deadlines.pop(member_id, None) is not None:
        env.result.cancel(classic_key(group.group_id, member_id))
    fence_member(env, group, member, ev.RemovalCause.DISCONNECT,
                 f"its connection closed {env.config.disconnect_grace_ms} ms ago without "
                 "leaving the group")
