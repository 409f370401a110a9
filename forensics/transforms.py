"""Pure DataFrame transforms: journal events and group-log records in, forensics tables out.

Every function takes DataFrames and returns one; none reads files, and only
`commit_gaps_around` collects (the rebalances' times, to look commits up where they are), so
each is tested on tiny frames. Inputs:

* `events`: the journal (`schema.JOURNAL_FIELDS` columns) plus `file` and `row`, which order
  events that share a millisecond (`reader.read_journal`).
* `records`: the decoded group log (`schema.GROUP_LOG_DDL`).

Times are epoch milliseconds throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F

START = "rebalance_started"
ENDS = ("group_stabilized", "group_empty", "group_dead")
OUTCOME = {"group_stabilized": "stabilized", "group_empty": "empty", "group_dead": "dead"}

_MEMBER = ("ts", "member_id", "group_instance_id", "client_id", "client_host", "cause")


def _outcome(end_type: Column) -> Column:
    mapped = F.when(F.lit(False), F.lit(None).cast("string"))
    for event_type, outcome in OUTCOME.items():
        mapped = mapped.when(end_type == event_type, F.lit(outcome))
    return mapped.otherwise(end_type)


def _first(array: Column) -> Column:
    """The first element, or null for an empty array (never an index error)."""
    return F.try_element_at(array, F.lit(1))


def _in_order(*partition: str) -> WindowSpec:
    return Window.partitionBy(*partition).orderBy("ts", "file", "row")


def _member_struct(cause: Column) -> Column:
    return F.struct(F.col("ts"), F.col("member_id"), F.col("group_instance_id"),
                    F.col("client_id"), F.col("client_host"), cause.alias("cause"))


def rebalances_from_journal(events: DataFrame) -> DataFrame:
    """One row per rebalance: from a `rebalance_started` that opens one (not a restart of an
    open one) to the `group_stabilized`/`group_empty`/`group_dead` that closes it
    (docs/events.md §5). Open rebalances have a null `end_ts`."""
    relevant = events.filter(F.col("group_id").isNotNull() & F.col("event_type").isin(
        START, "join_completed", "member_added", "member_removed", *ENDS))
    w = _in_order("group_id")
    boundary = F.when(F.col("event_type").isin(START, *ENDS), F.col("event_type"))
    is_start = F.col("event_type") == START
    marked = (
        relevant
        .withColumn("prev_boundary", F.last(boundary, ignorenulls=True).over(
            w.rowsBetween(Window.unboundedPreceding, -1)))
        .withColumn("inside", F.coalesce(F.col("prev_boundary") == START, F.lit(False)))
        .withColumn("opens", is_start & ~F.col("inside"))
        .withColumn("closes", F.col("event_type").isin(*ENDS) & F.col("inside"))
        .withColumn("rb", F.sum(F.col("opens").cast("int")).over(
            w.rowsBetween(Window.unboundedPreceding, 0)))
        # A member event just before an opening start is that rebalance's cause (the core
        # emits the removal, then the start): attribute it to the next rebalance, and keep it
        # only if it happened in the same millisecond as that start (filtered below).
        .withColumn("rb", F.when(F.col("event_type").startswith("member_") & ~F.col("inside"),
                                 F.col("rb") + 1).otherwise(F.col("rb")))
    )
    is_member_added = F.col("event_type") == "member_added"
    is_member_removed = F.col("event_type") == "member_removed"
    grouped = marked.groupBy("group_id", "rb").agg(
        F.max(F.when(F.col("opens"), F.struct(
            "ts", "generation", "from_state", "reason", "cause", "member_id", "client_id",
            "client_host"))).alias("first"),
        F.sum(is_start.cast("int")).alias("starts"),
        F.max(F.when((F.col("event_type") == "join_completed") & F.col("inside"),
                     F.struct("ts", "generation", "num_members", "protocol_name",
                              "leader_id"))).alias("join"),
        F.max(F.when(F.col("closes"), F.struct("ts", "event_type", "generation",
                                               "num_members"))).alias("end"),
        F.collect_list(F.when(is_member_added, _member_struct(F.lit(None).cast("string"))))
        .alias("added"),
        F.collect_list(F.when(is_member_removed, _member_struct(F.col("cause"))))
        .alias("removed"),
    ).filter(F.col("first").isNotNull())
    start_ts = F.col("first.ts")
    end_ts = F.col("end.ts")

    def during(name: str) -> Column:
        return F.filter(F.col(name), lambda m: (m["ts"] >= start_ts)
                        & (end_ts.isNull() | (m["ts"] <= end_ts)))

    culprit = F.col("first.member_id")
    out = (
        grouped
        .withColumn("added", during("added"))
        .withColumn("removed", during("removed"))
        .withColumn("culprit_instance", _first(F.filter(
            F.concat("added", "removed"), lambda m: m["member_id"] == culprit))
            .getField("group_instance_id"))
        .select(
            "group_id",
            F.col("first.generation").alias("generation_from"),
            F.coalesce(F.col("end.generation"), F.col("join.generation"))
            .alias("generation_to"),
            start_ts.alias("start_ts"),
            end_ts.alias("end_ts"),
            (F.col("join.ts") - start_ts).alias("join_ms"),
            F.when(F.col("end.event_type") == "group_stabilized", end_ts - F.col("join.ts"))
            .alias("sync_ms"),
            (end_ts - start_ts).alias("duration_ms"),
            F.coalesce(F.col("end.event_type"), F.lit("open")).alias("outcome"),
            F.col("first.cause").alias("cause"),
            F.col("first.reason").alias("reason"),
            culprit.alias("culprit_member_id"),
            F.col("culprit_instance").alias("culprit_instance_id"),
            F.col("first.client_id").alias("culprit_client_id"),
            F.col("first.client_host").alias("culprit_client_host"),
            F.col("first.from_state").alias("from_state"),
            F.coalesce(F.col("end.num_members"), F.col("join.num_members"))
            .alias("members_after"),
            F.col("join.protocol_name").alias("protocol"),
            (F.col("starts") - 1).alias("restarts"),
            F.transform("added", lambda m: m["client_id"]).alias("members_joined"),
            F.transform("removed", lambda m: F.concat_ws(":", m["client_id"], m["cause"]))
            .alias("members_removed"),
        )
        .withColumn("outcome", _outcome(F.col("outcome")))
    )
    by_start = Window.partitionBy("group_id").orderBy("start_ts")
    return (out
            .withColumn("members_before", F.coalesce(
                F.lag("members_after").over(by_start),
                F.when(F.col("from_state") == "Empty", F.lit(0))))
            .withColumn("inferred", F.lit(False))
            .withColumn("source", F.lit("journal")))


TARGET = "target_assignment_computed"
RECONCILED = "member_reconciled"
_CONSUMER_CAUSE = {"leave": "member_leave"}  # else the removal cause itself


def rebalances_from_consumer_groups(events: DataFrame) -> DataFrame:
    """Consumer groups (KIP-848, docs/events.md §4) have no group-wide barrier: one row per
    new group epoch, from its `target_assignment_computed` to the last `member_reconciled`
    with `member_state` `stable` at that epoch before the next epoch's target (null while no
    member has reconciled: `open`). The membership change is the member events since the
    previous target; the cause is that change (`member_join`, `member_leave`, or the removal
    cause), else `assignment_change` (a subscription or topic metadata change). Join and
    sync phases do not exist here and stay null; `partitions_moved` is the event's own."""
    consumer = events.filter(F.col("group_id").isNotNull() & F.col("event_type").isin(
        TARGET, RECONCILED, "member_added", "member_removed"))
    w = _in_order("group_id")
    targets_so_far = F.sum((F.col("event_type") == TARGET).cast("int")).over(
        w.rowsBetween(Window.unboundedPreceding, 0))
    # A membership change leads to the next target: count it with that one.
    is_change = F.col("event_type").isin("member_added", "member_removed")
    marked = consumer.withColumn("rb", targets_so_far).withColumn(
        "rb", F.when(is_change, F.col("rb") + 1)
        .otherwise(F.col("rb")))
    grouped = marked.groupBy("group_id", "rb").agg(
        F.max(F.when(F.col("event_type") == TARGET, F.struct(
            "ts", "generation", "reason", "member_id", "num_members", "assignor",
            "moved_partitions"))).alias("target"),
        F.collect_list(F.when(F.col("event_type") == RECONCILED, F.struct(
            "ts", "generation", "member_state"))).alias("steps"),
        F.collect_list(F.when(F.col("event_type") == "member_added",
                              _member_struct(F.lit(None).cast("string")))).alias("added"),
        F.collect_list(F.when(F.col("event_type") == "member_removed",
                              _member_struct(F.col("cause")))).alias("removed"),
    ).filter(F.col("target").isNotNull())
    epoch = F.col("target.generation")
    start_ts = F.col("target.ts")
    stable = F.filter("steps", lambda s: (s["member_state"] == "stable")
                      & (s["generation"] == epoch) & (s["ts"] >= start_ts))
    end_ts = F.array_max(F.transform(stable, lambda s: s["ts"]))
    culprit = F.col("target.member_id")
    culprit_event = _first(F.filter(F.concat("added", "removed"),
                                    lambda m: m["member_id"] == culprit))
    removal = _first(F.col("removed")).getField("cause")
    cause = (F.when(F.size("added") > 0, F.lit("member_join"))
             .when(F.size("removed") > 0, F.coalesce(
                 F.create_map(*[F.lit(x) for kv in _CONSUMER_CAUSE.items() for x in kv])
                 [removal], removal))
             .otherwise(F.lit("assignment_change")))
    by_start = Window.partitionBy("group_id").orderBy("start_ts")
    out = grouped.select(
        "group_id",
        epoch.alias("generation_to"),
        start_ts.alias("start_ts"),
        end_ts.alias("end_ts"),
        F.lit(None).cast("long").alias("join_ms"),
        F.lit(None).cast("long").alias("sync_ms"),
        (end_ts - start_ts).alias("duration_ms"),
        F.when(end_ts.isNotNull(), F.lit("stabilized")).otherwise(F.lit("open"))
        .alias("outcome"),
        cause.alias("cause"),
        F.col("target.reason").alias("reason"),
        culprit.alias("culprit_member_id"),
        culprit_event.getField("group_instance_id").alias("culprit_instance_id"),
        culprit_event.getField("client_id").alias("culprit_client_id"),
        culprit_event.getField("client_host").alias("culprit_client_host"),
        F.lit(None).cast("string").alias("from_state"),
        F.col("target.num_members").alias("members_after"),
        F.col("target.assignor").alias("protocol"),
        F.lit(None).cast("long").alias("restarts"),
        F.transform("added", lambda m: m["client_id"]).alias("members_joined"),
        F.transform("removed", lambda m: F.concat_ws(":", m["client_id"], m["cause"]))
        .alias("members_removed"),
        F.col("target.moved_partitions").cast("long").alias("partitions_moved"),
    )
    return (out
            .withColumn("generation_from", F.lag("generation_to").over(by_start))
            .withColumn("members_before", F.lag("members_after").over(by_start))
            .withColumn("inferred", F.lit(False))
            .withColumn("source", F.lit("journal")))


