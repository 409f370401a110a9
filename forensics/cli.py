"""`python -m forensics --data DIR --out DIR [--follow]`: explain every rebalance.

Mistakes on the command line get one line on stderr and exit status 2; an input problem (a
malformed journal line, a corrupted batch) is counted in the report, never fatal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from forensics.session import LOCAL_MASTER


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"forensics: {message}\n")
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m forensics", allow_abbrev=False,
                description="Rebalance forensics over a rebalanced log.dirs (event journal and "
                            "group log) or a Kafka log directory (__consumer_offsets-*).")
    p.add_argument("--data", required=True, type=Path,
                   help="rebalanced log.dirs, or a Kafka log directory")
    p.add_argument("--out", required=True, type=Path, help="where the report and tables go")
    p.add_argument("--journal", type=Path, default=None,
                   help="the journal directory when it is not DATA/events (journal.dir)")
    p.add_argument("--master", default=None,
                   help=f"Spark master (default {LOCAL_MASTER}; under spark-submit, its own)")
    p.add_argument("--timelines", type=int, default=10,
                   help="timeline PNGs for this many of the worst groups (default 10)")
    p.add_argument("--follow", action="store_true",
                   help="keep running: stream closed journal files and refresh the outputs")
    p.add_argument("--interval", type=float, default=10.0,
                   help="with --follow: seconds between refreshes (default 10)")
    p.add_argument("--once", action="store_true",
                   help="with --follow: process what is there, refresh once and stop")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.data.is_dir():
        sys.stderr.write(f"forensics: --data {args.data}: not a directory\n")
        return 2
    if args.timelines < 0 or args.interval <= 0:
        sys.stderr.write("forensics: --timelines must be >= 0 and --interval > 0\n")
        return 2
    if args.out.exists() and not args.out.is_dir():
        sys.stderr.write(f"forensics: --out {args.out}: exists and is not a directory\n")
        return 2

    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql import SparkSession

    from forensics.session import ClassCache, get_session, launched_by_spark_submit

    created = SparkSession.getActiveSession() is None
    cache = ClassCache() if created and not launched_by_spark_submit() else None
    # The JVM starts in the background while this process imports the job's modules.
    with ThreadPoolExecutor(max_workers=1) as starter:
        starting = starter.submit(get_session, args.master, class_cache=cache)
        if args.follow:
            from forensics.follow import follow
        else:
            from forensics.job import run
        spark = starting.result()
    try:
        if args.follow:
            follow(spark, args.data.resolve(), args.out.resolve(), journal=args.journal,
                   timelines=args.timelines, interval_s=args.interval, once=args.once)
            return 0
        outcome = run(spark, args.data.resolve(), args.out.resolve(), timelines=args.timelines,
                      journal=args.journal)
        print(f"{outcome.rebalances} rebalances in {outcome.groups} groups; "
              f"report: {outcome.report}")
        return 0
    finally:
        if created:
            spark.stop()
            if cache is not None:
                cache.finish()
