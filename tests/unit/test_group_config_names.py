"""The group configs take their values from the broker settings through one mapping each."""

from __future__ import annotations

from dataclasses import fields

from coordinator.group import config as classic
from coordinator.group.config import GroupConfig
from coordinator.group.consumer import config as consumer
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.settings import SETTINGS, defaults

BROKER_SETTINGS = {setting.key for setting in SETTINGS}


def test_every_mapped_name_is_a_broker_setting() -> None:
    assert set(classic.KAFKA_NAMES) <= BROKER_SETTINGS
    assert set(consumer.KAFKA_NAMES) <= BROKER_SETTINGS


def test_every_field_but_the_unconfigurable_ones_has_a_setting() -> None:
    assert {f.name for f in fields(GroupConfig)} - set(classic.KAFKA_NAMES.values()) == {
        "group_new_member_join_timeout_ms"}
    assert {f.name for f in fields(ConsumerGroupConfig)} - set(consumer.KAFKA_NAMES.values()) == {
        "disconnect_grace_ms", "reconciling_heartbeat_divisor", "reconciling_heartbeat_floor_ms"}


def test_the_configs_carry_the_settings_values() -> None:
    settings = dict(defaults().values)
    settings.update({"node.id": 7, "group.max.size": 3, "offsets.retention.minutes": 2,
                     "group.consumer.max.size": 5, "group.consumer.migration.policy": "upgrade"})
    config = GroupConfig.from_settings(settings)
    assert (config.node_id, config.group_max_size, config.offsets_retention_ms) == (7, 3, 120_000)
    assert config.group_min_session_timeout_ms == settings["group.min.session.timeout.ms"]
    consumer_config = ConsumerGroupConfig.from_settings(settings)
    assert consumer_config.max_size == 5
    assert consumer_config.migration_policy == "upgrade"
    assert consumer_config.assignors == tuple(settings["group.consumer.assignors"])