def with_consumer_groups(rebalances: DataFrame, events: DataFrame) -> DataFrame:
    """The classic groups' rebalances and the consumer groups' epochs in one table."""
    consumer = rebalances_from_consumer_groups(events)
    return rebalances.unionByName(consumer.drop("partitions_moved"))


def consumer_partitions_moved(events: DataFrame) -> DataFrame:
    """(group_id, generation, partitions_moved) of consumer groups, from their journal."""
    return events.filter(F.col("event_type") == TARGET).select(
        "group_id", "generation", F.col("moved_partitions").cast("long")
        .alias("partitions_moved"))


def member_sessions(events: DataFrame) -> DataFrame:
    """One row per member: when it joined (or was put in place by a static restart), when it
    left and why. Members present before the journal starts have a null `joined_ts`."""
    added = events.filter(F.col("event_type") == "member_added").select(
        "group_id", "member_id", "group_instance_id", "client_id", "client_host",
        F.col("ts").alias("joined_ts"), F.col("generation").alias("joined_generation"),
        F.lit("join").alias("joined_how"))
    replaced = events.filter(F.col("event_type") == "static_member_replaced").select(
        "group_id", "member_id", "group_instance_id", "client_id", "client_host",
        F.col("ts").alias("joined_ts"), F.col("generation").alias("joined_generation"),
        F.lit("static_restart").alias("joined_how"))
    starts = added.unionByName(replaced).dropDuplicates(["group_id", "member_id"])
    removed = events.filter(F.col("event_type") == "member_removed").select(
        "group_id", "member_id",
        F.col("group_instance_id").alias("r_instance"), F.col("client_id").alias("r_client"),
        F.col("client_host").alias("r_host"), F.col("ts").alias("left_ts"),
        F.col("generation").alias("left_generation"), F.col("cause").alias("left_cause"),
        F.col("reason").alias("left_reason")).dropDuplicates(["group_id", "member_id"])
    joined = starts.join(removed, ["group_id", "member_id"], "full_outer")
    return joined.select(
        "group_id", "member_id",
        F.coalesce("group_instance_id", "r_instance").alias("group_instance_id"),
        F.coalesce("client_id", "r_client").alias("client_id"),
        F.coalesce("client_host", "r_host").alias("client_host"),
        "joined_ts", "joined_generation", "joined_how", "left_ts", "left_generation",
        "left_cause", "left_reason",
        (F.col("left_ts") - F.col("joined_ts")).alias("session_ms"),
    )


