"""The report renderers on small pandas frames (no Spark)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from forensics.reader import Problems
from forensics.report import ReportData, render_html, render_timeline

REBALANCES = pd.DataFrame([{
    "group_id": "billing", "generation_from": 3, "generation_to": 4, "start_ts": 1_000,
    "end_ts": 1_500, "join_ms": 400, "sync_ms": 100, "duration_ms": 500,
    "outcome": "stabilized", "cause": "session_expiry", "reason": "removing member m-1 on "
    "heartbeat expiration", "culprit_member_id": "m-1", "culprit_instance_id": None,
    "culprit_client_id": "worker-7", "culprit_client_host": "/10.0.0.7",
    "from_state": "Stable", "members_after": 2, "protocol": "range", "restarts": 0,
    "members_joined": np.array([]), "members_removed": np.array(["worker-7:session_expiry"]),
    "members_before": 3, "inferred": False, "source": "journal", "partitions_moved": 2,
    "gap_start_ts": 900, "gap_end_ts": 1_800, "commit_gap_ms": 900}])


def test_the_page_names_cause_culprit_and_paused_time() -> None:
    data = ReportData(
        data_dir="data", has_journal=True, has_group_log=True, span=(900, 2_000),
        counts={"groups": 1, "members": 3, "commits": 10}, rebalances=REBALANCES,
        worst_groups=pd.DataFrame([{"group_id": "billing", "rebalances": 1, "paused_ms": 500,
                                    "longest_ms": 500, "longest_commit_gap_ms": 900,
                                    "top_cause": "session_expiry"}]),
        causes=pd.DataFrame([{"cause": "session_expiry", "inferred": False, "rebalances": 1,
                              "paused_ms": 500, "groups": 1}]),
        culprits=pd.DataFrame([{"culprit_client_id": "worker-7",
                                "culprit_client_host": "/10.0.0.7", "rebalances": 1,
                                "paused_ms": 500, "causes": np.array(["session_expiry"]),
                                "groups": 1}]),
        static_restarts=pd.DataFrame(columns=["group_id", "ts", "group_instance_id",
                                              "client_id", "rebalance"]),
        problems=Problems(malformed_lines=1, malformed_examples=[("events/x.jsonl", 42, "{")]),
        write_failures=pd.DataFrame([{"ts": 1_500, "group_ids": np.array(["billing", "ads"]),
                                      "records": 3, "error": "[Errno 28] No space left"}]),
        conversions=pd.DataFrame([{"ts": 1_700, "group_id": "billing", "generation": 4,
                                   "direction": "downgrade", "from_type": "consumer",
                                   "to_type": "classic", "num_members": 2,
                                   "reason": "the last consumer member left",
                                   "member_id": "m-9"}]))
    page = render_html(data)
    assert "<b>worker-7</b>" in page and "session_expiry" in page and "500 ms" in page
    assert "Failed group-log writes" in page and "billing, ads" in page
    assert "No space left" in page
    assert "3 → 2" in page and "events/x.jsonl at byte 42" in page
    assert "no event journal" not in page
    assert "<div class='v'>10</div><div class='l'>partition commits</div>" in page
    assert "Group type conversions" in page and "downgrade: consumer → classic" in page
    assert "the last consumer member left" in page


def test_the_timeline_is_a_png(tmp_path: Path) -> None:
    sessions = pd.DataFrame([
        {"member_id": "m-1", "group_instance_id": None, "client_id": "worker-7",
         "joined_ts": 950, "left_ts": 1_000, "left_cause": "session_expiry"},
        {"member_id": "m-2", "group_instance_id": "static-0", "client_id": "worker-8",
         "joined_ts": None, "left_ts": None, "left_cause": None}])
    gaps = pd.DataFrame([{"group_id": "billing", "gap_start_ts": 900, "gap_end_ts": 1_800}])
    path = tmp_path / "t.png"
    render_timeline(path, "billing", sessions, REBALANCES, gaps, (800, 2_000))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
