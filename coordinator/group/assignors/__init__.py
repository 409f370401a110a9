"""Server-side partition assignors of consumer groups (KIP-848): `uniform` and `range`.

An assignor is a pure function from the group's members (their subscribed topic ids and their
current target assignment, for stickiness) and the subscribed topics' partition counts to each
member's new target assignment. Every partition of a topic that has at least one subscriber is
assigned to exactly one of its subscribers; no partition is assigned twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.group.assignors.range import assign_range
from coordinator.group.assignors.uniform import assign_uniform

__all__ = ["ASSIGNORS", "Assignor", "MemberSpec", "TopicPartitionSet"]

# topic id -> partitions
TopicPartitionSet = Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberSpec:
    member_id: str
    instance_id: str | None = None
    subscribed: frozenset[uuid.UUID]
    current: TopicPartitionSet = field(default_factory=dict)


# (members in a stable order, topic id -> partition count) -> member id -> assignment
Assignor = Callable[
    [Sequence[MemberSpec], Mapping[uuid.UUID, int]], dict[str, dict[uuid.UUID, frozenset[int]]]
]

ASSIGNORS: Mapping[str, Assignor] = {
    "uniform": assign_uniform,
    "range": assign_range,
}
