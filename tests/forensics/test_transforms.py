"""The group log's DataFrame transforms on tiny hand-made frames (one shared SparkSession);
the journal's rules are in test_journal_pass.py."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from forensics import transforms as T
from forensics.schema import GROUP_LOG_DDL

RECORD_COLUMNS = ["source_file", "log_partition", "position", "offset", "timestamp",
                  "record_type", "key_version", "value_version", "group_id", "topic",
                  "partition", "committed_offset", "commit_timestamp", "expire_timestamp",
                  "tombstone", "protocol_type", "generation", "protocol", "leader",
                  "state_timestamp", "members", "error"]


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
    times = T.commit_times(records)
    with_gaps = {r.generation_to: r.commit_gap_ms
                 for r in T.commit_gaps_around(rebalances, times).collect()}
    assert with_gaps == {1: None, 2: 700, 3: None}
    per_partition = {r.partition: (r.commits, r.max_gap_ms, r.last_committed_offset,
                                   r.staleness_ms)
                     for r in T.commits(records, F.lit(3000).cast("long")).collect()}
    assert per_partition == {0: (3, 700, 12, 400), 1: (1, None, 5, 300)}

    # Per partition: partition 1 committed nothing before generation 2, so no gap is known.
    numbered = T.number_rebalances(rebalances)
    keys = ("topic", "partition")
    stream = T.commit_stream(numbered, T.partition_commit_times(records), keys)
    around = T.rebalance_commit_gaps(numbered, stream, keys, "group_log")
    gaps = {(r.generation_to, r.partition): (r.gap_start_ts, r.gap_end_ts, r.commit_gap_ms)
            for r in around.collect()}
    assert gaps == {(1, 0): (None, 1500, None), (1, 1): (None, 2700, None),
                    (2, 0): (1900, 2600, 700), (2, 1): (None, 2700, None),
                    (3, 0): (2600, None, None), (3, 1): (2700, None, None)}
    longest = {r.partition: r.longest_rebalance_gap_ms
               for r in T.commits(records, F.lit(3000).cast("long"), around).collect()}
    assert longest == {0: 700, 1: None}


def test_commit_gap_around_a_rebalance_and_the_gaps_worth_drawing(spark: Any) -> None:
    rebalances = spark.createDataFrame(
        [("g", 1, 2, 300, 5000, "member_join"), ("h", 1, 2, None, 50, "rejoin")],
        "group_id STRING, generation_from INT, generation_to INT, start_ts BIGINT, "
        "end_ts BIGINT, cause STRING")
    # A commit in the start's millisecond counts as before, one in the end's as after; two
    # commits in one millisecond are one moment for the median gap.
    commits = spark.createDataFrame(
        [("g", t) for t in (0, 100, 200, 300, 5000, 5000, 5100, 5200, 5300)]
        + [("h", 40), ("h", 60)], "group_id STRING, ts BIGINT")
    numbered = T.number_rebalances(rebalances)
    stream = T.commit_stream(numbered, commits)
    found = {r.group_id: (r.gap_start_ts, r.gap_end_ts, r.commit_gap_ms)
             for r in T.with_commit_gaps(numbered, stream).collect()}
    assert found == {"g": (300, 5000, 4700), "h": (40, 60, 20)}
    drawn = [(r.group_id, r.gap_start_ts, r.gap_end_ts) for r in T.drawn_gaps(stream).collect()]
    assert drawn == [("g", 300, 5000)]
    per_group = [(r.group_id, r.topic, r.commit_gap_ms, r.source) for r in
                 T.rebalance_commit_gaps(numbered, stream, (), "journal").collect()]
    assert sorted(per_group) == [("g", None, 4700, "journal"), ("h", None, 20, "journal")]
