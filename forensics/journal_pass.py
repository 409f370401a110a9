"""The journal's tables from one pass: each group's events, in order, through one function.

Each journal file is read and gathered per group where it is read (`journal_chunks`: one row
per file and group); those rows are shuffled by group once, and each group's go, as an Arrow
table, to `analyse_group_table` (`groupBy("group_id").applyInArrow`). That function walks
the group's events in time order and returns, as one row, everything the report needs from
them: the group's rebalances with their phases, cause, culprit and the commit gap around
each, its member sessions, the time in each state, the commit gaps worth drawing, the events
the report lists, and the input's tally (events by type, malformed lines, other versions).

Why one pass: on a cold JVM, every distinct Spark SQL operator costs compile time, and the
per-table plans (windows, joins, aggregations per table) cost more than reading the input.
One read, one shuffle of a row per file and group, and one Python function per group is the
same shape on a cluster (the files and the groups are spread over the executors) and far less
of it on two cores.

`analyse_group` is pure Python over plain values, so the rules are unit-tested without Spark.
Times are epoch milliseconds; events of one millisecond keep their journal order (`file`,
`row`), as in docs/events.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pyarrow as pa

from forensics.schema import KNOWN_EVENT_TYPES

JOURNAL_VERSION = 1
COMMIT = "offsets_committed"
TXN_BEGUN = "transaction_begun"
# A transaction's end names the groups it committed offsets to (`group_ids`): the reader hands
# it to each of them, so a group's rebalances can be matched with the transactions open then.
TXN_ENDS = frozenset({"transaction_committed", "transaction_aborted"})
# The events that explain rebalances (a transaction's start names no group: its end says it all).
CONTROL_TYPES = frozenset(KNOWN_EVENT_TYPES) - {COMMIT, TXN_BEGUN}
START = "rebalance_started"
JOIN = "join_completed"
ENDS = ("group_stabilized", "group_empty", "group_dead")
OUTCOME = {"group_stabilized": "stabilized", "group_empty": "empty", "group_dead": "dead"}
ADDED = "member_added"
REMOVED = "member_removed"
REPLACED = "static_member_replaced"
WRITE_FAILED = "group_write_failed"
CONVERTED = "group_converted"
TARGET = "target_assignment_computed"
RECONCILED = "member_reconciled"
_CONSUMER_CAUSE = {"leave": "member_leave"}  # else the removal cause itself

# A gap between two commits is drawn on a timeline when it is at least this long and this
# many times the group's median gap between commits.
DRAWN_GAP_MIN_MS = 1000
DRAWN_GAP_MEDIANS = 5

Event = dict[str, Any]

# --- output schema (Arrow; the Spark schema is derived from it) ---------------------------

_S, _I, _L, _B = pa.string(), pa.int32(), pa.int64(), pa.bool_()

REBALANCE = pa.struct([
    ("group_id", _S), ("generation_to", _I), ("generation_from", _I), ("start_ts", _L),
    ("end_ts", _L), ("join_ms", _L), ("sync_ms", _L), ("duration_ms", _L), ("outcome", _S),
    ("cause", _S), ("reason", _S), ("culprit_member_id", _S), ("culprit_instance_id", _S),
    ("culprit_client_id", _S), ("culprit_client_host", _S), ("from_state", _S),
    ("members_after", _I), ("protocol", _S), ("restarts", _L),
    ("members_joined", pa.list_(_S)), ("members_removed", pa.list_(_S)),
    ("members_before", _I), ("inferred", _B), ("source", _S), ("partitions_moved", _L),
    ("gap_start_ts", _L), ("gap_end_ts", _L), ("commit_gap_ms", _L),
    ("transactions_open", _L), ("transactions_aborted", _L), ("transactional_ids", pa.list_(_S)),
])
SESSION = pa.struct([
    ("group_id", _S), ("member_id", _S), ("group_instance_id", _S), ("client_id", _S),
    ("client_host", _S), ("joined_ts", _L), ("joined_generation", _I), ("joined_how", _S),
    ("left_ts", _L), ("left_generation", _I), ("left_cause", _S), ("left_reason", _S),
    ("session_ms", _L),
])
# `open_since`: the start of the state the group is still in when its events end; the job
# adds the time from there to the end of the data (known only once every group is read).
STATE = pa.struct([("group_id", _S), ("state", _S), ("total_ms", _L), ("entered", _L),
                   ("open_since", _L)])
GAP = pa.struct([("group_id", _S), ("key", _S), ("gap_start_ts", _L), ("gap_end_ts", _L),
                 ("gap_ms", _L)])
LISTED = pa.struct([
    ("event_type", _S), ("group_id", _S), ("ts", _L), ("generation", _I),
    ("group_instance_id", _S), ("old_member_id", _S), ("member_id", _S), ("client_id", _S),
    ("client_host", _S), ("rebalance", _B), ("group_ids", pa.list_(_S)), ("records", _I),
    ("error", _S),
])
CONVERSION = pa.struct([
    ("ts", _L), ("group_id", _S), ("generation", _I), ("direction", _S), ("from_type", _S),
    ("to_type", _S), ("num_members", _I), ("reason", _S), ("member_id", _S),
])
# Lines by (malformed, version, type): the input's totals and what was skipped.
TALLY = pa.struct([("group_id", _S), ("bad", _B), ("v", _I), ("event_type", _S), ("n", _L),
                   ("lo", _L), ("hi", _L)])

MALFORMED = pa.struct([("path", _S), ("position", _L), ("text", _S)])

TABLE_TYPES: dict[str, pa.StructType] = {
    "rebalances": REBALANCE, "member_sessions": SESSION, "group_states": STATE,
    "gaps": GAP, "listed": LISTED, "conversions": CONVERSION, "tally": TALLY,
    "malformed": MALFORMED,
}
OUTPUT = pa.schema([("group_id", _S)]
                   + [(name, pa.list_(t)) for name, t in TABLE_TYPES.items()])


def spark_ddl(schema: pa.Schema) -> str:
    """`schema` as the DDL string Spark's `applyInArrow` takes."""
    return ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in schema)


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return f"ARRAY<{_spark_type(t.value_type)}>"
    if pa.types.is_struct(t):
        return "STRUCT<" + ", ".join(f"`{f.name}`: {_spark_type(f.type)}" for f in t) + ">"
    names = {_S: "STRING", _I: "INT", _L: "BIGINT", _B: "BOOLEAN"}
    return names[t]


