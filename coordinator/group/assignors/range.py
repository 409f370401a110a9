"""The `range` assignor: per topic, contiguous partition ranges over its sorted subscribers.

As the classic RangeAssignor, so co-partitioned topics with the same subscribers line up: for a
topic of P partitions and S subscribers (sorted by instance id, then member id, so a static
member keeps its range across restarts), the first P mod S subscribers get P div S + 1
partitions, the rest P div S.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coordinator.group.assignors import MemberSpec


def assign_range(
    members: Sequence[MemberSpec], topics: Mapping[uuid.UUID, int]
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    out: dict[str, dict[uuid.UUID, frozenset[int]]] = {m.member_id: {} for m in members}
    ordered = sorted(members, key=lambda m: (m.instance_id or "\U0010ffff", m.member_id))
    for topic_id, count in topics.items():
        subscribers = [m.member_id for m in ordered if topic_id in m.subscribed]
        if not subscribers or count <= 0:
            continue
        base, extra = divmod(count, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            size = base + (1 if index < extra else 0)
            if size:
                out[member_id][topic_id] = frozenset(range(start, start + size))
            start += size
    return out
