"""The one-page HTML report and the per-group timeline PNGs, from small collected tables.

Nothing here touches Spark: the job collects the few rows a person reads (pandas frames) and
this module renders them, so the report opens in any browser with no Spark around.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.patches import Patch

if TYPE_CHECKING:
    # Only named in annotations: the timeline renderers import this module and need neither
    # the readers nor the PySpark they import.
    from forensics.reader import Problems

CAUSE_COLOURS = {
    "member_join": "#4c72b0",
    "member_rejoin": "#64b5cd",
    "metadata_change": "#8172b2",
    "member_leave": "#55a868",
    "session_expiry": "#c44e52",
    "rebalance_timeout": "#dd8452",
    "disconnect": "#937860",
    "write_failure": "#da8bc3",
    "member_left": "#c44e52",
    "membership_change": "#8c8c8c",
    "group_empty": "#bbbbbb",
    "rejoin": "#64b5cd",
}
OTHER_COLOUR = "#999999"

# What a report built from the group log alone cannot know (never invented).
NO_JOURNAL_HERE = "This directory has no event journal"
NO_JOURNAL_LIVE = ("No event journal was read (a live cluster's <code>__consumer_offsets</code>, "
                   "over the Kafka protocol; <code>--journal DIR</code> adds a broker's)")
INFERRED_NOTE = (
    ": rebalances are reconstructed from the "
    "<code>__consumer_offsets</code> GroupMetadata records alone. From the records: each "
    "generation's members (member id, static instance id, client id, host), its protocol, "
    "leader and assignment, the time the generation's metadata was written (≈ the end of the "
    "rebalance), partitions moved, and commit timestamps. <b>Not in the records, so not shown</b>: "
    "when a rebalance started, its join and sync phases, the broker's reason, and whether a "
    "member left gracefully or its session expired. Causes marked <i>inferred</i> come from the "
    "membership change between generations; a culprit is named only when exactly one member "
    "joined or left. The commit gap around each new generation bounds the pause from above."
)


@dataclass
class ReportData:
    data_dir: str
    has_journal: bool
    has_group_log: bool
    span: tuple[int | None, int | None]
    counts: dict[str, int]
    rebalances: pd.DataFrame
    worst_groups: pd.DataFrame
    causes: pd.DataFrame
    culprits: pd.DataFrame
    static_restarts: pd.DataFrame
    problems: Problems
    timelines: dict[str, str] = field(default_factory=dict)  # group -> PNG file name
    # `group_write_failed` events (ts, group_ids, records, error); None: not looked for
    write_failures: pd.DataFrame | None = None
    # `group_converted` events (transforms.group_conversions); None: not looked for
    conversions: pd.DataFrame | None = None
    live_source: bool = False  # a cluster's offsets topic, not a directory
    commits_label: str = "partition commits"  # what counts["commits"] counts
    shown_rebalances: int = 50  # per group; every row is in the Parquet table
    detailed_groups: int = 30


def _conversions_section(conversions: pd.DataFrame | None) -> list[str]:
    """Groups that changed type (classic ↔ consumer) with their members; the rebalances
    around each conversion are in the group's own table."""
    if conversions is None or not len(conversions):
        return []
    return ["<h2>Group type conversions</h2>",
            "<p class='meta'>An upgrade keeps the classic members' partitions in the new "
            "consumer group; a downgrade is followed by a rebalance of the classic group.</p>",
            _table(["time", "group", "direction", "generation", "members", "reason",
                    "member"], [
                [fmt_ts(r.ts), html.escape(str(r.group_id)),
                 html.escape(f"{_text(r.direction)}: {_text(r.from_type)} → "
                             f"{_text(r.to_type)}"),
                 _text(_int(r.generation)), _text(_int(r.num_members)),
                 html.escape(_text(r.reason)), html.escape(_text(r.member_id))]
                for r in conversions.sort_values("ts").itertuples()])]


