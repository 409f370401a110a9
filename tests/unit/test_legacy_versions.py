"""The old API versions kio no longer carries, against kafka-python's encoder and decoder.

Every request is encoded by kafka-python (a real client's code for these versions) and decoded by
`protocol.codec.decode_request`; every response is encoded by `protocol.codec.encode_response`
and decoded by kafka-python.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kafka.protocol import admin as kp_admin
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kio.schema.errors import ErrorCode

from coordinator.api import offset_commit
from coordinator.group.offset_commands import OffsetCommitOutcome
from coordinator.group.result import RequestRef
from protocol.build import build
from protocol.codec import decode_request, encode_response, response_type
from protocol.errors import MalformedRequest
from tests.served import served_versions

REF = RequestRef(1, 1)


def _decode(request: Any) -> tuple[Any, Any]:
    request.with_header(correlation_id=42, client_id="legacy-client")
    header, body = decode_request(bytes(request.encode(header=True)))
    assert (header.correlation_id, header.client_id) == (42, "legacy-client")
    return header, body


def _client_decode(response_cls: Any, api_key: int, version: int, entity: Any) -> Any:
    framed = encode_response(api_key, version, 42, entity)
    # size prefix, correlation id (response header v0), body
    assert int.from_bytes(framed[4:8], "big") == 42
    return response_cls.decode(framed[8:], version=version)


def test_every_minimum_is_kafka_3_9s() -> None:
    assert all(low == 0 for key, (low, _) in served_versions().items()), (
        "Apache Kafka 3.9 serves every one of these APIs from v0")


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce(version: int) -> None:
    request = ProduceRequest(version=version, acks=-1, timeout_ms=1500, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=3, records=b"abc")])])
    _, body = _decode(request)
    assert (body.acks, body.timeout, body.transactional_id) == (
        -1, datetime.timedelta(milliseconds=1500), None)
    assert [(t.name, [(p.index, p.records) for p in t.partition_data])
            for t in body.topic_data] == [("t", [(3, b"abc")])]
    entity = build(response_type(0, version), throttle_time=0, responses=[
        {"name": "t", "partition_responses": [
            {"index": 3, "error_code": ErrorCode.corrupt_message, "base_offset": 17,
             "log_append_time": None}]}])
    decoded = _client_decode(ProduceResponse, 0, version, entity)
    (partition,) = decoded.responses[0].partition_responses
    assert (partition.index, partition.error_code, partition.base_offset) == (
        3, ErrorCode.corrupt_message.value, 17)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch(version: int) -> None:
    request = FetchRequest(version=version, replica_id=-1, max_wait_ms=250, min_bytes=1,
                           max_bytes=4096, topics=[FetchRequest.FetchTopic(
                               topic="t", partitions=[FetchRequest.FetchTopic.FetchPartition(
                                   partition=1, fetch_offset=99, partition_max_bytes=777)])])
    _, body = _decode(request)
    assert (body.max_wait, body.min_bytes, body.isolation_level) == (
        datetime.timedelta(milliseconds=250), 1, 0)
    assert body.max_bytes == (4096 if version >= 3 else 0x7FFFFFFF)
    (partition,) = body.topics[0].partitions
    assert (body.topics[0].topic, partition.partition, partition.fetch_offset,
            partition.partition_max_bytes) == ("t", 1, 99, 777)
    entity = build(response_type(1, version), throttle_time=0, responses=[
        {"topic": "t", "partitions": [
            {"partition_index": 1, "error_code": ErrorCode.none, "high_watermark": 120,
             "last_stable_offset": 120, "aborted_transactions": None, "records": b"xyz"}]}])
    decoded = _client_decode(FetchResponse, 1, version, entity)
    (partition_out,) = decoded.responses[0].partitions
    assert (partition_out.partition_index, partition_out.high_watermark,
            partition_out.records) == (1, 120, b"xyz")


def test_list_offsets_v0() -> None:
    request = ListOffsetsRequest(version=0, replica_id=-1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=2, timestamp=-2, max_num_offsets=5)])])
    _, body = _decode(request)
    (partition,) = body.topics[0].partitions
    assert (partition.partition_index, partition.timestamp, partition.max_num_offsets) == (
        2, -2, 5)
    entity = build(response_type(2, 0), topics=[{"name": "t", "partitions": [
        {"partition_index": 2, "error_code": ErrorCode.none, "old_style_offsets": (30, 10, 0)}]}])
    decoded = _client_decode(ListOffsetsResponse, 2, 0, entity)
    assert list(decoded.topics[0].partitions[0].old_style_offsets) == [30, 10, 0]


@pytest.mark.parametrize("version", [0, 1])
def test_offset_commit(version: int) -> None:
    partition_cls = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    request = OffsetCommitRequest(
        version=version, group_id="g", generation_id_or_member_epoch=4, member_id="m-1",
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
            partition_cls(partition_index=0, committed_offset=5, commit_timestamp=1234,
                          committed_metadata="md"),
            partition_cls(partition_index=1, committed_offset=6, commit_timestamp=-1,
                          committed_metadata=None)])])
    _, body = _decode(request)
    command = offset_commit.to_command(body, version, REF)
    assert command.topics == (("t", ((0, 5, -1, "md"), (1, 6, -1, None))),)
    if version == 0:
        assert (command.generation_id, command.member_id, command.commit_timestamps) == (
            -1, "", None)
    else:
        assert (command.generation_id, command.member_id) == (4, "m-1")
        assert command.commit_timestamps == {("t", 0): 1234}  # -1 means "now"
    outcome = OffsetCommitOutcome.failed(command, ErrorCode.unsupported_version)
    framed = offset_commit.encode(outcome, version, 42)
    assert framed == encode_response(8, version, 42, offset_commit.to_response(outcome, version))
    decoded = OffsetCommitResponse.decode(framed[8:], version=version)
    assert [p.error_code for p in decoded.topics[0].partitions] == [
        ErrorCode.unsupported_version.value] * 2


def test_offset_fetch_v0_has_v1_layout() -> None:
    request = OffsetFetchRequest(version=0, group_id="g", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])])
    _, body = _decode(request)
    assert (body.group_id, [(t.name, list(t.partition_indexes)) for t in body.topics]) == (
        "g", [("t", [0, 1])])
    entity = build(response_type(9, 0), topics=[{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": -1, "metadata": "",
         "error_code": ErrorCode.unsupported_version}]}])
    decoded = _client_decode(OffsetFetchResponse, 9, 0, entity)
    assert decoded.topics[0].partitions[0].error_code == ErrorCode.unsupported_version.value


@pytest.mark.parametrize("version", [0, 1])
def test_create_topics(version: int) -> None:
    request_cls = kp_admin.CreateTopicsRequest
    request = request_cls(version=version, timeout_ms=3000, validate_only=True, topics=[
        request_cls.CreatableTopic(name="new", num_partitions=3, replication_factor=1,
                                   assignments=[], configs=[])])
    _, body = _decode(request)
    assert [(t.name, t.num_partitions) for t in body.topics] == [("new", 3)]
    assert body.validate_only is (version >= 1)
    entity = build(response_type(19, version), throttle_time=0, topics=[
        {"name": "new", "error_code": ErrorCode.topic_already_exists,
         "error_message": "exists"}])
    decoded = _client_decode(kp_admin.CreateTopicsResponse, 19, version, entity)
    assert decoded.topics[0].error_code == ErrorCode.topic_already_exists.value


def test_delete_topics_v0() -> None:
    request = kp_admin.DeleteTopicsRequest(version=0, topic_names=["a", "b"], timeout_ms=100)
    _, body = _decode(request)
    assert list(body.topic_names) == ["a", "b"]
    entity = build(response_type(20, 0), throttle_time=0, responses=[
        {"name": "a", "error_code": ErrorCode.none}])
    decoded = _client_decode(kp_admin.DeleteTopicsResponse, 20, 0, entity)
    assert decoded.responses[0].name == "a"


@pytest.mark.parametrize("frame", [
    # Fetch v2 whose topic array claims a billion entries
    bytes.fromhex("00010002000000010001" "63" "ffffffff000000640000000140000000"),
    # Produce v0 cut inside its partition records
    bytes.fromhex("0000000000000001000163" "ffff000003e8000000010001740000000100000000"
                  "0000000a0102"),
])
def test_malformed_legacy_requests_are_refused(frame: bytes) -> None:
    with pytest.raises(MalformedRequest):
        decode_request(frame)


def test_acl_apis_v0_are_v1_with_literal_patterns() -> None:
    create = kp_admin.CreateAclsRequest
    _, body = _decode(create(version=0, creations=[create.AclCreation(
        resource_type=3, resource_name="billing", principal="User:alice", host="*",
        operation=3, permission_type=3)]))
    [creation] = body.creations
    assert (creation.resource_name, creation.resource_pattern_type, creation.principal,
            creation.operation) == ("billing", 3, "User:alice", 3)
    decoded = _client_decode(kp_admin.CreateAclsResponse, 30, 0, build(
        response_type(30, 0), throttle_time=0, results=[{"error_code": ErrorCode.none,
                                                          "error_message": None}]))
    assert decoded.results[0].error_code == 0

    _, body = _decode(kp_admin.DescribeAclsRequest(
        version=0, resource_type_filter=3, resource_name_filter=None, principal_filter=None,
        host_filter="*", operation=1, permission_type=1))
    assert (body.resource_type_filter, body.pattern_type_filter, body.host_filter) == (3, 3, "*")
    decoded = _client_decode(kp_admin.DescribeAclsResponse, 29, 0, build(
        response_type(29, 0), throttle_time=0, error_code=ErrorCode.none, error_message=None,
        resources=[{"resource_type": 3, "resource_name": "billing", "pattern_type": 3,
                    "acls": [{"principal": "User:alice", "host": "*", "operation": 3,
                              "permission_type": 3}]}]))
    assert decoded.resources[0].acls[0].principal == "User:alice"

    delete = kp_admin.DeleteAclsRequest
    _, body = _decode(delete(version=0, filters=[delete.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, principal_filter="User:alice",
        host_filter=None, operation=1, permission_type=1)]))
    assert body.filters[0].principal_filter == "User:alice"
    decoded = _client_decode(kp_admin.DeleteAclsResponse, 31, 0, build(
        response_type(31, 0), throttle_time=0, filter_results=[{
            "error_code": ErrorCode.none, "error_message": None, "matching_acls": [{
                "error_code": ErrorCode.none, "error_message": None, "resource_type": 3,
                "resource_name": "billing", "pattern_type": 3, "principal": "User:alice",
                "host": "*", "operation": 3, "permission_type": 3}]}]))
    assert decoded.filter_results[0].matching_acls[0].resource_name == "billing"
