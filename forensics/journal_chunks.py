"""One journal file -> one row per group: the map side of the journal pass, without Spark.

Each file is read and parsed in its own task, and what the pass needs of it is gathered per
group there: the group's commit times (most of a journal), its other events (the ones that
explain rebalances) as their JSON lines with their place in the file, and a tally of its lines
by version and type. Spark then moves one row per file and group to the group's task instead
of a row per line, so the JVM does next to no work per line; on two cores and a cold JVM that
per-line work was most of the job's time (BENCHMARKS.md, forensics).

Lines that are not JSON objects with an `event_type`, or whose `v`, `ts` or `group_id` have
the wrong type, are malformed: counted in the tally of the group-less row, and the first few
of each file kept with their byte position.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from forensics.files import list_dir, name_of, read_bytes, size
from forensics.journal_pass import COMMIT, CONTROL_TYPES, JOURNAL_VERSION, TXN_ENDS

ACTIVE_NAME = ".events-active.jsonl"  # docs/events.md §1
ACTIVE_KEY = "~active"  # the active file's place in the order: after every closed file
_CLOSED_NAME = re.compile(r"^events-\d{13}-(\d{6,})\.jsonl$")  # docs/events.md §1
MALFORMED_EXAMPLES = 20  # per file

_S, _I, _L, _B = pa.string(), pa.int32(), pa.int64(), pa.bool_()
EVENT_LINE = pa.struct([("ts", _L), ("file", _S), ("row", _L), ("line", _S)])
LINE_TALLY = pa.struct([("bad", _B), ("v", _I), ("event_type", _S), ("n", _L), ("lo", _L),
                        ("hi", _L)])
MALFORMED = pa.struct([("path", _S), ("position", _L), ("text", _S)])
CHUNK = pa.schema([("group_id", _S), ("commit_ts", pa.list_(_L)),
                   ("events", pa.list_(EVENT_LINE)), ("tally", pa.list_(LINE_TALLY)),
                   ("malformed", pa.list_(MALFORMED))])


def journal_files(directory: str | Path, include_active: bool = True) -> list[str]:
    """Closed files in the order the broker wrote them (`file_key`), then the active one (a
    batch run reads it too); locations as `forensics.files` takes them (a local path or a
    URL)."""
    entries = list_dir(directory)
    closed = sorted((p for p, is_directory in entries if not is_directory
                     and _CLOSED.match(name_of(p))), key=file_key)
    active = [p for p, is_directory in entries if not is_directory
              and name_of(p) == ACTIVE_NAME]
    if include_active and active and (size(active[0]) or 0) > 0:
        closed.append(active[0])
    return closed


_CLOSED = re.compile(r"^events-.*\.jsonl$")


def file_key(path: str | Path) -> str:
    """Orders files, and events of one millisecond across files: closed files by the sequence
    in their names (the order the broker wrote them, whatever its clock did), the active file
    last. A name without a sequence sorts by itself, after those with one."""
    name = name_of(path)
    if name == ACTIVE_NAME:
        return ACTIVE_KEY
    match = _CLOSED_NAME.match(name)
    return f"{int(match.group(1)):020d}" if match else name


@dataclass
class _Group:
    commits: list[int] = field(default_factory=list)
    events: list[tuple[int, str, int, str]] = field(default_factory=list)
    tally: dict[tuple[bool, int | None, str | None], list[Any]] = field(default_factory=dict)
    malformed: list[tuple[str, int, str]] = field(default_factory=list)

    def count(self, bad: bool, v: int | None, event_type: str | None, ts: int | None) -> None:
        entry = self.tally.get((bad, v, event_type))
        if entry is None:
            self.tally[(bad, v, event_type)] = [1, ts, ts]
            return
        entry[0] += 1
        if ts is not None:
            entry[1] = ts if entry[1] is None else min(entry[1], ts)
            entry[2] = ts if entry[2] is None else max(entry[2], ts)


def read_files(paths: Sequence[str], numbers: Iterator[pa.RecordBatch]
               ) -> Iterator[pa.RecordBatch]:
    """`mapInArrow`'s function: the files whose numbers (`id`, an index into `paths`) come in,
    each as `CHUNK` rows."""
    for batch in numbers:
        for number in batch.column("id").to_pylist():
            yield read_file(paths[number])


def read_file(path: str | Path) -> pa.RecordBatch:
    """`path`'s lines as `CHUNK` rows, one per group (and one for lines without a group)."""
    data = read_bytes(path)
    lines = data.split(b"\n")
    key = file_key(path)
    fast = _chunk_rows_arrow(data, lines, key)
    return fast if fast is not None else chunk_rows(lines, key, str(path))


_HEAD = pa.schema([("v", _I), ("event_type", _S), ("ts", _L), ("group_id", _S)])


