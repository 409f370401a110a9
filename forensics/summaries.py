"""The report's rankings, from the collected `rebalances` table (pandas, no Spark).

The table is collected anyway (the report lists every group's rebalances), and it is small: a
few rows per rebalance. Ranking it here costs milliseconds, where a Spark job each cost a
scheduling round and a shuffle.
"""

from __future__ import annotations

import pandas as pd


def _paused(rebalances: pd.DataFrame) -> pd.Series:
    """The paused time of rebalances that ended with the group consuming again."""
    return rebalances["duration_ms"].where(rebalances["outcome"] == "stabilized")


def _sum_or_none(values: pd.Series) -> float | None:
    present = values.dropna()
    return float(present.sum()) if len(present) else None


def _counted(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per `keys`: rebalances, paused time (null when none ended stabilized), groups."""
    grouped = frame.groupby(keys, dropna=False, sort=False)
    return pd.DataFrame({
        "rebalances": grouped.size(),
        "paused_ms": grouped["_paused"].sum(min_count=1),
        "groups": grouped["group_id"].nunique(),
    }).reset_index()


def worst_groups(rebalances: pd.DataFrame) -> pd.DataFrame:
    """Per group: rebalances, total and longest pause, longest commit gap, most frequent
    cause; the longest total pause first."""
    columns = ["group_id", "rebalances", "paused_ms", "longest_ms", "longest_commit_gap_ms",
               "top_cause"]
    if rebalances.empty:
        return pd.DataFrame(columns=columns)
    frame = rebalances.assign(_paused=_paused(rebalances))
    rows = []
    for group, part in frame.groupby("group_id", sort=False):
        counts = part["cause"].value_counts(dropna=False)
        top = sorted(counts.items(), key=lambda kv: (-kv[1], "" if pd.isna(kv[0]) else
                                                     "\x00" + str(kv[0])))[0][0]
        rows.append({
            "group_id": group,
            "rebalances": len(part),
            "paused_ms": _sum_or_none(part["_paused"]),
            "longest_ms": part["_paused"].max(),
            "longest_commit_gap_ms": part["commit_gap_ms"].max(),
            "top_cause": None if pd.isna(top) else top,
        })
    out = pd.DataFrame(rows, columns=columns)
    return out.sort_values(["paused_ms", "rebalances", "group_id"],
                           ascending=[False, False, True], na_position="last",
                           kind="stable").reset_index(drop=True)


def top_causes(rebalances: pd.DataFrame) -> pd.DataFrame:
    """Per cause (and whether it was inferred): rebalances, paused time, groups."""
    columns = ["cause", "inferred", "rebalances", "paused_ms", "groups"]
    if rebalances.empty:
        return pd.DataFrame(columns=columns)
    frame = rebalances.assign(_paused=_paused(rebalances))
    out = _counted(frame, ["cause", "inferred"])
    return out.sort_values(["rebalances", "cause"], ascending=[False, True],
                           kind="stable").reset_index(drop=True)[columns]


def top_culprits(rebalances: pd.DataFrame) -> pd.DataFrame:
    """Per culprit client (id and host): rebalances caused, paused time, causes, groups."""
    columns = ["culprit_client_id", "culprit_client_host", "rebalances", "paused_ms", "causes",
               "groups"]
    named = rebalances[rebalances["culprit_client_id"].notna()] if len(rebalances) \
        else rebalances
    if named.empty:
        return pd.DataFrame(columns=columns)
    keys = ["culprit_client_id", "culprit_client_host"]
    frame = named.assign(_paused=_paused(named))
    out = _counted(frame, keys)
    # Each culprit's distinct causes, sorted: deduplicated first, so the per-culprit step
    # only builds lists (one Python call per culprit was most of the time here).
    distinct = (named[[*keys, "cause"]].dropna(subset=["cause"]).astype({"cause": str})
                .drop_duplicates().sort_values("cause"))
    causes = distinct.groupby(keys, dropna=False, sort=False)["cause"].agg(list)
    out = out.merge(causes.rename("causes").reset_index(), on=keys, how="left")
    out["causes"] = [c if isinstance(c, list) else [] for c in out["causes"]]
    return out.sort_values(["rebalances", "culprit_client_id"], ascending=[False, True],
                           kind="stable").reset_index(drop=True)[columns]
