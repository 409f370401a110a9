"""Every response version of the group APIs encodes and decodes back to itself.

Encoding with kio's writer catches what the dataclasses accept but the wire does not (a None
in a field that is only nullable from a later version, an int where an ErrorCode goes).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from coordinator.api import (
    describe_groups,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    sync_group,
)
from coordinator.group.outcomes import (
    DescribedGroup,
    DescribedMember,
    DescribeGroupsOutcome,
    HeartbeatOutcome,
    JoinedMember,
    JoinGroupOutcome,
    LeaveGroupOutcome,
    LeaveMemberOutcome,
    ListedGroup,
    ListGroupsOutcome,
    SyncGroupOutcome,
)
from coordinator.group.result import RequestRef
from protocol.build import build

REF = RequestRef(1, 1)


def roundtrip(entity: Any) -> Any:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    data = buf.getvalue()
    decoded, size = entity_reader(type(entity))(data, 0)
    assert size == len(data)
    assert decoded == entity
    return decoded


JOIN_OUTCOMES = [
    JoinGroupOutcome(error=ErrorCode.member_id_required, member_id="m-1"),
    JoinGroupOutcome(error=ErrorCode.unknown_member_id),
    JoinGroupOutcome(
        generation_id=3,
        protocol_type="consumer",
        protocol_name="range",
        leader="m-1",
        skip_assignment=True,
        member_id="m-1",
        members=(
            JoinedMember(member_id="m-1", group_instance_id="i1", metadata=b"\x00\x01"),
            JoinedMember(member_id="m-2", group_instance_id=None, metadata=b""),
        ),
    ),
]


@pytest.mark.parametrize("version", range(join_group.MIN_VERSION, join_group.MAX_VERSION + 1))
@pytest.mark.parametrize("outcome", JOIN_OUTCOMES)
def test_join_group_responses(version: int, outcome: JoinGroupOutcome) -> None:
    response = roundtrip(join_group.to_response(outcome, version))
    assert response.error_code is outcome.error
    if outcome.protocol_name is None:
        assert response.protocol_name == (None if version >= 7 else "")
    if outcome.members:
        assert [m.member_id for m in response.members] == ["m-1", "m-2"]


@pytest.mark.parametrize("version", range(0, 6))
@pytest.mark.parametrize(
    "outcome",
    [
        SyncGroupOutcome(error=ErrorCode.rebalance_in_progress),
        SyncGroupOutcome(protocol_type="consumer", protocol_name="range", assignment=b"abc"),
    ],
)
def test_sync_group_responses(version: int, outcome: SyncGroupOutcome) -> None:
    response = roundtrip(sync_group.to_response(outcome, version))
    assert response.assignment == outcome.assignment


@pytest.mark.parametrize("version", range(0, 5))
def test_heartbeat_responses(version: int) -> None:
    response = roundtrip(heartbeat.to_response(HeartbeatOutcome(error=ErrorCode.none), version))
    assert response.error_code is ErrorCode.none


@pytest.mark.parametrize("version", range(0, 6))
def test_leave_group_responses(version: int) -> None:
    outcome = LeaveGroupOutcome(
        members=(
            LeaveMemberOutcome(member_id="m", group_instance_id=None, error=ErrorCode.none),
            LeaveMemberOutcome(
                member_id="", group_instance_id="i", error=ErrorCode.unknown_member_id
            ),
        )
    )
    roundtrip(leave_group.to_response(outcome, version))


@pytest.mark.parametrize("version", range(0, 7))
def test_describe_groups_responses(version: int) -> None:
    outcome = DescribeGroupsOutcome(
        groups=(
            DescribedGroup(
                group_id="g",
                state="Stable",
                protocol_type="consumer",
                protocol_data="range",
                members=(
                    DescribedMember(
                        member_id="m",
                        group_instance_id="i",
                        client_id="c",
                        client_host="/h",
                        metadata=b"m",
                        assignment=b"a",
                    ),
                ),
                authorized_operations=328,
            ),
            DescribedGroup(
                group_id="x",
                error=ErrorCode.group_id_not_found,
                error_message="Group x not found.",
                state="Dead",
            ),
        )
    )
    roundtrip(describe_groups.to_response(outcome, version))


@pytest.mark.parametrize("version", range(0, 6))
def test_list_groups_responses(version: int) -> None:
    outcome = ListGroupsOutcome(
        groups=(ListedGroup(group_id="g", protocol_type="consumer", state="Stable"),)
    )
    response = roundtrip(list_groups.to_response(outcome, version))
    assert response.groups[0].group_id == "g"


NODE = (1, "broker.local", 9092)


def _find_request(version: int, key_type: int, *keys: str) -> Any:
    cls = load_request_schema(find_coordinator.API_KEY, version)
    if version >= 4:
        return build(cls, key_type=key_type, coordinator_keys=keys)
    return build(cls, key=keys[0], key_type=key_type)


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_answers_this_node(version: int) -> None:
    request = _find_request(version, 0, "g", "h")
    response = roundtrip(find_coordinator.handle(request, version, NODE, lambda g: False))
    if version >= 4:
        assert [(c.key, c.node_id, c.host, c.port) for c in response.coordinators] == [
            ("g", 1, "broker.local", 9092),
            ("h", 1, "broker.local", 9092),
        ]
    else:
        assert (response.node_id, response.host, response.port) == NODE
        assert response.error_code is ErrorCode.none


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_while_loading(version: int) -> None:
    response = roundtrip(
        find_coordinator.handle(
            _find_request(version, 0, "loading", "ready"), version, NODE, lambda g: g == "loading"
        )
    )
    if version >= 4:
        errors = [c.error_code for c in response.coordinators]
        assert errors == [ErrorCode.coordinator_load_in_progress, ErrorCode.none]
        assert response.coordinators[0].node_id == -1
    else:
        assert response.error_code is ErrorCode.coordinator_load_in_progress
        assert response.node_id == -1


@pytest.mark.parametrize("version", range(1, 7))
def test_find_coordinator_key_types(version: int) -> None:
    txn = find_coordinator.handle(_find_request(version, 1, "tx"), version, NODE, lambda g: True)
    share = find_coordinator.handle(_find_request(version, 2, "s"), version, NODE, lambda g: False)
    bogus = find_coordinator.handle(_find_request(version, 9, "b"), version, NODE, lambda g: False)
    for response, expected in (
        (txn, ErrorCode.none),
        (share, ErrorCode.invalid_request),
        (bogus, ErrorCode.invalid_request),
    ):
        roundtrip(response)
        error = response.coordinators[0].error_code if version >= 4 else response.error_code
        assert error is expected


def _request(api_key: int, version: int, **values: Any) -> Any:
    return build(load_request_schema(api_key, version), **values)


@pytest.mark.parametrize("version", range(0, 10))
def test_join_group_to_command(version: int) -> None:
    req = _request(
        11,
        version,
        group_id="g",
        session_timeout=10_000,
        rebalance_timeout=60_000,
        member_id="",
        group_instance_id="i",
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b"x"}],
        reason="why",
    )
    cmd = join_group.to_command(req, version, REF, "cid", "/h")
    assert cmd.session_timeout_ms == 10_000
    assert cmd.rebalance_timeout_ms == (10_000 if version == 0 else 60_000)
    assert cmd.group_instance_id == ("i" if version >= 5 else None)
    assert cmd.protocols[0].name == "range" and cmd.protocols[0].metadata == b"x"
    assert cmd.require_known_member_id == (version == 4)  # v5+ carries an instance id here
    assert cmd.client_id == "cid" and cmd.client_host == "/h"


@pytest.mark.parametrize("version", range(0, 6))
def test_leave_group_to_command(version: int) -> None:
    members = [{"member_id": "m2", "group_instance_id": "i"}]
    req = _request(13, version, group_id="g", member_id="m", members=members)
    cmd = leave_group.to_command(req, version, REF, "cid", "/h")
    if version < 3:
        assert [(m.member_id, m.group_instance_id) for m in cmd.members] == [("m", None)]
    else:
        assert [(m.member_id, m.group_instance_id) for m in cmd.members] == [("m2", "i")]


@pytest.mark.parametrize("version", range(0, 6))
def test_sync_and_list_to_command(version: int) -> None:
    req = _request(
        14,
        version,
        group_id="g",
        generation_id=3,
        member_id="m",
        protocol_type="consumer",
        protocol_name="range",
        assignments=[{"member_id": "m", "assignment": b"a"}],
    )
    cmd = sync_group.to_command(req, version, REF, "cid", "/h")
    assert cmd.assignments == (("m", b"a"),)
    assert cmd.requires_protocol == (version >= 5)
    lreq = _request(16, version, states_filter=["Stable"], types_filter=["classic"])
    lcmd = list_groups.to_command(lreq, version, REF, "cid", "/h")
    assert lcmd.states_filter == (frozenset({"Stable"}) if version >= 4 else frozenset())


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("error", [ErrorCode.none, ErrorCode.rebalance_in_progress])
def test_hand_packed_heartbeat_response_matches_kio(version: int, error: ErrorCode) -> None:
    from coordinator.api import heartbeat as heartbeat_api
    from coordinator.group.outcomes import HeartbeatOutcome
    from protocol.codec import encode_response

    outcome = HeartbeatOutcome(error=error)
    expected = encode_response(12, version, 12345,
                               heartbeat_api.to_response(outcome, version))
    assert heartbeat_api.encode(outcome, version, 12345) == expected


# -- hand-packed JoinGroup / SyncGroup responses -------------------------------------------------

_LONG = "m" * 200  # a compact length beyond one varint byte
_WIDE = "mémbre-ü-€"  # the length prefix counts UTF-8 bytes, not characters

PACKED_JOIN_OUTCOMES = [
    *JOIN_OUTCOMES,
    JoinGroupOutcome(error=ErrorCode.inconsistent_group_protocol, member_id=_WIDE),
    JoinGroupOutcome(
        generation_id=2**31 - 1,
        protocol_type=None,
        protocol_name="",
        leader=_LONG,
        member_id=_LONG,
    ),
    JoinGroupOutcome(
        generation_id=7,
        protocol_type="consumer",
        protocol_name="cooperative-sticky",
        leader="m-0",
        member_id="m-0",
        members=tuple(
            JoinedMember(
                member_id=f"m-{i}" if i % 3 else _WIDE + str(i),
                group_instance_id=None if i % 2 else f"instance-{i}",
                metadata=bytes(range(i % 256)) * (1 + i // 50),
            )
            for i in range(300)  # more than 127 members: a multi-byte compact array length
        ),
    ),
]


def _kio_bytes(module: Any, outcome: Any, version: int, correlation_id: int) -> bytes:
    from protocol.codec import encode_response

    return encode_response(
        module.API_KEY, version, correlation_id, module.to_response(outcome, version)
    )


@pytest.mark.parametrize("version", range(join_group.MIN_VERSION, join_group.MAX_VERSION + 1))
@pytest.mark.parametrize("outcome", PACKED_JOIN_OUTCOMES)
def test_hand_packed_join_group_response_matches_kio(
    version: int, outcome: JoinGroupOutcome
) -> None:
    expected = _kio_bytes(join_group, outcome, version, 987654)
    assert join_group.encode(outcome, version, 987654) == expected


PACKED_SYNC_OUTCOMES = [
    SyncGroupOutcome(error=ErrorCode.rebalance_in_progress),
    SyncGroupOutcome(error=ErrorCode.unknown_member_id, protocol_type="consumer"),
    SyncGroupOutcome(protocol_type="consumer", protocol_name="range", assignment=b"abc"),
    SyncGroupOutcome(protocol_type=_WIDE, protocol_name=_LONG, assignment=bytes(range(256)) * 4),
]


@pytest.mark.parametrize("version", range(sync_group.MIN_VERSION, sync_group.MAX_VERSION + 1))
@pytest.mark.parametrize("outcome", PACKED_SYNC_OUTCOMES)
def test_hand_packed_sync_group_response_matches_kio(
    version: int, outcome: SyncGroupOutcome
) -> None:
    expected = _kio_bytes(sync_group, outcome, version, -5)
    assert sync_group.encode(outcome, version, -5) == expected


_ids = st.text(max_size=70)
_joined_members = st.builds(
    JoinedMember,
    member_id=_ids,
    group_instance_id=st.none() | _ids,
    metadata=st.binary(max_size=300),
)


@given(
    version=st.integers(join_group.MIN_VERSION, join_group.MAX_VERSION),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    outcome=st.builds(
        JoinGroupOutcome,
        error=st.sampled_from(ErrorCode),
        generation_id=st.integers(-(2**31), 2**31 - 1),
        protocol_type=st.none() | _ids,
        protocol_name=st.none() | _ids,
        leader=_ids,
        skip_assignment=st.booleans(),
        member_id=_ids,
        members=st.lists(_joined_members, max_size=140).map(tuple),
    ),
)
@settings(max_examples=300, deadline=None)
def test_hand_packed_join_group_response_matches_kio_for_any_outcome(
    version: int, correlation_id: int, outcome: JoinGroupOutcome
) -> None:
    expected = _kio_bytes(join_group, outcome, version, correlation_id)
    assert join_group.encode(outcome, version, correlation_id) == expected


@given(
    version=st.integers(sync_group.MIN_VERSION, sync_group.MAX_VERSION),
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    outcome=st.builds(
        SyncGroupOutcome,
        error=st.sampled_from(ErrorCode),
        protocol_type=st.none() | _ids,
        protocol_name=st.none() | _ids,
        assignment=st.binary(max_size=400),
    ),
)
@settings(max_examples=300, deadline=None)
def test_hand_packed_sync_group_response_matches_kio_for_any_outcome(
    version: int, correlation_id: int, outcome: SyncGroupOutcome
) -> None:
    expected = _kio_bytes(sync_group, outcome, version, correlation_id)
    assert sync_group.encode(outcome, version, correlation_id) == expected
