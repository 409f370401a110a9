"""The DataFrame transforms on tiny hand-made frames (one shared SparkSession)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from forensics import transforms as T
from forensics.schema import GROUP_LOG_DDL, JOURNAL_FIELDS

EVENTS_DDL = f"{JOURNAL_FIELDS}, file STRING, row BIGINT"
COLUMNS = [c.split()[0].strip("`") for c in JOURNAL_FIELDS.split(", ")]
RECORD_COLUMNS = ["source_file", "log_partition", "position", "offset", "timestamp",
                  "record_type", "key_version", "value_version", "group_id", "topic",
                  "partition", "committed_offset", "commit_timestamp", "expire_timestamp",
                  "tombstone", "protocol_type", "generation", "protocol", "leader",
                  "state_timestamp", "members", "error"]


def events(spark: Any, *rows: dict[str, Any]) -> Any:
    full = []
    for n, row in enumerate(rows):
        values = {"v": 1, "group_id": "g", **row}
        full.append((*tuple(values.get(c) for c in COLUMNS), "events-1.jsonl", n))
    return spark.createDataFrame(full, EVENTS_DDL)


def member(event_type: str, ts: int, member_id: str, gen: int, **extra: Any) -> dict[str, Any]:
    return {"event_type": event_type, "ts": ts, "member_id": member_id, "generation": gen,
            "client_id": member_id.split("-")[0], "client_host": "/10.0.0.1", **extra}


def started(ts: int, gen: int, cause: str, culprit: str | None, **extra: Any) -> dict[str, Any]:
    return {"event_type": "rebalance_started", "ts": ts, "generation": gen, "cause": cause,
            "member_id": culprit, "client_id": culprit.split("-")[0] if culprit else None,
            "client_host": "/10.0.0.1" if culprit else None, "from_state": "Stable",
            "to_state": "PreparingRebalance", "reason": f"because {cause}", **extra}


def joined(ts: int, gen: int, members: int, duration: int) -> dict[str, Any]:
    return {"event_type": "join_completed", "ts": ts, "generation": gen,
            "num_members": members, "duration_ms": duration, "to_state": "CompletingRebalance"}


def stabilized(ts: int, gen: int, members: int, duration: int) -> dict[str, Any]:
    return {"event_type": "group_stabilized", "ts": ts, "generation": gen,
            "num_members": members, "duration_ms": duration, "to_state": "Stable"}


def test_rebalances_phases_cause_culprit_and_membership(spark: Any) -> None:
    frame = events(
        spark,
        member("member_added", 1000, "a-1", 0),
        started(1000, 0, "member_join", "a-1", from_state="Empty"),
        joined(1010, 1, 1, 10),
        stabilized(1030, 1, 1, 30),
        member("member_added", 5000, "b-1", 1, group_instance_id="static-b"),
        started(5000, 1, "member_join", "b-1"),
        # restarted while open: still the same rebalance
        started(5100, 1, "member_rejoin", "a-1"),
        joined(5400, 2, 2, 400),
        stabilized(5500, 2, 2, 500),
        member("member_removed", 9000, "a-1", 2, cause="session_expiry"),
        started(9000, 2, "session_expiry", "a-1"),
        joined(9050, 3, 1, 50),
        stabilized(9060, 3, 1, 60),
        # a static restart in Stable: no rebalance
        member("member_removed", 12000, "b-1", 3, cause="fenced", group_instance_id="static-b"),
    )
    rows = sorted(T.rebalances_from_journal(frame).collect(), key=lambda r: r.start_ts)
    got = [(r.generation_from, r.generation_to, r.start_ts, r.end_ts, r.join_ms, r.sync_ms,
            r.cause, r.culprit_client_id, r.members_before, r.members_after, r.restarts,
            r.outcome, list(r.members_joined), list(r.members_removed)) for r in rows]
    assert got == [
        (0, 1, 1000, 1030, 10, 20, "member_join", "a", 0, 1, 0, "stabilized", ["a"], []),
        (1, 2, 5000, 5500, 400, 100, "member_join", "b", 1, 2, 1, "stabilized", ["b"], []),
        (2, 3, 9000, 9060, 50, 10, "session_expiry", "a", 2, 1, 0, "stabilized", [],
         ["a:session_expiry"]),
    ]
    assert rows[1].culprit_instance_id == "static-b"
    assert rows[1].duration_ms == 500


def test_an_open_rebalance_and_one_ended_by_the_group_emptying(spark: Any) -> None:
    frame = events(
        spark,
        member("member_removed", 100, "a-1", 4, cause="leave"),
        started(100, 4, "member_leave", "a-1"),
        {"event_type": "group_empty", "ts": 120, "generation": 5, "to_state": "Empty"},
        member("member_added", 900, "c-1", 5),
        started(900, 5, "member_join", "c-1", from_state="Empty"),
    )
    rows = sorted(T.rebalances_from_journal(frame).collect(), key=lambda r: r.start_ts)
    assert [(r.cause, r.outcome, r.end_ts, r.duration_ms) for r in rows] == [
        ("member_leave", "empty", 120, 20), ("member_join", "open", None, None)]


def test_member_sessions_and_group_states(spark: Any) -> None:
    frame = events(
        spark,
        member("member_added", 1000, "a-1", 0),
        started(1000, 0, "member_join", "a-1", from_state="Empty"),
        joined(1010, 1, 1, 10),
        stabilized(1030, 1, 1, 30),
        member("member_removed", 3000, "a-1", 1, cause="fenced", group_instance_id="i"),
        {"event_type": "static_member_replaced", "ts": 3000, "generation": 1,
         "group_instance_id": "i", "old_member_id": "a-1", "member_id": "a-2",
         "client_id": "a", "client_host": "/h", "rebalance": False},
    )
    sessions = {r.member_id: r for r in T.member_sessions(frame).collect()}
    assert (sessions["a-1"].joined_ts, sessions["a-1"].left_ts, sessions["a-1"].left_cause) == (
        1000, 3000, "fenced")
    assert (sessions["a-2"].joined_how, sessions["a-2"].left_ts) == ("static_restart", None)
    states = {r.state: (r.total_ms, r.entered)
              for r in T.group_states(frame, F.lit(5000).cast("long")).collect()}
    assert states == {"PreparingRebalance": (10, 1), "CompletingRebalance": (20, 1),
                      "Stable": (3970, 1)}


def record(**fields: Any) -> tuple[Any, ...]:
    base = {"source_file": "s", "log_partition": 0, "position": 0, "tombstone": False}
    base.update(fields)
    return tuple(base.get(c) for c in RECORD_COLUMNS)


def group_meta(offset: int, ts: int, generation: int, members: list[tuple[str, str | None,
               list[tuple[str, int]]]]) -> tuple[Any, ...]:
    rows = [(m, inst, m.split("-")[0], "/h", 10000, 30000, assignment)
            for m, inst, assignment in members]
    return record(offset=offset, timestamp=ts, record_type="group_metadata", key_version=2,
                  value_version=3, group_id="g", protocol_type="consumer", generation=generation,
                  protocol="range", leader=members[0][0] if members else None, members=rows)


def commit(offset: int, ts: int, partition: int, committed: int) -> tuple[Any, ...]:
    return record(offset=offset, timestamp=ts, record_type="offset_commit", key_version=1,
                  value_version=3, group_id="g", topic="t", partition=partition,
                  committed_offset=committed, commit_timestamp=ts)


def test_group_log_alone_infers_causes_culprits_and_moves(spark: Any) -> None:
    p = [("t", n) for n in range(4)]
    records = spark.createDataFrame([
        group_meta(0, 1000, 1, [("a-1", None, p)]),
        group_meta(1, 2000, 2, [("a-1", None, p[:2]), ("b-1", None, p[2:])]),
        group_meta(2, 3000, 3, [("b-1", None, p)]),
        # a static member replaced in place: same generation, later record wins
        group_meta(3, 3500, 3, [("b-2", None, p)]),
        commit(4, 1500, 0, 10), commit(5, 1900, 0, 11), commit(6, 2600, 0, 12),
        commit(7, 2700, 1, 5),
    ], GROUP_LOG_DDL)
    generations = T.group_generations(records)
    moved = {r.generation: r.partitions_moved
             for r in T.partitions_moved(generations).collect()}
    assert moved == {1: 4, 2: 2, 3: 4}
    rebalances = T.with_partitions_moved(T.rebalances_from_group_log(generations),
                                         T.partitions_moved(generations))
    rows = sorted(rebalances.collect(), key=lambda r: r.generation_to)
    assert [(r.generation_to, r.cause, r.culprit_client_id, r.inferred, r.start_ts, r.end_ts)
            for r in rows] == [(1, "member_join", "a", True, None, 1000),
                               (2, "member_join", "b", True, None, 2000),
                               (3, "membership_change", None, True, None, 3500)]
    times = T.commit_times(None, records)
    assert times is not None
    with_gaps = {r.generation_to: r.commit_gap_ms
                 for r in T.commit_gaps_around(rebalances, times).collect()}
    assert with_gaps == {1: None, 2: 700, 3: None}
    per_partition = {r.partition: (r.commits, r.max_gap_ms, r.last_committed_offset,
                                   r.staleness_ms)
                     for r in T.commits(records, F.lit(3000).cast("long")).collect()}
    assert per_partition == {0: (3, 700, 12, 400), 1: (1, None, 5, 300)}


def test_consumer_group_epochs_are_rebalances(spark: Any) -> None:
    def target(ts: int, epoch: int, members: int, moved: int, culprit: str | None,
               reason: str) -> dict[str, Any]:
        return {"event_type": "target_assignment_computed", "ts": ts, "generation": epoch,
                "group_type": "consumer", "assignor": "uniform", "num_members": members,
                "moved_partitions": moved, "member_id": culprit, "reason": reason}

    def reconciled(ts: int, member_id: str, epoch: int, state: str) -> dict[str, Any]:
        return {"event_type": "member_reconciled", "ts": ts, "generation": epoch,
                "group_type": "consumer", "member_id": member_id, "member_state": state}

    frame = events(
        spark,
        member("member_added", 1000, "a-1", 0, group_type="consumer"),
        target(1000, 1, 1, 4, "a-1", "member a-1 joined"),
        reconciled(1020, "a-1", 1, "stable"),
        member("member_added", 2000, "b-1", 1, group_type="consumer"),
        target(2000, 2, 2, 2, "b-1", "member b-1 joined"),
        reconciled(2010, "a-1", 2, "unrevoked_partitions"),
        reconciled(2300, "a-1", 2, "stable"),
        reconciled(2500, "b-1", 2, "stable"),
        member("member_removed", 4000, "a-1", 2, cause="leave", group_type="consumer"),
        target(4100, 3, 1, 2, None, "member removed (leave)"),
    )
    rows = sorted(T.rebalances_from_consumer_groups(frame).collect(),
                  key=lambda r: r.start_ts)
    assert [(r.generation_from, r.generation_to, r.start_ts, r.end_ts, r.duration_ms,
             r.outcome, r.cause, r.culprit_client_id, r.members_before, r.members_after,
             r.partitions_moved, list(r.members_joined), list(r.members_removed))
            for r in rows] == [
        (None, 1, 1000, 1020, 20, "stabilized", "member_join", "a", None, 1, 4, ["a"], []),
        (1, 2, 2000, 2500, 500, "stabilized", "member_join", "b", 1, 2, 2, ["b"], []),
        (2, 3, 4100, None, None, "open", "member_leave", None, 2, 1, 2, [],
         ["a:leave"]),
    ]
    assert rows[0].join_ms is None and rows[0].protocol == "uniform"
    # Classic and consumer rows share one table; classic transforms ignore these events.
    both = T.with_consumer_groups(T.rebalances_from_journal(frame), frame)
    assert both.count() == 3
    # A classic group upgraded with its members: listed as a conversion, not a rebalance.
    converted = events(
        spark,
        {"event_type": "group_converted", "ts": 5000, "generation": 7, "direction": "upgrade",
         "from_type": "classic", "to_type": "consumer", "num_members": 2,
         "reason": "member c-1 joined with the consumer protocol", "member_id": "c-1"},
        member("member_added", 5000, "c-1", 7, group_type="consumer"))
    assert [tuple(r) for r in T.group_conversions(converted).collect()] == [
        (5000, "g", 7, "upgrade", "classic", "consumer", 2,
         "member c-1 joined with the consumer protocol", "c-1")]
