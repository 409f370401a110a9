"""The journal pass without Spark: each group's rules on hand-made events, the per-file reading
(Arrow's fast path against the Python loop), and the pass split over files (property)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import journal_pass as J
from forensics.journal_chunks import CHUNK, chunk_rows, file_key, journal_files, read_file


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


def first_join() -> list[dict[str, Any]]:
    """A member joins an empty group: its first rebalance, start to stable."""
    return [member("member_added", 1000, "a-1", 0),
            started(1000, 0, "member_join", "a-1", from_state="Empty"),
            joined(1010, 1, 1, 10),
            stabilized(1030, 1, 1, 30)]


def test_rebalances_phases_cause_culprit_and_membership() -> None:
    events = [
        *first_join(),
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
    ]
    rows = J.classic_rebalances("g", events)
    got = [(r["generation_from"], r["generation_to"], r["start_ts"], r["end_ts"], r["join_ms"],
            r["sync_ms"], r["cause"], r["culprit_client_id"], r["members_before"],
            r["members_after"], r["restarts"], r["outcome"], r["members_joined"],
            r["members_removed"]) for r in rows]
    assert got == [
        (0, 1, 1000, 1030, 10, 20, "member_join", "a", 0, 1, 0, "stabilized", ["a"], []),
        (1, 2, 5000, 5500, 400, 100, "member_join", "b", 1, 2, 1, "stabilized", ["b"], []),
        (2, 3, 9000, 9060, 50, 10, "session_expiry", "a", 2, 1, 0, "stabilized", [],
         ["a:session_expiry"]),
    ]
    assert rows[1]["culprit_instance_id"] == "static-b"
    assert rows[1]["duration_ms"] == 500


def test_an_open_rebalance_and_one_ended_by_the_group_emptying() -> None:
    events = [
        member("member_removed", 100, "a-1", 4, cause="leave"),
        started(100, 4, "member_leave", "a-1"),
        {"event_type": "group_empty", "ts": 120, "generation": 5, "to_state": "Empty"},
        member("member_added", 900, "c-1", 5),
        started(900, 5, "member_join", "c-1", from_state="Empty"),
    ]
    rows = J.classic_rebalances("g", events)
    assert [(r["cause"], r["outcome"], r["end_ts"], r["duration_ms"]) for r in rows] == [
        ("member_leave", "empty", 120, 20), ("member_join", "open", None, None)]


def test_member_sessions_and_group_states() -> None:
    events = [
        *first_join(),
        member("member_removed", 3000, "a-1", 1, cause="fenced", group_instance_id="i"),
        {"event_type": "static_member_replaced", "ts": 3000, "generation": 1,
         "group_instance_id": "i", "old_member_id": "a-1", "member_id": "a-2",
         "client_id": "a", "client_host": "/h", "rebalance": False},
    ]
    sessions = {r["member_id"]: r for r in J.member_sessions("g", events)}
    assert (sessions["a-1"]["joined_ts"], sessions["a-1"]["left_ts"],
            sessions["a-1"]["left_cause"]) == (1000, 3000, "fenced")
    assert (sessions["a-2"]["joined_how"], sessions["a-2"]["left_ts"]) == ("static_restart",
                                                                          None)
    states = pa.Table.from_pylist(J.group_states("g", events),
                                  schema=pa.schema(list(J.STATE)))
    closed = {r["state"]: (r["total_ms"], r["entered"])
              for r in J.close_states(states, 5000).to_pylist()}
    assert closed == {"PreparingRebalance": (10, 1), "CompletingRebalance": (20, 1),
                      "Stable": (3970, 1)}


def test_commit_gap_around_a_rebalance_and_the_gaps_worth_drawing() -> None:
    # A commit in the start's millisecond counts as before, one in the end's as after; two
    # commits in one millisecond are one moment for the median gap.
    commits = [0, 100, 200, 300, 5000, 5000, 5100, 5200, 5300]
    rebalances: list[dict[str, Any]] = [{"start_ts": 300, "end_ts": 5000},
                                        {"start_ts": None, "end_ts": 50},
                                        {"start_ts": 6000, "end_ts": None}]
    J.add_commit_gaps(rebalances, commits)
    assert [(r["gap_start_ts"], r["gap_end_ts"], r["commit_gap_ms"]) for r in rebalances] == [
        (300, 5000, 4700), (0, 100, 100), (5300, None, None)]
    assert [(g["gap_start_ts"], g["gap_end_ts"]) for g in J.drawn_gaps("g", commits)] == [
        (300, 5000)]
    assert J.drawn_gaps("g", [7, 7]) == []


def test_consumer_group_epochs_are_rebalances() -> None:
    def target(ts: int, epoch: int, members: int, moved: int, culprit: str | None,
               reason: str) -> dict[str, Any]:
        return {"event_type": "target_assignment_computed", "ts": ts, "generation": epoch,
                "group_type": "consumer", "assignor": "uniform", "num_members": members,
                "moved_partitions": moved, "member_id": culprit, "reason": reason}

    def reconciled(ts: int, member_id: str, epoch: int, state: str) -> dict[str, Any]:
        return {"event_type": "member_reconciled", "ts": ts, "generation": epoch,
                "group_type": "consumer", "member_id": member_id, "member_state": state}

    events = [
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
    ]
    rows = J.consumer_rebalances("g", events)
    assert [(r["generation_from"], r["generation_to"], r["start_ts"], r["end_ts"],
             r["duration_ms"], r["outcome"], r["cause"], r["culprit_client_id"],
             r["members_before"], r["members_after"], r["partitions_moved"],
             r["members_joined"], r["members_removed"]) for r in rows] == [
        (None, 1, 1000, 1020, 20, "stabilized", "member_join", "a", None, 1, 4, ["a"], []),
        (1, 2, 2000, 2500, 500, "stabilized", "member_join", "b", 1, 2, 2, ["b"], []),
        (2, 3, 4100, None, None, "open", "member_leave", None, 2, 1, 2, [], ["a:leave"]),
    ]
    assert rows[0]["join_ms"] is None and rows[0]["protocol"] == "uniform"
    # Classic and consumer rows share one table; the classic rules ignore these events.
    assert len(J.analyse_group("g", events, []).tables["rebalances"]) == 3
    # A classic group upgraded with its members: listed as a conversion, not a rebalance.
    converted = [
        {"event_type": "group_converted", "ts": 5000, "generation": 7, "direction": "upgrade",
         "from_type": "classic", "to_type": "consumer", "num_members": 2, "group_id": "g",
         "reason": "member c-1 joined with the consumer protocol", "member_id": "c-1"},
        member("member_added", 5000, "c-1", 7, group_type="consumer")]
    result = J.analyse_group("g", converted, [])
    assert result.tables["conversions"] == [
        {"ts": 5000, "group_id": "g", "generation": 7, "direction": "upgrade",
         "from_type": "classic", "to_type": "consumer", "num_members": 2,
         "reason": "member c-1 joined with the consumer protocol", "member_id": "c-1"}]
    assert result.tables["rebalances"] == []


# --- reading files ---------------------------------------------------------------------------

def line(event: dict[str, Any]) -> str:
    return json.dumps({"v": 1, "group_id": "g", **event})


def test_a_damaged_file_is_read_line_by_line_and_its_bad_lines_located(tmp_path: Path) -> None:
    good = [line({"event_type": "group_empty", "ts": 10 + n, "generation": n})
            for n in range(3)]
    torn = '{"v": 1, "event_type": "group_em'
    path = tmp_path / "events-0000000000010-000001.jsonl"
    path.write_text("\n".join([good[0], torn, good[1], "[1, 2]", '{"v": 1, "ts": 5}']) + "\n")
    rows = {r["group_id"]: r for r in read_file(path).to_pylist()}
    assert [e["row"] for e in rows["g"]["events"]] == [0, 2]
    assert {(t["bad"], t["n"]) for t in rows[None]["tally"]} == {(True, 3)}
    located = [(m["position"], m["text"]) for m in rows[None]["malformed"]]
    assert located[0] == (len(good[0]) + 1, torn)
    assert len(located) == 3


def test_the_arrow_path_and_the_python_loop_agree(tmp_path: Path) -> None:
    events = [line({"event_type": "offsets_committed", "ts": 100 + n, "group_id": f"g{n % 3}"})
              for n in range(50)]
    events += [line({"event_type": "rebalance_started", "ts": 120, "group_id": "g1"}),
               json.dumps({"v": 2, "event_type": "group_empty", "ts": 1}),
               line({"event_type": "new_thing", "ts": 3, "group_id": None}), ""]
    path = tmp_path / ".events-active.jsonl"
    path.write_text("\n".join(events) + "\n")
    fast = read_file(path)
    slow = chunk_rows(path.read_bytes().split(b"\n"), file_key(path), str(path))
    assert _normal(fast) == _normal(slow)
    assert journal_files(tmp_path) == [str(path)]
    assert {e["file"] for r in fast.to_pylist() for e in r["events"]} == {"~active"}


def test_journal_files_are_read_in_the_order_of_their_sequence(tmp_path: Path) -> None:
    """After a backwards clock step the newer file has the smaller timestamp in its name."""
    names = ["events-1700000000000-000009.jsonl", "events-1600000000000-000010.jsonl",
             "events-1500000000000-1000000.jsonl"]
    for name in names:
        (tmp_path / name).write_text(line({"event_type": "x", "ts": 1}) + "\n")
    assert [Path(p).name for p in journal_files(tmp_path)] == names
    assert sorted(names, key=lambda n: file_key(tmp_path / n)) == names


def _normal(batch: pa.RecordBatch) -> dict[Any, Any]:
    rows = {}
    for r in batch.to_pylist():
        r["commit_ts"] = sorted(r["commit_ts"])
        r["tally"] = sorted(r["tally"], key=lambda t: (t["bad"], t["v"] or 0,
                                                       t["event_type"] or ""))
        rows[r["group_id"]] = r
    return rows


# --- the pass split over files gives what one file gives ---------------------------------

KINDS = ["member_added", "rebalance_started", "join_completed", "group_stabilized",
         "member_removed", "offsets_committed", "offsets_committed", "group_empty"]


def _journal_lines(draw: Any) -> list[str]:
    n = draw(st.integers(min_value=0, max_value=40))
    lines = []
    ts = 1000
    for _ in range(n):
        ts += draw(st.integers(min_value=0, max_value=50))
        kind = draw(st.sampled_from(KINDS))
        event: dict[str, Any] = {"event_type": kind, "ts": ts,
                                 "group_id": draw(st.sampled_from(["a", "b"])),
                                 "member_id": draw(st.sampled_from(["m-1", "m-2"])),
                                 "generation": draw(st.integers(min_value=0, max_value=3)),
                                 "cause": "member_join"}
        if kind in ("join_completed", "group_stabilized"):
            event["to_state"] = "Stable" if kind == "group_stabilized" else "CompletingRebalance"
            event["num_members"] = 2
        lines.append(line(event))
    return lines


def _analyse(batches: list[pa.RecordBatch]) -> dict[str, Any]:
    """What `groupBy("group_id").applyInArrow` does, without Spark: each group's rows of
    every file, through the function."""
    table = pa.Table.from_batches(batches, schema=CHUNK)
    out = {}
    for group in set(table.column("group_id").to_pylist()):
        mask = [g == group for g in table.column("group_id").to_pylist()]
        row = J.analyse_group_table(table.filter(pa.array(mask))).to_pylist()[0]
        row["tally"] = sorted(row["tally"], key=lambda t: (t["event_type"] or ""))
        out[group] = row
    return out


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_splitting_the_journal_into_files_changes_nothing(data: Any) -> None:
    lines = _journal_lines(data.draw)
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(lines)),
                                     max_size=3)))
    whole = chunk_rows([s.encode() for s in lines], "events-1", "one")
    parts = []
    for n, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(lines)], strict=True)):
        parts.append(chunk_rows([s.encode() for s in lines[lo:hi]], f"events-{n + 1:02d}",
                                f"part-{n}"))
    one, split = _analyse([whole]), _analyse(parts)
    assert one.keys() == split.keys()
    for group in one:
        assert one[group]["rebalances"] == split[group]["rebalances"]
        assert one[group]["member_sessions"] == split[group]["member_sessions"]
        assert one[group]["group_states"] == split[group]["group_states"]
        assert one[group]["gaps"] == split[group]["gaps"]
        assert one[group]["tally"] == split[group]["tally"]
