"""What ApiVersions advertises is served: the highest advertised version of every API, sent to
the real broker, is answered with a response kio decodes, and the connection stays open.

The advertised table comes from the broker's ApiVersions answer, not from the source; a request
body for each API is listed here, so an API advertised without one fails the test.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from tests.bench import wire

pytestmark = pytest.mark.integration

TOPIC = "served"
_MS = datetime.timedelta(milliseconds=1)

# A plausible request of each API at its highest version: enough to be answered (an error code
# in the body is fine; a closed connection is not).
BODIES: dict[int, dict[str, Any]] = {
    0: {"acks": -1, "timeout": 1000 * _MS, "topic_data": []},  # acks=0 is never answered
    1: {"max_wait": 0 * _MS, "min_bytes": 0, "max_bytes": 1 << 20, "session_epoch": -1,
        "topics": []},
    2: {"replica_id": -1, "timeout": 1000 * _MS, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1,
                                        "current_leader_epoch": -1}]},
        {"name": "__consumer_offsets", "partitions": [{"partition_index": 0, "timestamp": -2,
                                                       "current_leader_epoch": -1}]}]},
    3: {"topics": None, "allow_auto_topic_creation": False},
    8: {"group_id": "standalone", "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0,
                                                   "committed_offset": 0,
                                                   "committed_leader_epoch": -1}]}]},
    9: {"groups": [{"group_id": "standalone", "member_epoch": -1, "topics": None}]},
    10: {"key_type": 0, "coordinator_keys": ["classic"]},
    11: {"group_id": "classic", "session_timeout": 10_000 * _MS,
         "rebalance_timeout": 10_000 * _MS, "member_id": "", "protocol_type": "consumer",
         "protocols": [{"name": "range", "metadata": b""}]},  # MEMBER_ID_REQUIRED at once
    12: {"group_id": "classic", "generation_id": 1, "member_id": "nobody"},
    13: {"group_id": "classic", "members": [{"member_id": "nobody"}]},
    14: {"group_id": "classic", "generation_id": 1, "member_id": "nobody",
         "protocol_type": "consumer", "protocol_name": "range", "assignments": []},
    15: {"groups": ["classic", "standalone", "missing"]},
    16: {"states_filter": [], "types_filter": []},
    17: {"mechanism": "PLAIN"},  # ILLEGAL_SASL_STATE on a PLAINTEXT listener
    18: {"client_software_name": "served-test", "client_software_version": "1.0"},
    19: {"topics": [{"name": "created", "num_partitions": 1, "replication_factor": 1,
                     "assignments": [], "configs": []}], "timeout": 5000 * _MS},
    20: {"topics": [{"name": "created", "topic_id": None}], "timeout": 5000 * _MS},
    22: {"transactional_id": None, "transaction_timeout": 60_000 * _MS, "producer_id": -1,
         "producer_epoch": -1},
    # The ACL APIs: SECURITY_DISABLED without authorizer.class.name.
    24: {"v3_and_below_transactional_id": "nobody", "v3_and_below_producer_id": 1,
         "v3_and_below_producer_epoch": 0, "v3_and_below_topics": []},
    25: {"transactional_id": "nobody", "producer_id": 1, "producer_epoch": 0,
         "group_id": "standalone"},
    26: {"transactional_id": "nobody", "producer_id": 1, "producer_epoch": 0,
         "committed": False},
    28: {"transactional_id": "nobody", "group_id": "standalone", "producer_id": 1,
         "producer_epoch": 0, "generation_id": -1, "member_id": "", "group_instance_id": None,
         "topics": []},
    29: {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
         "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1},
    30: {"creations": []},
    31: {"filters": []},
    36: {"auth_bytes": b""},  # ILLEGAL_SASL_STATE on a PLAINTEXT listener
    37: {"topics": [{"name": TOPIC, "count": 2, "assignments": None}],
         "timeout": 5000 * _MS},
    42: {"groups_names": ["missing"]},
    47: {"group_id": "standalone", "topics": []},
    50: {"users": None},
    51: {"deletions": [], "upsertions": []},
    68: {"group_id": "consumer", "member_id": str(uuid.uuid4()), "member_epoch": 0,
         "rebalance_timeout": 10_000 * _MS, "subscribed_topic_names": [TOPIC],
         "topic_partitions": []},
    69: {"group_ids": ["consumer", "missing"]},
    65: {"transactional_ids": ["nobody", ""]},  # TRANSACTIONAL_ID_NOT_FOUND, INVALID_REQUEST
    66: {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [],
         "duration_filter": -1},
}


async def test_the_highest_advertised_version_of_every_api_is_answered(
        connection: wire.Connection) -> None:
    versions = await connection.call(18, 4, BODIES[18])
    assert versions.error_code.value == 0
    advertised = {int(k.api_key): (int(k.min_version), int(k.max_version))
                  for k in versions.api_keys}
    assert set(advertised) == set(BODIES), "every advertised API needs a request body here"
    created = await connection.call(19, 7, {**BODIES[19], "topics": [
        {"name": TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []}]})
    assert created.topics[0].error_code.value == 0

    answered: dict[int, Any] = {}
    for api_key, (_, highest) in sorted(advertised.items()):
        # wire.call decodes with kio's reader for (key, version) and fails on a closed
        # connection or a correlation id out of order.
        answered[api_key] = await connection.call(api_key, highest, BODIES[api_key])
    # The same connection still serves requests after all of them.
    assert (await connection.call(18, 0, {})).error_code.value == 0

    assert answered[17].error_code.value == answered[36].error_code.value == 34
    assert answered[29].error_code.value == 54  # SECURITY_DISABLED
    assert answered[15].groups[2].error_code.value == 69  # GROUP_ID_NOT_FOUND from v6 on
    assert answered[11].error_code.value == 79  # MEMBER_ID_REQUIRED
    assert [p.error_code.value for t in answered[2].topics for p in t.partitions] == [0, 0]


async def test_describe_groups_v6_names_a_missing_group(connection: wire.Connection) -> None:
    described = await connection.call(15, 6, {"groups": ["missing"]})
    [group] = described.groups
    assert group.error_code.value == 69 and group.error_message
