"""Disconnect-fast failover for consumer groups, as the classic groups have it
(`classic/rebalance.py`).

A dynamic member, whether it speaks ConsumerGroupHeartbeat or the classic protocol, is
connected while a connection that carried an accepted heartbeat or OffsetCommit for it is open
(`group.connections`, the latest; `group.other_connections`, earlier ones still open). When the
last of them closes (the process died, or the broker closed it on bad input), the member is
fenced `group.member.disconnect.grace.ms` later with cause `disconnect` unless an accepted
request for it arrives on any connection meanwhile. A classic member's answered JoinGroup or
SyncGroup ends a grace, and binds its connection only if that carried one before (kafka-go
sends each on a connection it closes once answered). A classic member that owes a JoinGroup
(it was told to rejoin) is not fenced for closing its connection: the JoinGroup's deadline
bounds that wait. A rejected request changes nothing. Fencing bumps the group epoch, so its
partitions go to the others through the ordinary target assignment. A client that lives on and
reconnects within the grace costs nothing; one that stays away longer costs one epoch bump, as
a session expiry would, only sooner. Static members (instance id) are meant to come back and
keep the session timeout.

Timer: `("consumer-disconnect", group_id, member_id)`, deadline in `group.disconnect_deadlines`.
"""

from __future__ import annotations

from coordinator.group import events as ev
from coordinator.group.consumer.classic_members import classic_key
from coordinator.group.consumer.group import ConsumerGroup
from coordinator.group.consumer.heartbeat import ConsumerEnv, disconnect_key, fence_member

__all__ = ["bind_connection", "connection_lost", "note_alive", "on_disconnect_deadline"]


def note_alive(env: ConsumerEnv, group: ConsumerGroup, member_id: str) -> None:
    """An accepted request spoke for `member_id`: any grace ends."""
    if group.disconnect_deadlines.pop(member_id, None) is not None:
        env.result.cancel(disconnect_key(group.group_id, member_id))


def bind_connection(env: ConsumerEnv, group: ConsumerGroup, member_id: str,
                    connection_id: int) -> bool:
    """An accepted heartbeat or commit for `member_id` arrived on `connection_id`: it is
    alive, and the connection is its latest own. True when the connection is new to the member
    (the caller indexes it)."""
    previous = group.connections.get(member_id)
    if previous == connection_id and member_id not in group.disconnect_deadlines:
        return False  # nearly every heartbeat: same connection, no grace running
    member = group.members.get(member_id)
    if member is None or member.instance_id is not None or env.config.disconnect_grace_ms < 0:
        return False
    note_alive(env, group, member_id)
    if previous == connection_id:
        return False
    group.connections[member_id] = connection_id
    others = group.other_connections.get(member_id)
    known = others is not None and connection_id in others
    if others is not None:
        others.discard(connection_id)
    if previous is not None:
        group.other_connections.setdefault(member_id, set()).add(previous)
    if not group.other_connections.get(member_id, True):
        del group.other_connections[member_id]
    return not known


def connection_lost(env: ConsumerEnv, group: ConsumerGroup, member_id: str,
                    connection_id: int) -> None:
    """`connection_id` closed: the grace starts when it was the member's last own one."""
    others = group.other_connections.get(member_id)
    if group.connections.get(member_id) == connection_id:
        if others:
            group.connections[member_id] = others.pop()
        else:
            del group.connections[member_id]
    elif others is not None and connection_id in others:
        others.discard(connection_id)
    else:
        return  # not one of the member's (or it is gone)
    if others is not None and not others:
        del group.other_connections[member_id]
    member = group.members.get(member_id)
    grace = env.config.disconnect_grace_ms
    if (member is None or member.instance_id is not None or grace < 0
            or member_id in group.connections or member_id in group.disconnect_deadlines):
        return
    if group.classic_deadlines.get(member_id, ("",))[0] == "join":
        # A classic member told to rejoin may close its connection to do so (kafka-go does);
        # the JoinGroup it owes has its own deadline (`classic_members.py`).
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
