"""Spark schemas of the inputs (journal schema version 1, decoded group log) and the outputs."""

from __future__ import annotations

# The journal, docs/events.md. Reading with an explicit schema avoids an inference pass; the
# last column catches lines that are not JSON objects (torn by a crash, or garbage).
JOURNAL_FIELDS = (
    "v INT, event_type STRING, ts BIGINT, group_id STRING, generation INT, group_type STRING, "
    "`partition` INT, from_state STRING, to_state STRING, reason STRING, cause STRING, "
    "member_id STRING, group_instance_id STRING, client_id STRING, client_host STRING, "
    "protocol_name STRING, leader_id STRING, num_members INT, duration_ms BIGINT, "
    "missing_assignments INT, old_member_id STRING, rebalance BOOLEAN, partitions INT, "
    "groups_deleted INT, group_ids ARRAY<STRING>, records INT, error STRING, "
    "assignor STRING, partition_count INT, moved_partitions INT, member_state STRING, "
    "direction STRING, from_type STRING, to_type STRING, "
    "transactional_id STRING, producer_id BIGINT, producer_epoch INT, "
    "transaction_timeout_ms BIGINT"
)
CORRUPT_COLUMN = "_corrupt_record"
JOURNAL_DDL = f"{JOURNAL_FIELDS}, {CORRUPT_COLUMN} STRING"

KNOWN_EVENT_TYPES = (
    "rebalance_started", "join_completed", "assignment_received", "group_stabilized",
    "member_added", "member_removed", "static_member_replaced", "group_empty", "group_dead",
    "offsets_committed", "offsets_expired", "group_write_failed",
    "target_assignment_computed", "member_reconciled",  # consumer groups (KIP-848)
    "group_converted",  # consumer groups (KIP-848): classic <-> consumer migration
    "transaction_begun", "transaction_committed", "transaction_aborted",  # transactions
)

# One row per `__consumer_offsets` record (forensics.grouplog.GROUP_LOG_COLUMNS order).
GROUP_LOG_DDL = (
    "source_file STRING, log_partition INT, position BIGINT, `offset` BIGINT, "
    "`timestamp` BIGINT, record_type STRING, key_version INT, value_version INT, "
    "group_id STRING, topic STRING, `partition` INT, committed_offset BIGINT, "
    "commit_timestamp BIGINT, expire_timestamp BIGINT, tombstone BOOLEAN, "
    "protocol_type STRING, generation INT, protocol STRING, leader STRING, "
    "state_timestamp BIGINT, "
    "members ARRAY<STRUCT<member_id: STRING, group_instance_id: STRING, client_id: STRING, "
    "client_host: STRING, session_timeout: INT, rebalance_timeout: INT, "
    "assignment: ARRAY<STRUCT<topic: STRING, `partition`: INT>>>>, "
    "error STRING"
)
