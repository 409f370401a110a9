"""Moves one member from its current assignment towards its target (Kafka's
`CurrentAssignmentBuilder`): revoke first, assign only what nobody else still owns.

* STABLE at an older epoch, or UNRELEASED_PARTITIONS: compute the next step.
* UNREVOKED_PARTITIONS: wait until the member's reported owned partitions no longer contain
  any partition pending revocation (or it sent none: then keep waiting), then step to epoch+1.

A step keeps `assigned & target`; `assigned - target` must be revoked (the member stays at its
epoch in UNREVOKED_PARTITIONS while it still reports any of them); `target - kept` is given
now except partitions another member still owns (`owner_epoch` not -1), which leave the member
in UNRELEASED_PARTITIONS until a later heartbeat.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from coordinator.group.consumer.member import Assignment, ConsumerGroupMember, MemberState

__all__ = ["reconcile"]

OwnerEpoch = Callable[[uuid.UUID, int], int]  # -1 when nobody owns the partition


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    owner_epoch: OwnerEpoch,
    owned: Assignment | None,
) -> ConsumerGroupMember:
    """The member's next state; `owned` is what it reported (None: not sent this time)."""
    match member.state:
        case MemberState.STABLE:
            if member.member_epoch == target_epoch:
                return member
            return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned)
        case MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.pending_revocation):
                return member
            return _next(member, member.member_epoch + 1, target_epoch, target, owner_epoch,
                         owned)
        case MemberState.UNRELEASED_PARTITIONS:
            return _next(member, member.member_epoch, target_epoch, target, owner_epoch, owned)
        case _:
            return _next(member, target_epoch, target_epoch, target, owner_epoch, owned)


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    if owned is None:
        return True  # not reported: assume it still holds them
    return any(owned.get(t, frozenset()) & p for t, p in partitions.items())


def _with_epoch(member: ConsumerGroupMember, epoch: int) -> tuple[int, int]:
    """(member epoch, previous member epoch) after a step to `epoch` (as Kafka: the previous
    epoch is the one the member held before this step, even when it does not change)."""
    return epoch, member.member_epoch


def _next(
    member: ConsumerGroupMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    owner_epoch: OwnerEpoch,
    owned: Assignment | None,
) -> ConsumerGroupMember:
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    give: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        keep = current & wanted
        if keep:
            kept[topic_id] = keep
        if current - keep:
            revoke[topic_id] = current - keep
        pending = {p for p in wanted - keep if owner_epoch(topic_id, p) == -1}
        if len(pending) != len(wanted - keep):
            unreleased = True
        if pending:
            give[topic_id] = frozenset(pending)
    if revoke and _owns_any(owned, revoke):
        member_epoch, previous = _with_epoch(member, epoch)
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, member_epoch=member_epoch,
                       previous_member_epoch=previous, assigned=kept, pending_revocation=revoke)
    assigned = dict(kept)
    for topic_id, partitions in give.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    member_epoch, previous = _with_epoch(member, target_epoch)
    return replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        member_epoch=member_epoch,
        previous_member_epoch=previous,
        assigned=assigned,
        pending_revocation={},
    )
