"""LeaveGroup: single and batch, pending members, static removal by instance id."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from tests.builders import JoinGroupBuilder, heartbeat, leave
from tests.context import GroupTestContext


def test_leave_makes_survivors_rebalance_on_next_heartbeat() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2)
    out = ctx.send(leave(b))
    assert out.error is ErrorCode.none and out.members[0].error is ErrorCode.none
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    assert ctx.send(heartbeat(a, 1)).error is ErrorCode.rebalance_in_progress
    removed = ctx.events_named("member_removed")[-1]
    assert removed.member_id == b and removed.cause.value == "leave"


def test_batch_leave_reports_per_member_errors() -> None:
    ctx = GroupTestContext()
    a, _ = ctx.stable_group(2)
    out = ctx.send(leave(a, "ghost", ("", "no-such-instance")))
    assert [m.error for m in out.members] == [
        ErrorCode.none,
        ErrorCode.unknown_member_id,
        ErrorCode.unknown_member_id,
    ]


def test_leave_of_unknown_group() -> None:
    ctx = GroupTestContext()
    out = ctx.send(leave("x", group="nope"))
    assert out.error is ErrorCode.none and out.members[0].error is ErrorCode.unknown_member_id


def test_pending_member_just_disappears() -> None:
    ctx = GroupTestContext()
    pending = ctx.send(JoinGroupBuilder()).member_id
    out = ctx.send(leave(pending))
    assert out.members[0].error is ErrorCode.none
    assert ctx.group().pending_members == {}
    assert ctx.group().state is GroupState.EMPTY


def test_leaving_during_join_phase_lets_the_join_complete() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2)
    ctx.send(JoinGroupBuilder().member_id(a))
    ref = ctx.ref_of_last()
    ctx.send(leave(b))
    assert ctx.reply(ref).generation_id == 2


def test_static_member_removed_by_instance_id() -> None:
    ctx = GroupTestContext()
    ctx.send(JoinGroupBuilder().group_instance_id("i1"))
    ctx.sleep(0)
    out = ctx.send(leave(("", "i1")))
    assert out.members[0].error is ErrorCode.none
    assert ctx.group().members == {}


def test_static_member_with_wrong_member_id_is_fenced() -> None:
    ctx = GroupTestContext()
    ctx.send(JoinGroupBuilder().group_instance_id("i1"))
    ctx.sleep(0)
    out = ctx.send(leave(("someone-else", "i1")))
    assert out.members[0].error is ErrorCode.fenced_instance_id


def test_v0_response_folds_the_member_error() -> None:
    from coordinator.api import leave_group
    from coordinator.group.outcomes import LeaveGroupOutcome, LeaveMemberOutcome

    outcome = LeaveGroupOutcome(
        members=(
            LeaveMemberOutcome(
                member_id="m", group_instance_id=None, error=ErrorCode.unknown_member_id
            ),
        )
    )
    assert leave_group.to_response(outcome, 0).error_code is ErrorCode.unknown_member_id
    assert leave_group.to_response(outcome, 3).error_code is ErrorCode.none
