"""What the core answers a request touching groups whose log partition is not served now
(`coordinator/group/outcomes.py::refused_outcome`), driven through the test context."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group import outcomes as o
from tests.builders import describe, heartbeat, list_groups, sync
from tests.context import GroupTestContext

LOADING = ErrorCode.coordinator_load_in_progress
FAILED = ErrorCode.not_coordinator
far = {"far": LOADING, "lost": FAILED}.get  # "g" and "near" are served


def test_a_listing_is_refused_while_any_partition_is_not_served() -> None:
    assert o.refused_outcome(list_groups(), far, FAILED) == o.ListGroupsOutcome(error=FAILED)


def test_a_description_naming_one_unserved_group_is_refused_as_a_whole() -> None:
    refused = o.refused_outcome(describe("near", "far"), far, LOADING)
    assert isinstance(refused, o.DescribeGroupsOutcome)
    assert [(g.group_id, g.error) for g in refused.groups] == [("near", LOADING),
                                                               ("far", LOADING)]
    assert o.refused_outcome(describe("near", "g"), far, LOADING) is None


def test_a_member_request_gets_its_groups_answer_softened_as_kafka_does() -> None:
    assert o.refused_outcome(heartbeat("m", 1, group="far"), far, FAILED) == (
        o.HeartbeatOutcome(error=ErrorCode.none))  # keeps heartbeating until loaded
    assert o.refused_outcome(sync("m", 1, group="far"), far, FAILED) == (
        o.SyncGroupOutcome(error=ErrorCode.rebalance_in_progress))
    assert o.refused_outcome(heartbeat("m", 1, group="lost"), far, LOADING) == (
        o.HeartbeatOutcome(error=FAILED))


def test_a_served_group_goes_on_to_the_core() -> None:
    ctx = GroupTestContext()
    _, follower = ctx.stable_group(2)
    command = heartbeat(follower, 1)
    assert o.refused_outcome(command, far, LOADING) is None
    assert ctx.send(command, 101).error is ErrorCode.none