def fmt_ts(ts: Any) -> str:
    if ts is None or pd.isna(ts):
        return "—"
    return datetime.fromtimestamp(int(ts) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def fmt_ms(ms: Any) -> str:
    if ms is None or pd.isna(ms):
        return "—"
    value = int(ms)
    if value < 1000:
        return f"{value} ms"
    if value < 120_000:
        return f"{value / 1000:.1f} s"
    return f"{value / 60_000:.1f} min"


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and math.isnan(value):
        return "—"
    if isinstance(value, list | tuple) or hasattr(value, "tolist"):
        items = list(value)
        return ", ".join(str(v) for v in items) if items else "—"
    return str(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cause_cell(cause: object, inferred: object) -> str:
    name = _text(cause)
    colour = CAUSE_COLOURS.get(name, OTHER_COLOUR)
    tag = " <i>(inferred)</i>" if bool(inferred) else ""
    return (f'<span class="dot" style="background:{colour}"></span>'
            f"{html.escape(name)}{tag}")


def _culprit_cell(row: pd.Series) -> str:
    client = row.get("culprit_client_id")
    if client is None or pd.isna(client):
        return "—"
    parts = [f"<b>{html.escape(str(client))}</b>"]
    host = row.get("culprit_client_host")
    if host is not None and not pd.isna(host):
        parts.append(html.escape(str(host)))
    instance = row.get("culprit_instance_id")
    if instance is not None and not pd.isna(instance):
        parts.append(f"instance {html.escape(str(instance))}")
    member = row.get("culprit_member_id")
    if member is not None and not pd.isna(member):
        parts.append(f'<span class="mono">{html.escape(str(member))}</span>')
    return "<br>".join(parts)


def render_html(data: ReportData) -> str:
    rb = data.rebalances
    paused = rb.loc[rb["outcome"] == "stabilized", "duration_ms"].dropna().sum() \
        if len(rb) else 0
    gap_total = rb["commit_gap_ms"].dropna().sum() if "commit_gap_ms" in rb and len(rb) else 0
    start, end = data.span
    sources = []
    if data.has_journal:
        sources.append("event journal (<code>events/</code>)")
    if data.has_group_log:
        sources.append("group log (<code>__consumer_offsets</code> topic)" if data.live_source
                       else "group log (<code>__consumer_offsets-*</code>)")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>Rebalance forensics</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Rebalance forensics</h1>",
        f"<p class='meta'>Data: <code>{html.escape(data.data_dir)}</code> · sources: "
        f"{' + '.join(sources) or 'none found'} · span {fmt_ts(start)} → {fmt_ts(end)} UTC</p>",
    ]
    if not data.has_journal and data.has_group_log:
        opening = NO_JOURNAL_LIVE if data.live_source else NO_JOURNAL_HERE
        parts.append(f"<div class='note'>{opening}{INFERRED_NOTE}</div>")
    if not data.has_journal and not data.has_group_log:
        parts.append("<div class='note'>"
                     + ("The offsets topic held no records and no event journal was read"
                        if data.live_source else "No event journal and no "
                        "<code>__consumer_offsets-*</code> directory here")
                     + ": nothing to report.</div>")
    parts.append("<div class='cards'>")
    cards = [
        ("groups", str(data.counts.get("groups", 0))),
        ("rebalances", str(len(rb))),
        ("total paused time" if data.has_journal else "total commit gaps",
         fmt_ms(paused if data.has_journal else gap_total)),
        ("members seen", str(data.counts.get("members", 0))),
        (data.commits_label, str(data.counts.get("commits", 0))),
    ]
    for label, value in cards:
        parts.append(f"<div class='card'><div class='v'>{value}</div>"
                     f"<div class='l'>{html.escape(label)}</div></div>")
    parts.append("</div>")
    if data.has_journal:
        parts.append("<p class='meta'>Paused time: from <code>rebalance_started</code> to "
                     "<code>group_stabilized</code>, when the group can consume again (all "
                     "partitions stop for eager assignors; cooperative ones keep most).</p>")

    parts.append("<h2>Worst groups</h2>")
    parts.append(_table(
        ["group", "rebalances", "paused", "longest", "longest commit gap", "top cause"],
        [[f"<a href='#g-{html.escape(str(r.group_id))}'>{html.escape(str(r.group_id))}</a>",
          r.rebalances, fmt_ms(r.paused_ms), fmt_ms(r.longest_ms),
          fmt_ms(r.longest_commit_gap_ms), _cause_cell(r.top_cause, not data.has_journal)]
         for r in data.worst_groups.head(15).itertuples()]))

    parts.append("<h2>Top causes</h2>")
    parts.append(_table(["cause", "rebalances", "paused", "groups"], [
        [_cause_cell(r.cause, r.inferred), r.rebalances, fmt_ms(r.paused_ms), r.groups]
        for r in data.causes.itertuples()]))
    parts.append("<h2>Top culprits</h2>")
    parts.append(_table(["client id", "host", "rebalances caused", "paused", "causes", "groups"], [
        [f"<b>{html.escape(_text(r.culprit_client_id))}</b>",
         html.escape(_text(r.culprit_client_host)), r.rebalances, fmt_ms(r.paused_ms),
         html.escape(_text(r.causes)), r.groups]
        for r in data.culprits.head(15).itertuples()]))

    if len(data.static_restarts):
        parts.append("<h2>Static member restarts</h2>")
        parts.append(_table(["group", "time", "instance", "new client", "rebalance"], [
            [html.escape(str(r.group_id)), fmt_ts(r.ts), html.escape(_text(r.group_instance_id)),
             html.escape(_text(r.client_id)),
             "yes" if r.rebalance else "no — replaced in place"]
            for r in data.static_restarts.itertuples()]))

    failures = data.write_failures
    if failures is not None and len(failures):
        parts.append("<h2>Failed group-log writes</h2>")
        parts.append("<p class='meta'>What waited for these writes was answered with an error "
                     "and undone; the groups in them rebalance.</p>")
        parts.append(_table(["time", "groups", "records", "error"], [
            [fmt_ts(r.ts), html.escape(", ".join(str(g) for g in _list(r.group_ids))),
             html.escape(_text(r.records)), html.escape(_text(r.error))]
            for r in failures.sort_values("ts").itertuples()]))

    parts.extend(_conversions_section(data.conversions))

    parts.append("<h2>Rebalances by group</h2>")
    groups = data.worst_groups["group_id"].tolist() if len(data.worst_groups) else []
    if len(groups) > data.detailed_groups:
        parts.append(f"<p class='meta'>The {data.detailed_groups} worst of {len(groups)} groups;"
                     " every group is in <code>rebalances/</code> (Parquet).</p>")
    for group in groups[:data.detailed_groups]:
        rows = rb[rb["group_id"] == group].sort_values(["end_ts", "start_ts"], na_position="last")
        parts.append(f"<h3 id='g-{html.escape(str(group))}'>{html.escape(str(group))}</h3>")
        png = data.timelines.get(str(group))
        if png:
            alt = f"timeline of {html.escape(str(group))}"
            parts.append(f"<img src='{html.escape(png)}' alt='{alt}'>")
        shown = rows.tail(data.shown_rebalances)
        if len(rows) > len(shown):
            parts.append(f"<p class='meta'>Last {len(shown)} of {len(rows)} rebalances; all are "
                         "in <code>rebalances/</code> (Parquet).</p>")
        # Only for a group with a rebalance during an open transaction (journal only).
        with_transactions = "transactions_open" in shown and bool(
            (shown["transactions_open"].fillna(0) > 0).any())
        parts.append(_table(
            ["generation", "start", "end", "join", "sync", "paused", "cause", "culprit",
             "members", "joined", "removed", "partitions moved", "commit gap"]
            + (["open transactions"] if with_transactions else []),
            [[f"{_text(_int(r['generation_from']))} → {_text(_int(r['generation_to']))}",
              fmt_ts(r["start_ts"]), fmt_ts(r["end_ts"]), fmt_ms(r["join_ms"]),
              fmt_ms(r["sync_ms"]), fmt_ms(r["duration_ms"]) + _restarts(r),
              _cause_cell(r["cause"], r["inferred"]) + _reason(r), _culprit_cell(r),
              f"{_text(_int(r['members_before']))} → {_text(_int(r['members_after']))}",
              html.escape(_text(r["members_joined"])), html.escape(_text(r["members_removed"])),
              _text(_int(r["partitions_moved"])), fmt_ms(r["commit_gap_ms"])]
             + ([_transactions_cell(r)] if with_transactions else [])
             for _, r in shown.iterrows()], cls="rb"))
    parts.append(_problems_html(data.problems))
    parts.append("<p class='meta'>Tables: <code>rebalances/</code>, <code>member_sessions/</code>,"
                 " <code>group_states/</code>, <code>commits/</code> (Parquet) next to this "
                 "file.</p></body></html>")
    return "\n".join(parts)


def _list(value: Any) -> list[Any]:
    return [] if value is None or (not hasattr(value, "__len__") and pd.isna(value)) \
        else list(value)


def _int(value: Any) -> int | None:
    if value is None or pd.isna(value):
        return None
    return int(value)


def _transactions_cell(row: pd.Series) -> str:
    """`2 (1 aborted): app-1, app-2`, or a dash."""
    count = _int(row["transactions_open"]) or 0
    if count == 0:
        return "—"
    aborted = _int(row["transactions_aborted"]) or 0
    text = f"{count}" + (f" ({aborted} aborted)" if aborted else "")
    names = _text(row["transactional_ids"])
    return html.escape(f"{text}: {names}" if names != "—" else text)


def _restarts(row: pd.Series) -> str:
    restarts = row.get("restarts")
    if restarts is None or pd.isna(restarts) or int(restarts) == 0:
        return ""
    return f"<br><small>restarted {int(restarts)} times</small>"


def _reason(row: pd.Series) -> str:
    reason = row.get("reason")
    if reason is None or pd.isna(reason):
        return ""
    return f"<br><small>{html.escape(str(reason)[:160])}</small>"


def _problems_html(problems: Problems) -> str:
    rows: list[list[object]] = []
    if problems.malformed_lines:
        rows.append(["malformed journal lines", problems.malformed_lines,
                     "<br>".join(f"{html.escape(p)} at byte {pos}: <code>{html.escape(t)}</code>"
                                 for p, pos, t in problems.malformed_examples[:10])])
    for event_type, count in sorted(problems.unknown_event_types.items()):
        rows.append([f"unknown event type <code>{html.escape(str(event_type))}</code>", count,
                     "skipped"])
    for version, count in sorted(problems.other_versions.items(), key=lambda kv: str(kv[0])):
        rows.append([f"journal schema version {version}", count, "skipped (this job reads 1)"])
    if problems.corrupt_batches:
        rows.append(["corrupted or unreadable batches", len(problems.corrupt_batches),
                     "<br>".join(f"{html.escape(p)} at byte {pos}: {html.escape(e)}"
                                 for p, pos, e in problems.corrupt_batches[:10])])
    if problems.undecodable_records:
        rows.append(["undecodable records", problems.undecodable_records, "skipped"])
    for version, count in sorted(problems.unknown_record_types.items(), key=lambda kv: kv[0] or 0):
        rows.append([f"record key version {version} (KIP-848 / share groups)", count,
                     "counted, not modelled"])
    if not rows:
        return "<h2>Input problems</h2><p class='meta'>None: every line and batch was read.</p>"
    return "<h2>Input problems</h2>" + _table(["what", "count", "where"], rows)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#222}
h1{margin-bottom:0}h2{margin-top:28px;border-bottom:1px solid #ddd}
.meta{color:#666}.note{background:#fff7e0;border:1px solid #e8c66a;padding:10px;margin:12px 0}
.cards{display:flex;gap:12px;margin:16px 0}.card{border:1px solid #ddd;border-radius:6px;
padding:10px 16px}.card .v{font-size:22px;font-weight:600}.card .l{color:#666}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;
vertical-align:top;text-align:left}th{background:#f4f4f4}table.rb{font-size:12px}
.dot{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:5px}
.mono{font-family:monospace;font-size:11px;color:#555}img{max-width:100%;border:1px solid #eee}
"""


# -- timelines -------------------------------------------------------------------------------


def ready() -> None:
    """Nothing: a renderer process that ran it has imported this module (matplotlib, pandas)."""


def render_timeline(path: Path, group: str, sessions: pd.DataFrame, rebalances: pd.DataFrame,
                    gaps: pd.DataFrame, span: tuple[int, int]) -> None:
    """Members as lanes (their sessions as bars, removals marked with the cause), rebalances as
    bars coloured by cause across all lanes, commit gaps shaded in their own lane."""
    start, end = span
    t0 = start

    def x(ts: object) -> float:
        return (float(ts) - t0) / 1000.0  # type: ignore[arg-type]

    sessions = sessions.sort_values("joined_ts", na_position="first").reset_index(drop=True)
    lanes = len(sessions)
    height = 1.6 + 0.32 * (lanes + 2)
    fig, ax = plt.subplots(figsize=(11, min(height, 14)), dpi=90)
    total = max(x(end), 0.001)
    # Rebalances: one bar per rebalance spanning every lane, coloured by cause.
    for r in rebalances.itertuples():
        r_end = r.end_ts if not pd.isna(r.end_ts) else end
        r_start = r.start_ts if not pd.isna(r.start_ts) else r_end
        width = max(x(r_end) - x(r_start), total * 0.002)
        colour = CAUSE_COLOURS.get(str(r.cause), OTHER_COLOUR)
        ax.axvspan(x(r_start), x(r_start) + width, color=colour, alpha=0.35, lw=0)
    # Commit gaps: the lane at the bottom.
    ax.broken_barh([(x(g.gap_start_ts), x(g.gap_end_ts) - x(g.gap_start_ts))
                    for g in gaps.itertuples()], (-1.4, 0.8), facecolors="#f2b8b5",
                   edgecolors="#c44e52", hatch="///", lw=0.5)
    labels = ["commit gaps"]
    ticks = [-1.0]
    for lane, s in enumerate(sessions.itertuples()):
        joined = s.joined_ts if not pd.isna(s.joined_ts) else start
        left = s.left_ts if not pd.isna(s.left_ts) else end
        ax.broken_barh([(x(joined), max(x(left) - x(joined), total * 0.002))], (lane - 0.3, 0.6),
                       facecolors="#5a5a5a" if not _is_static(s) else "#2a9d8f")
        if not pd.isna(s.left_ts):
            ax.plot([x(left)], [lane], marker="x", color="black", ms=6)
            ax.annotate(_text(s.left_cause), (x(left), lane), xytext=(4, 4),
                        textcoords="offset points", fontsize=7)
        name = _text(s.client_id)
        if not pd.isna(s.group_instance_id) and s.group_instance_id:
            name += f" [{s.group_instance_id}]"
        labels.append(f"{name} {str(s.member_id)[-6:]}")
        ticks.append(lane)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_ylim(-1.8, max(lanes, 1) - 0.2)
    ax.set_xlim(0, total * 1.02)
    ax.set_xlabel(f"seconds since {fmt_ts(start)} UTC")
    ax.set_title(f"group {group}: members, rebalances (by cause) and commit gaps", fontsize=10)
    causes = sorted({str(c) for c in rebalances["cause"].dropna()})
    handles = [Patch(color=CAUSE_COLOURS.get(c, OTHER_COLOUR), alpha=0.5, label=c)
               for c in causes]
    handles.append(Patch(facecolor="#f2b8b5", edgecolor="#c44e52", hatch="///",
                         label="commit gap"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="x", color="#eee")
    # Margins sized from the text they hold: `tight_layout` would draw the figure once more
    # just to measure it, a third of the time a timeline takes.
    width_in, height_in = fig.get_size_inches()
    labels_in = max(len(label) for label in labels) * 8 * 0.6 / 72 + 0.25
    legend_in = max(len(str(h.get_label())) for h in handles) * 7 * 0.6 / 72 + 0.55
    fig.subplots_adjust(left=min(labels_in / width_in, 0.4), right=1 - legend_in / width_in,
                        top=1 - 0.35 / height_in, bottom=0.5 / height_in)
    fig.savefig(path)
    plt.close(fig)


def _is_static(session: object) -> bool:
    instance = getattr(session, "group_instance_id", None)
    return instance is not None and not pd.isna(instance) and bool(instance)
