"""What a user installs is what the tests exercise: the wheel, installed into a fresh venv.

The rest of the suite imports the source tree (an editable install), which hides a package the
wheel leaves out. Here the wheel is built from a copy of the project, installed (not editable)
into a throwaway virtualenv, and the installed `rebalanced` is started outside the source tree
and driven through the stock-client scenario that `make docker-test` runs in containers:
three client libraries in one group, produce, consume, commit, restart the broker, resume.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess, free_port
from tests.scenario import stock_clients

pytestmark = pytest.mark.integration

PROJECT = Path(__file__).resolve().parents[2]
# Everything a clean clone holds that is not the project itself.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "data", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
    ".ruff_cache", ".pytest_cache", ".hypothesis", "bench-results")
_BUILD_TIMEOUT_S = 300


class Installed:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "venv" / "bin"

    def script(self, name: str) -> str:
        return str(self.bin / name)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH would let the source tree shadow the installed wheel.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=_BUILD_TIMEOUT_S)
    assert result.returncode == 0, f"{args} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    shutil.copytree(PROJECT, source, ignore=_NOT_SOURCE)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
          str(root / "dist"), str(source)], cwd=root)
    wheels = list((root / "dist").glob("rebalanced-*.whl"))
    assert len(wheels) == 1, wheels
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    target = Installed(root)
    _run([target.script("python"), "-m", "pip", "install", "--quiet", str(wheels[0])], cwd=root)
    shutil.rmtree(source)
    yield target


def test_installed_broker_starts_and_helps(installed: Installed, tmp_path: Path) -> None:
    result = _run([installed.script("rebalanced"), "--help"], cwd=tmp_path)
    assert "--log.dirs" in result.stdout
    # Every module of the installed packages imports: a missing subpackage fails here.
    # (The pytest plugin needs pytest, which is the test suite's, not a dependency.)
    _run([installed.script("python"), "-c",
          "import pkgutil, importlib, importlib.util, coordinator, protocol, storage\n"
          "for pkg in (coordinator, protocol, storage):\n"
          "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
          "        if m.name.endswith('.pytest_plugin') and not importlib.util.find_spec("
          "'pytest'):\n"
          "            continue\n"
          "        importlib.import_module(m.name)\n"
          "assert 'site-packages' in coordinator.__file__, coordinator.__file__\n"
          "from importlib.metadata import entry_points\n"
          "plugins = {e.name: e.value for e in entry_points(group='pytest11')}\n"
          "assert plugins.get('rebalanced') == 'coordinator.testkit.pytest_plugin', plugins\n"],
         cwd=tmp_path)


def test_the_wheel_carries_its_c_speedups(installed: Installed, tmp_path: Path) -> None:
    """Built where a C compiler is at hand (they are optional without one): the fsync threads
    and the TLS record path, which must also bind to the OpenSSL of this Python's `ssl`."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the wheel is built without its speedups")
    result = _run([installed.script("python"), "-c",
                   "import storage.fsync_offload as f, protocol.tls as t, "
                   "storage._legacy_speedups, forensics._grouplog_speedups\n"
                   "print(f.AVAILABLE, t.RECORDS_IN_C)"], cwd=tmp_path)
    assert result.stdout.split() == ["True", "True"], result.stdout


def test_healthcheck_fails_without_a_broker(installed: Installed, tmp_path: Path) -> None:
    result = subprocess.run([installed.script("rebalanced-healthcheck"),
                             f"127.0.0.1:{free_port()}"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "unhealthy" in result.stderr


def test_installed_broker_passes_the_stock_client_scenario(
        installed: Installed, tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", command=[installed.script("rebalanced")])
    broker.start(timeout=30)
    try:
        _run([installed.script("rebalanced-healthcheck"), broker.bootstrap], cwd=tmp_path)
        stock_clients.run(broker.bootstrap, "first", tmp_path)
        broker.stop()
        assert broker.proc is not None and broker.proc.returncode == 0, broker.log_text()[-2000:]
        broker.start(timeout=30)
        stock_clients.run(broker.bootstrap, "resume", tmp_path)
    except BaseException:
        print(broker.log_text()[-4000:])
        raise
    finally:
        broker.stop()
