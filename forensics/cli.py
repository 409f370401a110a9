"""`python -m forensics --data DIR --out DIR [--follow]`: explain every rebalance;
`python -m forensics --bootstrap-server HOST:PORT --out DIR`: the same from a live cluster's
`__consumer_offsets`.

Mistakes on the command line get one line on stderr and exit status 2; an input that cannot be
read at all (an unreachable cluster, a topic that is not an offsets topic) one line and exit
status 1; an input problem (a malformed journal line, a corrupted batch) is counted in the
report, never fatal.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from forensics.files import check, is_url, normalize
from forensics.live import EARLIEST, LATEST, OFFSETS_TOPIC, LiveSource, LiveSourceError
from forensics.session import LOCAL_MASTER


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"forensics: {message}\n")
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m forensics", allow_abbrev=False,
                description="Rebalance forensics over a rebalanced log.dirs (event journal and "
                            "group log) or a Kafka log directory (__consumer_offsets-*).")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data",
                        help="rebalanced log.dirs, or a Kafka log directory: a path or a URL "
                             "(s3://BUCKET/DIR, hdfs://..., gs://..., abfs://...)")
    source.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="read the group log from this live Kafka-compatible cluster")
    p.add_argument("--out", required=True, type=Path, help="where the report and tables go")
    p.add_argument("--journal", default=None,
                   help="the journal directory when it is not DATA/events (journal.dir)")
    p.add_argument("--topic", default=None,
                   help="with --bootstrap-server: the offsets topic (default __consumer_offsets)")
    p.add_argument("--starting-offsets", default="earliest",
                   help='with --bootstrap-server: earliest (default), latest, or '
                        '\'{"__consumer_offsets": {"PARTITION": OFFSET}}\'')
    p.add_argument("--ending-offsets", default="latest",
                   help="with --bootstrap-server: latest (default), or offsets as above")
    p.add_argument("--starting-timestamp", type=int, default=None, metavar="MS",
                   help="with --bootstrap-server: from the first record at or after this "
                        "time (ms since the epoch); replaces --starting-offsets")
    p.add_argument("--ending-timestamp", type=int, default=None, metavar="MS",
                   help="with --bootstrap-server: up to the first record at or after this "
                        "time; replaces --ending-offsets")
    p.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                   help="with --bootstrap-server: a client setting (security.protocol, "
                        "sasl.*, ssl.*, ...); repeatable")
    p.add_argument("--command-config", type=Path, default=None, metavar="FILE",
                   help="with --bootstrap-server: client settings, one KEY=VALUE a line")
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
    if args.data is not None and not is_url(args.data) and not Path(args.data).is_dir():
        sys.stderr.write(f"forensics: --data {args.data}: not a directory\n")
        return 2
    if args.follow and (is_url(args.data or "") or is_url(args.journal or "")):
        sys.stderr.write("forensics: --follow reads a local journal directory\n")
        return 2
    for flag, location in (("--data", args.data), ("--journal", args.journal)):
        # A missing bucket or a refused credential: one line before Spark starts.
        problem = check(location) if location is not None and is_url(location) else None
        if problem is not None:
            sys.stderr.write(f"forensics: {flag} {location}: {problem}\n")
            return 1
    if args.timelines < 0 or args.interval <= 0:
        sys.stderr.write("forensics: --timelines must be >= 0 and --interval > 0\n")
        return 2
    if args.out.exists() and not args.out.is_dir():
        sys.stderr.write(f"forensics: --out {args.out}: exists and is not a directory\n")
        return 2

    live = None
    if args.bootstrap_server is not None:
        try:
            live = _plan_live(args)
        except LiveSourceError as exc:
            sys.stderr.write(f"forensics: {exc}\n")
            return 1

    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql import SparkSession

    from forensics.session import ClassCache, get_session, launched_by_spark_submit

    created = SparkSession.getActiveSession() is None
    cache = ClassCache() if created and not launched_by_spark_submit() else None
    # The JVM starts in the background while this process imports the job's modules.
    with ThreadPoolExecutor(max_workers=1) as starter:
        starting = starter.submit(get_session, args.master, class_cache=cache)
        if args.follow:
            from forensics.follow import follow, follow_live
        else:
            from forensics.job import run
        spark = starting.result()
    try:
        if args.follow and live is not None:
            follow_live(spark, live, args.out.resolve(),
                        journal=Path(args.journal).resolve() if args.journal else None,
                        timelines=args.timelines, interval_s=args.interval, once=args.once)
            return 0
        if args.follow:
            follow(spark, Path(args.data).resolve(), args.out.resolve(),
                   journal=Path(args.journal) if args.journal else None,
                   timelines=args.timelines, interval_s=args.interval, once=args.once)
            return 0
        try:
            outcome = run(spark, normalize(args.data) if args.data else None,
                          args.out.resolve(), timelines=args.timelines,
                          journal=normalize(args.journal) if args.journal else None, live=live)
        except Exception as exc:
            failure = _source_failure(exc)
            if failure is None:
                raise
            sys.stderr.write(f"forensics: {failure}\n")
            return 1
        print(f"{outcome.rebalances} rebalances in {outcome.groups} groups; "
              f"report: {outcome.report}")
        return 0
    finally:
        if created:
            spark.stop()
            if cache is not None:
                cache.finish()


def _plan_live(args: argparse.Namespace) -> LiveSource:
    """The offsets topic's ranges, asked of the cluster before Spark starts: an unreachable
    cluster or a wrong topic fails here, in one line."""
    from forensics.live import parse_bound, plan

    settings: dict[str, str] = {}
    lines = list(args.consumer_property)
    if args.command_config is not None:
        try:
            text = args.command_config.read_text(encoding="utf-8")
        except OSError as exc:
            raise LiveSourceError(f"--command-config {args.command_config}: "
                                  f"{exc.strerror}") from None
        lines = [line.strip() for line in text.splitlines()
                 if line.strip() and not line.lstrip().startswith("#")] + lines
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise LiveSourceError(f"client setting {line!r}: not KEY=VALUE")
        settings[key.strip()] = value.strip()
    topic = args.topic or OFFSETS_TOPIC
    ranges = plan(args.bootstrap_server, topic, settings,
                  parse_bound(args.starting_offsets, EARLIEST, topic),
                  parse_bound(args.ending_offsets, LATEST, topic),
                  starting_ms=args.starting_timestamp, ending_ms=args.ending_timestamp)
    return LiveSource(args.bootstrap_server, topic, settings, tuple(ranges))


_SOURCE_FAILURE = re.compile(r"LiveSourceError: ([^\n]+)")


def _source_failure(exc: BaseException) -> str | None:
    """The one line of a source failure that Spark carried back from an executor inside its
    own exception, if that is what `exc` is."""
    found = _SOURCE_FAILURE.search(str(exc))
    return found.group(1).strip() if found else None
