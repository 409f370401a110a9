"""`encode_in_slices` writes the bytes `encode_response(build(...))` writes, pausing between
slices of elements."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from protocol.build import build
from protocol.codec import encode_response, response_type
from protocol.legacy_versions import legacy_response
from protocol.slices import encode_in_slices


def _metadata(topics: int, partitions: int) -> dict[str, Any]:
    return {
        "throttle_time": 0, "cluster_id": "c", "controller_id": 1,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "topics": [{"error_code": 0, "name": f"t{t}", "topic_id": uuid.UUID(int=t),
                    "is_internal": False, "partitions": [
                        {"error_code": 0, "partition_index": p, "leader_id": 1,
                         "leader_epoch": 0, "replica_nodes": (1,), "isr_nodes": (1,),
                         "offline_replicas": ()} for p in range(partitions)]}
                   for t in range(topics)],
    }


def _offset_fetch(partitions: int) -> dict[str, Any]:
    entries = [{"partition_index": p, "committed_offset": p * 7, "committed_leader_epoch": -1,
                "metadata": "" if p % 2 else None, "error_code": 0}
               for p in range(partitions)]
    return {"throttle_time": 0, "error_code": 0, "topics": [{"name": "t", "partitions": entries}],
            "groups": [{"group_id": "g", "error_code": 0,
                        "topics": [{"name": "t", "partitions": entries}]}]}


def _list_offsets(partitions: int) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [{"name": "t", "partitions": [
        {"partition_index": p, "error_code": 0, "timestamp": -1, "offset": p,
         "leader_epoch": 0, "old_style_offsets": (p,)} for p in range(partitions)]}]}


def _describe_groups(groups: int) -> dict[str, Any]:
    return {"throttle_time": 0, "groups": [
        {"error_code": 0, "group_id": f"g{g}", "group_state": "Stable", "protocol_type": "consumer",
         "protocol_data": "range", "members": [
             {"member_id": f"m{m}", "group_instance_id": None, "client_id": "c",
              "client_host": "/h", "member_metadata": b"x", "member_assignment": b""}
             for m in range(3)]} for g in range(groups)]}


CASES = [(3, v, _metadata) for v in range(0, 13)] + [
    (9, v, _offset_fetch) for v in range(0, 10)] + [(2, v, _list_offsets) for v in range(0, 9)] + [
    (15, v, _describe_groups) for v in range(0, 6)]


@pytest.mark.parametrize(("api_key", "version", "values"), CASES)
def test_the_sliced_bytes_are_the_whole_encoding(api_key: int, version: int, values: Any) -> None:
    try:
        cls = response_type(api_key, version)
    except Exception:
        pytest.skip("no schema for this version")
    described = values(3, 5) if api_key == 3 else values(7)
    whole = encode_response(api_key, version, 42, build(cls, described))
    pieces = list(encode_in_slices(api_key, version, 42, described, per_slice=4))
    assert pieces[-1] == whole
    if legacy_response(api_key, version) is None:
        assert pieces.count(None) >= 2
    else:  # a version older than kio's schemas is written whole
        assert pieces == [whole]
    assert all(p is None for p in pieces[:-1])


def test_a_small_answer_is_written_without_a_pause() -> None:
    pieces = list(encode_in_slices(9, 7, 1, _offset_fetch(10)))
    assert len(pieces) == 1 and pieces[0] is not None


def test_entities_already_built_are_written_as_they_are() -> None:
    cls = response_type(3, 12)
    described = _metadata(4, 2)
    topic_type = type(build(cls, described).topics[0])
    prebuilt = {**described, "topics": [build(topic_type, t) for t in described["topics"]]}
    assert list(encode_in_slices(3, 12, 5, prebuilt))[-1] == encode_response(
        3, 12, 5, build(cls, described))


def test_a_null_array_stays_null() -> None:
    cls = response_type(3, 12)
    described = {**_metadata(0, 0), "topics": None}
    assert list(encode_in_slices(3, 12, 5, described))[-1] == encode_response(
        3, 12, 5, build(cls, described))