@dataclass
class GroupResult:
    """One group's rows of each table (dicts with the fields of `TABLE_TYPES`)."""

    tables: dict[str, list[Event]] = field(
        default_factory=lambda: {name: [] for name in TABLE_TYPES})


def analyse_group_table(table: pa.Table) -> pa.Table:
    """`applyInArrow`'s function: one group's rows of `journal_chunks.CHUNK` (one per journal
    file it is in) -> one row of `OUTPUT`."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return OUTPUT.empty_table()
    group = table.column("group_id")[0].as_py()
    commits = sorted(pc.list_flatten(table.column("commit_ts")).to_pylist())
    lines = flat_table(table.column("events")).sort_by(
        [("ts", "ascending"), ("file", "ascending"), ("row", "ascending")])
    events = [json.loads(line) for line in lines.column("line").to_pylist()]
    result = analyse_group(group, events, commits)
    tally = flat_table(table.column("tally")).group_by(
        ["bad", "v", "event_type"], use_threads=False).aggregate(
        [("n", "sum"), ("lo", "min"), ("hi", "max")])
    result.tables["tally"] = [
        {"group_id": group, "bad": r["bad"], "v": r["v"], "event_type": r["event_type"],
         "n": r["n_sum"], "lo": r["lo_min"], "hi": r["hi_max"]} for r in tally.to_pylist()]
    result.tables["malformed"] = flat_table(table.column("malformed")).to_pylist()
    columns: dict[str, Any] = {"group_id": pa.array([group], _S)}
    for name, struct in TABLE_TYPES.items():
        columns[name] = pa.array([result.tables[name]], pa.list_(struct))
    return pa.table(columns, schema=OUTPUT)


def flat_table(lists: pa.ChunkedArray) -> pa.Table:
    """A column of lists of structs as one table of the structs' fields (the job splits the
    pass's output with it too)."""
    import pyarrow.compute as pc

    struct_type = lists.type.value_type
    flat = pc.list_flatten(lists)
    chunks = flat.chunks if isinstance(flat, pa.ChunkedArray) else [flat]
    schema = pa.schema(list(struct_type))
    return pa.Table.from_batches(
        [pa.RecordBatch.from_struct_array(c) for c in chunks if len(c)], schema=schema)


