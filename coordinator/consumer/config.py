"""Consumer group (KIP-848) settings, named after Kafka's `group.consumer.*` broker configs."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConsumerGroupConfig"]


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

    @property
    def upgrade_allowed(self) -> bool:
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_allowed(self) -> bool:
        return self.migration_policy in ("downgrade", "bidirectional")
