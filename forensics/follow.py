"""`--follow`: Structured Streaming over the rotated journal, refreshing the outputs.

The broker closes journal files by an atomic rename (docs/events.md §1), so Spark's file
source sees each closed file once and whole; the active file is hidden and never read. Every
micro-batch copies the files it saw into `OUT/_journal` (so the history outlives the broker's
journal retention) and rebuilds the report and tables from every file copied so far plus the
group log as it is now, with the batch job. The checkpoint in `OUT/_checkpoint` makes a
restarted `--follow` continue where it stopped.

On a live cluster (`follow_live`) without a journal, a micro-batch instead updates the
report's state on the driver: only the groups with new records are analysed again
(`follow_state`), so a trigger costs what is new, not a rebuild.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from forensics.datasource import LIVE_FORMAT_NAME, register_live
from forensics.follow_state import LiveFollower
from forensics.grouplog import GROUP_LOG_COLUMNS
from forensics.job import RENDER_WORKERS, Renderer, run
from forensics.live import LiveSource
from forensics.reader import journal_dir

STORE = "_journal"


def follow(spark: SparkSession, data_dir: Path, out_dir: Path, *, journal: Path | None,
           timelines: int, interval_s: float, once: bool) -> None:
    directory = Path(journal or journal_dir(data_dir))
    directory.mkdir(parents=True, exist_ok=True)  # the file source needs it to exist
    out_dir.mkdir(parents=True, exist_ok=True)
    store = out_dir / STORE
    store.mkdir(exist_ok=True)

    def refresh(batch: DataFrame, batch_id: int) -> None:
        for row in batch.select("path").distinct().collect():
            keep(Path(_local_path(row["path"])), store)
        outcome = run(spark, data_dir, out_dir, timelines=timelines, journal=store)
        print(f"batch {batch_id}: {outcome.rebalances} rebalances in {outcome.groups} groups; "
              f"report: {outcome.report}", flush=True)

    stream = (spark.readStream.option("maxFilesPerTrigger", 1000).text(str(directory))
              .select(F.col("_metadata.file_path").alias("path")))
    _run_stream(stream, refresh, out_dir, interval_s=interval_s, once=once)


def _run_stream(stream: DataFrame, refresh: Any, out_dir: Path, *, interval_s: float,
                once: bool) -> None:
    """Run `refresh` on each micro-batch of `stream`, checkpointed in `OUT/_checkpoint`: once
    over what is there (`once`), or every `interval_s` until interrupted."""
    writer: Any = (stream.writeStream.foreachBatch(refresh)
                   .option("checkpointLocation", str(out_dir / "_checkpoint")))
    writer = (writer.trigger(availableNow=True) if once
              else writer.trigger(processingTime=f"{interval_s} seconds"))
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()


GROUP_LOG_STORE = "_group_log"


def follow_live(spark: SparkSession, live: LiveSource, out_dir: Path, *,
                journal: Path | None, timelines: int, interval_s: float, once: bool) -> None:
    """Structured Streaming over a live cluster's offsets topic: each micro-batch's records
    are kept in `OUT/_group_log` (a Parquet directory per batch, written whole, so a batch
    Spark runs again after a failure replaces itself). Without a journal the report is kept
    up to date incrementally on the driver (`follow_state.LiveFollower`: only the groups with
    new records are analysed again); with one, it is rebuilt from every record kept so far
    with the batch job. `OUT/_checkpoint` holds the offsets read, so a restarted `--follow`
    reads only what is new (and starts from the records kept)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    store = out_dir / GROUP_LOG_STORE
    store.mkdir(exist_ok=True)
    follower = LiveFollower(out_dir, live.display, timelines) if journal is None else None
    renderer = Renderer(min(RENDER_WORKERS, timelines)) if follower is not None else None
    resumed = False

    def refresh(batch: DataFrame, batch_id: int) -> None:
        nonlocal resumed
        started = time.perf_counter()
        records = batch.toArrow()
        _keep_batch(records, store / f"batch_id={batch_id}")
        if follower is None or renderer is None:
            outcome = run(spark, None, out_dir, timelines=timelines, journal=journal,
                          live=live, group_log_store=store)
        else:
            touched: set[str] = set()
            if not resumed:  # a restart: the records kept before it first
                for kept in _kept_batches(store, before=batch_id):
                    touched |= follower.add(kept)
                resumed = True
            touched |= follower.add(records)
            outcome = follower.refresh(touched, renderer)
        print(f"batch {batch_id}: {outcome.rebalances} rebalances in {outcome.groups} groups; "
              f"report: {outcome.report} ({time.perf_counter() - started:.1f} s)", flush=True)

    register_live(spark)
    stream = spark.readStream.format(LIVE_FORMAT_NAME).options(**live.stream_options()).load()
    try:
        _run_stream(stream, refresh, out_dir, interval_s=interval_s, once=once)
    finally:
        if renderer is not None:
            renderer.close()


def _keep_batch(records: pa.Table, directory: Path) -> None:
    """A micro-batch's records as one Parquet file in `directory`, replaced whole."""
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    pq.write_table(records, tmp / "part-00000.parquet")
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)


def _kept_batches(store: Path, before: int) -> list[pa.Table]:
    """The records of the micro-batches kept in `store` before batch `before`, in order."""
    found = []
    for directory in store.glob("batch_id=*"):
        batch_id = int(directory.name.partition("=")[2])
        if batch_id < before:
            found.append((batch_id, directory))
    return [pq.read_table(d).select(list(GROUP_LOG_COLUMNS)) for _, d in sorted(found)]


def keep(path: Path, store: Path) -> None:
    """A copy of a closed journal file in `store`, written whole or not at all."""
    target = store / path.name
    if target.exists():
        return
    partial = store / f".{path.name}.partial"
    shutil.copyfile(path, partial)
    partial.replace(target)


def _local_path(uri: str) -> str:
    return uri[len("file:"):] if uri.startswith("file:") else uri
