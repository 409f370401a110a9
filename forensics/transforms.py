"""Pure DataFrame transforms over the group log: decoded records in, forensics tables out.

Every function takes DataFrames and returns one; none reads files or collects, so each is
tested on tiny frames. `records` are the decoded group log (`schema.GROUP_LOG_DDL`);
`rebalances` come from the journal pass (`journal_pass`) or from the group log alone
(`rebalances_from_group_log`). The journal's own tables are made by `journal_pass`.

Times are epoch milliseconds throughout.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from forensics.journal_pass import DRAWN_GAP_MEDIANS, DRAWN_GAP_MIN_MS


def _first(array: Column) -> Column:
    """The first element, or null for an empty array (never an index error)."""
    return F.try_element_at(array, F.lit(1))


def commit_times(records: DataFrame) -> DataFrame:
    """(group_id, ts) of every commit record in the group log. Not deduplicated (that would
    shuffle every commit): a millisecond may repeat."""
    return offset_commits(records).select(
        "group_id", F.col("commit_timestamp").alias("ts")).filter(
        F.col("ts").isNotNull() & (F.col("ts") > 0))


def offset_commits(records: DataFrame) -> DataFrame:
    return records.filter((F.col("record_type") == "offset_commit") & ~F.col("tombstone"))


def partition_commit_times(records: DataFrame) -> DataFrame:
    """(group_id, topic, partition, ts) of every commit record in the group log."""
    return offset_commits(records).select(
        "group_id", "topic", "partition", F.col("commit_timestamp").alias("ts")).filter(
        F.col("ts").isNotNull() & (F.col("ts") > 0))


def commits(records: DataFrame, data_end_ts: Column,
            around_rebalances: DataFrame | None = None) -> DataFrame:
    """Per group and partition: commits, rate, staleness, the longest gap between commits,
    and (from `around_rebalances`, `rebalance_commit_gaps` per partition) the longest commit
    gap around any of the group's rebalances."""
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
    out = agg.select(
        "*",
        F.when(span_s > 0, (F.col("commits") - 1) / span_s).alias("commits_per_s"),
        (data_end_ts - F.col("last_commit_ts")).alias("staleness_ms"),
    )
    if around_rebalances is None:
        return out.withColumn("longest_rebalance_gap_ms", F.lit(None).cast("long"))
    longest = around_rebalances.groupBy("group_id", "topic", "partition").agg(
        F.max("commit_gap_ms").alias("longest_rebalance_gap_ms"))
    return out.join(longest, ["group_id", "topic", "partition"], "left")


# A commit in the millisecond a rebalance starts counts as before it, one in the millisecond
# it ends as after it: in each group's (or partition's) sorted stream, end marks sort before
# the commits of their millisecond and start marks after them.
_END_MARK, _COMMIT, _START_MARK = 0, 1, 2


def number_rebalances(rebalances: DataFrame) -> DataFrame:
    """`_rid`: each rebalance's number within its group (cache the result: the commit stream
    and the join back to the rebalances must see the same numbers)."""
    return rebalances.withColumn("_rid", F.row_number().over(Window.partitionBy(
        "group_id").orderBy("start_ts", "end_ts", "generation_to")))


def commit_stream(rebalances: DataFrame, commits: DataFrame,
                  keys: tuple[str, ...] = ()) -> DataFrame:
    """The commits of each group (or of each group's partition, `keys` = ("topic",
    "partition")) in time order with every rebalance's start and end marked between them, in
    one sort; what comes out is small:

    * a mark row per rebalance (and key) and end (`_kind` `_START_MARK`/`_END_MARK`): the
      last commit at or before the start (`gap_start_ts`), the first at or after the end
      (`gap_end_ts`);
    * a gap row (`_kind` `_COMMIT`) for every gap between two commits worth drawing: at least
      a second and five times the group's median gap between commits.

    `rebalances` come from `number_rebalances`; `commits` have group_id, `keys` and ts."""
    marks = rebalances.select("group_id", "_rid", F.coalesce("start_ts", "end_ts").alias("_at"),
                              "end_ts")
    if keys:
        marks = marks.join(commits.select("group_id", *keys).distinct(), "group_id")
    no_rid = F.lit(None).cast("int").alias("_rid")
    stream = (
        commits.select("group_id", *keys, "ts", F.lit(_COMMIT).alias("_kind"), no_rid)
        .unionByName(marks.filter(F.col("_at").isNotNull()).select(
            "group_id", *keys, F.col("_at").alias("ts"), F.lit(_START_MARK).alias("_kind"),
            "_rid"))
        .unionByName(marks.filter(F.col("end_ts").isNotNull()).select(
            "group_id", *keys, F.col("end_ts").alias("ts"), F.lit(_END_MARK).alias("_kind"),
            "_rid")))
    kind = F.col("_kind")
    w = Window.partitionBy("group_id", *keys).orderBy("ts", "_kind")
    stepped = (stream
               .withColumn("_c", F.when(kind == _COMMIT, F.col("ts")))
               # the nearest commits on either side, skipping the marks (a running pass)
               .withColumn("_prev", F.expr("lag(_c) IGNORE NULLS").over(w))
               .withColumn("_next", F.expr("lead(_c) IGNORE NULLS").over(w)))
    gap = F.when(kind == _COMMIT, F.col("ts") - F.col("_prev"))
    with_median = stepped.withColumn("_gap", gap).withColumn(
        # several commits in one millisecond are one moment: the median of the gaps > 0
        # (a coarse sketch: the median only sets the drawing threshold)
        "_median", F.percentile_approx(F.when(F.col("_gap") > 0, F.col("_gap")), 0.5, 100)
        .over(Window.partitionBy("group_id")))
    drawn = ((F.col("_gap") >= DRAWN_GAP_MIN_MS)
             & (F.col("_gap") >= DRAWN_GAP_MEDIANS * F.col("_median")))
    return with_median.filter((kind != _COMMIT) | drawn).select(
        "group_id", *keys, "_rid", "_kind",
        F.when(kind != _END_MARK, F.col("_prev")).alias("gap_start_ts"),
        F.when(kind == _END_MARK, F.col("_next")).when(kind == _COMMIT, F.col("ts"))
        .alias("gap_end_ts"))


