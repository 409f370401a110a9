"""A member waiting for partitions others still own is told to heartbeat sooner; every other
member gets the configured interval."""

from __future__ import annotations

from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.member import MemberState
from coordinator.group.consumer.reconciling_interval import reconciling_interval_ms
from tests.consumer_helpers import beat, image, join, parts
from tests.context import GroupTestContext

INTERVAL = 2_000


def _context(interval: int = INTERVAL) -> GroupTestContext:
    ctx = GroupTestContext(consumer_config=ConsumerGroupConfig(
        session_timeout_ms=45_000, heartbeat_interval_ms=interval))
    ctx.service.consumer.set_topic_image(image({"t": 4}))
    return ctx


def _state(ctx: GroupTestContext, member_id: str) -> MemberState:
    return ctx.service.consumer.groups["g"].members[member_id].state


def test_the_shorter_interval_is_a_quarter_with_a_floor() -> None:
    assert reconciling_interval_ms(ConsumerGroupConfig(heartbeat_interval_ms=5_000)) == 1_250
    assert reconciling_interval_ms(ConsumerGroupConfig(heartbeat_interval_ms=200)) == 100
    # Never longer than the configured interval itself.
    assert reconciling_interval_ms(ConsumerGroupConfig(heartbeat_interval_ms=50)) == 50
    assert reconciling_interval_ms(ConsumerGroupConfig(
        heartbeat_interval_ms=5_000, reconciling_heartbeat_divisor=2)) == 2_500


def test_a_newcomer_heartbeats_sooner_until_the_old_owner_released_its_share() -> None:
    ctx = _context()
    short = INTERVAL // 4
    first = ctx.send(join("m1"))
    assert first.heartbeat_interval_ms == INTERVAL  # nobody else owns its partitions
    epoch1 = first.member_epoch
    assert ctx.send(beat("m1", epoch1, {"t": [0, 1, 2, 3]})).heartbeat_interval_ms == INTERVAL

    # A newcomer: its share is still owned by m1, so it waits (UNRELEASED_PARTITIONS).
    ctx.sleep(100)
    second = ctx.send(join("m2"))
    assert parts(second.assignment) == set()
    assert _state(ctx, "m2") is MemberState.UNRELEASED_PARTITIONS
    assert second.heartbeat_interval_ms == short

    # m1 learns it must revoke (UNREVOKED_PARTITIONS): the configured interval, since clients
    # acknowledge a revocation as soon as it is done.
    ctx.sleep(100)
    told = ctx.send(beat("m1", epoch1, {"t": [0, 1, 2, 3]}))
    assert _state(ctx, "m1") is MemberState.UNREVOKED_PARTITIONS
    assert told.heartbeat_interval_ms == INTERVAL
    kept = parts(told.assignment)
    assert len(kept) == 2

    # Until m1 acknowledges, m2 keeps waiting, at the shorter interval.
    ctx.sleep(short)
    waiting = ctx.send(beat("m2", second.member_epoch, {}))
    assert parts(waiting.assignment) == set()
    assert waiting.heartbeat_interval_ms == short

    # m1 acknowledges: reconciled.
    acked = ctx.send(beat("m1", epoch1, {"t": kept}))
    assert _state(ctx, "m1") is MemberState.STABLE
    assert acked.heartbeat_interval_ms == INTERVAL

    # m2 gets the released partitions on its next (sooner) heartbeat, and is reconciled.
    ctx.sleep(short)
    given = ctx.send(beat("m2", second.member_epoch, {}))
    assert parts(given.assignment) == {0, 1, 2, 3} - kept
    assert _state(ctx, "m2") is MemberState.STABLE
    assert given.heartbeat_interval_ms == INTERVAL

    # Steady heartbeats (the shortcut) carry the configured interval.
    ctx.sleep(INTERVAL)
    assert ctx.send(beat("m2", given.member_epoch)).heartbeat_interval_ms == INTERVAL
    assert ctx.send(beat("m1", acked.member_epoch)).heartbeat_interval_ms == INTERVAL
