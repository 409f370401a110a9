"""The group log's tables for one group, in plain Python: what `forensics.transforms` computes
with Spark SQL over a whole group log (`rebalances_from_group_log`, `partitions_moved`,
`with_commit_gaps`, `member_sessions_from_group_log`, `rebalance_commit_gaps`, `commits`,
`drawn_gaps`), for the records of one group.

`--follow` on a live cluster uses it (`forensics.follow_state`): a micro-batch holds the few
records that are new, and only the groups they belong to are computed again, on the driver,
instead of running the batch job's Spark plan (about ten jobs, several seconds even on a
handful of rows) over everything kept so far. The rules are those of the transforms, and the
tests hold the two to the same rows.

Times are epoch milliseconds.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pyarrow as pa

from forensics.journal_pass import DRAWN_GAP_MEDIANS, DRAWN_GAP_MIN_MS

Row = dict[str, Any]

_S, _I, _L, _B, _D = pa.string(), pa.int32(), pa.int64(), pa.bool_(), pa.float64()


def _schema(*fields: tuple[str, pa.DataType] | tuple[str, pa.DataType, bool]) -> pa.Schema:
    return pa.schema([pa.field(f[0], f[1], nullable=f[2] if len(f) > 2 else True)  # type: ignore[misc]
                      for f in fields])


# The Parquet schemas the batch job writes for a group log alone (Spark's column order and
# nullability), so that a table `--follow` writes is the batch job's table.
SCHEMAS: dict[str, pa.Schema] = {
    "rebalances": _schema(
        ("group_id", _S), ("generation_to", _I), ("generation_from", _I), ("start_ts", _L),
        ("end_ts", _L), ("join_ms", _L), ("sync_ms", _L), ("duration_ms", _L),
        ("outcome", _S, False), ("cause", _S, False), ("reason", _S),
        ("culprit_member_id", _S), ("culprit_instance_id", _S), ("culprit_client_id", _S),
        ("culprit_client_host", _S), ("from_state", _S), ("members_after", _I),
        ("protocol", _S), ("restarts", _L), ("members_joined", pa.list_(_S)),
        ("members_removed", pa.list_(_S)), ("members_before", _I), ("inferred", _B, False),
        ("source", _S, False), ("partitions_moved", _L), ("gap_start_ts", _L),
        ("gap_end_ts", _L), ("commit_gap_ms", _L)),
    "member_sessions": _schema(
        ("group_id", _S), ("member_id", _S), ("group_instance_id", _S), ("client_id", _S),
        ("client_host", _S), ("joined_ts", _L), ("joined_generation", _I),
        ("joined_how", _S, False), ("left_ts", _L), ("left_generation", _I),
        ("left_cause", _S), ("left_reason", _S), ("session_ms", _L)),
    "rebalance_commit_gaps": _schema(
        ("group_id", _S), ("generation_from", _I), ("generation_to", _I), ("start_ts", _L),
        ("end_ts", _L), ("cause", _S, False), ("topic", _S), ("partition", _I),
        ("gap_start_ts", _L), ("gap_end_ts", _L), ("commit_gap_ms", _L),
        ("source", _S, False)),
    "commits": _schema(
        ("group_id", _S), ("topic", _S), ("partition", _I), ("commits", _L, False),
        ("first_commit_ts", _L), ("last_commit_ts", _L), ("last_committed_offset", _L),
        ("max_gap_ms", _L), ("commits_per_s", _D), ("staleness_ms", _L),
        ("longest_rebalance_gap_ms", _L)),
    "gaps": _schema(("group_id", _S), ("key", _S), ("gap_start_ts", _L), ("gap_end_ts", _L),
                    ("gap_ms", _L)),
}

# An offset commit as the pass keeps it: (commit_timestamp, offset, committed_offset).
Commit = tuple[int | None, int, int | None]
PartitionKey = tuple[str | None, int | None]


@dataclass
class GroupLog:
    """One group's modelled records: its GroupMetadata records (dicts with `generation`,
    `timestamp`, `log_partition`, `offset`, `protocol_type`, `protocol`, `leader`, `members`)
    and its offset commits per (topic, partition). Tombstones are left out when added."""

    metadata: list[Row] = field(default_factory=list)
    commits: dict[PartitionKey, list[Commit]] = field(default_factory=dict)


@dataclass
class GroupTables:
    """One group's rows of each table; `commits` rows have no `staleness_ms` yet (it depends
    on the end of all the data, `finish_commits`)."""

    rebalances: list[Row]
    member_sessions: list[Row]
    rebalance_commit_gaps: list[Row]
    commits: list[Row]
    gaps: list[Row]


def analyse_group_log(group: str, log: GroupLog) -> GroupTables:
    generations = _generations(log.metadata)
    rebalances = _rebalances(group, generations)
    moved = _partitions_moved(generations)
    for row in rebalances:
        row["partitions_moved"] = moved.get(row["generation_to"])
    commit_times = sorted(ts for commits in log.commits.values()
                          for ts, _, _ in commits if ts is not None and ts > 0)
    _add_commit_gaps(rebalances, commit_times)
    around: list[Row] = []
    partition_times: dict[PartitionKey, list[int]] = {
        key: sorted(ts for ts, _, _ in commits if ts is not None and ts > 0)
        for key, commits in log.commits.items()}
    for key, times in partition_times.items():
        if not times:
            continue
        marks = [{"start_ts": r["start_ts"], "end_ts": r["end_ts"]} for r in rebalances]
        _add_commit_gaps(marks, times)
        for row, mark in zip(rebalances, marks, strict=True):
            if row["start_ts"] is None and row["end_ts"] is None:
                continue  # no mark, no row (as the Spark stream)
            around.append({
                "group_id": group, "generation_from": row["generation_from"],
                "generation_to": row["generation_to"], "start_ts": row["start_ts"],
                "end_ts": row["end_ts"], "cause": row["cause"], "topic": key[0],
                "partition": key[1], "gap_start_ts": mark["gap_start_ts"],
                "gap_end_ts": mark["gap_end_ts"], "commit_gap_ms": mark["commit_gap_ms"],
                "source": "group_log"})
    return GroupTables(rebalances=rebalances,
                       member_sessions=_member_sessions(group, generations),
                       rebalance_commit_gaps=around,
                       commits=_commits(group, log.commits, around),
                       gaps=_drawn_gaps(group, partition_times))


def finish_commits(rows: list[Row], data_end: int) -> list[Row]:
    """`commits` rows with `staleness_ms`: how long before the end of the data each
    partition's last commit was."""
    return [{**row, "staleness_ms": (data_end - row["last_commit_ts"]
                                     if row["last_commit_ts"] is not None else None)}
            for row in rows]