def analyse_group(group: str | None, events: Sequence[Event], commit_times: Sequence[int]
                  ) -> GroupResult:
    """One group's tables from its events (journal fields, schema version 1, known types, no
    commits; in journal order) and its commit times (ascending). A null group (events that
    name no group) gives only the listed events."""
    result = GroupResult()
    tables = result.tables
    for e in events:
        if e["event_type"] in (REPLACED, WRITE_FAILED):
            tables["listed"].append({k: e.get(k) for k in LISTED.names})
        elif e["event_type"] == CONVERTED:
            tables["conversions"].append({k: e.get(k) for k in CONVERSION.names})
    if group is None:
        return result
    rebalances = classic_rebalances(group, events) + consumer_rebalances(group, events)
    add_commit_gaps(rebalances, commit_times)
    add_open_transactions(rebalances, events)
    tables["rebalances"] = rebalances
    tables["member_sessions"] = member_sessions(group, events)
    tables["group_states"] = group_states(group, events)
    tables["gaps"] = drawn_gaps(group, commit_times)
    return result


def _member(e: Event, cause: str | None) -> Event:
    return {"ts": e["ts"], "member_id": e.get("member_id"),
            "group_instance_id": e.get("group_instance_id"), "client_id": e.get("client_id"),
            "client_host": e.get("client_host"), "cause": cause}


def _removed_label(m: Event) -> str:
    """`client:cause`, either part left out when it is unknown."""
    return ":".join(str(p) for p in (m["client_id"], m["cause"]) if p is not None)


def _latest(current: Event | None, e: Event) -> Event:
    return e if current is None or (e["ts"], e.get("generation") or 0) >= (
        current["ts"], current.get("generation") or 0) else current


def classic_rebalances(group: str, events: Iterable[Event]) -> list[Event]:
    """Classic groups (docs/events.md §5): one row per rebalance, from a `rebalance_started`
    that opens one (not a restart of an open one) to the `group_stabilized`, `group_empty` or
    `group_dead` that closes it; an open rebalance has a null `end_ts`. A member event just
    before an opening start (the core writes the removal, then the start) belongs to it when
    it is in the same millisecond; member events during the rebalance belong to it too."""
    rebalances: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None  # the open rebalance
    before: list[tuple[str, Event]] = []  # member events since the last boundary, outside
    for e in events:
        kind = e["event_type"]
        if kind == START:
            if current is None:
                current = {"first": e, "starts": 1, "join": None, "end": None,
                           "members": list(before)}
                rebalances.append(current)
                before = []
            else:
                current["starts"] += 1
        elif kind in ENDS:
            if current is not None:
                current["end"] = e
                current = None
        elif kind == JOIN:
            if current is not None:
                current["join"] = _latest(current["join"], e)
        elif kind in (ADDED, REMOVED):
            (current["members"] if current is not None else before).append((kind, e))
    return _with_members_before([_classic_row(group, r) for r in rebalances])


