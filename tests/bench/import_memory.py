"""Which modules a started broker's memory went to: Python allocations made while each module
was imported, by package.

    python -m tests.bench.import_memory --top 30

In this process: tracemalloc is started, every module's import (`exec_module`: its code
objects, its classes and functions, whatever its body builds) is timed in traced bytes, minus
the modules it imported itself, and then `python -m coordinator` runs (empty data directory
under `--dir`, a free loopback port). Once the broker accepts connections, the bytes are summed
by package (`coordinator.<sub>.<module>` by their first three names, `protocol`, `storage` and
`kio` by two, anything else by its first) and printed, with the total and the number of
modules; then the process ends. The figures are of allocations, not of resident pages: the
mapped libraries (the interpreter, uvloop, OpenSSL, kio's native reader) are not in them, nor
are the few modules this script imports before it starts counting (`argparse`, `socket`,
`tempfile`, `threading` and what they import).
"""

from __future__ import annotations

import argparse
import collections
import importlib._bootstrap_external as bootstrap_external
import os
import runpy
import shutil
import socket
import sys
import tempfile
import threading
import time
import tracemalloc
from typing import Any

_SPLIT_DEEPER = {"coordinator": 3, "protocol": 2, "storage": 2, "kio": 2}


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:_SPLIT_DEEPER.get(parts[0], 1)])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _watch_imports() -> collections.Counter[str]:
    """Start tracemalloc and count each import's own traced bytes by module name."""
    tracemalloc.start(1)
    own: collections.Counter[str] = collections.Counter()
    nested: list[int] = []
    loader: Any = bootstrap_external._LoaderBasics  # type: ignore[attr-defined]
    original = loader.exec_module

    def exec_module(self: Any, module: Any) -> None:
        nested.append(0)
        before = tracemalloc.get_traced_memory()[0]
        try:
            original(self, module)
        finally:
            total = tracemalloc.get_traced_memory()[0] - before
            own[module.__name__] += total - nested.pop()
            if nested:
                nested[-1] += total

    loader.exec_module = exec_module
    return own


def _report_when_accepting(port: int, own: collections.Counter[str], top: int,
                           data: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        print("the broker did not accept connections within 60 s", file=sys.stderr)
        os._exit(1)
    by_package: collections.Counter[str] = collections.Counter()
    for module, size in own.items():
        by_package[_package(module)] += size
    lines = [f"{sum(own.values()) / 1e6:.2f} MB traced while importing {len(own)} modules"]
    lines += [f"{size / 1e3:9.1f} kB  {package}"
              for package, size in by_package.most_common(top)]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    shutil.rmtree(data, ignore_errors=True)
    os._exit(0)  # the broker has served its purpose; no shutdown to wait for


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.import_memory",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=30, help="packages to print")
    parser.add_argument("--dir", default=None, help="where the scratch data directory goes")
    args = parser.parse_args(argv)
    own = _watch_imports()
    port = _free_port()
    data = tempfile.mkdtemp(prefix="import-memory-", dir=args.dir)
    threading.Thread(target=_report_when_accepting, args=(port, own, args.top, data),
                     daemon=True).start()
    sys.argv = ["coordinator", "--log.dirs", data,
                "--listeners", f"PLAINTEXT://127.0.0.1:{port}"]
    runpy.run_module("coordinator", run_name="__main__", alter_sys=True)
    return 1  # the broker stopped before the report


if __name__ == "__main__":
    raise SystemExit(main())
