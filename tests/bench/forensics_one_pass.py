"""What one pass over the journal costs in Spark: the floor under a redesign of the job.

`python -m tests.bench.forensics_one_pass [--events N]` writes the forensics bench's journal
(`forensics_bench.write_journal`, 1,000,000 events by default) and then times, in a fresh
local[2] session (the same settings and class-data archive as `python -m forensics`), one read
of the journal by Spark's JSON reader, one shuffle by group and a per-group function over Arrow
(sort by time, count the rebalance starts, find the longest gap between events). The rows
carry what a job of this shape needs: group, time and type of every event, and the fields that
explain rebalances for the events that are not commits. The real job
runs a few dozen distinct Spark SQL operators where this runs three; the difference between
the two wall times is what a job with that shape could save (BENCHMARKS.md, forensics).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.bench.forensics_bench import write_journal

DETAIL_FIELDS = ("generation", "from_state", "to_state", "reason", "cause", "member_id",
                 "group_instance_id", "client_id", "client_host", "protocol_name", "leader_id",
                 "num_members", "duration_ms", "rebalance", "assignor", "moved_partitions",
                 "member_state")


def per_group(table: Any) -> Any:
    """One group's events -> one row: the stand-in for a per-group state machine."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ordered = table.sort_by("ts")
    times = ordered.column("ts").to_numpy()
    longest = int(np.diff(times).max()) if len(times) > 1 else 0
    starts = pc.sum(pc.equal(ordered.column("event_type"), "rebalance_started")).as_py() or 0
    return pa.table({"group_id": [ordered.column("group_id")[0].as_py()],
                     "starts": [starts], "longest_gap_ms": [longest]})


def main() -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forensics-one-pass-"))
    try:
        events = write_journal(work / "events", args.events)
        started = time.perf_counter()
        from forensics.reader import journal_files
        from forensics.schema import JOURNAL_DDL
        from forensics.session import ClassCache, get_session

        cache = ClassCache()
        spark = get_session(class_cache=cache)
        session_s = time.perf_counter() - started
        paths = [str(p) for p in journal_files(work / "events")]
        from pyspark.sql import functions as F

        # What a one-pass job must carry: every event's group, time and type, and the other
        # fields only for the events that are not commits (as one struct, null for commits:
        # the same fields as columns of their own cost ~12 s more here).
        journal = spark.read.schema(JOURNAL_DDL).json(paths).select(
            "group_id", "ts", "event_type",
            F.when(F.col("event_type") != "offsets_committed", F.struct(*DETAIL_FIELDS))
            .alias("detail"))
        groups = journal.groupBy("group_id").applyInArrow(
            per_group, "group_id STRING, starts BIGINT, longest_gap_ms BIGINT").toArrow()
        wall_s = time.perf_counter() - started
        spark.stop()
        cache.finish()
        print(json.dumps({"journal_events": events, "groups": groups.num_rows,
                          "session_ready_s": round(session_s, 1),
                          "one_pass_wall_s": round(wall_s, 1)}, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
