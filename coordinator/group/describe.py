"""DescribeGroups and ListGroups over both group types: read-only answers from the live groups.

ConsumerGroupDescribe is the consumer groups' own (`consumer/coordinator.py`); these two classic
APIs see a consumer group only as far as Kafka shows it to them.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group import commands as c
from coordinator.group.classic.groups import ClassicGroups
from coordinator.group.classic.state import GroupState
from coordinator.group.consumer.coordinator import ConsumerGroupCoordinator
from coordinator.group.consumer.heartbeat import GROUP_TYPE as CONSUMER_GROUP_TYPE
from coordinator.group.outcomes import (
    DescribedGroup,
    DescribedMember,
    DescribeGroupsOutcome,
    ListedGroup,
    ListGroupsOutcome,
)

__all__ = ["describe_groups", "list_groups"]

# Kafka: DescribeGroups with includeAuthorizedOperations and no authorizer reports every
# operation a group supports: READ (3), DELETE (6), DESCRIBE (8), as a bit field.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)


def describe_groups(classic: ClassicGroups, consumer: ConsumerGroupCoordinator,
                    cmd: c.DescribeGroups) -> DescribeGroupsOutcome:
    return DescribeGroupsOutcome(
        groups=tuple(_describe_group(classic, consumer, gid, cmd) for gid in cmd.group_ids)
    )


def _describe_group(classic: ClassicGroups, consumer: ConsumerGroupCoordinator, group_id: str,
                    cmd: c.DescribeGroups) -> DescribedGroup:
    group = classic.group(group_id)
    if group is None:
        if cmd.api_version >= 6:
            # KIP-1043: v6 reports a missing group as such instead of a Dead one.
            return DescribedGroup(
                group_id=group_id,
                error=ErrorCode.group_id_not_found,
                error_message=(f"Group {group_id} is not a classic group."
                               if consumer.group(group_id) is not None
                               else f"Group {group_id} not found."),
                state=GroupState.DEAD.value,
            )
        # Kafka fills in the operations of every group answered without an error, Dead too.
        return DescribedGroup(group_id=group_id, state=GroupState.DEAD.value,
                              authorized_operations=_operations(cmd))
    stable = group.is_state(GroupState.STABLE) and group.protocol_name is not None
    protocol = group.protocol_name if stable else None
    return DescribedGroup(
        group_id=group_id,
        state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=protocol or "",
        members=tuple(
            DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata(protocol) if protocol is not None else b"",
                assignment=m.assignment if protocol is not None else b"",
            )
            for m in group.members.values()
        ),
        authorized_operations=_operations(cmd),
    )


def _operations(cmd: c.DescribeGroups) -> int:
    return GROUP_AUTHORIZED_OPERATIONS if cmd.include_authorized_operations else -(2**31)


# What Java's String.trim() removes from both ends: every character up to the space.
_JAVA_TRIMMED = "".join(map(chr, range(0x21)))


def list_groups(classic: ClassicGroups, consumer: ConsumerGroupCoordinator,
                cmd: c.ListGroups) -> ListGroupsOutcome:
    states = {s.lower().strip(_JAVA_TRIMMED) for s in cmd.states_filter}  # as Kafka's trim()
    types = {t.lower() for t in cmd.types_filter}
    classic_groups: tuple[ListedGroup, ...] = ()
    if not types or "classic" in types:
        classic_groups = tuple(
            ListedGroup(
                group_id=g.group_id,
                protocol_type=g.protocol_type or "",
                state=g.state.value,
            )
            for g in classic
            if not states or g.state.value.lower() in states
        )
    consumer_groups: tuple[ListedGroup, ...] = ()
    if not types or CONSUMER_GROUP_TYPE in types:
        consumer_groups = tuple(
            ListedGroup(group_id=g.group_id, protocol_type=CONSUMER_GROUP_TYPE,
                        state=g.state.value, group_type=CONSUMER_GROUP_TYPE)
            for g in consumer
            if not states or g.state.value.lower() in states
        )
    return ListGroupsOutcome(groups=classic_groups + consumer_groups)
