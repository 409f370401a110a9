"""The rebalances' transaction columns, without Spark: a rebalance during an open transaction
of a producer that committed offsets to the group (its `transaction_committed` or
`transaction_aborted` names the group), and the reading of those events, which name no
`group_id`, into each group they name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forensics import journal_pass as J
from forensics.journal_chunks import chunk_rows, file_key, read_file
from tests.forensics.test_journal_pass import first_join, joined, stabilized, started


def ended(ts: int, duration: int | None, tid: str, groups: list[str],
          aborted: bool = False) -> dict[str, Any]:
    return {"event_type": "transaction_aborted" if aborted else "transaction_committed",
            "ts": ts, "transactional_id": tid, "producer_id": 7, "producer_epoch": 0,
            "reason": "timeout" if aborted else "client", "duration_ms": duration,
            "partition_count": 2, "group_ids": groups}


def transaction_columns(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    rows = J.analyse_group("g", sorted(events, key=lambda e: e["ts"]), []).tables["rebalances"]
    return [(r["start_ts"], r["transactions_open"], r["transactions_aborted"],
             r["transactional_ids"]) for r in rows]


def test_a_rebalance_counts_the_transactions_open_during_it() -> None:
    events = [
        *first_join(),  # 1000 to 1030
        started(5000, 1, "session_expiry", None),
        joined(5400, 2, 1, 400),
        stabilized(5500, 2, 1, 500),
        started(9000, 2, "member_join", None),  # still open when the data ends
        ended(900, 100, "before", ["g"]),  # 800-900: ended before the first one started
        ended(1100, 500, "across", ["g"]),  # 600-1100: spans the first rebalance
        ended(5200, 100, "inside", ["g"], aborted=True),  # 5100-5200: within the second
        ended(6000, 500, "after", ["g"]),  # 5500-6000: starts as the second ends
        ended(9500, 1000, "open", ["g"]),  # 8500-9500: during the open third
    ]
    assert transaction_columns(events) == [
        (1000, 1, 0, ["across"]), (5000, 1, 1, ["inside"]), (9000, 1, 0, ["open"])]


def test_without_transactions_the_columns_are_zero() -> None:
    assert transaction_columns(first_join()) == [(1000, 0, 0, [])]
    # an end without a duration (never reported by the broker) is left out
    assert transaction_columns([*first_join(), ended(1010, None, "x", ["g"])]) == [
        (1000, 0, 0, [])]


def line(event: dict[str, Any]) -> str:
    return json.dumps({"v": 1, **event})


def test_a_transactions_end_is_read_into_every_group_it_names(tmp_path: Path) -> None:
    lines = [line({"event_type": "rebalance_started", "ts": 100, "group_id": "a"}),
             line({"event_type": "transaction_begun", "ts": 105, "transactional_id": "t"}),
             line(ended(110, 10, "t", ["a", "b"])),
             line(ended(120, 10, "u", [])),
             line({"event_type": "offsets_committed", "ts": 130, "group_id": "b"})]
    path = tmp_path / "events-0000000000100-000001.jsonl"
    path.write_text("\n".join(lines) + "\n")
    fast = {r["group_id"]: r for r in read_file(path).to_pylist()}
    slow = {r["group_id"]: r for r in chunk_rows(path.read_bytes().split(b"\n"),
                                                  file_key(path), str(path)).to_pylist()}
    for rows in (fast, slow):
        assert [e["row"] for e in rows["a"]["events"]] == [0, 2]
        assert [e["row"] for e in rows["b"]["events"]] == [2]
        assert rows[None]["events"] == []  # the begun event explains nothing by itself
        # counted once each, under no group, as any event without a group_id
        assert {(t["event_type"], t["n"]) for t in rows[None]["tally"]} == {
            ("transaction_begun", 1), ("transaction_committed", 2)}



def page(rebalances: Any) -> str:
    import pandas as pd

    from forensics.reader import Problems
    from forensics.report import ReportData, render_html

    empty = pd.DataFrame()
    return render_html(ReportData(
        data_dir="data", has_journal=True, has_group_log=False, span=(900, 2_000),
        counts={"groups": 1, "members": 3, "commits": 10}, rebalances=rebalances,
        worst_groups=pd.DataFrame([{"group_id": "billing", "rebalances": 1, "paused_ms": 500,
                                    "longest_ms": 500, "longest_commit_gap_ms": 900,
                                    "top_cause": "session_expiry"}]),
        causes=empty, culprits=empty,
        static_restarts=pd.DataFrame(columns=["group_id", "ts", "group_instance_id",
                                              "client_id", "rebalance"]),
        problems=Problems(), write_failures=empty, conversions=empty))


def test_the_report_shows_the_open_transactions_of_a_group_that_had_some() -> None:
    import numpy as np

    from tests.forensics.test_report import REBALANCES

    during = REBALANCES.assign(transactions_open=[2], transactions_aborted=[1],
                               transactional_ids=[np.array(["app-1", "app-2"])])
    shown = page(during)
    assert "open transactions" in shown and "2 (1 aborted): app-1, app-2" in shown
    none = REBALANCES.assign(transactions_open=[0], transactions_aborted=[0],
                             transactional_ids=[np.array([])])
    assert "open transactions" not in page(none)
    assert "open transactions" not in page(REBALANCES)  # a group log alone has no column
