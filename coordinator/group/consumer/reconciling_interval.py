"""The heartbeat interval a ConsumerGroupHeartbeat answer carries.

Every answer carries `heartbeat_interval_ms` and Kafka's clients (librdkafka, the Java
consumer) take the latest one. Partitions move in steps: the old owner learns of a revocation
on its next heartbeat and acknowledges it on the one after; the new owner gets the released
partitions on its own next heartbeat. librdkafka sends the acknowledgement at once, without
waiting for its interval (its debug log: "Expediting next heartbeat ... Assignment Done"), but
the new owner only asks again when its interval is up: with the configured interval it could own
its share almost two intervals after it joined. So a member waiting for partitions that others
still have to release (UNRELEASED_PARTITIONS) gets a shorter interval, and the configured one
again once it is reconciled. A member that must revoke keeps the configured interval: the
client answers as soon as it has revoked, whatever the interval.
"""

from __future__ import annotations

from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.member import ConsumerGroupMember, MemberState

__all__ = ["heartbeat_interval_for", "reconciling_interval_ms"]


def reconciling_interval_ms(config: ConsumerGroupConfig) -> int:
    """The shorter interval: a fraction of the configured one, not below the floor (and never
    longer than the configured interval itself)."""
    interval = config.heartbeat_interval_ms
    shorter = max(interval // max(config.reconciling_heartbeat_divisor, 1),
                  config.reconciling_heartbeat_floor_ms)
    return min(shorter, interval)


def heartbeat_interval_for(config: ConsumerGroupConfig, member: ConsumerGroupMember) -> int:
    """The shorter interval while the member waits for partitions others still own, else the
    configured one."""
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return reconciling_interval_ms(config)
    return config.heartbeat_interval_ms