def _classic_row(group: str, r: dict[str, Any]) -> Event:
    first, join, end = r["first"], r["join"], r["end"]
    start_ts, end_ts = first["ts"], end["ts"] if end is not None else None
    during = [(k, e) for k, e in r["members"]
              if e["ts"] >= start_ts and (end_ts is None or e["ts"] <= end_ts)]
    added = [_member(e, None) for k, e in during if k == ADDED]
    removed = [_member(e, e.get("cause")) for k, e in during if k == REMOVED]
    culprit = first.get("member_id")
    instance = next((m["group_instance_id"] for m in added + removed
                     if culprit is not None and m["member_id"] == culprit), None)
    join_ts = join["ts"] if join is not None else None
    return {
        "group_id": group,
        "generation_from": first.get("generation"),
        "generation_to": _coalesce(end, join, "generation"),
        "start_ts": start_ts,
        "end_ts": end_ts,
        "join_ms": _minus(join_ts, start_ts),
        "sync_ms": (_minus(end_ts, join_ts)
                    if end is not None and end["event_type"] == "group_stabilized" else None),
        "duration_ms": _minus(end_ts, start_ts),
        "outcome": OUTCOME[end["event_type"]] if end is not None else "open",
        "cause": first.get("cause"),
        "reason": first.get("reason"),
        "culprit_member_id": culprit,
        "culprit_instance_id": instance,
        "culprit_client_id": first.get("client_id"),
        "culprit_client_host": first.get("client_host"),
        "from_state": first.get("from_state"),
        "members_after": _coalesce(end, join, "num_members"),
        "protocol": join.get("protocol_name") if join is not None else None,
        "restarts": r["starts"] - 1,
        "members_joined": [m["client_id"] for m in added],
        "members_removed": [_removed_label(m) for m in removed],
        "inferred": False,
        "source": "journal",
        "partitions_moved": None,
    }


def _with_members_before(rows: list[Event]) -> list[Event]:
    """Each rebalance's members before: the previous one's members after (by start), else 0
    when it started from Empty."""
    previous: Event | None = None
    for row in sorted(rows, key=lambda r: r["start_ts"]):
        before = previous["members_after"] if previous is not None else None
        if before is None and row["from_state"] == "Empty":
            before = 0
        row["members_before"] = before
        previous = row
    return rows


def consumer_rebalances(group: str, events: Iterable[Event]) -> list[Event]:
    """Consumer groups (KIP-848, docs/events.md §4) have no group-wide barrier: one row per
    new group epoch, from its `target_assignment_computed` to the last `member_reconciled`
    with `member_state` `stable` at that epoch before the next epoch's target (null while no
    member has reconciled: `open`). The membership change is the member events since the
    previous target; the cause is that change (`member_join`, `member_leave`, or the removal
    cause), else `assignment_change` (a subscription or topic metadata change). Join and
    sync phases do not exist here and stay null; `partitions_moved` is the event's own."""
    epochs: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    changes: list[tuple[str, Event]] = []  # member events since the last target
    for e in events:
        kind = e["event_type"]
        if kind == TARGET:
            current = {"target": e, "steps": [], "members": changes}
            epochs.append(current)
            changes = []
        elif kind == RECONCILED:
            if current is not None:
                current["steps"].append(e)
        elif kind in (ADDED, REMOVED):
            changes.append((kind, e))
    rows = [_consumer_row(group, epoch) for epoch in epochs]
    previous: Event | None = None
    for row in sorted(rows, key=lambda r: r["start_ts"]):
        row["generation_from"] = previous["generation_to"] if previous is not None else None
        row["members_before"] = previous["members_after"] if previous is not None else None
        previous = row
    return rows