def group_states(events: DataFrame, data_end_ts: Column) -> DataFrame:
    """Time each group spent in each state; the last state runs to `data_end_ts`."""
    changes = events.filter(F.col("group_id").isNotNull() & F.col("to_state").isNotNull())
    w = _in_order("group_id")
    spans = changes.withColumn("next_ts", F.lead("ts").over(w)).withColumn(
        "span_ms", F.greatest(F.coalesce(F.col("next_ts"), data_end_ts) - F.col("ts"),
                              F.lit(0)))
    return spans.groupBy("group_id", F.col("to_state").alias("state")).agg(
        F.sum("span_ms").alias("total_ms"), F.count(F.lit(1)).alias("entered"))


def commit_times(events: DataFrame | None, records: DataFrame | None) -> DataFrame | None:
    """(group_id, ts) of every commit: journal `offsets_committed` lines and group-log commit
    timestamps. Not deduplicated (that would shuffle every commit): a millisecond may repeat."""
    parts = []
    if events is not None:
        parts.append(events.filter(F.col("event_type") == "offsets_committed")
                     .select("group_id", "ts"))
    if records is not None:
        parts.append(offset_commits(records).select(
            "group_id", F.col("commit_timestamp").alias("ts")))
    if not parts:
        return None
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union.filter(F.col("ts").isNotNull() & (F.col("ts") > 0))


