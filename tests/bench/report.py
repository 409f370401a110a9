"""Side-by-side tables: one column per broker, then rebalanced / peer ratios."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    path: tuple[str, ...]
    better: str = ""  # "higher", "lower" or "" (informational)


# Rows per scenario. A path is looked up in a subject's result dict; a dict with "error" on the
# way makes the cell "n/a (error ...)".
ROWS: dict[str, list[Row]] = {
    "dataplane": [
        Row("start to accepting (ms)", ("start", "start_to_accepting_ms"), "lower"),
        Row("produce (msgs/s)", ("produce", "msgs_per_s"), "higher"),
        Row("produce (MB/s)", ("produce", "mb_per_s"), "higher"),
        Row("produce: broker CPU (µs/msg)", ("produce", "broker_cpu_us_per_msg"), "lower"),
        Row("produce: load generator CPU (%)", ("produce", "client_cpu_pct")),
        Row("consume (msgs/s)", ("consume", "msgs_per_s"), "higher"),
        Row("consume (MB/s)", ("consume", "mb_per_s"), "higher"),
        Row("consume: time to first message (ms)", ("consume", "time_to_first_ms"), "lower"),
        Row("consume: broker CPU (µs/msg)", ("consume", "broker_cpu_us_per_msg"), "lower"),
        Row("wake-up latency p50 (ms)", ("latency", "p50_ms"), "lower"),
        Row("wake-up latency p99 (ms)", ("latency", "p99_ms"), "lower"),
        Row("wake-up latency samples", ("latency", "samples")),
        Row("broker RSS after produce (MB)", ("produce", "rss_mb"), "lower"),
    ],
    "heartbeat": [
        Row("heartbeats/s (100 members, closed loop)", ("heartbeats_per_s",), "higher"),
        Row("latency p50 (ms)", ("p50_ms",), "lower"),
        Row("latency p99 (ms)", ("p99_ms",), "lower"),
        Row("broker CPU per heartbeat (µs)", ("broker_cpu_us_per_hb",), "lower"),
        Row("broker CPU (%)", ("broker_cpu_pct",)),
        Row("load generator CPU (%)", ("client_cpu_pct",)),
    ],
    "leave": [
        Row("LeaveGroup -> survivors synced, median (ms)", ("median_ms",), "lower"),
        Row("LeaveGroup -> survivors synced, max (ms)", ("max_ms",), "lower"),
        Row("repeats", ("repeats",)),
    ],
    "session-expiry": [
        Row("last heartbeat -> survivor sees rebalance (ms)", ("observed_ms",)),
        Row("late by, beyond the 6 s session (ms)", ("late_by_ms",), "lower"),
    ],
    "many-groups": [
        Row("groups formed", ("formed",), "higher"),
        Row("setup (s)", ("setup_s",), "lower"),
        Row("broker RSS (MB)", ("rss_mb",), "lower"),
        Row("RSS per group beyond its connection (KB)", ("kb_per_group",), "lower"),
        Row("idle broker CPU over 5 s (%)", ("idle_cpu_pct",), "lower"),
    ],
    "offset-commit": [
        Row("commits/s (10 members, 10 partitions each)", ("commits_per_s",), "higher"),
        Row("offsets/s", ("offsets_per_s",), "higher"),
        Row("latency p50 (ms)", ("p50_ms",), "lower"),
        Row("latency p99 (ms)", ("p99_ms",), "lower"),
        Row("broker CPU per commit (µs)", ("broker_cpu_us_per_commit",), "lower"),
        Row("broker CPU (%)", ("broker_cpu_pct",)),
        Row("load generator CPU (%)", ("client_cpu_pct",)),
        Row("partition errors", ("partition_errors",), "lower"),
    ],
    "down-conversion": [
        # broker CPU per message, each mode reading the same messages
        Row("plain: Fetch v4, magic 2 as stored (µs/msg)", ("plain_v4", "broker_cpu_us_per_msg"),
            "lower"),
        Row("plain: Fetch v3, down-converted to magic 1 (µs/msg)",
            ("plain_v3", "broker_cpu_us_per_msg"), "lower"),
        Row("plain: Fetch v3 CPU / Fetch v4 CPU", ("plain_v3", "cpu_ratio_to_magic2"), "lower"),
        Row("plain: Fetch v1, down-converted to magic 0 (µs/msg)",
            ("plain_v1", "broker_cpu_us_per_msg"), "lower"),
        Row("plain: Fetch v1 CPU / Fetch v4 CPU", ("plain_v1", "cpu_ratio_to_magic2"), "lower"),
        Row("gzip: Fetch v4, magic 2 as stored (µs/msg)", ("gzip_v4", "broker_cpu_us_per_msg"),
            "lower"),
        Row("gzip: Fetch v3, down-converted to magic 1 (µs/msg)",
            ("gzip_v3", "broker_cpu_us_per_msg"), "lower"),
        Row("gzip: Fetch v3 CPU / Fetch v4 CPU", ("gzip_v3", "cpu_ratio_to_magic2"), "lower"),
        Row("gzip: Fetch v1, down-converted to magic 0 (µs/msg)",
            ("gzip_v1", "broker_cpu_us_per_msg"), "lower"),
        Row("gzip: Fetch v1 CPU / Fetch v4 CPU", ("gzip_v1", "cpu_ratio_to_magic2"), "lower"),
    ],
    "offset-recovery": [
        Row("offset records committed", ("records_committed",)),
        Row("commit rate (records/s, pipelined)", ("records_per_s",), "higher"),
        Row("SIGTERM -> exited (s)", ("stop_seconds",), "lower"),
        Row("restart -> accepting (s)", ("start_to_accepting_s",), "lower"),
        Row("restart -> first OffsetFetch answered (s)", ("start_to_first_offset_fetch_s",),
            "lower"),
        Row("RSS after recovery (MB)", ("rss_after_recovery_mb",), "lower"),
        Row("group log before stop (MB)", ("group_log_mb_before",)),
        Row("group log after compaction (MB)", ("group_log_mb_after_compaction",), "lower"),
    ],
}


def storm_rows(sizes: Sequence[int]) -> list[Row]:
    rows: list[Row] = []
    for n in sizes:
        key = str(n)
        rows += [
            Row(f"{n} members: first join -> all synced (ms)", (key, "total_ms"), "lower"),
            Row(f"{n} members: beyond the initial delay (ms)", (key, "beyond_delay_ms")),
            Row(f"{n} members: beyond all deliberate waits (ms)", (key, "overhead_ms"),
                "lower"),
            Row(f"{n} members: broker CPU (ms)", (key, "broker_cpu_ms"), "lower"),
        ]
    return rows


def lookup(result: Any, path: Sequence[str]) -> Any:
    """The value at `path`, or an `_Err` carrying the first error met on the way."""
    node = result
    for key in path:
        if isinstance(node, dict) and "na" in node:
            return _Err(str(node["na"]), na=True)
        if isinstance(node, dict) and "error" in node:
            return _Err(str(node["error"]))
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    if isinstance(node, dict) and "error" in node:
        return _Err(str(node["error"]))
    return node


@dataclass(frozen=True, slots=True)
class _Err:
    message: str
    na: bool = False


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, _Err) and value.na:
        return f"n/a ({value.message})"
    if isinstance(value, _Err):
        text = value.message.replace("\n", " ").replace("|", "/")
        return f"n/a (error: {text[:60]}{'…' if len(text) > 60 else ''})"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 100:
            return f"{value:.0f}"
        if magnitude >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def ratio(ours: Any, theirs: Any) -> str:
    if not isinstance(ours, int | float) or not isinstance(theirs, int | float):
        return "-"
    if isinstance(ours, bool) or isinstance(theirs, bool):
        return "-"
    if theirs == 0:
        return "-"
    value = ours / theirs
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"


def table(scenario: str, rows: Sequence[Row], subjects: Sequence[tuple[str, str]],
          results: dict[str, Any], markdown: bool) -> str:
    """`subjects`: (key in results, column title); rebalanced subjects first."""
    ours = [s for s in subjects if s[0].startswith("rebalanced")]
    peers = [s for s in subjects if not s[0].startswith("rebalanced")]
    header = ["metric", "better"] + [title for _, title in subjects]
    header += [f"{o_key}/{p_key}" for o_key, _ in ours for p_key, _ in peers]
    lines: list[list[str]] = []
    for row in rows:
        values = {key: lookup(results.get(key, {"error": "not run"}), row.path)
                  for key, _ in subjects}
        if all(v is None for v in values.values()):
            continue
        cells = [row.label, {"higher": "↑", "lower": "↓"}.get(row.better, "")]
        cells += [fmt(values[key]) for key, _ in subjects]
        for o_key, _ in ours:
            for p_key, _ in peers:
                cells.append(ratio(values[o_key], values[p_key]) if row.better else "")
        lines.append(cells)
    if markdown:
        out = [f"| {' | '.join(header)} |", "|" + "---|" * len(header)]
        out += [f"| {' | '.join(cells)} |" for cells in lines]
        return "\n".join(out)
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]
    rule = "-+-".join("-" * w for w in widths)
    out = [f"== {scenario} ==", " | ".join(h.ljust(w) for h, w in zip(header, widths,
                                                                           strict=True)), rule]
    for cells in lines:
        out.append(" | ".join(
            (c.ljust(w) if i < 2 else c.rjust(w))
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))))
    return "\n".join(out)
