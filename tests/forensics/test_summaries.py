"""The report's rankings from a collected rebalances table (pandas only, no Spark)."""

from __future__ import annotations

import pandas as pd

from forensics import summaries as S


def rebalances() -> pd.DataFrame:
    rows = [
        # group, outcome, duration, cause, inferred, client, host, commit gap
        ("a", "stabilized", 100, "member_join", False, "c1", "/h1", 150),
        ("a", "stabilized", 300, "session_expiry", False, "c2", "/h2", 400),
        ("a", "stabilized", 50, "member_join", False, "c1", "/h1", None),
        ("b", "stabilized", 1000, "member_leave", False, "c3", None, 1200),
        ("c", "open", None, "member_join", False, None, None, None),
    ]
    return pd.DataFrame(rows, columns=["group_id", "outcome", "duration_ms", "cause",
                                       "inferred", "culprit_client_id", "culprit_client_host",
                                       "commit_gap_ms"])


def test_worst_groups_by_paused_time_with_their_top_cause() -> None:
    worst = S.worst_groups(rebalances())
    assert worst["group_id"].tolist() == ["b", "a", "c"]
    a = worst.set_index("group_id").loc["a"]
    assert (a["rebalances"], a["paused_ms"], a["longest_ms"], a["longest_commit_gap_ms"],
            a["top_cause"]) == (3, 450, 300, 400, "member_join")
    c = worst.set_index("group_id").loc["c"]
    assert pd.isna(c["paused_ms"]) and c["rebalances"] == 1


def test_top_causes_and_culprits() -> None:
    causes = S.top_causes(rebalances())
    assert causes["cause"].tolist() == ["member_join", "member_leave", "session_expiry"]
    join = causes.iloc[0]
    assert (join["rebalances"], join["paused_ms"], join["groups"]) == (3, 150, 2)
    culprits = S.top_culprits(rebalances())
    assert culprits["culprit_client_id"].tolist() == ["c1", "c2", "c3"]
    first = culprits.iloc[0]
    assert (first["rebalances"], first["paused_ms"], first["causes"], first["groups"]) == (
        2, 150, ["member_join"], 1)
    assert pd.isna(culprits.iloc[2]["culprit_client_host"])


def test_an_empty_table_ranks_nothing() -> None:
    empty = rebalances().iloc[0:0]
    assert S.worst_groups(empty).empty and S.top_causes(empty).empty
    assert S.top_culprits(empty).empty