def to_table(name: str, rows: Sequence[Row]) -> pa.Table:
    schema = SCHEMAS[name]
    return pa.Table.from_pylist(list(rows), schema=schema)


def _identity(member: Row) -> str | None:
    """A restarted static member is the same member."""
    instance = member.get("group_instance_id")
    return instance if instance is not None else member.get("member_id")


def _generations(metadata: list[Row]) -> list[Row]:
    """The last GroupMetadata record of each generation (the highest log partition, then
    offset), in generation order."""
    last: dict[int | None, Row] = {}
    for record in metadata:
        generation = record["generation"]
        seen = last.get(generation)
        if seen is None or ((record["log_partition"], record["offset"])
                            > (seen["log_partition"], seen["offset"])):
            last[generation] = record
    return [last[g] for g in sorted(last, key=lambda g: (g is not None, g or 0))]


def _rebalances(group: str, generations: list[Row]) -> list[Row]:
    """Each new generation ends a rebalance; the cause is inferred from the membership
    change (`transforms.rebalances_from_group_log`)."""
    rows: list[Row] = []
    previous: Row | None = None
    for record in generations:
        members = list(record["members"] or [])
        prev_members = list(previous["members"] or []) if previous is not None else None
        ids = {_identity(m) for m in members}
        prev_ids = {_identity(m) for m in prev_members or []}
        joined = [m for m in members if _identity(m) not in prev_ids]
        left = [m for m in prev_members or [] if _identity(m) not in ids]
        if not members:
            cause = "group_empty"
        elif joined and not left:
            cause = "member_join"
        elif left and not joined:
            cause = "member_left"
        elif joined and left:
            cause = "membership_change"
        else:
            cause = "rejoin"
        single = (joined or left)[0] if len(joined) + len(left) == 1 else None
        generation = record["generation"]
        if generation is not None and generation > 0:
            rows.append({
                "group_id": group, "generation_to": generation,
                "generation_from": previous["generation"] if previous is not None else None,
                "start_ts": None, "end_ts": record["timestamp"], "join_ms": None,
                "sync_ms": None, "duration_ms": None,
                "outcome": "empty" if not members else "stabilized", "cause": cause,
                "reason": None,
                "culprit_member_id": single.get("member_id") if single else None,
                "culprit_instance_id": single.get("group_instance_id") if single else None,
                "culprit_client_id": single.get("client_id") if single else None,
                "culprit_client_host": single.get("client_host") if single else None,
                "from_state": None, "members_after": len(members),
                "protocol": record["protocol"], "restarts": None,
                "members_joined": [m.get("client_id") for m in joined],
                "members_removed": [m.get("client_id") for m in left],
                "members_before": len(prev_members) if prev_members is not None else None,
                "inferred": True, "source": "group_log"})
        previous = record
    return rows


