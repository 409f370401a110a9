"""Coordinator settings, named after the Kafka broker configs they stand for.

`KAFKA_NAMES` is the one place that says which broker setting (`coordinator/settings.py`, by
Kafka's name) sets which field; the runtime builds the config with `from_settings`. A field
that no setting names (`group_new_member_join_timeout_ms`) keeps its default, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KAFKA_NAMES", "GroupConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfig:
    node_id: int = 1  # broker.id / node.id
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    # Kafka's classic NewMemberJoinTimeoutMs: a new member's JoinGroup is dropped after this
    # long, since it cannot heartbeat before it knows its member id (KIP-394 discussion).
    group_new_member_join_timeout_ms: int = 300_000
    # A dynamic member whose connection closes without LeaveGroup is removed this long after
    # the close unless a request for it arrives meanwhile; -1 keeps Kafka's session semantics.
    group_member_disconnect_grace_ms: int = 1_000
    offsets_topic_num_partitions: int = 50
    offset_metadata_max_bytes: int = 4_096
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> GroupConfig:
        """From the broker's parsed settings, by Kafka's names; a name not there keeps the
        field's default."""
        return cls(**{field: settings[name] for name, field in KAFKA_NAMES.items()
                      if name in settings})


KAFKA_NAMES: Mapping[str, str] = {
    "node.id": "node_id",
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "group.max.size": "group_max_size",
    "group.member.disconnect.grace.ms": "group_member_disconnect_grace_ms",
    "offsets.topic.num.partitions": "offsets_topic_num_partitions",
    "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    "offsets.retention.minutes": "offsets_retention_minutes",
    "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
}
