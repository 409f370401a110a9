"""Metrics counting, the per-group cap, the exposition, and the page's escaping."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.group import events as ev
from coordinator.ops import metrics as om
from coordinator.ops import page
from coordinator.ops.metrics import history as hi


def started(group: str, ts: int, reason: str, generation: int = 0,
            cause: ev.RebalanceCause = ev.RebalanceCause.OTHER) -> ev.RebalanceStarted:
    return ev.RebalanceStarted(ts_ms=ts, group_id=group, generation_id=generation, partition=0,
                               previous_state="Stable", reason=reason,
                               cause=cause, member_id="m-1",
                               client_id="app", client_host="/10.0.0.1")


def rebalance(metrics: om.BrokerMetrics, group: str, ts: int, reason: str,
              cause: ev.RebalanceCause = ev.RebalanceCause.OTHER) -> None:
    metrics.on_event(started(group, ts, reason, cause=cause))
    metrics.on_event(ev.JoinCompleted(ts_ms=ts + 300, group_id=group, generation_id=1,
                                      protocol_name="range", leader_id="m-1", member_count=2,
                                      duration_ms=300))
    metrics.on_event(ev.GroupStabilized(ts_ms=ts + 400, group_id=group, generation_id=1,
                                        member_count=2, duration_ms=400))


@pytest.mark.parametrize("cause", list(ev.RebalanceCause))
def test_a_classic_rebalance_is_counted_under_the_journals_cause(cause: ev.RebalanceCause
                                                                 ) -> None:
    """The cause is set where the rebalance starts; /metrics and the journal both read it."""
    metrics = om.BrokerMetrics()
    metrics.on_event(started("g", 0, "any reason text", cause=cause))
    assert metrics.rebalances.rebalances_by_cause == {("classic", cause.value): 1}
    journal = ev.journal_record(started("g", 0, "any reason text", cause=cause).as_dict(),
                                wall_ms=0)
    assert journal["cause"] == cause.value


@pytest.mark.parametrize(("reason", "cause"), [
    ("member joined", "member_join"),
    ("subscription changed", "metadata_change"),
    ("subscribed topic metadata changed", "metadata_change"),
    ("member removed (leave)", "member_leave"),
    ("member removed (session_expiry)", "session_expiry"),
    ("member removed (rebalance_timeout)", "rebalance_timeout"),
    ("member removed (disconnect)", "disconnect"),
    ("member removed (fenced)", "fenced"),
    ("group epoch ahead", "other"),
])
def test_a_consumer_rebalance_is_named_in_the_journals_vocabulary(reason: str,
                                                                  cause: str) -> None:
    event = ev.TargetAssignmentComputed(ts_ms=0, group_id="g", group_type="consumer",
                                        generation_id=2, assignor="uniform", member_count=1,
                                        partition_count=1, moved_partitions=1, reason=reason)
    assert hi.rebalance_cause(event) == cause


def test_phases_history_and_the_group_cap() -> None:
    metrics = om.BrokerMetrics(max_groups=2)
    for i, group in enumerate(("a", "b", "c", "d")):
        rebalance(metrics, group, 1000 * i, "removing member m on LeaveGroup",
                  ev.RebalanceCause.MEMBER_LEAVE)
    assert set(metrics.rebalances.rebalance_seconds) == {"a", "b", om.OTHER_GROUPS}
    assert metrics.rebalances.rebalance_seconds[om.OTHER_GROUPS]["total"].count == 2
    a = metrics.rebalances.rebalance_seconds["a"]
    assert (a["join"].total, a["sync"].total, a["total"].total) == (0.3, 0.1, 0.4)
    assert metrics.rebalances.rebalances_by_cause == {("classic", "member_leave"): 4}
    assert metrics.rebalances.completed_rebalances == 4
    [last] = metrics.rebalances.history["d"].rebalances
    assert (last.cause, last.join_ms, last.total_ms, last.outcome) == (
        "member_leave", 300, 400, "stabilized")

    metrics.on_event(ev.MemberRemoved(ts_ms=5000, group_id="a", generation_id=1, member_id="m",
                                      group_instance_id=None, client_id="app", client_host="/h",
                                      cause=ev.RemovalCause.SESSION_EXPIRY))
    assert metrics.rebalances.members_removed == {("classic", "session_expiry"): 1}

    snap = metrics.snapshot(om.GroupCounts(), num_offsets=7, connections=3, now_ms=10_400)
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for family in text_string_to_metric_families(om.exposition(snap).decode())
              for s in family.samples}
    assert values[("rebalanced_seconds_since_last_rebalance", (("group", "a"),))] == 10.0
    assert ("rebalanced_seconds_since_last_rebalance", (("group", "c"),)) not in values
    assert values[("kafka_coordinator_group_groupmetadatamanager_numoffsets", ())] == 7
    assert values[("rebalanced_open_connections", ())] == 3
    assert values[("rebalanced_rebalance_duration_seconds_count",
                   (("group", om.OTHER_GROUPS), ("phase", "join")))] == 2


def test_request_latency_per_api_and_version() -> None:
    from protocol.codec import RequestHeader

    class Connection:
        closed = False

        def complete(self, slot: object, data: bytes | None) -> None:
            pass

    metrics = om.BrokerMetrics()
    for _ in range(3):  # JoinGroup: every request is timed
        metrics.context(Connection(), object(), RequestHeader(11, 5, 0, "c")).respond_raw(b"")
    histogram = metrics.requests[(11, 5)]
    assert histogram.count == 3 and dict(histogram.cumulative())["+Inf"] == 3
    for seconds in (0.0001, 0.0002, 0.003):
        histogram.observe(seconds)
    assert dict(histogram.cumulative())["0.00025"] >= 2
    assert histogram.count == 6


def test_every_served_api_version_has_a_counter_slot() -> None:
    from tests.served import served_versions

    served = served_versions()

    slots = {om.BrokerMetrics.slot_of(key, version)
             for key, (low, high) in served.items() for version in range(low, high + 1)}
    assert None not in slots
    assert len(slots) == sum(high - low + 1 for low, high in served.values())


def test_page_escapes_what_clients_choose() -> None:
    metrics = om.BrokerMetrics()
    hostile = "<script>alert(1)</script>"
    metrics.on_event(started("g", 0, hostile))
    snap = {"now_ms": 1000, "node_id": 1, "group_count": 1, "shown": 1, "groups": [{
        "group_id": hostile, "state": "PreparingRebalance", "generation_id": 0,
        "protocol_type": "consumer", "protocol": None, "leader_id": None, "member_count": 1,
        "members": [{"member_id": "m", "client_id": hostile, "host": "/h", "instance_id": None,
                     "partitions": [("t", 0)]}],
        "lag": [], "removed": [],
        "rebalances": [dict(started_ms=0, generation_id=0, reason=hostile, cause="other",
                            member_id="m", client_id=hostile, client_host="/h", join_ms=None,
                            total_ms=None, outcome="in progress", members=None,
                            running_ms=1000)]}]}
    html = page.render(snap)
    tags: list[str] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: object) -> None:
            tags.append(tag)

    Tags().feed(html)
    assert "script" not in tags
    assert "&lt;script&gt;" in html


def test_the_timed_context_sets_every_field_of_the_plain_one() -> None:
    import dataclasses

    from coordinator.api.context import RequestContext

    class Header:
        api_key = 12
        api_version = 3

    timed = om.TimedRequestContext(object(), object(), Header(),
                                   om.Histogram(om.LATENCY_BOUNDS))
    for f in dataclasses.fields(RequestContext):
        getattr(timed, f.name)  # an unset slot raises AttributeError


def test_every_request_is_counted_and_hot_ones_are_sampled() -> None:
    from coordinator.api.context import RequestContext
    from protocol.codec import RequestHeader

    metrics = om.BrokerMetrics()
    contexts = [metrics.context(object(), object(), RequestHeader(12, 4, i, "c"))
                for i in range(128)]
    commits = [metrics.context(object(), object(), RequestHeader(8, 9, i, "c"))
               for i in range(16)]
    joins = [metrics.context(object(), object(), RequestHeader(11, 5, 0, "c"))
             for _ in range(3)]
    assert metrics.request_count(12, 4) == 128 and metrics.request_count(11, 5) == 3
    assert metrics.request_count(8, 9) == 16 and metrics.request_count(12, 3) == 0

    def timed(cs: list[RequestContext]) -> int:
        return sum(type(c) is om.TimedRequestContext for c in cs)

    assert timed(contexts) == 128 // om.SAMPLE_EVERY[12] == 2
    assert timed(commits) == 16 // om.SAMPLE_EVERY[8] == 2
    assert timed(joins) == 3
    assert all(isinstance(c, RequestContext) for c in contexts + commits + joins)
    snap = metrics.snapshot(om.GroupCounts(), num_offsets=0, connections=0, now_ms=0)
    assert snap["request_counts"] == {(12, 4): 128, (8, 9): 16, (11, 5): 3}
    assert snap["requests"][(12, 4)].count == 0  # created when timed, answered later


def test_the_cached_exposition_equals_a_fresh_one() -> None:
    from protocol.codec import RequestHeader

    class Connection:
        closed = False

        def complete(self, slot: object, data: bytes | None) -> None:
            pass

    metrics = om.BrokerMetrics()
    cache: dict[str, object] = {}

    def serve(api_key: int, version: int, count: int) -> None:
        for i in range(count):
            metrics.context(Connection(), object(),
                            RequestHeader(api_key, version, i, "c")).respond_raw(b"")

    def scrape(now_ms: int) -> tuple[bytes, bytes]:
        snap = metrics.snapshot(om.GroupCounts(), num_offsets=3, connections=2, now_ms=now_ms)
        return om.exposition(snap, cache), om.exposition(snap)

    serve(11, 5, 2)
    serve(12, 4, 64)
    rebalance(metrics, "a", 0, "removing member m on LeaveGroup")
    for step in range(3):
        cached, fresh = scrape(1000 * step)
        assert cached == fresh
        serve(12, 4, 64)  # only the heartbeat histogram moves between these scrapes
    metrics.offset_commits += 5
    rebalance(metrics, "b", 5000, "adding new member m")
    cached, fresh = scrape(9000)
    assert cached == fresh
    assert b'offset_commit_total 5.0' in cached and b'group="b"' in cached


def test_a_conversion_ends_the_open_rebalance_of_the_old_group_type() -> None:
    metrics = om.BrokerMetrics()
    metrics.on_event(started("g", 1000, "adding new member m"))
    metrics.on_event(ev.GroupConverted(ts_ms=1600, group_id="g", generation_id=1,
                                       direction="upgrade", from_type="classic",
                                       to_type="consumer", member_count=2, reason="upgrade"))
    [last] = metrics.rebalances.history["g"].rebalances
    assert (last.outcome, last.total_ms) == ("converted", 600)
