"""The whole job on a tiny hand-written journal and group log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from coordinator.events import journal_record
from forensics.job import run
from tests.forensics.test_grouplog import CASES, key_hex, segment
from tests.unit._batches import make_batch


def write_journal(directory: Path) -> None:
    directory.mkdir(parents=True)
    lines = []
    for ts, payload in [
        (1000, {"event": "member_added", "group_id": "g", "generation_id": 0, "member_id": "a-1",
                "group_instance_id": None, "client_id": "a", "client_host": "/h"}),
        (1000, {"event": "rebalance_started", "group_id": "g", "generation_id": 0,
                "partition": 1, "previous_state": "Empty",
                "reason": "adding new member a-1 with group instance id None", "member_id": "a-1",
                "client_id": "a", "client_host": "/h"}),
        (1100, {"event": "join_completed", "group_id": "g", "generation_id": 1,
                "protocol_name": "range", "leader_id": "a-1", "member_count": 1,
                "duration_ms": 100}),
        (1150, {"event": "group_stabilized", "group_id": "g", "generation_id": 1,
                "member_count": 1, "duration_ms": 150}),
        (1200, {"event": "offsets_committed", "group_id": "g", "generation_id": 1,
                "member_id": "a-1", "partitions": 1}),
    ]:
        lines.append(json.dumps(journal_record(payload, ts)))
    (directory / "events-0000000001000-000001.jsonl").write_text("\n".join(lines) + "\n")


def test_the_job_writes_tables_page_and_timeline(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_journal(data / "events")
    key = bytes.fromhex(key_hex("OffsetCommitValue"))
    value = bytes.fromhex(next(c["hex"] for c in CASES if c["record"] == "OffsetCommitValue"))
    segment(data, make_batch([value], keys=[key]), partition=1)
    out = tmp_path / "out"
    outcome = run(spark, data, out)
    assert outcome.rebalances == 1 and outcome.report.exists()
    rebalances = pd.read_parquet(out / "rebalances")
    row = rebalances.iloc[0]
    assert (row["cause"], row["culprit_client_id"], row["join_ms"], row["sync_ms"]) == (
        "member_join", "a", 100, 50)
    for table in ("member_sessions", "group_states", "commits"):
        assert len(pd.read_parquet(out / table)) >= 1, table
    assert list(out.glob("timeline-*.png"))
    assert "<b>a</b>" in outcome.report.read_text(encoding="utf-8")
