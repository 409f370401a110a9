"""A warm parent for test brokers: it imports the broker's modules once, then forks a broker
for each start asked on its stdin. Importing them (kio's protocol tables above all) is most of
a broker's start-up; a forked child starts with them loaded, in its own process all the same.

Protocol, one JSON object a line on stdin: {"argv": [...], "log": path, "cwd": path}; the
answer on stdout is the child's pid (or `error: ...`). On end of input the parent stops the
brokers it forked that still run, and exits.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import traceback


def _run_child(job: dict[str, object]) -> int:
    from coordinator.__main__ import main as broker_main

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()  # the test's Ctrl-C reaches the test, which stops its brokers itself
    log_fd = os.open(str(job["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.chdir(str(job["cwd"]))
    argv = job["argv"]
    assert isinstance(argv, list)
    return broker_main([str(a) for a in argv])


def main() -> int:
    from coordinator.__main__ import _keep_hypothesis_out

    _keep_hypothesis_out()
    # What `rebalanced` imports before it serves: paid here once, not per broker.
    for module in ("coordinator.runtime.broker", "coordinator.security.listeners",
                   "coordinator.runtime.test_control", "protocol.server"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)

    # Forked brokers are reaped by the kernel; `os.kill(pid, 0)` then tells the test they ended.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    children: list[int] = []
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            job = json.loads(line)
        except ValueError as exc:
            out.write(f"error: {exc}\n")
            out.flush()
            continue
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _run_child(job)
            except BaseException:
                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        children.append(pid)
        out.write(f"{pid}\n")
        out.flush()
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