def offset_commits(records: DataFrame) -> DataFrame:
    return records.filter((F.col("record_type") == "offset_commit") & ~F.col("tombstone"))


def commits(records: DataFrame, data_end_ts: Column) -> DataFrame:
    """Per group and partition: commits, rate, staleness and the longest gap between commits."""
    rows = offset_commits(records).select(
        "group_id", "topic", "partition", "committed_offset",
        F.col("commit_timestamp").alias("ts"), "offset")
    w = Window.partitionBy("group_id", "topic", "partition").orderBy("ts", "offset")
    gaps = rows.withColumn("gap_ms", F.col("ts") - F.lag("ts").over(w))
    agg = gaps.groupBy("group_id", "topic", "partition").agg(
        F.count(F.lit(1)).alias("commits"),
        F.min("ts").alias("first_commit_ts"),
        F.max("ts").alias("last_commit_ts"),
        F.max(F.struct("ts", "offset", "committed_offset")).getField("committed_offset")
        .alias("last_committed_offset"),
        F.max("gap_ms").alias("max_gap_ms"),
    )
    span_s = (F.col("last_commit_ts") - F.col("first_commit_ts")) / 1000.0
    return agg.select(
        "*",
        F.when(span_s > 0, (F.col("commits") - 1) / span_s).alias("commits_per_s"),
        (data_end_ts - F.col("last_commit_ts")).alias("staleness_ms"),
    )


def commit_gaps_around(rebalances: DataFrame, times: DataFrame) -> DataFrame:
    """Add the commit gap around each rebalance: from the group's last commit at or before the
    rebalance started (or ended, when its start is unknown) to its first commit at or after
    the rebalance ended. This is the pause as the consumers' commits show it.

    Rebalances are few and commits many: the rebalances' start and end times (collected, a few
    bytes each) go to every task, which looks up the nearest commits of its own share with a
    binary search; only one candidate per rebalance and task is then shuffled. Commits are
    never sorted or moved as a whole."""
    keyed = rebalances.withColumn("_rid", F.row_number().over(Window.partitionBy(
        "group_id").orderBy("start_ts", "end_ts", "generation_to")))
    marks = [(r["group_id"], r["_rid"], r["at"], r["end_ts"]) for r in keyed.select(
        "group_id", "_rid", F.coalesce("start_ts", "end_ts").alias("at"), "end_ts").collect()]
    nearest = times.mapInPandas(_nearest_commits(marks),
                                "group_id STRING, _rid INT, before BIGINT, after BIGINT")
    found = nearest.groupBy("group_id", "_rid").agg(
        F.max("before").alias("gap_start_ts"), F.min("after").alias("gap_end_ts"))
    return (keyed.join(found, ["group_id", "_rid"], "left")
            .withColumn("commit_gap_ms", F.col("gap_end_ts") - F.col("gap_start_ts"))
            .drop("_rid"))


