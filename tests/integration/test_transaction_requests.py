"""Transactional requests' bad input on the wire: Kafka's error codes, nothing recorded."""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from crc32c import crc32c

from storage.record_batch import encode_batch
from storage.transactions import TRANSACTIONAL
from tests.bench import wire

pytestmark = pytest.mark.integration

_MS = datetime.timedelta(milliseconds=1)


def transactional_batch(producer_id: int, epoch: int) -> bytes:
    data = bytearray(encode_batch([(b"k", b"v")], 1000))
    struct.pack_into(">h", data, 21, TRANSACTIONAL)
    struct.pack_into(">qhi", data, 43, producer_id, epoch, 0)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


async def init(connection: wire.Connection, timeout_ms: int = 60_000, version: int = 4) -> Any:
    return await connection.call(22, version, {
        "transactional_id": "tx", "transaction_timeout": timeout_ms * _MS,
        "producer_id": -1, "producer_epoch": -1})


async def test_transactional_requests_answer_kafkas_errors(connection: wire.Connection) -> None:
    too_long = await init(connection, timeout_ms=900_001)
    assert too_long.error_code.value == 50  # INVALID_TRANSACTION_TIMEOUT
    first = await init(connection)
    assert (first.error_code.value, first.producer_epoch) == (0, 0)
    second = await init(connection)
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)

    async def add(topic: str, epoch: int, version: int = 3) -> list[int]:
        answer = await connection.call(24, version, {
            "v3_and_below_transactional_id": "tx",
            "v3_and_below_producer_id": first.producer_id,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
        return [p.partition_error_code.value for t in answer.results_by_topic_v3_and_below
                for p in t.results_by_partition]

    assert await add("missing", 1) == [3]  # UNKNOWN_TOPIC_OR_PARTITION
    created = await connection.call(19, 7, {"topics": [
        {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout": 5000 * _MS, "validate_only": False})
    assert created.topics[0].error_code.value == 0
    assert await add("t", 0) == [90]  # PRODUCER_FENCED: the first epoch is fenced
    assert await add("t", 0, version=2) == [47]  # INVALID_PRODUCER_EPOCH before v3
    end_without = await connection.call(26, 3, {
        "transactional_id": "tx", "producer_id": first.producer_id, "producer_epoch": 1,
        "committed": True})
    assert end_without.error_code.value == 48  # INVALID_TXN_STATE: nothing begun
    assert await add("t", 1) == [0]

    async def produce(epoch: int) -> int:
        answer = await connection.call(0, 9, {
            "transactional_id": "tx", "acks": -1, "timeout": 5000 * _MS,
            "topic_data": [{"name": "t", "partition_data": [
                {"index": 0, "records": transactional_batch(first.producer_id, epoch)}]}]})
        return int(answer.responses[0].partition_responses[0].error_code.value)

    assert await produce(0) == 47  # INVALID_PRODUCER_EPOCH: a fenced producer appends nothing
    assert await produce(1) == 0
    fenced_end = await connection.call(26, 3, {
        "transactional_id": "tx", "producer_id": first.producer_id, "producer_epoch": 0,
        "committed": True})
    assert fenced_end.error_code.value == 90
    unknown = await connection.call(26, 3, {
        "transactional_id": "nobody", "producer_id": 7, "producer_epoch": 0,
        "committed": False})
    assert unknown.error_code.value == 49  # INVALID_PRODUCER_ID_MAPPING
    committed = await connection.call(26, 3, {
        "transactional_id": "tx", "producer_id": first.producer_id, "producer_epoch": 1,
        "committed": True})
    assert committed.error_code.value == 0


async def test_txn_offsets_of_unknown_topics_are_answered_before_the_group(
        connection: wire.Connection) -> None:
    # Kafka answers unknown topics and partitions itself; with none left the group
    # coordinator never sees the request, so no group is made.
    producer = await init(connection)
    # The group is in the transaction, so only the unknown topic can refuse the commit.
    added = await connection.call(25, 3, {
        "transactional_id": "tx", "producer_id": producer.producer_id,
        "producer_epoch": producer.producer_epoch, "group_id": "ghost"})
    assert added.error_code.value == 0
    answer = await connection.call(28, 3, {
        "transactional_id": "tx", "group_id": "ghost", "producer_id": producer.producer_id,
        "producer_epoch": producer.producer_epoch, "generation_id": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "missing", "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    assert [p.error_code.value for t in answer.topics for p in t.partitions] == [3]
    listed = await connection.call(16, 4, {"states_filter": []})
    assert [g.group_id for g in listed.groups] == []
