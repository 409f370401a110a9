"""The SparkSession: local defaults for `python -m forensics`, the cluster's under spark-submit."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pyspark import SparkConf
from pyspark.sql import SparkSession

LOCAL_MASTER = "local[2]"
# Java's own log lines about the class-data archive (hundreds of warnings about classes it
# cannot archive) are not the user's business.
_QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
_DUMP_WAIT_S = 120.0
# The JIT's first tier only (C1). The job's JVM work is short: a run of a million journal
# events spends seconds in Spark's generated code, and each JVM (the driver's, and on a
# cluster each executor's) compiles Spark again from cold. The optimizing compiler (C2) took
# a core for much of a run to compile code that had finished running by then: C1 alone took
# the million-event report from 18-23 s to 11-16 s on `local[2]`, and on a standalone
# cluster it makes the executors' start cheaper (BENCHMARKS.md). A long job over far more
# data may want C2 back: `REBALANCED_FORENSICS_JAVA_OPTIONS` replaces these options (empty:
# the JVM's defaults); under spark-submit, `spark.executor.extraJavaOptions` and
# `--driver-java-options` do.
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"
# An executor of a standalone worker runs its tasks one at a time per core, on a heap of about
# a gigabyte: the serial collector starts with no collector threads and no G1 region tables
# to set up, where G1 starts a parallel and a concurrent thread per CPU the JVM sees
# (BENCHMARKS.md, issue 27: the cluster's wall time against `local[2]`).
EXECUTOR_GC_OPTIONS = "-XX:+UseSerialGC"
# The Python daemon of the job's workers: PySpark's, with pyspark imported from the installed
# package instead of Spark's zip of it where the two are the same (`forensics.pyspark_path`).
DAEMON_MODULE_KEY = "spark.python.daemon.module"
DAEMON_MODULE = "forensics.spark_daemon"
REGISTERED_RATIO_KEY = "spark.scheduler.minRegisteredResourcesRatio"


def launched_by_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands Python its gateway port."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_session(master: str | None = None, app_name: str = "rebalanced-forensics",
                driver_memory: str = "2g", class_cache: ClassCache | None = None
                ) -> SparkSession:
    """The active session if there is one (tests, notebooks), else a new one. Outside
    spark-submit it runs on `master` (default local[2]) with the UI off and every listener on
    127.0.0.1, and with `class_cache`'s JVM options; under spark-submit the cluster's settings
    win unless `master` is given."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if not launched_by_spark_submit():
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers must run this interpreter (its packages: the broker's codec, crc32c).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = (builder.master(master or LOCAL_MASTER)
                   .config("spark.ui.enabled", "false")
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.memory", driver_memory)
                   .config("spark.sql.shuffle.partitions", "4")
                   .config("spark.default.parallelism", "2")
                   # Adaptive execution re-plans the query after every shuffle: for this job's
                   # small tables on one machine that planning costs more than it saves (the
                   # 1M-event report: 70 s with it, 57-62 s without).
                   .config("spark.sql.adaptive.enabled", "false")
                   .config(DAEMON_MODULE_KEY, DAEMON_MODULE))
        driver_options = " ".join(filter(None, (
            class_cache.java_options if class_cache is not None else "", job_java_options())))
        if driver_options:
            builder = builder.config("spark.driver.extraJavaOptions", driver_options)
    else:
        if master:
            builder = builder.master(master)
        submitted = _submitted_conf()
        executor_options = _executor_java_options(submitted)
        if executor_options:
            builder = builder.config(EXECUTOR_JAVA_OPTIONS, executor_options)
        if not submitted.contains(DAEMON_MODULE_KEY):
            builder = builder.config(DAEMON_MODULE_KEY, DAEMON_MODULE)
        if not submitted.contains(REGISTERED_RATIO_KEY):
            # Spark's default makes the session wait until 80 % of the executors have
            # registered; the job's own work before its first job (planning, its imports,
            # the timeline renderers' start) then runs after the executors' start instead of
            # beside it. Tasks go to the executors as they register.
            builder = builder.config(REGISTERED_RATIO_KEY, "0")
        if not submitted.contains("spark.ui.enabled"):
            # The driver's web UI: a Jetty server started on the driver's JVM while the
            # executors' JVMs start on the cluster, for a job that is over in seconds (off
            # on `local[2]` too). `--conf spark.ui.enabled=true` keeps it.
            builder = builder.config("spark.ui.enabled", "false")
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    spark = builder.getOrCreate()
    if launched_by_spark_submit():
        _cluster_defaults(spark)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _cluster_defaults(spark: SparkSession) -> None:
    """Under spark-submit, the SQL settings the job is tuned for, where the submitter gave
    none: shuffles into as many partitions as the cluster has cores (Spark's default of 200
    is 200 Python tasks for tables of a few thousand rows), and no adaptive re-planning (see
    `get_session`)."""
    given = spark.sparkContext.getConf()
    cores = max(spark.sparkContext.defaultParallelism, 1)
    for key, value in (("spark.sql.shuffle.partitions", str(2 * cores)),
                       ("spark.sql.adaptive.enabled", "false")):
        if not given.contains(key):
            spark.conf.set(key, value)


EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"