def _consumer_row(group: str, epoch: dict[str, Any]) -> Event:
    target = epoch["target"]
    number, start_ts = target.get("generation"), target["ts"]
    added = [_member(e, None) for k, e in epoch["members"] if k == ADDED]
    removed = [_member(e, e.get("cause")) for k, e in epoch["members"] if k == REMOVED]
    stable = [s["ts"] for s in epoch["steps"] if s.get("member_state") == "stable"
              and s.get("generation") == number and s["ts"] >= start_ts]
    end_ts = max(stable) if stable else None
    culprit = target.get("member_id")
    culprit_event = next((m for m in added + removed
                          if culprit is not None and m["member_id"] == culprit), None)
    if added:
        cause: str | None = "member_join"
    elif removed:
        removal = removed[0]["cause"]
        cause = _CONSUMER_CAUSE.get(removal, removal) if removal is not None else None
    else:
        cause = "assignment_change"
    moved = target.get("moved_partitions")
    return {
        "group_id": group,
        "generation_to": number,
        "start_ts": start_ts,
        "end_ts": end_ts,
        "join_ms": None,
        "sync_ms": None,
        "duration_ms": _minus(end_ts, start_ts),
        "outcome": "stabilized" if end_ts is not None else "open",
        "cause": cause,
        "reason": target.get("reason"),
        "culprit_member_id": culprit,
        "culprit_instance_id": culprit_event["group_instance_id"] if culprit_event else None,
        "culprit_client_id": culprit_event["client_id"] if culprit_event else None,
        "culprit_client_host": culprit_event["client_host"] if culprit_event else None,
        "from_state": None,
        "members_after": target.get("num_members"),
        "protocol": target.get("assignor"),
        "restarts": None,
        "members_joined": [m["client_id"] for m in added],
        "members_removed": [_removed_label(m) for m in removed],
        "inferred": False,
        "source": "journal",
        "partitions_moved": moved,
    }


def add_commit_gaps(rebalances: list[Event], commit_times: Sequence[int]) -> None:
    """The commit gap around each rebalance: from the group's last commit at or before the
    rebalance started (or ended, when its start is unknown) to its first commit at or after it
    ended. A commit in the millisecond a rebalance starts counts as before it, one in the
    millisecond it ends as after it. This is the pause as the consumers' commits show it."""
    from bisect import bisect_left, bisect_right

    for row in rebalances:
        at = row["start_ts"] if row["start_ts"] is not None else row["end_ts"]
        before = bisect_right(commit_times, at) if at is not None else 0
        gap_start = commit_times[before - 1] if at is not None and before > 0 else None
        end = row["end_ts"]
        after = bisect_left(commit_times, end) if end is not None else len(commit_times)
        gap_end = commit_times[after] if after < len(commit_times) else None
        row["gap_start_ts"] = gap_start
        row["gap_end_ts"] = gap_end
        row["commit_gap_ms"] = _minus(gap_end, gap_start)


def add_open_transactions(rebalances: list[Event], events: Iterable[Event]) -> None:
    """The transactions that were open during each rebalance: those of a producer that
    committed offsets to this group in that transaction (AddOffsetsToTxn,
    `send_offsets_to_transaction`), as its `transaction_committed` or `transaction_aborted`
    event names the group. A transaction is open from `ts - duration_ms` to `ts`; a rebalance
    from its start (its end when the start is unknown) to its end (still open: to the end of
    the data). They overlap when each starts before the other ends. A transaction still open
    when the journal ends has no end event and is not counted."""
    transactions = [(e["ts"] - e["duration_ms"], e["ts"], e.get("transactional_id"),
                     e["event_type"] == "transaction_aborted")
                    for e in events
                    if e["event_type"] in TXN_ENDS and e.get("duration_ms") is not None]
    for row in rebalances:
        start = row["start_ts"] if row["start_ts"] is not None else row["end_ts"]
        end = row["end_ts"]
        overlapping = [t for t in transactions
                       if (end is None or t[0] < end) and (start is None or t[1] > start)]
        row["transactions_open"] = len(overlapping)
        row["transactions_aborted"] = sum(1 for t in overlapping if t[3])
        row["transactional_ids"] = sorted({str(t[2]) for t in overlapping if t[2] is not None})


