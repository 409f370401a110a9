"""A Spark standalone cluster on loopback, from the installed pyspark: a master and workers,
each its own JVM (`spark-class ...Master` / `...Worker`), and `spark-submit` against it the way
README shows. Used by the cluster test and the benchmark."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.broker_process import free_port

ROOT = Path(__file__).resolve().parent.parent.parent


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_env() -> dict[str, str]:
    """Every process bound to loopback; Python workers and the driver run this interpreter
    (its packages: crc32c, pyarrow). Under spark-submit the job writes no class-data archive;
    its executors map the one `python -m forensics` keeps, where there is one, as a user's
    would."""
    return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_MASTER_HOST": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1"}


class StandaloneCluster:
    def __init__(self, work: Path, workers: int = 2, cores: int = 1,
                 memory: str = "1536m") -> None:
        self.work = work
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.ui_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115 - the child's
        self.procs.append(subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args], stdout=log,
            stderr=subprocess.STDOUT, env=cluster_env(), cwd=self.work))

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.ui_port)])
        for n in range(self.workers):
            work_dir = self.work / f"worker-{n}"
            work_dir.mkdir(exist_ok=True)
            self._start(f"worker-{n}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--webui-port", str(free_port()), "--cores", str(self.cores),
                "--memory", self.memory, "--work-dir", str(work_dir), self.master_url])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            if self.alive_workers() == self.workers:
                return self
            time.sleep(0.5)
        logs = (self.work / "master.log").read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"the standalone cluster did not come up: {logs}")

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/",
                                        timeout=2) as answer:
                return int(json.load(answer).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def submit(self, job_args: list[str], zip_path: Path, timeout: float = 900.0,
               conf: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`spark-submit --master spark://... --py-files forensics.zip --driver-java-options
        "$(python -m forensics.package --java-options)" forensics/submit_main.py ARGS`, from
        the source tree, as README shows it (with `conf` as `--conf`s, if any)."""
        from forensics.session import driver_java_options

        spark_submit = shutil.which("spark-submit") or str(spark_home() / "bin" / "spark-submit")
        confs = [arg for key, value in (conf or {}).items()
                 for arg in ("--conf", f"{key}={value}")]
        return subprocess.run(
            [spark_submit, "--master", self.master_url, *confs, "--py-files", str(zip_path),
             "--driver-java-options", driver_java_options(),
             "forensics/submit_main.py", *job_args],
            cwd=ROOT, env=cluster_env(), capture_output=True, text=True, timeout=timeout)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
