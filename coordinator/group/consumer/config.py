"""Consumer group (KIP-848) settings, named after Kafka's `group.consumer.*` broker configs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KAFKA_NAMES", "ConsumerGroupConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    # group.consumer.assignors: the first is the default when a member names none.
    assignors: tuple[str, ...] = ("uniform", "range")
    # group.consumer.migration.policy: "upgrade"/"bidirectional" let a consumer-protocol
    # member convert a classic group into a consumer group (its classic members stay, see
    # `classic_members.py`); "downgrade"/"bidirectional" turn a consumer group whose last
    # consumer-protocol member left back into a classic group; "disabled" does neither.
    migration_policy: str = "bidirectional"
    # group.member.disconnect.grace.ms, shared with the classic groups (the coordinator copies
    # its own setting here): a dynamic member whose connection closed is fenced this long
    # after, unless heard from again; -1 turns it off (`disconnect.py`).
    disconnect_grace_ms: int = 1_000
    # A member waiting for partitions that others still have to release is told to heartbeat
    # this many times more often, never faster than the floor: it gets them within a fraction
    # of an interval of their release instead of up to a whole one. Kafka clients honour the
    # interval of every answer (`reconciling_interval.py`).
    reconciling_heartbeat_divisor: int = 4
    reconciling_heartbeat_floor_ms: int = 100

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ConsumerGroupConfig:
        """From the broker's parsed settings, by Kafka's names (`KAFKA_NAMES`); a name not
        there keeps the field's default."""
        return cls(**{field: settings[name] for name, field in KAFKA_NAMES.items()
                      if name in settings})

    @property
    def upgrade_allowed(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_allowed(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")


# Kafka's setting name -> field. `disconnect_grace_ms` is not here: the coordinator copies the
# classic groups' `group.member.disconnect.grace.ms` into it, so the two cannot disagree.
KAFKA_NAMES: Mapping[str, str] = {
    "group.consumer.session.timeout.ms": "session_timeout_ms",
    "group.consumer.heartbeat.interval.ms": "heartbeat_interval_ms",
    "group.consumer.max.size": "max_size",
    "group.consumer.assignors": "assignors",
    "group.consumer.migration.policy": "migration_policy",
}