def _owners(record: Row) -> list[tuple[str, int | None, str | None]]:
    return [(a["topic"], a["partition"], _identity(m))
            for m in record["members"] or [] for a in m.get("assignment") or []
            if a["topic"] is not None]


def _partitions_moved(generations: list[Row]) -> dict[int, int]:
    """Per generation: topic-partitions whose owner differs from the previous generation's,
    including newly assigned and no longer assigned ones (`transforms.partitions_moved`)."""
    moved: dict[int, int] = {}
    previous: list[tuple[str, int | None, str | None]] = []
    for record in generations:
        current = _owners(record)
        by_key: dict[tuple[str, int | None], tuple[list[str | None], list[str | None]]] = {}
        for topic, partition, owner in current:
            by_key.setdefault((topic, partition), ([], []))[0].append(owner)
        for topic, partition, owner in previous:
            by_key.setdefault((topic, partition), ([], []))[1].append(owner)
        count = 0
        for now, before in by_key.values():
            if now and before:  # the full outer join's pairs
                count += sum(0 if a == b else 1 for a in now for b in before)
            else:
                count += len(now) + len(before)
        moved[record["generation"]] = count
        previous = current
    return moved


def _add_commit_gaps(rebalances: list[Row], commit_times: Sequence[int]) -> None:
    """From the last commit at or before each rebalance started (or ended, when its start is
    unknown) to the first at or after it ended (`journal_pass.add_commit_gaps`)."""
    for row in rebalances:
        at = row["start_ts"] if row["start_ts"] is not None else row["end_ts"]
        before = bisect_right(commit_times, at) if at is not None else 0
        gap_start = commit_times[before - 1] if at is not None and before > 0 else None
        end = row["end_ts"]
        after = bisect_left(commit_times, end) if end is not None else len(commit_times)
        gap_end = commit_times[after] if after < len(commit_times) else None
        row["gap_start_ts"] = gap_start
        row["gap_end_ts"] = gap_end
        row["commit_gap_ms"] = (gap_end - gap_start if gap_end is not None
                                and gap_start is not None else None)