def _gaps_per_rebalance(stream: DataFrame, keys: tuple[str, ...]) -> DataFrame:
    kind = F.col("_kind")
    return stream.filter(kind != _COMMIT).groupBy("group_id", *keys, "_rid").agg(
        F.max(F.when(kind == _START_MARK, F.col("gap_start_ts"))).alias("gap_start_ts"),
        F.max(F.when(kind == _END_MARK, F.col("gap_end_ts"))).alias("gap_end_ts"),
    ).withColumn("commit_gap_ms", F.col("gap_end_ts") - F.col("gap_start_ts"))


def with_commit_gaps(rebalances: DataFrame, stream: DataFrame) -> DataFrame:
    """`rebalances` (numbered) with the group's commit gap around each: from its last commit
    at or before the rebalance started (or ended, when its start is unknown) to its first
    commit at or after the rebalance ended. This is the pause as the consumers' commits show
    it. `stream` is `commit_stream` of the group's commits."""
    return (rebalances.join(_gaps_per_rebalance(stream, ()), ["group_id", "_rid"], "left")
            .drop("_rid"))


def commit_gaps_around(rebalances: DataFrame, times: DataFrame) -> DataFrame:
    """`with_commit_gaps` from the rebalances and their groups' commit times, in one go."""
    numbered = number_rebalances(rebalances)
    return with_commit_gaps(numbered, commit_stream(numbered, times))


REBALANCE_GAP_COLUMNS = ("group_id", "generation_from", "generation_to", "start_ts", "end_ts",
                         "cause")


def rebalance_commit_gaps(rebalances: DataFrame, stream: DataFrame, keys: tuple[str, ...],
                          source: str) -> DataFrame:
    """The longest commit gap around each rebalance, per partition: one row per rebalance and
    (topic, partition) from the partition's own commits (`keys` = ("topic", "partition"),
    `source` "group_log"), or one row per rebalance with the topic and partition null from the
    group's commit times (no keys, `source` "journal"). A partition whose consumer died stops
    committing before the rebalance, the others right up to it: its gap is the longest."""
    found = _gaps_per_rebalance(stream, keys)
    if not keys:
        found = (found.withColumn("topic", F.lit(None).cast("string"))
                 .withColumn("partition", F.lit(None).cast("int")))
    return rebalances.select("_rid", *REBALANCE_GAP_COLUMNS).join(
        found, ["group_id", "_rid"]).select(
        *REBALANCE_GAP_COLUMNS, "topic", "partition", "gap_start_ts", "gap_end_ts",
        "commit_gap_ms", F.lit(source).alias("source"))


def drawn_gaps(stream: DataFrame, keys: tuple[str, ...] = ()) -> DataFrame:
    """(group_id, key, gap_start_ts, gap_end_ts, gap_ms): the gaps `commit_stream` kept for
    the timelines; `key` names the partition ("topic-partition") or is empty."""
    key = (F.concat_ws("-", *[F.col(k).cast("string") for k in keys]) if keys
           else F.lit(""))
    return stream.filter(F.col("_kind") == _COMMIT).select(
        "group_id", key.alias("key"), "gap_start_ts", "gap_end_ts",
        (F.col("gap_end_ts") - F.col("gap_start_ts")).alias("gap_ms"))


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
