"""Which JoinGroup fields the group log could not store: checked before a member is let in.

A member whose strings do not fit the group log's int16 lengths would make every write of its
group fail; JoinGroup refuses it with INVALID_REQUEST instead (`ClassicGroups.invalid_join`).
"""

from __future__ import annotations

from coordinator.group import commands as c
from coordinator.grouplog.records import MAX_STORED_STRING_BYTES

__all__ = ["unstorable_join_field"]

# The group log stores these strings with int16 lengths (MAX_STORED_STRING_BYTES): a member
# whose ids or protocol names do not fit could never be written, and its group's persistence
# would fail on every rebalance. A client or instance id also becomes the prefix of a member id,
# to which "-" and a UUID are appended.
_MEMBER_ID_SUFFIX_BYTES = 37


def _too_long(value: str | None, reserve: int = 0) -> bool:
    if value is None or len(value) * 4 + reserve <= MAX_STORED_STRING_BYTES:
        return False  # no string of this many characters can be too long (the usual case)
    return len(value.encode()) + reserve > MAX_STORED_STRING_BYTES


def unstorable_join_field(cmd: c.JoinGroup) -> str | None:
    """The first JoinGroup field the group log could not store, if any."""
    if _too_long(cmd.group_id):
        return "group_id"
    if _too_long(cmd.member_id):
        return "member_id"
    if _too_long(cmd.client_id, _MEMBER_ID_SUFFIX_BYTES):
        return "client_id"
    if _too_long(cmd.group_instance_id, _MEMBER_ID_SUFFIX_BYTES):
        return "group_instance_id"
    if _too_long(cmd.protocol_type):
        return "protocol_type"
    for protocol in cmd.protocols:
        if _too_long(protocol.name):
            return "protocol name"
    return None