def _nearest_commits(marks: list[tuple[str, int, int | None, int | None]]
                     ) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """For `mapInPandas`: per task, each rebalance's last commit at or before its start (a
    commit in the start's millisecond counts as before) and first commit at or after its end
    (one in the end's millisecond counts as after), among the commits the task reads."""
    by_group: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    rows = pd.DataFrame(marks, columns=["group_id", "rid", "at", "end"])
    for group, part in rows.groupby("group_id", sort=False):
        by_group[str(group)] = (part["rid"].to_numpy(np.int32),
                                part["at"].to_numpy(np.float64),
                                part["end"].to_numpy(np.float64))

    def nearest(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        commits: dict[str, list[np.ndarray]] = {}
        for batch in batches:
            for group, part in batch.groupby("group_id", sort=False):
                if group in by_group:
                    commits.setdefault(str(group), []).append(part["ts"].to_numpy(np.int64))
        for group, chunks in commits.items():
            ts = np.sort(np.concatenate(chunks))
            rid, at, end = by_group[group]
            with np.errstate(invalid="ignore"):
                i = np.searchsorted(ts, at, side="right") - 1
                j = np.searchsorted(ts, end, side="left")
            has_before = ~np.isnan(at) & (i >= 0)
            has_after = ~np.isnan(end) & (j < len(ts))
            before = pd.array(np.where(has_before, ts[np.clip(i, 0, len(ts) - 1)], 0),
                              dtype="Int64")
            after = pd.array(np.where(has_after, ts[np.clip(j, 0, len(ts) - 1)], 0),
                             dtype="Int64")
            before[~has_before] = pd.NA
            after[~has_after] = pd.NA
            keep = has_before | has_after
            yield pd.DataFrame({"group_id": group, "_rid": rid[keep],
                                "before": before[keep], "after": after[keep]})

    return nearest


def group_generations(records: DataFrame) -> DataFrame:
    """The last GroupMetadata record of each (group, generation): who was in it and who owned
    which partition."""
    meta = records.filter((F.col("record_type") == "group_metadata") & ~F.col("tombstone"))
    w = Window.partitionBy("group_id", "generation").orderBy(
        F.col("log_partition").desc(), F.col("offset").desc())
    return (meta.withColumn("_n", F.row_number().over(w)).filter(F.col("_n") == 1)
            .select("group_id", "generation", F.col("timestamp").alias("ts"), "protocol_type",
                    "protocol", "leader", "members", "offset"))


def partitions_moved(generations: DataFrame) -> DataFrame:
    """(group_id, generation, partitions_moved): topic-partitions whose owner (static instance
    id, else member id) differs from the previous generation's, including newly assigned and
    no longer assigned ones."""
    owners = generations.select(
        "group_id", "generation", F.explode_outer("members").alias("m")).select(
        "group_id", "generation",
        F.coalesce("m.group_instance_id", "m.member_id").alias("owner"),
        F.explode_outer("m.assignment").alias("a")).select(
        "group_id", "generation", "owner", F.col("a.topic").alias("topic"),
        F.col("a.partition").alias("partition"))
    order = Window.partitionBy("group_id").orderBy("generation")
    gens = generations.select("group_id", "generation").distinct().withColumn(
        "next_generation", F.lead("generation").over(order))
    current = owners.filter(F.col("topic").isNotNull())
    previous = (current.join(gens, ["group_id", "generation"])
                .filter(F.col("next_generation").isNotNull())
                .select("group_id", F.col("next_generation").alias("generation"), "topic",
                        "partition", F.col("owner").alias("prev_owner")))
    compared = current.join(previous, ["group_id", "generation", "topic", "partition"],
                            "full_outer")
    moved = compared.groupBy("group_id", "generation").agg(F.sum(
        F.when(F.col("owner").eqNullSafe(F.col("prev_owner")), 0).otherwise(1))
        .alias("partitions_moved"))
    return gens.select("group_id", "generation").join(moved, ["group_id", "generation"],
                                                      "left").fillna(0, ["partitions_moved"])


def rebalances_from_group_log(generations: DataFrame) -> DataFrame:
    """Rebalances as the group log alone shows them (a Kafka log directory without a journal):
    each new generation of a group is the end of one. The start, the phases and the reason are
    not in the records; the cause is inferred from the membership change and marked so."""
    order = Window.partitionBy("group_id").orderBy("generation")

    def identity(m: Column) -> Column:  # a restarted static member is the same member
        return F.coalesce(m["group_instance_id"], m["member_id"])

    no_members = F.filter("members", lambda m: F.lit(False))  # typed empty array
    with_prev = (generations
                 .withColumn("prev_members", F.lag("members").over(order))
                 .withColumn("generation_from", F.lag("generation").over(order))
                 .withColumn("ids", F.transform("members", identity))
                 .withColumn("prev_ids", F.transform(
                     F.coalesce(F.col("prev_members"), no_members), identity)))
    joined = F.filter("members", lambda m: ~F.array_contains(F.col("prev_ids"), identity(m)))
    removed = F.filter(F.coalesce(F.col("prev_members"), no_members),
                       lambda m: ~F.array_contains(F.col("ids"), identity(m)))
    staged = with_prev.withColumn("joined", joined).withColumn("left", removed)
    n_joined, n_left = F.size("joined"), F.size("left")
    cause = (F.when(F.size("members") == 0, "group_empty")
             .when((n_joined > 0) & (n_left == 0), "member_join")
             .when((n_joined == 0) & (n_left > 0), "member_left")
             .when((n_joined > 0) & (n_left > 0), "membership_change")
             .otherwise("rejoin"))
    single = F.when(n_joined + n_left == 1,
                    F.coalesce(_first(F.col("joined")), _first(F.col("left"))))
    return staged.select(
        "group_id",
        F.col("generation_from"),
        F.col("generation").alias("generation_to"),
        F.lit(None).cast("long").alias("start_ts"),
        F.col("ts").alias("end_ts"),
        F.lit(None).cast("long").alias("join_ms"),
        F.lit(None).cast("long").alias("sync_ms"),
        F.lit(None).cast("long").alias("duration_ms"),
        F.when(F.size("members") == 0, "empty").otherwise("stabilized").alias("outcome"),
        cause.alias("cause"),
        F.lit(None).cast("string").alias("reason"),
        single.getField("member_id").alias("culprit_member_id"),
        single.getField("group_instance_id").alias("culprit_instance_id"),
        single.getField("client_id").alias("culprit_client_id"),
        single.getField("client_host").alias("culprit_client_host"),
        F.lit(None).cast("string").alias("from_state"),
        F.size("members").alias("members_after"),
        F.col("protocol"),
        F.lit(None).cast("long").alias("restarts"),
        F.transform("joined", lambda m: m["client_id"]).alias("members_joined"),
        F.transform("left", lambda m: m["client_id"]).alias("members_removed"),
        F.when(F.col("prev_members").isNotNull(), F.size("prev_members"))
        .alias("members_before"),
        F.lit(True).alias("inferred"),
        F.lit("group_log").alias("source"),
    ).filter(F.col("generation_to") > 0)


def with_partitions_moved(rebalances: DataFrame, moved: DataFrame | None) -> DataFrame:
    """`moved` (group_id, generation, partitions_moved): from the group log's assignments,
    and for consumer groups from their `target_assignment_computed` events."""
    if moved is None:
        return rebalances.withColumn("partitions_moved", F.lit(None).cast("long"))
    return rebalances.join(
        moved.select("group_id", F.col("generation").alias("generation_to"),
                     F.col("partitions_moved").cast("long")),
        ["group_id", "generation_to"], "left")


def static_restarts(events: DataFrame) -> DataFrame:
    """Static members replaced in place; `rebalance` false means the restart cost nothing."""
    return events.filter(F.col("event_type") == "static_member_replaced").select(
        "group_id", "ts", "generation", "group_instance_id", "old_member_id", "member_id",
        "client_id", "client_host", "rebalance")


def write_failures(events: DataFrame) -> DataFrame:
    """Failed group-log writes: when, which groups' records were in them, and the error."""
    return events.filter(F.col("event_type") == "group_write_failed").select(
        "ts", "group_ids", "records", "error")


def group_conversions(events: DataFrame) -> DataFrame:
    """Groups that changed type with their members (`group_converted`): classic to consumer
    (upgrade) or back (downgrade), at which epoch, with how many members, and why."""
    return events.filter(F.col("event_type") == "group_converted").select(
        "ts", "group_id", "generation", "direction", "from_type", "to_type", "num_members",
        "reason", "member_id")


def worst_groups(rebalances: DataFrame) -> DataFrame:
    """Per group: rebalances, total and longest pause, most frequent cause."""
    paused = F.when(F.col("outcome") == "stabilized", F.col("duration_ms"))
    per_cause = rebalances.groupBy("group_id", "cause").agg(F.count(F.lit(1)).alias("n"))
    top = per_cause.withColumn("_r", F.row_number().over(
        Window.partitionBy("group_id").orderBy(F.col("n").desc(), "cause"))).filter(
        F.col("_r") == 1).select("group_id", F.col("cause").alias("top_cause"))
    return rebalances.groupBy("group_id").agg(
        F.count(F.lit(1)).alias("rebalances"),
        F.sum(paused).alias("paused_ms"),
        F.max(paused).alias("longest_ms"),
        F.max("commit_gap_ms").alias("longest_commit_gap_ms"),
    ).join(top, "group_id", "left").orderBy(
        F.col("paused_ms").desc_nulls_last(), F.col("rebalances").desc(), "group_id")


def top_causes(rebalances: DataFrame) -> DataFrame:
    paused = F.when(F.col("outcome") == "stabilized", F.col("duration_ms"))
    return rebalances.groupBy("cause", "inferred").agg(
        F.count(F.lit(1)).alias("rebalances"), F.sum(paused).alias("paused_ms"),
        F.countDistinct("group_id").alias("groups")).orderBy(
        F.col("rebalances").desc(), "cause")


def top_culprits(rebalances: DataFrame) -> DataFrame:
    paused = F.when(F.col("outcome") == "stabilized", F.col("duration_ms"))
    return rebalances.filter(F.col("culprit_client_id").isNotNull()).groupBy(
        "culprit_client_id", "culprit_client_host").agg(
        F.count(F.lit(1)).alias("rebalances"), F.sum(paused).alias("paused_ms"),
        F.collect_set("cause").alias("causes"),
        F.countDistinct("group_id").alias("groups")).orderBy(
        F.col("rebalances").desc(), "culprit_client_id")


def member_sessions_from_group_log(generations: DataFrame) -> DataFrame:
    """Member sessions as the group log alone shows them: first and last generation a member
    (static instance id, else member id) appears in, and the generation it was gone from.
    Times are those of the GroupMetadata records, so a join time is an upper bound."""
    seen = generations.select("group_id", "generation", "ts",
                              F.explode("members").alias("m")).select(
        "group_id", "generation", "ts",
        F.coalesce("m.group_instance_id", "m.member_id").alias("identity"),
        F.col("m.member_id").alias("member_id"),
        F.col("m.group_instance_id").alias("group_instance_id"),
        F.col("m.client_id").alias("client_id"), F.col("m.client_host").alias("client_host"))
    spans = seen.groupBy("group_id", "identity").agg(
        F.min("generation").alias("joined_generation"), F.min("ts").alias("joined_ts"),
        F.max("generation").alias("last_generation"),
        F.max(F.struct("generation", "member_id", "group_instance_id", "client_id",
                       "client_host")).alias("last"))
    order = Window.partitionBy("group_id").orderBy("generation")
    following = generations.select("group_id", "generation", "ts").withColumn(
        "next_generation", F.lead("generation").over(order)).withColumn(
        "next_ts", F.lead("ts").over(order))
    joined = spans.join(following.select(
        "group_id", F.col("generation").alias("last_generation"), "next_generation",
        "next_ts"), ["group_id", "last_generation"], "left")
    return joined.select(
        "group_id", F.col("last.member_id").alias("member_id"),
        F.col("last.group_instance_id").alias("group_instance_id"),
        F.col("last.client_id").alias("client_id"),
        F.col("last.client_host").alias("client_host"),
        "joined_ts", "joined_generation", F.lit("inferred").alias("joined_how"),
        F.col("next_ts").alias("left_ts"), F.col("next_generation").alias("left_generation"),
        F.when(F.col("next_generation").isNotNull(), F.lit("inferred: absent from the next "
                                                          "generation")).alias("left_cause"),
        F.lit(None).cast("string").alias("left_reason"),
        (F.col("next_ts") - F.col("joined_ts")).alias("session_ms"),
    )
