"""`--follow` on a live cluster, incrementally: the state the report is made from, kept on the
driver between micro-batches.

A micro-batch adds its records to each group's kept records (`group_log_pass.GroupLog`), to
the running totals and to the problems; only the groups that have new records are analysed
again (`group_log_pass.analyse_group_log`), the other groups' rows are the ones they had, and
the tables and the report are written from all groups' rows. A trigger thus costs what its
new records and their groups cost, not a Spark plan over everything kept so far.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from forensics.group_log_pass import (
    GroupLog,
    GroupTables,
    analyse_group_log,
    finish_commits,
    to_table,
)
from forensics.job import Outcome, Renderer, write_outputs
from forensics.journal_pass import OUTPUT
from forensics.reader import Problems, Summary, journal_tables

_METADATA_FIELDS = ("group_id", "generation", "timestamp", "log_partition", "offset",
                    "protocol_type", "protocol", "leader", "members")
_MAX_CORRUPT_EXAMPLES = 50


class LiveFollower:
    """The report's state for `--follow` on a live cluster's offsets topic."""

    def __init__(self, out_dir: Path, source: str, timelines: int) -> None:
        self.out_dir = out_dir
        self.source = source
        self.timelines = timelines
        self.logs: dict[str, GroupLog] = {}
        self.results: dict[str, GroupTables] = {}
        self.summary = Summary()
        self.problems = Problems()
        self.records = 0

    def add(self, records: pa.Table) -> set[str]:
        """Keep a micro-batch's records (`grouplog.GROUP_LOG_COLUMNS`); the groups they
        belong to."""
        self.records += records.num_rows
        self._tally(records)
        touched: set[str] = set()
        live = pc.invert(pc.fill_null(records.column("tombstone"), False))
        kinds = records.column("record_type")
        commits = records.filter(pc.and_(pc.equal(kinds, "offset_commit"), live))
        columns = [commits.column(name).to_pylist() for name in (
            "group_id", "topic", "partition", "commit_timestamp", "offset",
            "committed_offset")]
        for group, topic, partition, ts, offset, committed in zip(*columns, strict=True):
            if group is None:
                continue
            log = self.logs.get(group)
            if log is None:
                log = self.logs[group] = GroupLog()
            log.commits.setdefault((topic, partition), []).append((ts, offset, committed))
            touched.add(group)
        metadata = records.filter(pc.and_(pc.equal(kinds, "group_metadata"), live))
        for row in metadata.select(list(_METADATA_FIELDS)).to_pylist():
            group = row["group_id"]
            if group is None:
                continue
            self.logs.setdefault(group, GroupLog()).metadata.append(row)
            touched.add(group)
        return touched

    def refresh(self, touched: Iterable[str], renderer: Renderer) -> Outcome:
        """Analyse the `touched` groups again and write the tables and the report."""
        for group in touched:
            self.results[group] = analyse_group_log(group, self.logs[group])
        found = journal_tables(OUTPUT.empty_table(), Problems())
        data_end = self.summary.last_ts if self.summary.last_ts is not None else 0
        has_group_log = self.records > 0
        tables: dict[str, pa.Table | None]
        if not has_group_log:  # nothing yet: the tables a journal would fill, empty
            tables = {"rebalances": found.tables["rebalances"],
                      "member_sessions": found.tables["member_sessions"],
                      "group_states": found.tables["group_states"]}
        else:
            results = [self.results[g] for g in sorted(self.results)]
            tables = {
                "rebalances": to_table("rebalances",
                                       [r for t in results for r in t.rebalances]),
                "member_sessions": to_table("member_sessions",
                                            [r for t in results for r in t.member_sessions]),
                "rebalance_commit_gaps": to_table(
                    "rebalance_commit_gaps",
                    [r for t in results for r in t.rebalance_commit_gaps]),
                "commits": to_table("commits", finish_commits(
                    [r for t in results for r in t.commits], data_end)),
                "gaps": (to_table("gaps", [r for t in results for r in t.gaps])
                         if self.timelines > 0 else None),
            }
        return write_outputs(self.out_dir, tables, found, self.summary, self.problems,
                             source=self.source, has_group_log=has_group_log,
                             timelines=self.timelines, renderer=renderer, live_source=True)

    def _tally(self, records: pa.Table) -> None:
        """The totals and problems `reader.summarize_group_log` gives, added up batch by
        batch."""
        for record_type, key_version, tombstone, count, lo, hi, groups in _tallies(records):
            if record_type == "undecodable":
                self.problems.undecodable_records += count
            elif record_type == "unknown":
                unknown = self.problems.unknown_record_types
                key = key_version if key_version is not None else -1
                unknown[key] = unknown.get(key, 0) + count
            elif record_type in ("offset_commit", "group_metadata"):
                self.summary.add(count, record_type == "offset_commit" and not tombstone, lo, hi,
                                 groups)
        self.summary.events = 0  # records, not journal events
        corrupt = records.filter(pc.equal(records.column("record_type"), "corrupt"))
        room = _MAX_CORRUPT_EXAMPLES - len(self.problems.corrupt_batches)
        for row in corrupt.select(["source_file", "position", "error"]).slice(
                0, max(room, 0)).to_pylist():
            self.problems.corrupt_batches.append(
                (row["source_file"], row["position"], row["error"]))


def _tallies(records: pa.Table) -> list[tuple[str, int | None, bool | None, int, int | None,
                                              int | None, list[str]]]:
    """(record_type, key_version, tombstone, records, first and last positive timestamp,
    groups)."""
    timestamps = records.column("timestamp")
    positive = pc.if_else(pc.greater(timestamps, 0), timestamps,
                          pa.scalar(None, timestamps.type))
    table = pa.table({"record_type": records.column("record_type"),
                      "key_version": records.column("key_version"),
                      "tombstone": records.column("tombstone"),
                      "ts": positive, "group_id": records.column("group_id")})
    grouped = table.group_by(["record_type", "key_version", "tombstone"],
                             use_threads=False).aggregate(
        [([], "count_all"), ("ts", "min"), ("ts", "max"), ("group_id", "distinct")])
    return [(row["record_type"], row["key_version"], row["tombstone"], row["count_all"],
             row["ts_min"], row["ts_max"], [g for g in row["group_id_distinct"] if g is not None])
            for row in grouped.to_pylist()]
