"""The job on an object store: a journal and a group log in an S3 bucket, served by moto's S3
server on loopback (with IAM credentials checked), read by the real command through pyarrow's
S3 filesystem on the driver and the executors; the tables must be the local run's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from forensics.cli import main
from forensics.job import TABLES, run
from tests.bench.forensics_bench import write_group_log, write_journal
from tests.broker_process import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent.parent
BUCKET = "forensics-data"


class S3Server:
    """moto's S3 (and IAM) server in a child process; requests need a real key after the
    first few, which make one."""

    def __init__(self, work: Path) -> None:
        pytest.importorskip("moto", reason="the S3 tests need moto[server] (test extra)")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
        self.log = open(work / "moto.log", "wb")  # noqa: SIM115 - the child's
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self.log, stderr=self.log, env=env)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.05)
        import boto3

        iam = boto3.client("iam", endpoint_url=self.url, region_name="us-east-1",
                           aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName="forensics")
        key = iam.create_access_key(UserName="forensics")["AccessKey"]
        iam.put_user_policy(UserName="forensics", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17",
             "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        self.env = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                    "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
                    "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.url}

    def upload(self, local: Path, bucket: str, prefix: str) -> None:
        from pyarrow import fs

        s3 = fs.S3FileSystem(access_key=self.env["AWS_ACCESS_KEY_ID"],
                             secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
                             region="us-east-1", endpoint_override=self.url,
                             allow_bucket_creation=True)
        s3.create_dir(bucket)
        fs.copy_files(str(local), f"{bucket}/{prefix}", source_filesystem=fs.LocalFileSystem(),
                      destination_filesystem=s3)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, Path]]:
    work = tmp_path_factory.mktemp("s3")
    data = work / "data"
    write_journal(data / "events", 3000, groups=8)
    write_group_log(data, 4000, partitions=2)
    server = S3Server(work)
    try:
        server.upload(data, BUCKET, "cluster-a")
        yield server, data
    finally:
        server.stop()


def _rows(out: Path, table: str) -> list[dict[str, Any]]:
    path = out / table
    return sorted(pq.read_table(path).to_pylist(), key=repr) if path.exists() else []


def test_the_command_reads_a_bucket_like_a_directory(
        spark: Any, store: tuple[S3Server, Path], tmp_path: Path) -> None:
    server, data = store
    local = run(spark, data, tmp_path / "local", timelines=0)
    env = {**os.environ, **server.env, "REBALANCED_FORENSICS_CLASS_CACHE": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "forensics", "--data", f"s3://{BUCKET}/cluster-a",
         "--out", str(tmp_path / "s3"), "--timelines", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{local.rebalances} rebalances in {local.groups} groups" in done.stdout
    assert local.rebalances > 0
    for table in TABLES:
        assert _rows(tmp_path / "s3", table) == _rows(tmp_path / "local", table), table
    assert (tmp_path / "s3" / "commits").exists()
    page = (tmp_path / "s3" / "report.html").read_text("utf-8")
    assert f"s3://{BUCKET}/cluster-a" in page


def test_a_missing_bucket_gets_one_line(store: tuple[S3Server, Path], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    server, _ = store
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    assert main(["--data", "s3://no-such-bucket/data", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "s3://no-such-bucket/data" in err
    assert "no such bucket no-such-bucket" in err and "Traceback" not in err
    assert main(["--data", f"s3://{BUCKET}/no-such-dir", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such directory" in err


def test_a_wrong_credential_gets_one_line(store: tuple[S3Server, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    server, _ = store
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOTAKEY000000000")
    from forensics import files

    files._from_url.cache_clear()  # a filesystem made with the right key is cached
    assert main(["--data", f"s3://{BUCKET}/cluster-a", "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"s3://{BUCKET}/cluster-a" in err
    assert "INVALID_ACCESS_KEY_ID" in err
    files._from_url.cache_clear()
