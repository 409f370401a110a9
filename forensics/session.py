"""The SparkSession: local defaults for `python -m forensics`, the cluster's under spark-submit."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

LOCAL_MASTER = "local[2]"


def launched_by_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands Python its gateway port."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def get_session(master: str | None = None, app_name: str = "rebalanced-forensics",
                driver_memory: str = "2g") -> SparkSession:
    """The active session if there is one (tests, notebooks), else a new one. Outside
    spark-submit it runs on `master` (default local[2]) with the UI off and every listener on
    127.0.0.1; under spark-submit the cluster's settings win unless `master` is given."""
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
                   .config("spark.default.parallelism", "2"))
    elif master:
        builder = builder.master(master)
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
