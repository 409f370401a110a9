"""The classic group state machine: states, their valid previous states, and the transition.

The table is SPEC §3 (Kafka's `ClassicGroupState`). Each member's docstring says how every API
is answered in that state (`action`) and what moves the group out of it (`transition`); the
per-API modules implement exactly these blocks.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Protocol

__all__ = ["VALID_PREVIOUS", "GroupState", "StateHolder", "can_rebalance", "transition_to"]


class GroupState(enum.Enum):
    """The state of a classic group; `value` is Kafka's name, as DescribeGroups reports it."""

    EMPTY = "Empty"
    """Group has no more members, but lingers until all offsets have expired. This state also
    represents groups which use Kafka only for offset commits and have no members.

    action: respond normally to join group from new members
            respond to sync group with UNKNOWN_MEMBER_ID
            respond to heartbeat with UNKNOWN_MEMBER_ID
            respond to leave group with UNKNOWN_MEMBER_ID
            respond to offset commit with generation -1 (simple consumers) normally
    transition: last offsets removed in periodic expiration task => Dead
                join group from a new member => PreparingRebalance
                group is removed by partition emigration or DeleteGroups => Dead
    """

    PREPARING_REBALANCE = "PreparingRebalance"
    """Group is preparing to rebalance.

    action: respond to heartbeats with REBALANCE_IN_PROGRESS
            respond to sync group with REBALANCE_IN_PROGRESS
            remove member on leave group request
            park join group requests from new or existing members until all expected members
              have joined (or the rebalance timeout / initial delay expires)
            allow offset commits from members of the current generation (KIP-429)
    transition: some members have joined by the timeout => CompletingRebalance
                all members have left the group => Empty
                group is removed by partition emigration => Dead
    """

    COMPLETING_REBALANCE = "CompletingRebalance"
    """Group is awaiting the assignment from the leader.

    action: respond to heartbeats with NONE and reset the session deadline
            respond to offset commits with REBALANCE_IN_PROGRESS
            park sync group requests from followers until the leader's assignment arrives
            answer a join group with unchanged protocols with the current generation
            remove member on leave group request
    transition: sync group with the assignment from the leader => Stable
                join group with new or changed metadata => PreparingRebalance
                leave group from an existing member => PreparingRebalance
                member failure detected => PreparingRebalance
                pending sync members expire after the rebalance timeout => PreparingRebalance
                group is removed by partition emigration => Dead
    """

    STABLE = "Stable"
    """Group is stable.

    action: respond to member heartbeats normally
            respond to sync group from any member with its current assignment
            respond to join group from followers with matching metadata with the current group
              metadata (a static member with an empty member id replaces its old id, KIP-345)
            allow offset commits from members of the current generation
    transition: member failure detected via heartbeat => PreparingRebalance
                leave group from an existing member => PreparingRebalance
                leader join group => PreparingRebalance
                follower join group with new metadata => PreparingRebalance
                group is removed by partition emigration => Dead
    """

    DEAD = "Dead"
    """Group has no more members and its metadata is being removed.

    action: respond to join group with COORDINATOR_NOT_AVAILABLE (UNKNOWN_MEMBER_ID for a known
              member id would make the client reset; Kafka answers COORDINATOR_NOT_AVAILABLE)
            respond to sync group, heartbeat and offset commit with COORDINATOR_NOT_AVAILABLE
            respond to leave group with COORDINATOR_NOT_AVAILABLE
    transition: Dead is a final state before the group is removed from memory
    """

    def __str__(self) -> str:
        return self.value


_S = GroupState

VALID_PREVIOUS: Mapping[GroupState, frozenset[GroupState]] = {
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}


class StateHolder(Protocol):
    state: GroupState
    previous_state: GroupState
    state_timestamp_ms: int


def can_rebalance(state: GroupState) -> bool:
    return state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]


def transition_to(holder: StateHolder, target: GroupState, now_ms: int) -> None:
    """Move `holder` to `target`, recording the time; an invalid transition is a bug."""
    assert holder.state in VALID_PREVIOUS[target], (
        f"invalid group state transition {holder.state} -> {target}"
    )
    holder.previous_state = holder.state
    holder.state = target
    holder.state_timestamp_ms = now_ms
