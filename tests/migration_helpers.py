"""Classic consumers in tests of online migration: ConsumerProtocol bytes and a Stable classic
group whose members hold real subscriptions and assignments."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from coordinator.group import commands as c
from coordinator.group.embedded_protocol import encode_assignment, parse_assignment
from tests.builders import JoinGroupBuilder, heartbeat, sync
from tests.context import GroupTestContext


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def subscription(topics: Iterable[str], owned: Mapping[str, Iterable[int]] | None = None,
                 version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription; v0 has no owned partitions (an eager client)."""
    topics = list(topics)
    out = [struct.pack(">h", version), struct.pack(">i", len(topics))]
    out.extend(_string(t) for t in topics)
    out.append(struct.pack(">i", -1))  # user data
    if version >= 1:
        owned = owned or {}
        out.append(struct.pack(">i", len(owned)))
        for topic, partitions in sorted(owned.items()):
            ps = sorted(partitions)
            out.append(_string(topic) + struct.pack(">i", len(ps)))
            out.extend(struct.pack(">i", p) for p in ps)
    if version >= 2:
        out.append(struct.pack(">i", -1))
    if version >= 3:
        out.append(struct.pack(">h", -1))
    return b"".join(out)


def classic_join(group: str = "g", member: str = "", topics: Iterable[str] = ("t",),
                 owned: Mapping[str, Iterable[int]] | None = None, version: int = 0,
                 **kw: object) -> JoinGroupBuilder:
    meta = subscription(topics, owned, version)
    return JoinGroupBuilder(group=group, member=member,
                            offered=(c.Protocol(name="range", metadata=meta),),
                            **kw)  # type: ignore[arg-type]


def held(outcome: object, topic: str = "t") -> set[int]:
    """The partitions a SyncGroup answer gives."""
    return set(parse_assignment(outcome.assignment).get(topic, frozenset()))  # type: ignore[attr-defined]


def stable_classic_group(ctx: GroupTestContext, n: int, partitions: int, group: str = "g",
                         session_ms: int = 10_000) -> dict[str, set[int]]:
    """A Stable classic group of n members subscribed to `t`, partitions split in ranges by
    the leader; member i talks on connection 100 + i. Returns member id -> partitions."""
    ids, refs = [], []
    for i in range(n):
        b = classic_join(group, client_id=f"c{i}", session_ms=session_ms)
        ids.append(ctx.join_dynamic(b, connection=100 + i))
        refs.append(ctx.ref_of_last())
    ctx.sleep(0)
    joined = [ctx.reply(r) for r in refs]
    assert all(j is not None and j.error.value == 0 for j in joined), joined
    leader, generation = joined[0].leader, joined[0].generation_id
    share = {m: set(range(i, partitions, n)) for i, m in enumerate(sorted(ids))}
    for m in [leader] + [x for x in ids if x != leader]:
        assignments = ({x: encode_assignment({"t": frozenset(p)}, 0) for x, p in share.items()}
                       if m == leader else None)
        ctx.send(sync(m, generation, group=group, assignments=assignments), 100 + ids.index(m))
    for m in ids:  # a first heartbeat makes each connection the member's own
        ctx.send(heartbeat(m, generation, group=group), 100 + ids.index(m))
    assert ctx.group(group).state.value == "Stable"
    return share
