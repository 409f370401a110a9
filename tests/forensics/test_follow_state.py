"""`--follow`'s incremental state on the driver gives the batch job's tables: a varied group
log fed in micro-batches (only the groups with new records analysed again) against the batch
job's Spark plan over all of it."""

from __future__ import annotations

import random
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from forensics.follow_state import LiveFollower
from forensics.job import Renderer, run
from forensics.live import OFFSETS_TOPIC, LiveSource
from forensics.schema import GROUP_LOG_DDL
from tests.forensics.test_transforms import RECORD_COLUMNS, record

TABLES = ("rebalances", "member_sessions", "rebalance_commit_gaps", "commits")


def _group_log(seed: int = 3) -> list[tuple[Any, ...]]:
    """Groups whose members come, go and restart statically, committing to a few partitions,
    with tombstones, unknown and undecodable records among them, over two log partitions."""
    rng = random.Random(seed)
    rows: list[tuple[Any, ...]] = []
    offsets = [0, 0]
    ts = 1_000_000
    groups: dict[str, dict[str, Any]] = {
        f"g{n}": {"generation": 0, "members": [f"m{n}-0"]} for n in range(5)}

    def add(log_partition: int, **fields: Any) -> None:
        rows.append(record(log_partition=log_partition, offset=offsets[log_partition],
                           position=offsets[log_partition] * 10, **fields))
        offsets[log_partition] += 1

    for _ in range(400):
        ts += rng.choice([1, 5, 40, 200, 3000])
        group = rng.choice(sorted(groups))
        state = groups[group]
        where = int(group[1:]) % 2
        roll = rng.random()
        if roll < 0.08:
            members = state["members"]
            if len(members) > 1 and rng.random() < 0.4:
                members.remove(rng.choice(members))
            else:
                members.append(f"{group}-m{rng.randrange(1000)}")
            state["generation"] += 1
            partitions = [("t", p) for p in range(4)]
            assignment = [[pt for i, pt in enumerate(partitions) if i % len(members) == k]
                          for k in range(len(members))]
            static = [m if m.endswith("0") else None for m in members]
            add(where, timestamp=ts, record_type="group_metadata", key_version=2,
                value_version=3, group_id=group, protocol_type="consumer",
                generation=state["generation"], protocol="range", leader=members[0],
                members=[(f"{m}-{state['generation']}" if s else m, s, m.split("-")[0], "/h",
                          10000, 30000, a)
                         for m, s, a in zip(members, static, assignment, strict=True)])
        elif roll < 0.10:
            add(where, timestamp=ts, record_type="offset_commit", key_version=1,
                group_id=group, topic="t", partition=rng.randrange(4), tombstone=True)
        elif roll < 0.11:
            add(where, timestamp=ts, record_type="unknown", key_version=9)
        elif roll < 0.12:
            add(where, timestamp=ts, record_type="undecodable", key_version=1,
                error="bad value")
        else:
            add(where, timestamp=ts, record_type="offset_commit", key_version=1,
                value_version=3, group_id=group, topic="t", partition=rng.randrange(4),
                committed_offset=rng.randrange(10_000),
                commit_timestamp=ts - rng.choice([0, 0, 0, 7]))
    return rows


def _rows(directory: Path) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in pq.read_table(directory).to_pylist())


def test_micro_batches_give_the_batch_jobs_tables(spark: Any, tmp_path: Path) -> None:
    rows = _group_log()
    records = spark.createDataFrame(rows, GROUP_LOG_DDL).toArrow()
    assert records.column_names == RECORD_COLUMNS
    store = tmp_path / "store"
    cuts = [0, 150, 151, 290, len(rows)]  # the second batch: one record
    batches = [records.slice(a, b - a) for a, b in pairwise(cuts)]
    for batch_id, batch in enumerate(batches):
        (store / f"batch_id={batch_id}").mkdir(parents=True)
        pq.write_table(batch, store / f"batch_id={batch_id}" / "part-00000.parquet")
    source = LiveSource("127.0.0.1:9092", OFFSETS_TOPIC, {}, ())
    expected = run(spark, None, tmp_path / "batch", timelines=0, live=source,
                   group_log_store=store)

    follower = LiveFollower(tmp_path / "follow", source.display, timelines=0)
    (tmp_path / "follow").mkdir()
    renderer = Renderer(0)
    touched_counts = []
    for batch in batches:
        touched = follower.add(batch)
        touched_counts.append(len(touched))
        outcome = follower.refresh(touched, renderer)
    assert touched_counts[1] <= 1  # a one-record batch analyses at most its group again
    assert (outcome.rebalances, outcome.groups) == (expected.rebalances, expected.groups)
    assert expected.rebalances > 20
    for table in TABLES:
        follow_table = pq.read_table(tmp_path / "follow" / table)
        assert follow_table.schema == pq.read_table(tmp_path / "batch" / table).schema, table
        assert _rows(tmp_path / "follow" / table) == _rows(tmp_path / "batch" / table), table
    assert outcome.problems.undecodable_records == expected.problems.undecodable_records > 0
    assert (outcome.problems.unknown_record_types
            == expected.problems.unknown_record_types != {})
    page = (tmp_path / "follow" / "report.html").read_text(encoding="utf-8")
    assert page == (tmp_path / "batch" / "report.html").read_text(encoding="utf-8")
    # The headline counts one commit per partition, tombstones (deleted offsets) not among
    # them, as the `commits` table does; and the note speaks of a cluster, not a directory.
    kinds, tombstones = records.column("record_type"), records.column("tombstone")
    commits = sum(1 for kind, tombstone in zip(kinds.to_pylist(), tombstones.to_pylist(),
                                              strict=True)
                  if kind == "offset_commit" and not tombstone)
    assert commits < sum(1 for kind in kinds.to_pylist() if kind == "offset_commit")
    assert (f"<div class='v'>{commits}</div><div class='l'>partition commits</div>"
            in page)
    assert "No event journal was read (a live cluster" in page
    assert "This directory" not in page


def test_an_empty_start_writes_an_empty_report(spark: Any, tmp_path: Path) -> None:
    follower = LiveFollower(tmp_path, "live", timelines=0)
    empty = spark.createDataFrame([], GROUP_LOG_DDL).toArrow()
    outcome = follower.refresh(follower.add(empty), Renderer(0))
    assert (outcome.rebalances, outcome.groups) == (0, 0)
    assert (tmp_path / "report.html").is_file()
