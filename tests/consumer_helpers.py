"""Builders for the consumer group (KIP-848) tests: heartbeats and a topic image."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.group.consumer.commands import ConsumerGroupHeartbeat
from coordinator.group.consumer.group import TopicImage, TopicInfo
from coordinator.group.result import RequestRef

_PLACEHOLDER = RequestRef(0, 0)


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def image(topics: Mapping[str, int], version: int = 1) -> TopicImage:
    return TopicImage(version=version, by_name={
        name: TopicInfo(topic_id(name), name, count) for name, count in topics.items()})


def owned(parts: Mapping[str, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {topic_id(t): frozenset(p) for t, p in parts.items()}


def join(member_id: str, topics: Iterable[str] = ("t",), group: str = "g", **kw: Any
         ) -> ConsumerGroupHeartbeat:
    fields: dict[str, Any] = {
        "rebalance_timeout_ms": 30_000, "subscribed_topic_names": tuple(topics), "owned": {},
        "client_id": "client", "client_host": "/127.0.0.1"}
    fields.update(kw)
    return ConsumerGroupHeartbeat(ref=_PLACEHOLDER, api_version=1, group_id=group,
                                  member_id=member_id, member_epoch=0, **fields)


def beat(member_id: str, epoch: int, owned_parts: Mapping[str, Iterable[int]] | None = None,
         group: str = "g", **kw: Any) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(
        ref=_PLACEHOLDER, api_version=1, group_id=group, member_id=member_id,
        member_epoch=epoch, owned=None if owned_parts is None else owned(owned_parts),
        client_id="client", client_host="/127.0.0.1", **kw)


def parts(assignment: Mapping[uuid.UUID, frozenset[int]] | None, topic: str = "t") -> set[int]:
    if assignment is None:
        return set()
    return set(assignment.get(topic_id(topic), frozenset()))
