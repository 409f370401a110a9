"""The live group page at `/`: one self-contained HTML document, refreshed by the browser.

What the page shows is copied on the event loop into plain data, bounded by `MAX_GROUPS`,
`MAX_MEMBERS` and `MAX_PARTITIONS`: the endpoint picks the first groups by id a slice of ids at
a time (`first_group_ids`) and copies them a few at a time (`group_view`), so a broker of
100,000 groups never holds its loop for long; `render_parts()` turns that into HTML a group at
a time. No scripts and no external assets: a `<meta http-equiv="refresh">` reloads it, and the
rebalance timeline is inline CSS bars.
"""

from __future__ import annotations

import datetime
import heapq
import struct
from collections.abc import Iterable, Iterator
from html import escape
from itertools import chain
from typing import Any

from coordinator.ops.metrics import BrokerMetrics

MAX_GROUPS = 100
MAX_MEMBERS = 200  # per group
MAX_PARTITIONS = 1000  # lag rows per group
REFRESH_SECONDS = 5


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions of a `consumer` protocol assignment (ConsumerProtocolAssignment)."""
    out: list[tuple[str, int]] = []
    try:
        (topics,) = struct.unpack_from(">i", data, 2)
        pos = 6
        for _ in range(max(min(topics, 100_000), 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos:pos + length].decode("utf-8")
            pos += length
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            partitions = struct.unpack_from(f">{max(count, 0)}i", data, pos)
            pos += 4 * max(count, 0)
            out.extend((topic, p) for p in partitions)
    except (struct.error, UnicodeDecodeError):
        return out
    return sorted(out)


def _classic_group(group: Any) -> dict[str, Any]:
    members = []
    for member in list(group.members.values())[:MAX_MEMBERS]:
        assigned = (decode_assignment(member.assignment)
                    if group.protocol_type == "consumer" else [])
        members.append({"member_id": member.member_id, "client_id": member.client_id,
                        "host": member.client_host, "instance_id": member.group_instance_id,
                        "partitions": assigned})
    return {"group_type": "classic", "state": getattr(group.state, "value", str(group.state)),
            "generation_id": group.generation_id, "protocol_type": group.protocol_type,
            "protocol": group.protocol_name, "leader_id": group.leader_id,
            "member_count": len(group.members), "members": members}


def _consumer_group(group: Any, topic_names: dict[Any, str]) -> dict[str, Any]:
    members = []
    for member in list(group.members.values())[:MAX_MEMBERS]:
        assigned = sorted((topic_names.get(topic_id, str(topic_id)), p)
                          for topic_id, partitions in member.assigned.items()
                          for p in partitions)
        members.append({"member_id": member.member_id, "client_id": member.client_id,
                        "host": member.client_host, "instance_id": member.instance_id,
                        "partitions": assigned, "epoch": member.member_epoch})
    return {"group_type": "consumer", "state": group.state.value,
            "generation_id": group.group_epoch, "protocol_type": "consumer",
            "protocol": None, "leader_id": None, "member_count": len(group.members),
            "members": members}


def first_group_ids(group_ids: Iterable[str], kept: Iterable[str] = ()) -> list[str]:
    """The `MAX_GROUPS` smallest ids of `group_ids` and `kept` (the page lists groups by id):
    called a slice of ids at a time, each time with what the last slice kept."""
    return heapq.nsmallest(MAX_GROUPS, dict.fromkeys(chain(kept, group_ids)))


def topic_names(broker: Any) -> dict[Any, str]:
    consumer = broker.groups.service.consumer
    return {info.topic_id: name for name, info in consumer.image.by_name.items()}


def group_view(broker: Any, metrics: BrokerMetrics, group_id: str, now_ms: int,
               names: dict[Any, str]) -> dict[str, Any] | None:
    """What the page shows of one group, copied into plain data (None: the group is gone)."""
    runtime = broker.groups
    classic = runtime.service.groups.get(group_id)
    if classic is not None:
        out = _classic_group(classic)
    else:
        consumer = runtime.service.consumer.groups.get(group_id)
        if consumer is None:
            return None
        out = _consumer_group(consumer, names)
    owner = {tp: m["client_id"] for m in out["members"] for tp in m["partitions"]}
    lag = []
    for fetched in runtime.offsets.fetch(group_id, None)[:MAX_PARTITIONS]:
        topic = broker.topics.get(fetched.topic)
        end = None
        if topic is not None and 0 <= fetched.partition < len(topic.partitions):
            end = topic.partitions[fetched.partition].log_end_offset
        lag.append({"topic": fetched.topic, "partition": fetched.partition,
                    "committed": fetched.offset, "end": end,
                    "lag": end - fetched.offset if end is not None and fetched.offset >= 0
                    else None,
                    "owner": owner.get((fetched.topic, fetched.partition))})
    history = metrics.history.get(group_id)
    rebalances = [dict(
        started_ms=r.started_ms, generation_id=r.generation_id, reason=r.reason,
        cause=r.cause, member_id=r.member_id, client_id=r.client_id,
        client_host=r.client_host, join_ms=r.join_ms, total_ms=r.total_ms,
        outcome=r.outcome, members=r.members, group_type=r.group_type,
        running_ms=max(now_ms - r.started_ms, 0))
        for r in (history.rebalances if history else ())]
    removed = list(history.removed) if history else []
    out.update(group_id=group_id, lag=lag, rebalances=rebalances, removed=removed)
    return out


def snapshot(broker: Any, metrics: BrokerMetrics, now_ms: int) -> dict[str, Any]:
    """The whole page's data in one go (the endpoint gathers the same in slices)."""
    service = broker.groups.service
    group_ids = first_group_ids(chain(service.groups, service.consumer.groups))
    names = topic_names(broker)
    views = [group_view(broker, metrics, group_id, now_ms, names) for group_id in group_ids]
    return page_data(broker, now_ms, [v for v in views if v is not None],
                     len(service.groups) + len(service.consumer.groups))