def _chunk_rows_arrow(data: bytes, lines: list[bytes], key: str) -> pa.RecordBatch | None:
    """`chunk_rows` for a file every line of which is a well-formed event: Arrow's JSON
    reader parses the fields every line needs (version, type, time, group) in C++, several
    times faster than a Python loop; the lines of the events that explain rebalances are taken
    as they are. None when any line is malformed (the Python loop then counts and locates
    them)."""
    import pyarrow.compute as pc
    import pyarrow.json as pj

    try:
        head = pj.read_json(pa.py_buffer(data), read_options=pj.ReadOptions(use_threads=False),
                            parse_options=pj.ParseOptions(explicit_schema=_HEAD,
                                                          unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    rows = [n for n, line in enumerate(lines) if line and not line.isspace()]
    if len(rows) != head.num_rows or head.column("event_type").null_count:
        return None
    groups: dict[str | None, _Group] = {}
    tally = head.group_by(["group_id", "v", "event_type"], use_threads=False).aggregate(
        [([], "count_all"), ("ts", "min"), ("ts", "max")])
    for r in tally.to_pylist():
        entry = groups.setdefault(r["group_id"], _Group())
        entry.tally[(False, r["v"], r["event_type"])] = [r["count_all"], r["ts_min"],
                                                         r["ts_max"]]
    current = pc.and_(pc.equal(head.column("v"), JOURNAL_VERSION),
                      pc.is_valid(head.column("ts")))
    is_commit = pc.and_(pc.and_(current, pc.equal(head.column("event_type"), COMMIT)),
                        pc.greater(head.column("ts"), 0))
    commits = head.filter(is_commit).group_by("group_id", use_threads=False).aggregate(
        [("ts", "list")])
    for group, times in zip(commits.column("group_id").to_pylist(),
                            commits.column("ts_list").to_pylist(), strict=True):
        groups[group].commits = times
    is_control = pc.and_(current, pc.is_in(head.column("event_type"),
                                           pa.array(sorted(CONTROL_TYPES), _S)))
    picked = pc.indices_nonzero(pc.fill_null(is_control, False)).to_pylist()
    control = head.take(pa.array(picked, _L)).select(
        ["group_id", "ts", "event_type"]).to_pylist()
    for n, event in zip(picked, control, strict=True):
        row = rows[n]
        text = lines[row].decode("utf-8", "replace")
        if event["event_type"] in TXN_ENDS:
            _to_transaction_groups(groups, json.loads(text), (event["ts"], key, row, text))
            continue
        groups[event["group_id"]].events.append((event["ts"], key, row, text))
    return _batch(groups)


def _to_transaction_groups(groups: dict[str | None, _Group], event: dict[str, Any],
                           line: tuple[int, str, int, str]) -> None:
    """A transaction's end goes to each group it committed offsets to (it names no
    `group_id`); it is counted, like any event, where its `group_id` (none) puts it."""
    named = event.get("group_ids")
    for group in named if type(named) is list else ():
        if type(group) is str:
            entry = groups.get(group)
            if entry is None:
                entry = groups[group] = _Group()
            entry.events.append(line)


def chunk_rows(lines: Iterable[bytes], key: str, display_path: str) -> pa.RecordBatch:
    """The Python loop: every line parsed on its own, the malformed ones counted and the first
    `MALFORMED_EXAMPLES` located."""
    groups: dict[str | None, _Group] = {}
    loads = json.loads
    position = 0
    for row, line in enumerate(lines):
        start = position
        position += len(line) + 1
        if not line.strip():
            continue
        try:
            event = loads(line)
        except ValueError:
            event = None
        if type(event) is dict:
            event_type, v, ts = event.get("event_type"), event.get("v"), event.get("ts")
            group = event.get("group_id")
            good = (type(event_type) is str and (v is None or type(v) is int)
                    and (ts is None or type(ts) is int)
                    and (group is None or type(group) is str))
        else:
            good = False
        if not good:
            bad = groups.setdefault(None, _Group())
            bad.count(True, None, None, None)
            if len(bad.malformed) < MALFORMED_EXAMPLES:
                text = line.decode("utf-8", "replace")
                bad.malformed.append((display_path, start, text[:120]))
            continue
        entry = groups.get(group)
        if entry is None:
            entry = groups[group] = _Group()
        entry.count(False, v, event_type, ts)
        if v == JOURNAL_VERSION and ts is not None:
            if event_type == COMMIT:
                if ts > 0:
                    entry.commits.append(ts)
            elif event_type in TXN_ENDS:
                _to_transaction_groups(groups, event,
                                       (ts, key, row, line.decode("utf-8", "replace")))
            elif event_type in CONTROL_TYPES:
                entry.events.append((ts, key, row, line.decode("utf-8", "replace")))
    return _batch(groups)


def _batch(groups: dict[str | None, _Group]) -> pa.RecordBatch:
    names = list(groups)
    values = [groups[g] for g in names]
    return pa.RecordBatch.from_arrays([
        pa.array(names, _S),
        pa.array([g.commits for g in values], pa.list_(_L)),
        pa.array([[{"ts": ts, "file": f, "row": r, "line": text} for ts, f, r, text in g.events]
                  for g in values], pa.list_(EVENT_LINE)),
        pa.array([[{"bad": bad, "v": v, "event_type": t, "n": n, "lo": lo, "hi": hi}
                   for (bad, v, t), (n, lo, hi) in g.tally.items()] for g in values],
                 pa.list_(LINE_TALLY)),
        pa.array([[{"path": p, "position": pos, "text": text} for p, pos, text in g.malformed]
                  for g in values], pa.list_(MALFORMED)),
    ], schema=CHUNK)
