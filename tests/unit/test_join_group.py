"""JoinGroup: validation, KIP-394 member ids, the join phase and its completion."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from coordinator.group.classic.state import GroupState
from coordinator.group.config import GroupConfig
from tests.builders import JoinGroupBuilder, leave, protocols, sync
from tests.context import GroupTestContext


def test_empty_group_id_is_invalid() -> None:
    ctx = GroupTestContext()
    assert ctx.send(JoinGroupBuilder(group="")).error is ErrorCode.invalid_group_id


def test_session_timeout_outside_bounds_is_invalid() -> None:
    ctx = GroupTestContext()
    too_short = ctx.send(JoinGroupBuilder().session_timeout_ms(5_999))
    too_long = ctx.send(JoinGroupBuilder().session_timeout_ms(1_800_001))
    assert too_short.error is ErrorCode.invalid_session_timeout
    assert too_long.error is ErrorCode.invalid_session_timeout


def test_empty_protocol_list_is_inconsistent() -> None:
    ctx = GroupTestContext()
    out = ctx.send(JoinGroupBuilder().with_protocols())
    assert out.error is ErrorCode.inconsistent_group_protocol


def test_unknown_group_with_member_id_is_unknown_member() -> None:
    ctx = GroupTestContext()
    out = ctx.send(JoinGroupBuilder().member_id("ghost"))
    assert out.error is ErrorCode.unknown_member_id
    assert ctx.service.group("g") is None


def test_v4_dynamic_member_gets_member_id_required() -> None:
    ctx = GroupTestContext()
    out = ctx.send(JoinGroupBuilder().api_version(4))
    assert out.error is ErrorCode.member_id_required
    assert out.member_id == "client-1"
    assert ctx.group().pending_members == {"client-1": 10_000}


def test_pending_member_expires_after_session_timeout() -> None:
    ctx = GroupTestContext()
    ctx.send(JoinGroupBuilder().session_timeout_ms(6_000))
    ctx.sleep(5_999)
    assert "client-1" in ctx.group().pending_members
    ctx.sleep(1)
    assert ctx.group().pending_members == {}


def test_v3_member_joins_in_one_step() -> None:
    ctx = GroupTestContext()
    assert ctx.send(JoinGroupBuilder().api_version(3)) is None  # parked in the initial delay
    ctx.sleep(0)
    out = ctx.reply(ctx.ref_of_last())
    assert out.error is ErrorCode.none
    assert out.generation_id == 1
    assert out.leader == out.member_id == "client-1"
    assert [m.member_id for m in out.members] == ["client-1"]


def test_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    from datetime import timedelta

    from kio.schema.join_group.v0.request import JoinGroupRequest, JoinGroupRequestProtocol
    from kio.schema.types import GroupId
    from kio.static.primitive import i32Timedelta

    from coordinator.api import join_group
    from coordinator.group.result import RequestRef

    req = JoinGroupRequest(
        group_id=GroupId("g"),
        session_timeout=i32Timedelta.parse(timedelta(milliseconds=7_000)),
        member_id="",
        protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )
    cmd = join_group.to_command(req, 0, RequestRef(1, 1), "cid", "/h")
    assert cmd.rebalance_timeout_ms == 7_000
    assert not cmd.require_known_member_id


def test_initial_delay_extends_while_members_arrive_bounded_by_rebalance_timeout() -> None:
    ctx = GroupTestContext(GroupConfig(group_initial_rebalance_delay_ms=3_000))
    first = JoinGroupBuilder().rebalance_timeout_ms(7_000)
    ctx.join_dynamic(first)
    ref = ctx.ref_of_last()
    ctx.sleep(2_000)
    ctx.join_dynamic(first, connection=2)  # a new member: the delay is extended
    ctx.sleep(1_000)  # first delay over at 3000, extended to 6000
    assert ctx.reply(ref) is None
    ctx.sleep(2_000)
    ctx.join_dynamic(first, connection=3)
    ctx.sleep(999)  # 5999
    assert ctx.reply(ref) is None
    ctx.sleep(1)  # 6000: remaining 7000-3000-3000 = 1000 more
    assert ctx.reply(ref) is None
    ctx.sleep(1_000)
    out = ctx.reply(ref)
    assert out is not None and out.error is ErrorCode.none
    assert len(out.members) == 3


def test_initial_delay_completes_without_new_members() -> None:
    ctx = GroupTestContext(GroupConfig(group_initial_rebalance_delay_ms=3_000))
    ctx.join_dynamic()
    ref = ctx.ref_of_last()
    ctx.sleep(2_999)
    assert ctx.reply(ref) is None
    ctx.sleep(1)
    assert ctx.reply(ref).generation_id == 1
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE


def test_join_completes_as_soon_as_every_member_rejoins() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2)
    ra = ctx.send(JoinGroupBuilder().member_id(a))  # leader rejoins: rebalance
    assert ra is None
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    rb_ = ctx.send(JoinGroupBuilder(client_id="c1").member_id(b), connection=2)
    assert rb_ is not None and rb_.generation_id == 2  # completed immediately, no timer
    assert ctx.reply(ctx.ref_of_last()).members == ()
    leader_reply = [o for o in ctx.replies.values() if getattr(o, "generation_id", 0) == 2]
    assert any(o.members for o in leader_reply)


def test_members_that_do_not_rejoin_are_removed_at_the_rebalance_timeout() -> None:
    ctx = GroupTestContext()
    a, b = ctx.stable_group(2, rebalance_ms=20_000, session_ms=60_000)
    changed = protocols("range", metadata=b"new subscription")
    ctx.send(JoinGroupBuilder().member_id(b).rebalance_timeout_ms(20_000).with_protocols(*changed))
    ref = ctx.ref_of_last()
    ctx.sleep(19_999)
    assert ctx.reply(ref) is None
    ctx.sleep(1)
    out = ctx.reply(ref)
    assert out.generation_id == 2
    assert out.leader == b  # the old leader did not rejoin: re-elected
    assert set(ctx.group().members) == {b}
    removed = ctx.events_named("member_removed")
    assert [(e.member_id, e.cause.value) for e in removed] == [(a, "rebalance_timeout")]


def test_protocol_vote_picks_the_most_preferred_common_protocol() -> None:
    ctx = GroupTestContext()
    v3 = JoinGroupBuilder().api_version(3)
    rr_first = v3.with_protocols(*protocols("roundrobin", "range"))
    range_first = v3.with_protocols(*protocols("range", "roundrobin"))
    ctx.send(rr_first)
    ctx.send(range_first, connection=2)
    ctx.send(range_first, connection=3)
    ctx.sleep(0)
    assert ctx.group().protocol_name == "range"


def test_new_member_without_a_common_protocol_is_inconsistent() -> None:
    ctx = GroupTestContext()
    ctx.stable_group(1)
    out = ctx.send(JoinGroupBuilder().api_version(3).with_protocols(*protocols("sticky")))
    assert out.error is ErrorCode.inconsistent_group_protocol


def test_group_max_size_refuses_extra_members() -> None:
    ctx = GroupTestContext(GroupConfig(group_initial_rebalance_delay_ms=0, group_max_size=1))
    ctx.stable_group(1)
    out = ctx.send(JoinGroupBuilder().api_version(3), connection=2)
    assert out.error is ErrorCode.group_max_size_reached
    assert out.member_id == ""


def test_follower_rejoin_in_stable_with_same_metadata_gets_current_generation() -> None:
    ctx = GroupTestContext()
    _, b = ctx.stable_group(2)
    out = ctx.send(JoinGroupBuilder(client_id="c1").member_id(b))
    assert out.error is ErrorCode.none and out.generation_id == 1 and out.members == ()
    assert ctx.group().state is GroupState.STABLE


def test_completing_rebalance_rejoin_with_same_metadata_is_answered_again() -> None:
    ctx = GroupTestContext()
    a = ctx.join_dynamic()
    ctx.sleep(0)
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    out = ctx.send(JoinGroupBuilder().member_id(a))
    assert out.generation_id == 1 and [m.member_id for m in out.members] == [a]


def test_a_duplicate_parked_join_is_told_to_rejoin() -> None:
    ctx = GroupTestContext(GroupConfig(group_initial_rebalance_delay_ms=3_000))
    a = ctx.join_dynamic()
    first = ctx.ref_of_last()
    ctx.send(JoinGroupBuilder().member_id(a), connection=2)
    assert ctx.reply(first).error is ErrorCode.rebalance_in_progress
    ctx.sleep(3_000)
    assert ctx.reply(ctx.ref_of_last()).generation_id == 1


def test_join_to_empty_group_with_known_member_id_is_unknown() -> None:
    ctx = GroupTestContext()
    a = ctx.stable_group(1)[0]
    ctx.send(leave(a))
    assert ctx.group().state is GroupState.EMPTY
    out = ctx.send(JoinGroupBuilder().member_id(a))
    assert out.error is ErrorCode.unknown_member_id


def test_group_becoming_empty_is_persisted() -> None:
    ctx = GroupTestContext()
    a = ctx.stable_group(1)[0]
    ctx.send(leave(a))
    value = ctx.service.durable_view()["g"]
    assert value.members == () and value.generation == 2 and value.protocol is None
    assert ctx.events_named("group_empty")[0].generation_id == 2


def test_sync_after_join_uses_new_generation() -> None:
    ctx = GroupTestContext()
    a = ctx.join_dynamic()
    ctx.sleep(0)
    assert ctx.send(sync(a, 1, assignments={a: b"x"})).assignment == b"x"


def test_a_repeated_protocol_name_counts_once() -> None:
    ctx = GroupTestContext()
    repeated = JoinGroupBuilder(version=3).with_protocols(*protocols("range", "range"))
    ctx.send(repeated)
    ctx.send(JoinGroupBuilder(version=3, client_id="other").with_protocols(*protocols("sticky")))
    ctx.sleep(0)
    joined = [o for o in ctx.replies.values() if o.error is ErrorCode.none]
    assert [o.protocol_name for o in joined] == ["range"]
    refused = [o for o in ctx.replies.values() if o.error is not ErrorCode.none]
    assert [o.error for o in refused] == [ErrorCode.inconsistent_group_protocol]


def test_closing_a_connection_forgets_its_parked_joins_in_every_group() -> None:
    ctx = GroupTestContext(GroupConfig(group_initial_rebalance_delay_ms=3_000))
    for group in ("orders", "billing", "orders"):  # one connection, joins parked in two groups
        ctx.join_dynamic(JoinGroupBuilder(group=group), connection=5)
    ctx.join_dynamic(JoinGroupBuilder(group="billing"), connection=7)  # one group only
    ctx.join_dynamic(JoinGroupBuilder(group="billing"), connection=6)
    other = ctx.ref_of_last()
    ctx.close(5)  # the context asserts that nothing is answered on connections 5 and 7
    ctx.close(7)
    for group in ("orders", "billing"):
        assert not [p for m in ctx.group(group).members.values()
                    for p in (m.awaiting_join, m.awaiting_sync)
                    if p is not None and p.ref is not None and p.ref.connection_id in {5, 7}]
    ctx.sleep(9_000)  # past every (extended) initial delay
    assert ctx.reply(other) is not None and ctx.reply(other).error is ErrorCode.none


def test_group_max_size_also_forgets_the_refused_pending_member() -> None:
    ctx = GroupTestContext(GroupConfig(group_initial_rebalance_delay_ms=0, group_max_size=2))
    (a,) = ctx.stable_group(1)
    b = ctx.send(JoinGroupBuilder(client_id="b").api_version(4), connection=2).member_id
    c = ctx.send(JoinGroupBuilder(client_id="c").api_version(4), connection=3).member_id
    assert set(ctx.group().pending_members) == {b, c}
    ctx.send(JoinGroupBuilder(client_id="b").api_version(4).member_id(b), connection=2)
    ctx.send(JoinGroupBuilder(client_id="c0").api_version(4).member_id(a), connection=100)
    refused = ctx.send(JoinGroupBuilder(client_id="c").api_version(4).member_id(c), connection=3)
    assert refused.error is ErrorCode.group_max_size_reached
    assert ctx.group().pending_members == {}
    # Nobody is left to wait for: the join phase completes now, not at c's session timeout.
    ctx.sleep(0)
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    assert set(ctx.group().members) == {a, b}


def test_join_fields_the_group_log_cannot_store_are_invalid() -> None:
    ctx = GroupTestContext()
    long_name = "p" * 32_768
    cases = [
        JoinGroupBuilder(client_id="c" * 32_740),  # + "-" and a UUID for the member id
        JoinGroupBuilder().group_instance_id("i" * 32_740),
        JoinGroupBuilder().with_protocols(*protocols(long_name)),
        JoinGroupBuilder(client_id="é" * 16_384),  # 32,768 bytes in UTF-8
    ]
    for builder in cases:
        assert ctx.send(builder).error is ErrorCode.invalid_request
    assert ctx.service.group("g") is None
    assert ctx.send(JoinGroupBuilder(client_id="c" * 32_730)).error is not (
        ErrorCode.invalid_request)