def _member_sessions(group: str, generations: list[Row]) -> list[Row]:
    """First and last generation each member appears in and the generation it was gone from
    (`transforms.member_sessions_from_group_log`)."""
    following: dict[int, tuple[int | None, int | None]] = {}
    for record, after in pairwise(generations):
        following[record["generation"]] = (after["generation"], after["timestamp"])
    spans: dict[str | None, Row] = {}
    for record in generations:
        generation, ts = record["generation"], record["timestamp"]
        for m in record["members"] or []:
            last = (generation, m.get("member_id"), m.get("group_instance_id"),
                    m.get("client_id"), m.get("client_host"))
            span = spans.get(_identity(m))
            if span is None:
                spans[_identity(m)] = {"joined_generation": generation, "joined_ts": ts,
                                       "last": last}
                continue
            span["joined_generation"] = _least(span["joined_generation"], generation)
            span["joined_ts"] = _least(span["joined_ts"], ts)
            if _struct_key(last) > _struct_key(span["last"]):
                span["last"] = last
    rows = []
    for span in spans.values():
        last_generation, member_id, instance, client_id, host = span["last"]
        next_generation, next_ts = following.get(last_generation, (None, None))
        rows.append({
            "group_id": group, "member_id": member_id, "group_instance_id": instance,
            "client_id": client_id, "client_host": host, "joined_ts": span["joined_ts"],
            "joined_generation": span["joined_generation"], "joined_how": "inferred",
            "left_ts": next_ts, "left_generation": next_generation,
            "left_cause": ("inferred: absent from the next generation"
                           if next_generation is not None else None),
            "left_reason": None,
            "session_ms": (next_ts - span["joined_ts"] if next_ts is not None
                           and span["joined_ts"] is not None else None)})
    return rows


def _least(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _struct_key(values: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    """Spark's order of structs: field by field, null first."""
    return tuple((v is not None, v if v is not None else 0) for v in values)


def _commits(group: str, commits: dict[PartitionKey, list[Commit]],
             around: list[Row]) -> list[Row]:
    """Per partition: commits, rate, the longest gap between commits, the last committed
    offset and the longest commit gap around a rebalance (`transforms.commits`)."""
    longest: dict[PartitionKey, int | None] = {}
    for row in around:
        key = (row["topic"], row["partition"])
        gap = row["commit_gap_ms"]
        if gap is not None:
            seen = longest.get(key)
            longest[key] = gap if seen is None else max(seen, gap)
        else:
            longest.setdefault(key, None)
    rows = []
    for (topic, partition), found in commits.items():
        if not found:
            continue
        ordered = sorted(found, key=lambda c: ((c[0] is not None, c[0] or 0), c[1]))
        times = [c[0] for c in ordered if c[0] is not None]
        gaps = [b[0] - a[0] for a, b in pairwise(ordered)
                if a[0] is not None and b[0] is not None]
        first = min(times) if times else None
        last = max(times) if times else None
        latest = max(ordered, key=lambda c: ((c[0] is not None, c[0] or 0), c[1]))
        span_s = (last - first) / 1000.0 if first is not None and last is not None else None
        rows.append({
            "group_id": group, "topic": topic, "partition": partition,
            "commits": len(ordered), "first_commit_ts": first, "last_commit_ts": last,
            "last_committed_offset": latest[2], "max_gap_ms": max(gaps) if gaps else None,
            "commits_per_s": (len(ordered) - 1) / span_s if span_s else None,
            "longest_rebalance_gap_ms": longest.get((topic, partition))})
    return rows


def _drawn_gaps(group: str, partition_times: dict[PartitionKey, list[int]]) -> list[Row]:
    """The gaps between two commits of a partition worth drawing: at least
    `DRAWN_GAP_MIN_MS` and `DRAWN_GAP_MEDIANS` times the group's median gap (of all its
    partitions' gaps > 0, the lower median)."""
    gaps = [(f"{key[0]}-{key[1]}", b - a, a, b) for key, times in partition_times.items()
            for a, b in pairwise(times)]
    positive = sorted(g for _, g, _, _ in gaps if g > 0)
    if not positive:
        return []
    median = positive[(len(positive) + 1) // 2 - 1]
    threshold = max(DRAWN_GAP_MIN_MS, DRAWN_GAP_MEDIANS * median)
    return [{"group_id": group, "key": key, "gap_start_ts": a, "gap_end_ts": b, "gap_ms": g}
            for key, g, a, b in gaps if g >= threshold]
