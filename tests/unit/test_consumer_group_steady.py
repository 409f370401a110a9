"""The steady-state heartbeat shortcut: when it answers, and when it leaves the full path to."""

from __future__ import annotations

from dataclasses import replace

from coordinator.group.consumer.commands import ConsumerGroupHeartbeat
from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.consumer.steady import steady_heartbeat
from coordinator.group.result import RequestRef
from tests.consumer_helpers import beat, image, join
from tests.context import GroupTestContext


def _on(connection: int, cmd: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeat:
    """The heartbeat as it arrives on `connection` (`ctx.send` uses connection 1)."""
    return replace(cmd, ref=RequestRef(connection, 99))


def _reconciled(ctx: GroupTestContext) -> int:
    """One member joined and reconciled; its epoch."""
    reply = ctx.send(join("m1", ("t",)))
    reply = ctx.send(beat("m1", reply.member_epoch, {"t": [0, 1, 2]}))
    assert reply.error.value == 0
    return int(reply.member_epoch)


def _context() -> GroupTestContext:
    ctx = GroupTestContext(consumer_config=ConsumerGroupConfig(session_timeout_ms=10_000))
    ctx.service.consumer.set_topic_image(image({"t": 3}))
    return ctx


def test_a_reconciled_member_s_null_heartbeat_takes_the_shortcut_and_moves_its_session() -> None:
    ctx = _context()
    epoch = _reconciled(ctx)
    consumer = ctx.service.consumer
    groups = dict(consumer.groups)
    ctx.sleep(4_000)
    outcome = steady_heartbeat(consumer.config, consumer.image, groups,
                               _on(1, beat("m1", epoch)), ctx.now_ms)
    assert outcome is not None
    assert (outcome.member_id, outcome.member_epoch, outcome.assignment) == ("m1", epoch, None)
    assert groups["g"].session_deadlines["m1"] == ctx.now_ms + 10_000
    # Heartbeats through the coordinator keep the member past its first session.
    for _ in range(4):
        ctx.sleep(4_000)
        assert ctx.send(beat("m1", epoch)).error.value == 0
    assert "m1" in groups["g"].members


def test_anything_else_takes_the_full_path() -> None:
    ctx = _context()
    epoch = _reconciled(ctx)
    consumer = ctx.service.consumer
    groups = dict(consumer.groups)

    def shortcut(**kw: object) -> object:
        return steady_heartbeat(consumer.config, consumer.image, groups,
                                _on(1, beat("m1", kw.pop("epoch", epoch), **kw)),  # type: ignore[arg-type]
                                ctx.now_ms)

    assert shortcut() is not None
    # Another connection than the member's latest: the full path notes it.
    assert steady_heartbeat(consumer.config, consumer.image, groups,
                            _on(2, beat("m1", epoch)), ctx.now_ms) is None

    assert shortcut(epoch=epoch + 1) is None  # fenced by the full path
    assert shortcut(epoch=epoch - 1) is None
    assert shortcut(rack_id="r") is None
    assert shortcut(instance_id="i") is None  # unknown instance id
    assert shortcut(rebalance_timeout_ms=30_000) is None
    assert shortcut(subscribed_topic_names=("t",)) is None
    consumer.set_topic_image(image({"t": 4}, version=2))  # a new partition: a new target
    assert steady_heartbeat(consumer.config, consumer.image, groups,
                            _on(1, beat("m1", epoch)), ctx.now_ms) is None
    reply = ctx.send(beat("m1", epoch))
    assert reply.member_epoch > epoch
