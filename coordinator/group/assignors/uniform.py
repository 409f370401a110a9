"""The `uniform` assignor (Kafka's default): balanced and sticky.

Every partition of every subscribed topic goes to one of its subscribers so that member loads
differ by at most one where subscriptions allow it, while moving as few partitions as possible
away from their current owners: a member joining a stable group takes its share from the
others and nobody else's partitions move.

* Homogeneous subscriptions (every member subscribes to the same topics), the common case: each
  member may keep up to its quota (P div M, plus one for the first P mod M members that
  need it) of what it has; the rest is dealt to members below quota.
* Heterogeneous subscriptions: partitions are placed one topic at a time, rarest subscription
  first; a partition stays with its current owner unless that owner is already more than one
  partition above the least loaded subscriber, else it goes to the least loaded subscriber.
  Balance is therefore per subscriber set, as far as the subscriptions allow (Kafka's
  heterogeneous builder also runs a final balancing pass that this one does not).
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coordinator.group.assignors import MemberSpec


def assign_uniform(
    members: Sequence[MemberSpec], topics: Mapping[uuid.UUID, int]
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    if not members:
        return {}
    first = members[0].subscribed
    if all(m.subscribed == first for m in members):
        return _homogeneous(members, {t: n for t, n in topics.items() if t in first})
    return _heterogeneous(members, topics)


def _homogeneous(
    members: Sequence[MemberSpec], topics: Mapping[uuid.UUID, int]
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    total = sum(topics.values())
    quota, extra = divmod(total, len(members))
    owned: dict[str, list[tuple[uuid.UUID, int]]] = {}
    taken: set[tuple[uuid.UUID, int]] = set()
    # Sticky pass: everyone keeps up to `quota` of its valid partitions; members keeping more
    # than that compete for the `extra` one-more slots, larger holders first.
    keep_more: list[tuple[int, str]] = []
    for m in members:
        mine = [(t, p) for t, parts in sorted(m.current.items()) if t in topics
                for p in sorted(parts) if p < topics[t]]
        owned[m.member_id] = mine[:quota]
        taken.update(owned[m.member_id])
        if len(mine) > quota:
            keep_more.append((-len(mine), m.member_id))
    keep_more.sort()
    slots_left = extra
    current_by_id = {m.member_id: m for m in members}
    for _, member_id in keep_more:
        if not slots_left:
            break
        m = current_by_id[member_id]
        for t, parts in sorted(m.current.items()):
            if t not in topics:
                continue
            candidate = next(((t, p) for p in sorted(parts)
                              if p < topics[t] and (t, p) not in taken), None)
            if candidate is not None:
                owned[member_id].append(candidate)
                taken.add(candidate)
                slots_left -= 1
                break
    # Deal the rest: members below quota first, then the remaining one-more slots.
    unassigned = [(t, p) for t in sorted(topics) for p in range(topics[t])
                  if (t, p) not in taken]
    position = 0
    for m in members:
        need = quota - len(owned[m.member_id])
        if need > 0:
            owned[m.member_id].extend(unassigned[position:position + need])
            position += need
    for m in members:
        if position >= len(unassigned) or slots_left <= 0:
            break
        if len(owned[m.member_id]) == quota:
            owned[m.member_id].append(unassigned[position])
            position += 1
            slots_left -= 1
    return {member_id: _group(parts) for member_id, parts in owned.items()}


def _heterogeneous(
    members: Sequence[MemberSpec], topics: Mapping[uuid.UUID, int]
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    load = {m.member_id: 0 for m in members}
    owned: dict[str, list[tuple[uuid.UUID, int]]] = {m.member_id: [] for m in members}
    owner_of: dict[tuple[uuid.UUID, int], str] = {}
    for m in members:
        for t, parts in m.current.items():
            for p in parts:
                owner_of[(t, p)] = m.member_id
    subscribers = {t: [m.member_id for m in members if t in m.subscribed] for t in topics}
    for t in sorted(topics, key=lambda t: (len(subscribers[t]), t)):
        eligible = subscribers[t]
        if not eligible:
            continue
        heap = [(load[mid], mid) for mid in eligible]
        heapq.heapify(heap)
        eligible_set = set(eligible)
        for p in range(topics[t]):
            while heap and heap[0][0] != load[heap[0][1]]:
                _, mid = heapq.heappop(heap)
                heapq.heappush(heap, (load[mid], mid))
            least = heap[0][0]
            current = owner_of.get((t, p))
            if current in eligible_set and load[current] <= least + 1:  # type: ignore[index]
                chosen = current
            else:
                chosen = heap[0][1]
            assert chosen is not None
            owned[chosen].append((t, p))
            load[chosen] += 1
            heapq.heappush(heap, (load[chosen], chosen))
    return {member_id: _group(parts) for member_id, parts in owned.items()}


def _group(parts: list[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, frozenset[int]]:
    grouped: dict[uuid.UUID, set[int]] = {}
    for t, p in parts:
        grouped.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in grouped.items()}
