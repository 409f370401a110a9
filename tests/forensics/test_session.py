"""The driver JVM's class-data archive (`forensics.session.ClassCache`), without Spark: a
stand-in process plays the JVM that writes the archive when its standard input closes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.session import ClassCache

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