def job_java_options(default: str = JIT_OPTIONS) -> str:
    """The JVM options the job runs with (`default`: `JIT_OPTIONS`, for executors with
    `EXECUTOR_GC_OPTIONS`), or `REBALANCED_FORENSICS_JAVA_OPTIONS` where set."""
    return os.environ.get("REBALANCED_FORENSICS_JAVA_OPTIONS", default).strip()


def driver_java_options() -> str:
    """For spark-submit's `--driver-java-options` (`python -m forensics.package
    --java-options`): spark-submit starts the driver's JVM before the job's Python, so only
    its command line can give that JVM the job's options and the class-data archive."""
    archive = ClassCache.existing()
    cache = f'-XX:SharedArchiveFile="{archive}" -Xshare:auto {_QUIET_CDS}' if archive else ""
    return " ".join(filter(None, (cache, job_java_options())))


def _submitted_conf() -> SparkConf:
    """The settings spark-submit gave its JVM (the command line, spark-defaults.conf)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return SparkConf()


def _executor_java_options(submitted: SparkConf) -> str | None:
    """Under spark-submit, when the submitter set no executor JVM options: the job's JVM
    options (`job_java_options`, with `EXECUTOR_GC_OPTIONS`), and the class-data archive
    that `python -m forensics` keeps for its driver, for the executors. An executor
    starts a JVM of its own when the application arrives and loads the same Spark classes;
    where it finds the archive (the driver's host, or the same path on a shared install) it
    maps them instead, which took the two executors' registration on a standalone cluster of
    one machine from 8-12 s after the application started to 4-5 s. Where the file is
    missing, or belongs to another Java or Spark, the JVM goes on without it, silently."""
    archive = ClassCache.existing()
    options = job_java_options(JIT_OPTIONS + " " + EXECUTOR_GC_OPTIONS)
    if (archive is None and not options) or submitted.contains(EXECUTOR_JAVA_OPTIONS):
        return None
    cache = f'-XX:SharedArchiveFile="{archive}" -Xshare:auto {_QUIET_CDS}' if archive else ""
    return " ".join(filter(None, (cache, options)))


class ClassCache:
    """A class-data archive of the driver JVM (Java's AppCDS), kept in the user's cache
    directory: the JVM maps the Spark classes it loaded last time instead of loading and
    verifying them again, which takes seconds off every start of the job.

    The first run on a machine (or with another Java or PySpark) has no archive: its JVM
    writes one when it exits (`finish`, which waits for that), and later runs use it. An
    archive is only ever used once its JVM has exited cleanly, so a half-written file is never
    read (Java does not check). `REBALANCED_FORENSICS_CLASS_CACHE=0` turns it off."""

    def __init__(self, directory: Path | None = None) -> None:
        self.java_options = ""
        self._archive: Path | None = None
        self._partial: Path | None = None
        archive = self.path(directory)
        if archive is None:
            return
        directory = archive.parent
        if archive.is_file():
            self.java_options = f'-XX:SharedArchiveFile="{archive}" -Xshare:auto {_QUIET_CDS}'
            return
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        self._archive = archive
        self._partial = directory / f".{archive.name}.{os.getpid()}.partial"
        self.java_options = f'-XX:ArchiveClassesAtExit="{self._partial}" {_QUIET_CDS}'

    @staticmethod
    def path(directory: Path | None = None) -> Path | None:
        """Where the archive of this Java and this PySpark is kept; None when it is turned
        off (`REBALANCED_FORENSICS_CLASS_CACHE=0`) or there is no java."""
        if os.environ.get("REBALANCED_FORENSICS_CLASS_CACHE", "1") == "0":
            return None
        java = _java()
        if java is None:
            return None
        import pyspark

        # The Spark whose jars the JVM loads: SPARK_HOME when set (spark-submit sets it; its
        # Python then imports pyspark from a zip there), else the pyspark package's own.
        spark_home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
        stat = java.stat()
        key = hashlib.sha256(
            f"{pyspark.__version__}|{spark_home.resolve()}|{java}|{stat.st_size}|"
            f"{stat.st_mtime_ns}".encode()).hexdigest()[:16]
        return (directory or _cache_home() / "rebalanced") / f"spark-driver-{key}.jsa"

    @staticmethod
    def existing() -> Path | None:
        """The archive, if a run has written one."""
        archive = ClassCache.path()
        return archive if archive is not None and archive.is_file() else None

    def finish(self, process: subprocess.Popen[bytes] | None = None) -> None:
        """After `SparkSession.stop()`: when this run's JVM (`process`, by default the one
        PySpark started) writes the archive, let it exit (it does when its standard input
        closes), wait for the archive, and keep it."""
        if self._partial is None or self._archive is None:
            return
        if process is None:
            from pyspark import SparkContext

            process = getattr(getattr(SparkContext, "_gateway", None), "proc", None)
        try:
            if process is None:
                return
            if process.stdin is not None:
                process.stdin.close()
            clean = process.wait(timeout=_DUMP_WAIT_S) == 0
            if clean and self._partial.is_file():
                self._partial.replace(self._archive)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
        finally:
            self._partial.unlink(missing_ok=True)


def _java() -> Path | None:
    """The java that Spark's launcher runs: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).is_file():
        return None
    return Path(found).resolve()


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
