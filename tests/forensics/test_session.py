"""The driver JVM's class-data archive (`forensics.session.ClassCache`), without Spark: a
stand-in process plays the JVM that writes the archive when its standard input closes. And the
JVM options the job gives its driver and executors, and the spark-submit zip's bytecode."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from forensics.package import build
from forensics.session import JIT_OPTIONS, ClassCache, driver_java_options, job_java_options

pytestmark = pytest.mark.skipif(shutil.which("java") is None,
                                reason="the archive is keyed on the java on PATH (a JDK 17)")

WRITES_AT_EXIT = ("import pathlib, sys; sys.stdin.read(); "
                  "pathlib.Path(sys.argv[1]).write_bytes(b'archive'); sys.exit(int(sys.argv[2]))")


def _jvm(partial: str, status: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", WRITES_AT_EXIT, partial, str(status)],
                            stdin=subprocess.PIPE)


def _partial_of(cache: ClassCache) -> str:
    option = next(o for o in cache.java_options.split() if o.startswith("-XX:ArchiveClasses"))
    return option.split("=", 1)[1].strip('"')


def test_the_first_run_writes_the_archive_and_the_next_one_maps_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REBALANCED_FORENSICS_CLASS_CACHE", raising=False)
    first = ClassCache(tmp_path)
    assert "-Xlog:cds=off" in first.java_options
    partial = _partial_of(first)
    first.finish(_jvm(partial, 0))
    archives = list(tmp_path.glob("spark-driver-*.jsa"))
    assert [a.read_bytes() for a in archives] == [b"archive"]
    assert not Path(partial).exists()
    second = ClassCache(tmp_path)
    assert f'-XX:SharedArchiveFile="{archives[0]}"' in second.java_options
    assert "ArchiveClassesAtExit" not in second.java_options
    second.finish()  # nothing to wait for


def test_an_archive_whose_jvm_did_not_exit_cleanly_is_never_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REBALANCED_FORENSICS_CLASS_CACHE", raising=False)
    cache = ClassCache(tmp_path)
    partial = _partial_of(cache)
    cache.finish(_jvm(partial, 1))
    assert list(tmp_path.iterdir()) == []
    assert "ArchiveClassesAtExit" in ClassCache(tmp_path).java_options


def test_it_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REBALANCED_FORENSICS_CLASS_CACHE", "0")
    cache = ClassCache(tmp_path)
    assert cache.java_options == ""
    cache.finish()
    assert list(tmp_path.iterdir()) == []


def test_the_job_runs_its_jvms_on_the_first_jit_tier_unless_told_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("REBALANCED_FORENSICS_JAVA_OPTIONS", raising=False)
    assert job_java_options() == JIT_OPTIONS == "-XX:TieredStopAtLevel=1"
    assert driver_java_options() == JIT_OPTIONS  # no archive yet
    archive = ClassCache.path()
    assert archive is not None
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    assert driver_java_options().split() == [
        f'-XX:SharedArchiveFile="{archive}"', "-Xshare:auto", "-Xlog:cds=off",
        "-Xlog:cds+dynamic=off", JIT_OPTIONS]
    monkeypatch.setenv("REBALANCED_FORENSICS_JAVA_OPTIONS", "")
    assert job_java_options() == ""
    assert driver_java_options().split()[-1] == "-Xlog:cds+dynamic=off"
    monkeypatch.setenv("REBALANCED_FORENSICS_JAVA_OPTIONS", "-XX:+UseSerialGC")
    assert driver_java_options().split()[-1] == "-XX:+UseSerialGC"


def test_the_java_options_command_prints_them(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "forensics.package", "--java-options"],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path),
                               "REBALANCED_FORENSICS_JAVA_OPTIONS": "-XX:+UseSerialGC"})
    assert done.stdout == "-XX:+UseSerialGC\n"


def test_the_zip_carries_bytecode_that_python_imports(tmp_path: Path) -> None:
    zip_path = build(tmp_path / "forensics.zip")
    with zipfile.ZipFile(zip_path) as zf:
        names = set(zf.namelist())
    assert {"forensics/job.py", "forensics/job.pyc", "storage/varint.py",
            "storage/varint.pyc"} <= names
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import forensics.journal_pass as m; "
             "print(m.__file__, type(m.__loader__).__name__)")
    done = subprocess.run([sys.executable, "-c", probe, str(zip_path)], cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == [f"{zip_path}/forensics/journal_pass.pyc", "zipimporter"]
