"""The steady-state ConsumerGroupHeartbeat, answered without the full heartbeat's work.

Once a member is reconciled, each heartbeat carries only its id and epoch (every optional
field null: "unchanged"), and the full path (`heartbeat.heartbeat`) then validates, finds the
member, compares its subscription, checks the topic metadata and the target assignment, takes
no reconciliation step, moves the session deadline and answers with the member's epoch: no
record, no event, no timer change. `steady_heartbeat` checks, cheaply and before changing
anything, that the request and the group are in exactly that situation, and then does only
what that path would do. Anything else returns None and takes the full path, so the answer and
the group's state are always the full path's (`tests/property/test_consumer_group_steady.py`
runs both on the same states and compares).
"""

from __future__ import annotations

from coordinator.group.consumer.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatOutcome,
)
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.group import ConsumerGroup, TopicImage
from coordinator.group.consumer.member import MemberState
from coordinator.grouplog.records import MAX_STORED_STRING_BYTES

__all__ = ["steady_heartbeat"]

# Strings this short cannot exceed the group log's limit whatever they hold (at most 4 bytes a
# character): the full path's check needs no encoding then.
_SHORT_ENOUGH = MAX_STORED_STRING_BYTES // 4
_STABLE = MemberState.STABLE

_new = object.__new__
(_set_error, _set_error_message, _set_member_id, _set_member_epoch, _set_heartbeat_interval,
 _set_assignment) = (vars(ConsumerGroupHeartbeatOutcome)[name].__set__ for name in (
     "error", "error_message", "member_id", "member_epoch", "heartbeat_interval_ms",
     "assignment"))
_NO_ERROR = ConsumerGroupHeartbeatOutcome().error


def steady_heartbeat(config: ConsumerGroupConfig, image: TopicImage,
                     groups: dict[str, ConsumerGroup], cmd: ConsumerGroupHeartbeat, now_ms: int
                     ) -> ConsumerGroupHeartbeatOutcome | None:
    """The answer to a steady-state heartbeat (its session moved), or None: not one."""
    if (cmd.owned is not None or cmd.subscribed_topic_names is not None
            or cmd.subscribed_topic_regex is not None or cmd.server_assignor is not None
            or cmd.rack_id is not None or cmd.rebalance_timeout_ms != -1
            or cmd.member_epoch <= 0):
        return None
    group = groups.get(cmd.group_id)
    if group is None:
        return None
    member_id = cmd.member_id
    member = group.members.get(member_id)
    if (member is None or member.member_epoch != cmd.member_epoch
            or member.classic is not None  # a classic-protocol member: the full path decides
            or member.state is not _STABLE
            or member.member_epoch != group.assignment_epoch
            or group.group_epoch != group.assignment_epoch
            or group.metadata_version != image.version
            or member.client_id != cmd.client_id or member.client_host != cmd.client_host):
        return None
    instance_id = cmd.instance_id
    if instance_id is not None and (instance_id != member.instance_id
                                    or group.static_members.get(instance_id) != member_id):
        return None
    # The full path's validation: what it would refuse, it refuses there.
    if (not cmd.group_id or not member_id or instance_id == ""
            or len(cmd.group_id) > _SHORT_ENOUGH or len(member_id) > _SHORT_ENOUGH
            or len(cmd.client_id) > _SHORT_ENOUGH or len(cmd.client_host) > _SHORT_ENOUGH
            or (instance_id is not None and len(instance_id) > _SHORT_ENOUGH)):
        return None
    deadlines = group.session_deadlines
    if member_id not in deadlines:  # the full path schedules a wake-up then
        return None
    # The full path binds the request's connection (`disconnect.bind_connection`): a new
    # connection, or a disconnect grace running, is for it to handle.
    if ((group.connections.get(member_id) != cmd.ref.connection_id
         or member_id in group.disconnect_deadlines)
            and member.instance_id is None and config.disconnect_grace_ms >= 0):
        return None
    deadlines[member_id] = now_ms + config.session_timeout_ms
    outcome = _new(ConsumerGroupHeartbeatOutcome)
    _set_error(outcome, _NO_ERROR)
    _set_error_message(outcome, None)
    _set_member_id(outcome, member_id)
    _set_member_epoch(outcome, member.member_epoch)
    _set_heartbeat_interval(outcome, config.heartbeat_interval_ms)
    _set_assignment(outcome, None)
    return outcome