def drawn_gaps(group: str, commit_times: Sequence[int]) -> list[Event]:
    """The gaps between two commits worth drawing on a timeline: at least `DRAWN_GAP_MIN_MS`
    and `DRAWN_GAP_MEDIANS` times the group's median gap. Several commits in one millisecond
    are one moment: the median is of the gaps > 0 (the lower median: a gap that occurred)."""
    gaps = [(b - a, a, b) for a, b in pairwise(commit_times)]
    positive = sorted(g for g, _, _ in gaps if g > 0)
    if not positive:
        return []
    median = positive[(len(positive) + 1) // 2 - 1]
    threshold = max(DRAWN_GAP_MIN_MS, DRAWN_GAP_MEDIANS * median)
    return [{"group_id": group, "key": "", "gap_start_ts": a, "gap_end_ts": b, "gap_ms": g}
            for g, a, b in gaps if g >= threshold]


def member_sessions(group: str, events: Iterable[Event]) -> list[Event]:
    """One row per member: when it joined (or was put in place by a static restart), when it
    left and why. Members present before the journal starts have a null `joined_ts`."""
    joined: dict[str | None, Event] = {}
    left: dict[str | None, Event] = {}
    for e in events:
        kind, member = e["event_type"], e.get("member_id")
        if kind in (ADDED, REPLACED) and member not in joined:
            joined[member] = e
        elif kind == REMOVED and member not in left:
            left[member] = e
    rows = []
    for member in list(joined) + [m for m in left if m not in joined]:
        start, end = joined.get(member), left.get(member)

        def pick(name: str, start: Event | None = start, end: Event | None = end) -> Any:
            value = start.get(name) if start is not None else None
            return value if value is not None or end is None else end.get(name)

        joined_ts = start["ts"] if start is not None else None
        left_ts = end["ts"] if end is not None else None
        rows.append({
            "group_id": group, "member_id": member,
            "group_instance_id": pick("group_instance_id"), "client_id": pick("client_id"),
            "client_host": pick("client_host"),
            "joined_ts": joined_ts,
            "joined_generation": start.get("generation") if start is not None else None,
            "joined_how": (("join" if start["event_type"] == ADDED else "static_restart")
                           if start is not None else None),
            "left_ts": left_ts,
            "left_generation": end.get("generation") if end is not None else None,
            "left_cause": end.get("cause") if end is not None else None,
            "left_reason": end.get("reason") if end is not None else None,
            "session_ms": _minus(left_ts, joined_ts),
        })
    return rows


def group_states(group: str, events: Iterable[Event]) -> list[Event]:
    """Time in each state, from the events that change it (`to_state`); the last state is
    open (`open_since`) until the job knows where the data ends (`close_states`)."""
    changes = [(e["ts"], e["to_state"]) for e in events if e.get("to_state") is not None]
    totals: dict[str, list[int]] = {}
    for (ts, state), (next_ts, _) in pairwise(changes):
        total = totals.setdefault(state, [0, 0])
        total[0] += max(next_ts - ts, 0)
        total[1] += 1
    open_since: dict[str, int] = {}
    if changes:
        ts, state = changes[-1]
        totals.setdefault(state, [0, 0])[1] += 1
        open_since[state] = ts
    return [{"group_id": group, "state": state, "total_ms": total, "entered": entered,
             "open_since": open_since.get(state)}
            for state, (total, entered) in totals.items()]


def close_states(states: pa.Table, data_end: int) -> pa.Table:
    """`group_states` rows of every group with the state each is still in run to `data_end`,
    the end of the data: (group_id, state, total_ms, entered)."""
    import pyarrow.compute as pc

    still = pc.max_element_wise(
        pc.subtract(pa.scalar(data_end, pa.int64()), states.column("open_since")),
        pa.scalar(0, pa.int64()))
    return pa.table({"group_id": states.column("group_id"), "state": states.column("state"),
                     "total_ms": pc.add(states.column("total_ms"), pc.fill_null(still, 0)),
                     "entered": states.column("entered")})


def _coalesce(a: Event | None, b: Event | None, name: str) -> Any:
    value = a.get(name) if a is not None else None
    return value if value is not None or b is None else b.get(name)


def _minus(a: int | None, b: int | None) -> int | None:
    return a - b if a is not None and b is not None else None
