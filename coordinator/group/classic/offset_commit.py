"""The group side of an OffsetCommit to a classic group (SPEC §10, Kafka
`ClassicGroup.validateOffsetCommit`).

The per-partition checks and the records are the offsets' (`coordinator/group/offsets.py`); a
group that does not exist yet is `ClassicGroups`' to create (a standalone consumer's commit).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group.classic import rebalance as rb
from coordinator.group.classic.group import ClassicGroup
from coordinator.group.classic.state import GroupState

__all__ = ["validate_offset_commit"]


def validate_offset_commit(env: rb.Env, group: ClassicGroup, member_id: str, generation_id: int,
                           group_instance_id: str | None) -> ErrorCode | None:
    """None when the offsets may be stored. A commit by a current member resets its session
    deadline, also during PreparingRebalance (KIP-429 members commit while they revoke)."""
    if group.is_state(GroupState.DEAD):
        return ErrorCode.coordinator_not_available
    if generation_id < 0 and group.is_state(GroupState.EMPTY):
        return None
    if generation_id >= 0 or member_id != c.UNKNOWN_MEMBER_ID or group_instance_id is not None:
        error = rb.validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
    elif not group.is_state(GroupState.EMPTY):
        return ErrorCode.unknown_member_id
    match group.state:
        case GroupState.EMPTY:
            return None
        case GroupState.STABLE | GroupState.PREPARING_REBALANCE:
            rb.schedule_heartbeat(env, group, group.members[member_id])
            return None
        case GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        case GroupState.DEAD:
            raise AssertionError("checked above")
