"""The job on a real Spark standalone cluster: a master and two workers from the installed
pyspark on loopback, the job submitted with `spark-submit` as README shows it, and the tables
compared row for row with the `local[2]` run of the same input. The input is small (a few
thousand journal events and group-log records): the cluster's start and the submit cost the
test its time; `make bench-forensics` times the million-event report on the same cluster."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from forensics.job import TABLES, run
from forensics.package import build
from forensics.session import EXECUTOR_GC_OPTIONS, JIT_OPTIONS
from tests.bench.forensics_bench import write_group_log, write_journal
from tests.forensics.spark_cluster import StandaloneCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    if shutil.which("java") is None:
        pytest.skip("a Spark cluster needs java on PATH (a JDK 17)")
    started = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    try:
        yield started
    finally:
        started.stop()


def _rows(out: Path, table: str) -> list[dict[str, Any]]:
    path = out / table
    return sorted(pq.read_table(path).to_pylist(), key=repr) if path.exists() else []


def test_spark_submit_on_a_standalone_cluster_matches_local(
        spark: Any, cluster: StandaloneCluster, tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_journal(data / "events", 4000, groups=8)
    write_group_log(data, 4000, partitions=2)
    local = run(spark, data, tmp_path / "local", timelines=2)
    zip_path = build(tmp_path / "dist" / "forensics.zip")
    done = cluster.submit(["--data", str(data), "--out", str(tmp_path / "cluster"),
                           "--timelines", "2"], zip_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"{local.rebalances} rebalances in {local.groups} groups" in done.stdout
    assert local.rebalances > 0
    for table in TABLES:
        assert _rows(tmp_path / "cluster", table) == _rows(tmp_path / "local", table), table
    assert len(list((tmp_path / "cluster").glob("timeline-*.png"))) == 2
    # The work ran on the workers' executors, not in the driver.
    executors = list(cluster.work.glob("worker-*/app-*/*/stderr"))
    assert {p.parent.parent.parent.name for p in executors} == {"worker-0", "worker-1"}
    # Their JVMs got the job's options (the submitter set none).
    for log in executors:
        command = log.read_text(errors="replace").splitlines()[0]
        assert JIT_OPTIONS in command and EXECUTOR_GC_OPTIONS in command