def page_data(broker: Any, now_ms: int, groups: list[dict[str, Any]],
              group_count: int) -> dict[str, Any]:
    return {"now_ms": now_ms, "node_id": broker.node_id, "groups": groups,
            "group_count": group_count, "shown": len(groups)}


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d1d1f;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.1em;margin:0}
.muted{color:#6e6e73}.group{background:#fff;border:1px solid #ddd;border-radius:6px;
padding:1em;margin:1em 0}.head{display:flex;gap:1em;align-items:baseline;flex-wrap:wrap}
.state{padding:.1em .6em;border-radius:1em;font-weight:600;font-size:.85em}
.Stable{background:#d4f5dd;color:#11632b}.Empty{background:#eee;color:#555}
.PreparingRebalance,.CompletingRebalance,.Assigning,.Reconciling{background:#fff0c2;
color:#7a5300}
.Dead{background:#fbd5d5;color:#8a1c1c}
table{border-collapse:collapse;margin:.5em 0;font-size:.92em}
th,td{text-align:left;padding:.2em .8em .2em 0;border-bottom:1px solid #eee;vertical-align:top}
th{font-weight:600;color:#444}.num{text-align:right;font-variant-numeric:tabular-nums}
.lag{color:#b3261e;font-weight:600}.why{font-weight:600}
.bar{display:flex;height:12px;min-width:2px;border-radius:2px;overflow:hidden}
.join{background:#e0a800}.sync{background:#1a73e8}.reconcile{background:#2e9d57}.open{background:repeating-linear-gradient(
45deg,#e0a800,#e0a800 4px,#f3d27a 4px,#f3d27a 8px)}
.legend span{display:inline-block;width:10px;height:10px;margin:0 .3em 0 1em;border-radius:2px}
"""


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else escape(str(value))


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%H:%M:%S")


def _ago(ms: int) -> str:
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def _culprit(r: dict[str, Any]) -> str:
    if not r["member_id"] and not r["client_id"]:
        return "-"
    who = escape(r["client_id"] or "?")
    where = f" on {escape(r['client_host'])}" if r["client_host"] else ""
    member = f" <span class=muted>({escape(r['member_id'])})</span>" if r["member_id"] else ""
    return f"{who}{where}{member}"


def _timeline(rebalances: list[dict[str, Any]]) -> str:
    if not rebalances:
        return "<p class=muted>No rebalance since the broker started.</p>"
    longest = max((r["total_ms"] if r["total_ms"] is not None else r["running_ms"])
                  for r in rebalances) or 1
    rows = []
    for r in reversed(rebalances):
        total = r["total_ms"] if r["total_ms"] is not None else r["running_ms"]
        width = max(total / longest * 300, 2)
        if r["outcome"] == "in progress":
            bar = f"<div class='bar open' style='width:{width:.0f}px'></div>"
        elif r.get("group_type") == "consumer":
            bar = (f"<div class=bar style='width:{width:.0f}px'>"
                   f"<div class=reconcile style='width:{width:.0f}px'></div></div>")
        else:
            join = min(r["join_ms"] if r["join_ms"] is not None else total, total)
            join_px = join / max(total, 1) * width
            bar = (f"<div class=bar style='width:{width:.0f}px'>"
                   f"<div class=join style='width:{join_px:.0f}px'></div>"
                   f"<div class=sync style='width:{width - join_px:.0f}px'></div></div>")
        rows.append(
            f"<tr><td>{_when(r['started_ms'])}</td><td class=num>{r['generation_id']}"
            f"&rarr;{r['generation_id'] + 1}</td><td class=why>{escape(r['cause'])}</td>"
            f"<td>{escape(r['reason'])}</td><td>{_culprit(r)}</td>"
            f"<td class=num>{_duration(total)}</td><td>{bar}</td>"
            f"<td>{escape(r['outcome'])}</td></tr>")
    if rebalances[-1].get("group_type") == "consumer":
        # No barrier: members keep consuming what they keep while the others reconcile.
        head = ("<th>group epoch</th><th>cause</th><th>reason</th><th>culprit</th>"
                "<th>reconciling for</th><th>timeline <span class=legend>"
                "<span class=reconcile></span>until every member reconciled</span></th>")
    else:
        head = ("<th>generation</th><th>cause</th><th>reason</th><th>culprit</th>"
                "<th>paused for</th><th>timeline <span class=legend><span class=join></span>"
                "join<span class=sync></span>sync</span></th>")
    return ("<table class=rebalances><tr><th>started (UTC)</th>" + head + "<th>outcome</th>"
            "</tr>" + "".join(rows) + "</table>")


def _group(g: dict[str, Any], now_ms: int) -> str:
    parts = [f"<section class=group id='group-{escape(g['group_id'])}'><div class=head>"
             f"<h2>{escape(g['group_id'])}</h2>"
             f"<span class='state {escape(g['state'])}'>{escape(g['state'])}</span>"
             + (f"<span class=muted>consumer group (KIP-848) &middot; group epoch "
                f"{g['generation_id']} &middot; {g['member_count']} member(s)</span>"
                if g.get("group_type") == "consumer" else
                f"<span class=muted>generation {g['generation_id']} &middot; "
                f"{g['member_count']} member(s) &middot; protocol "
                f"{_text(g['protocol_type'])}/{_text(g['protocol'])}</span>")]
    if g["rebalances"]:
        last = g["rebalances"][-1]
        parts.append(f"<span class=muted>last rebalance {_ago(now_ms - last['started_ms'])}: "
                     f"<b>{escape(last['cause'])}</b></span>")
    parts.append("</div>")
    if g["members"]:
        parts.append("<table class=members><tr><th>client id</th><th>host</th>"
                     "<th>instance id</th><th>partitions</th><th>member id</th></tr>")
        for m in g["members"]:
            assigned = ", ".join(f"{escape(t)}-{p}" for t, p in m["partitions"]) or "-"
            parts.append(f"<tr><td>{_text(m['client_id'])}</td><td>{_text(m['host'])}</td>"
                         f"<td>{_text(m['instance_id'])}</td><td>{assigned}</td>"
                         f"<td class=muted>{_text(m['member_id'])}</td></tr>")
        parts.append("</table>")
        if g["member_count"] > len(g["members"]):
            parts.append(f"<p class=muted>{len(g['members'])} of {g['member_count']} members "
                         "shown.</p>")
    if g["lag"]:
        parts.append("<table class=lag-table><tr><th>topic</th><th>partition</th>"
                     "<th class=num>committed</th><th class=num>log end</th>"
                     "<th class=num>lag</th><th>consumer</th></tr>")
        for row in g["lag"]:
            lag = row["lag"]
            lag_cell = (f"<td class='num{' lag' if lag else ''}'>{_text(lag)}</td>")
            parts.append(f"<tr><td>{escape(row['topic'])}</td><td class=num>{row['partition']}"
                         f"</td><td class=num>{_text(row['committed'])}</td>"
                         f"<td class=num>{_text(row['end'])}</td>{lag_cell}"
                         f"<td>{_text(row['owner'])}</td></tr>")
        parts.append("</table>")
    parts.append(_timeline(g["rebalances"]))
    if g["removed"]:
        removed = "; ".join(
            f"{_when(r['ts_ms'])} {escape(r['client_id'] or r['member_id'])}: "
            f"{escape(r['cause'])}" for r in reversed(g["removed"]))
        parts.append(f"<p class=muted>Members removed: {removed}</p>")
    parts.append("</section>")
    return "".join(parts)


def render_parts(snap: dict[str, Any], parts: list[str]) -> Iterator[None]:
    """The page into `parts`, a group per step (the endpoint gives the event loop back
    between steps)."""
    now_ms = snap["now_ms"]
    more = ""
    if snap["group_count"] > snap["shown"]:
        more = (f"<p class=muted>{snap['shown']} of {snap['group_count']} groups shown "
                "(sorted by name).</p>")
    parts.append(
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<meta http-equiv=refresh content={REFRESH_SECONDS}>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>rebalanced: groups</title><style>{_STYLE}</style></head><body>"
        f"<h1>rebalanced &middot; consumer groups</h1><p class=muted>node {snap['node_id']} "
        f"&middot; {snap['group_count']} group(s) &middot; {_when(now_ms)} UTC &middot; "
        f"refreshes every {REFRESH_SECONDS} s &middot; <a href=/metrics>/metrics</a></p>"
        f"{more}")
    for g in snap["groups"]:
        parts.append(_group(g, now_ms))
        yield
    if not snap["groups"]:
        parts.append("<p class=muted>No groups yet.</p>")
    parts.append("</body></html>")


def render(snap: dict[str, Any]) -> str:
    parts: list[str] = []
    for _ in render_parts(snap, parts):
        pass
    return "".join(parts)
