"""`--follow`: Structured Streaming over the rotated journal, refreshing the outputs.

The broker closes journal files by an atomic rename (docs/events.md §1), so Spark's file
source sees each closed file once and whole; the active file is hidden and never read. Every
micro-batch appends its events to `OUT/_events` (Parquet) and rebuilds the report and tables
from everything seen so far plus the group log as it is now. The checkpoint in
`OUT/_checkpoint` makes a restarted `--follow` continue where it stopped.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from forensics.job import run
from forensics.reader import Problems, clean_journal, journal_dir, with_file
from forensics.schema import CORRUPT_COLUMN, JOURNAL_DDL


def follow(spark: SparkSession, data_dir: Path, out_dir: Path, *, journal: Path | None,
           timelines: int, interval_s: float, once: bool) -> None:
    directory = journal or journal_dir(data_dir)
    directory.mkdir(parents=True, exist_ok=True)  # the file source needs it to exist
    out_dir.mkdir(parents=True, exist_ok=True)
    store = out_dir / "_events"
    totals = Problems()

    def refresh(stream_batch: DataFrame, batch_id: int) -> None:
        batch = stream_batch.withColumn("row", F.monotonically_increasing_id()).cache()
        problems = Problems()
        clean_journal(batch, problems)  # counts this batch's malformed and unknown lines
        totals.malformed_lines += problems.malformed_lines
        totals.malformed_examples.extend(problems.malformed_examples)
        for key, count in problems.unknown_event_types.items():
            totals.unknown_event_types[key] = totals.unknown_event_types.get(key, 0) + count
        kept = batch.filter(batch[CORRUPT_COLUMN].isNull()).drop(CORRUPT_COLUMN, "source_path")
        kept.write.mode("append").parquet(str(store))
        events = spark.read.parquet(str(store)) if _has_parquet(store) else None
        outcome = run(spark, data_dir, out_dir, timelines=timelines, events=events,
                      extra_problems=totals)
        print(f"batch {batch_id}: {outcome.rebalances} rebalances in {outcome.groups} groups; "
              f"report: {outcome.report}", flush=True)

    stream = with_file(spark.readStream.schema(JOURNAL_DDL)
                        .option("mode", "PERMISSIVE")
                        .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
                        .option("maxFilesPerTrigger", 1000)
                        .json(str(directory)))
    writer: Any = (stream.writeStream.foreachBatch(refresh)
                   .option("checkpointLocation", str(out_dir / "_checkpoint")))
    writer = (writer.trigger(availableNow=True) if once
              else writer.trigger(processingTime=f"{interval_s} seconds"))
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
        time.sleep(0)


def _has_parquet(path: Path) -> bool:
    return path.is_dir() and any(path.glob("*.parquet"))
