"""Metrics and the page for consumer groups (KIP-848), fed by the core's events as the runtime
feeds them: each command's events after the command, with the live groups beside them."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from coordinator.group.consumer.config import ConsumerGroupConfig
from coordinator.group.offsets import OffsetStore
from coordinator.ops import metrics as om
from coordinator.ops import page
from coordinator.ops.view import CLASSIC, CONSUMER
from coordinator.runtime.ops_view import BrokerOpsView
from storage.topics import Topic
from tests.consumer_helpers import beat, image, join, parts
from tests.context import GroupTestContext


class _Broker:
    """What the ops view reads of a broker: the test context's groups, no offsets, no topics."""

    node_id = 1

    def __init__(self, ctx: GroupTestContext) -> None:
        self.ctx = ctx
        self.groups = self
        self.service = ctx.service
        self.offsets = OffsetStore()
        self.topics: dict[str, Topic] = {}

    def wall_ms(self) -> int:
        return self.ctx.now_ms


class Fed:
    """A test context whose events reach a `BrokerMetrics` after every command and sleep."""

    def __init__(self, partitions: int = 4) -> None:
        self.ctx = GroupTestContext(consumer_config=ConsumerGroupConfig())
        self.ctx.service.consumer.set_topic_image(image({"t": partitions}))
        self.view = BrokerOpsView(_Broker(self.ctx))
        self.metrics = om.BrokerMetrics()
        self.metrics.rebalances.consumer_groups = self.view
        self._seen = 0

    def _feed(self) -> None:
        self.metrics.on_events(self.ctx.events[self._seen:])
        self._seen = len(self.ctx.events)

    def send(self, cmd: Any) -> Any:
        reply = self.ctx.send(cmd)
        self._feed()
        return reply

    def sleep(self, ms: int) -> None:
        self.ctx.sleep(ms)
        self._feed()


def exported(metrics: om.BrokerMetrics, fed: Fed) -> dict[tuple[str, tuple[tuple[str, str], ...]],
                                                         float]:
    counts = om.GroupCounts()
    for by_state in fed.view.count_group_states(CLASSIC, 1000):
        counts.add_classic(by_state)
    for by_state in fed.view.count_group_states(CONSUMER, 1000):
        counts.add_consumer(by_state)
    snap = metrics.snapshot(counts, num_offsets=0, connections=0, now_ms=fed.ctx.now_ms)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(om.exposition(snap).decode())
            for s in family.samples}


def test_a_handover_is_one_consumer_rebalance_that_ends_when_everyone_reconciled() -> None:
    fed = Fed()
    fed.send(join("a"))  # epoch 1: a gets everything at once
    fed.send(join("b"))  # epoch 2: a must give two partitions up first
    history = fed.metrics.rebalances.history["g"]
    first, second = history.rebalances
    assert (first.cause, first.outcome, first.total_ms) == ("member_join", "stabilized", 0)
    assert (second.cause, second.outcome, second.member_id) == ("member_join", "in progress", "b")
    assert second.group_type == "consumer" and second.client_id == "client"
    fed.sleep(300)
    a = fed.send(beat("a", 1, {"t": [0, 1, 2, 3]}))
    kept = parts(a.assignment)
    fed.sleep(200)
    fed.send(beat("a", 1, {"t": kept}))  # a acknowledged: b may take the rest
    assert second.outcome == "in progress"  # b has not got them yet
    fed.send(beat("b", 2, {}))
    assert (second.outcome, second.total_ms, second.members) == ("stabilized", 500, 2)

    values = exported(fed.metrics, fed)
    k = "kafka_server_group_coordinator_metrics_"
    assert values[(k + "group_count", (("protocol", "consumer"),))] == 1
    assert values[(k + "group_count", (("protocol", "classic"),))] == 0
    assert values[(k + "consumer_group_count", (("state", "stable"),))] == 1
    assert values[(k + "classic_group_count", (("state", "Stable"),))] == 0
    assert values[(k + "consumer_group_rebalance_total", ())] == 2
    assert values[(k + "group_completed_rebalance_total", ())] == 0  # classic only, as Kafka
    assert values[("rebalanced_rebalances_total",
                   (("cause", "member_join"), ("protocol", "consumer")))] == 2
    total = (("group", "g"), ("phase", "total"))
    assert values[("rebalanced_rebalance_duration_seconds_count", total)] == 2
    assert values[("rebalanced_rebalance_duration_seconds_sum", total)] == 0.5
    assert ("rebalanced_rebalance_duration_seconds_count",
            (("group", "g"), ("phase", "join"))) not in values  # no join barrier
    assert values[("rebalanced_seconds_since_last_rebalance", (("group", "g"),))] == 0


def test_an_expired_member_is_counted_by_cause_and_type() -> None:
    fed = Fed(partitions=3)
    fed.send(join("a"))
    fed.send(join("b"))
    fed.sleep(40_000)
    fed.send(beat("a", 1, {"t": [0, 1, 2]}))
    fed.sleep(10_000)  # b never heartbeats again: 45 s after its join it is fenced
    group = fed.ctx.service.consumer.group("g")
    assert group is not None
    # the new target assignment is computed at a's next heartbeat
    fed.send(beat("a", group.members["a"].member_epoch, {"t": [0, 1, 2]}))
    assert fed.metrics.rebalances.members_removed == {("consumer", "session_expiry"): 1}
    last = fed.metrics.rebalances.history["g"].rebalances[-1]
    assert (last.cause, last.member_id) == ("session_expiry", "b")  # not a, who heartbeated
    assert [r.cause for r in fed.metrics.rebalances.history["g"].removed] == ["session_expiry"]
    values = exported(fed.metrics, fed)
    assert values[("rebalanced_members_removed_total",
                   (("cause", "session_expiry"), ("protocol", "consumer")))] == 1
    assert values[("rebalanced_rebalances_total",
                   (("cause", "session_expiry"), ("protocol", "consumer")))] == 1


def test_the_page_shows_a_consumer_group_its_members_and_its_last_rebalance() -> None:
    fed = Fed()
    fed.send(join("a"))
    fed.send(join("b", client_id="billing-2", client_host="/10.1.2.3"))
    snap = page.snapshot(fed.view, fed.metrics.rebalances, fed.ctx.now_ms)
    [group] = snap["groups"]
    assert group["group_type"] == "consumer" and group["state"] == "Reconciling"
    assert [m["partitions"] for m in group["members"]] == [[("t", 0), ("t", 1), ("t", 2),
                                                             ("t", 3)], []]
    html = page.render(snap)
    assert "consumer group (KIP-848)" in html and "Reconciling" in html
    assert "member_join" in html and "billing-2 on /10.1.2.3" in html
    assert "reconciling for" in html
