"""`rebalanced`: start the broker with settings from a file, the environment and flags."""

from __future__ import annotations

import asyncio
import atexit
import gc
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from coordinator.ops.log_output import BufferedLines, BufferedLoggerFactory

# The broker's modules are imported when the broker runs, not here: loading kio's protocol
# tables takes most of a second, which `rebalanced groups ...` (an admin client) does not need.
if TYPE_CHECKING:
    from coordinator.ops.http import OpsServer
    from coordinator.ops.loop_lag import LoopLagMonitor
    from coordinator.runtime.broker import Broker
    from coordinator.runtime.test_control import TestControl
    from protocol.server import KafkaServer, ListenerSecurity

# Log lines are written through a buffer flushed once per 100 ms burst of lines (and at exit)
# rather than one write syscall per line: a join storm logs an event per member
# (`coordinator/ops/log_output.py`).
_LOG_STREAM = open(sys.stderr.fileno(), "w", buffering=1 << 16, closefd=False)  # noqa: SIM115
_LOG_LINES = BufferedLines(_LOG_STREAM)
# `main` flushes on its way out; this covers a line logged after it (its flusher thread keeps
# the stream alive, so the interpreter's own teardown would not flush it).
atexit.register(_LOG_LINES.flush)


def configure_logging(level: int = logging.INFO, log_format: str = "auto") -> None:
    """JSON lines, or structlog's console renderer (time, level, the sentence, key fields) when
    `log.format` is `console`, or `auto` and stderr is a terminal."""
    console = log_format == "console" or (log_format == "auto" and _LOG_STREAM.isatty())
    renderer: Any = (structlog.dev.ConsoleRenderer(colors=_LOG_STREAM.isatty())
                     if console else structlog.processors.JSONRenderer())
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso" if not console else "%H:%M:%S.%f",
                                             utc=True),
            *([] if console else [structlog.processors.format_exc_info]),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=BufferedLoggerFactory(_LOG_LINES),
        cache_logger_on_first_use=True,
    )


def _log_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """An error no callback caught, logged as the broker's other lines are (asyncio's own
    handler writes to stderr directly, ahead of the info lines still in the log's buffer)."""
    exception = context.get("exception")
    fields = {key: repr(value) for key, value in context.items()
              if key not in ("message", "exception")}
    structlog.get_logger("rebalanced.loop").error(
        "unhandled error in the event loop", detail=context.get("message"),
        exc_info=exception if isinstance(exception, BaseException) else False, **fields)


def _tune_gc() -> None:
    """Keep the collector's pauses short under load.

    Everything made so far (modules, settings, the opened logs) lives as long as the process,
    so it is frozen out of every collection. Young collections run every 10,000 allocations
    instead of 700, and full ones far less often: under a commit load each commit leaves ten
    long-lived offset values behind, and the default thresholds started a full collection
    several times a second, each stalling the loop for tens of milliseconds (a commit's p99).
    Only garbage in reference cycles waits longer; the rest is freed by reference counting.
    """
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)


def raise_open_files_limit() -> int:
    """Raise the soft limit of open files to the hard limit, and return it.

    The default soft limit (often 1,024) is a safety net for interactive shells, not a budget
    for a broker: connections, partition segments and the group log's segment rolls all need
    descriptors, and running out of them fails a log roll. The HTTP port's share is capped
    below it (`coordinator.ops.http.connection_limit`).
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        # An unlimited hard limit is refused above the kernel's nr_open.
        try:
            with open("/proc/sys/fs/nr_open", encoding="ascii") as f:
                hard = int(f.read())
        except (OSError, ValueError):
            hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, resource.getrlimit(
                resource.RLIMIT_NOFILE)[1]))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def _watch_loop(broker: Broker) -> LoopLagMonitor:
    """The event-loop lag monitor, on this (the loop's) thread, exported at /metrics."""
    from coordinator.ops.loop_lag import LoopLagMonitor, schedstat_reader
    from protocol.connection import ACTIVITY

    monitor = LoopLagMonitor(warn_ms=broker.settings["loop.lag.warn.ms"],
                             runqueue_wait=schedstat_reader())
    loop = asyncio.get_running_loop()
    monitor.start(loop.call_later, activity=ACTIVITY, call_soon=loop.call_soon)
    if broker.metrics is not None:
        broker.metrics.loop_lag = monitor
    return monitor


async def serve(broker: Broker, server_factory: type[KafkaServer] | None = None,
                security: Mapping[str, ListenerSecurity] | None = None) -> None:
    from coordinator.runtime.broker import connection_limit
    from coordinator.security.listeners import listener_security
    from protocol.server import KafkaServer, install_signal_handlers

    server_factory = server_factory or KafkaServer
    started = time.monotonic()
    open_files = raise_open_files_limit()
    settings = broker.settings
    if security is None:
        security = listener_security(settings)
    await broker.start()
    _tune_gc()
    loop_lag = _watch_loop(broker)
    server = server_factory(broker,
                            listeners=[(listener.name, listener.host, listener.port)
                                       for listener in settings.listeners],
                            security=security,
                            max_frame_bytes=settings["socket.request.max.bytes"],
                            max_in_flight=settings["queued.max.requests"],
                            idle_ms=settings["connections.max.idle.ms"],
                            max_connections=connection_limit(
                                settings["max.connections"],
                                settings["offsets.topic.num.partitions"]),
                            max_connections_per_ip=settings["max.connections.per.ip"],
                            max_buffered_bytes=settings["queued.max.request.bytes"],
                            refusals=broker.refusals)
    bound = await server.start()
    log = structlog.get_logger("rebalanced")
    ops = await _start_ops(broker, server)
    control = await _start_test_control(broker)
    listening = {listener.name: f"{listener.host}:{server.bound[listener.name]}"
                 for listener in settings.listeners}
    protocols = settings["listener.security.protocol.map"]
    log.info("broker started", host=settings.listen[0], port=bound, listeners=listening,
             security_protocols={listener.name: protocols.get(listener.name, "PLAINTEXT")
                                 for listener in settings.listeners},
             advertised={name: f"{host}:{port}"
                         for name, (host, port) in settings.advertised_by_listener().items()},
             node_id=broker.node_id, data_dir=str(broker.data_dir),
             open_files_limit=open_files,
             open_segments_limit=broker.segment_budget.limit,
             startup_ms=round((time.monotonic() - started) * 1000))
    install_signal_handlers(broker.stop_requested.set)
    await broker.stop_requested.wait()
    log.info("broker stopping")
    if ops is not None:
        await ops.stop()
    if control is not None:
        await control.stop()
    await server.stop()
    await broker.stop()
    loop_lag.stop()
    log.info("broker stopped")
    if broker.failure is not None:
        raise broker.failure


async def _start_ops(broker: Broker, server: KafkaServer) -> OpsServer | None:
    """The metrics.listener endpoint (/metrics and the group page), when configured."""
    listener = broker.settings["metrics.listener"]
    if not listener or broker.metrics is None:
        return None
    # Imported only when served: the page's modules (and `html`) are half a megabyte.
    from coordinator.ops.access import access_from_settings, ssl_context_from_settings
    from coordinator.ops.http import OpsLimits, OpsServer

    host, _, port = listener.rpartition(":")
    access = access_from_settings(broker.settings)
    tls = ssl_context_from_settings(broker.settings)
    ops = OpsServer(broker.ops_view, broker.metrics, lambda: len(server.connections),
                    OpsLimits.from_settings(broker.settings), access)
    bound = await ops.start(host.strip("[]"), int(port), tls)
    structlog.get_logger("rebalanced").info("metrics listening", host=host, port=bound,
                                            paths=["/metrics", "/"],
                                            scheme="https" if tls else "http",
                                            authentication=access.scheme,
                                            max_connections=ops.max_connections)
    return ops


async def _start_test_control(broker: Broker) -> TestControl | None:
    """The test control endpoint (test.control.listener), when configured: faults, virtual
    time and group waiters for test suites (docs/testing.md)."""
    listener = broker.settings["test.control.listener"]
    if not listener:
        return None
    from coordinator.runtime.test_control import TestControl, VirtualClock

    assert isinstance(broker.clock, VirtualClock)
    control = TestControl(broker, broker.clock, broker.settings["test.control.token"],
                          broker.settings["test.control.allow.remote"])
    host, _, port = listener.rpartition(":")
    bound = await control.start(host.strip("[]"), int(port))
    structlog.get_logger("rebalanced").warning(
        "test control endpoint listening: faults and virtual time can be driven from it",
        host=host, port=bound)
    return control


def test_control_problem(settings: Any) -> str | None:
    """Why the test control settings cannot be used, or None."""
    import ipaddress

    listener = settings["test.control.listener"]
    if not listener:
        return None
    if not settings["test.control.token"]:
        return "test.control.listener needs test.control.token"
    host = listener.rpartition(":")[0].strip("[]")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not settings["test.control.allow.remote"]:
        return (f"test.control.listener {listener} is not a loopback address: set "
                "test.control.allow.remote=true to serve other hosts")
    return None


def _unwritable_data_dir(data_dir: Path) -> str | None:
    """Why the broker could not write its data directory (log.dirs), or None.

    A volume mounted from a directory the broker's user does not own (a bind mount made by
    root, in a container) fails here, with the command that fixes it, rather than as a
    traceback from the first file the broker opens."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except PermissionError:
        pass
    except OSError as exc:
        return f"cannot create log.dirs {data_dir}: {exc.strerror}"
    if data_dir.is_dir() and os.access(data_dir, os.W_OK | os.X_OK):
        return None
    uid, gid = os.getuid(), os.getgid()
    where = data_dir if data_dir.is_dir() else data_dir.parent
    return (f"log.dirs {data_dir} is not writable by uid {uid} (gid {gid}): "
            f"run `chown -R {uid}:{gid}` on {where} (for a bind mount: on its host directory)")


def _keep_hypothesis_out() -> None:
    """kio registers Hypothesis strategies for its types whenever Hypothesis can be imported,
    and development environments have it (a test dependency). The broker never generates test
    data, yet the import costs about 10 MB of resident memory and 0.15 s of start-up. Marking
    the module as absent makes kio take its "not installed" path, as it does in the production
    image. A process that has already imported Hypothesis (a test run) keeps it. Called before
    anything imports kio."""
    if "hypothesis" not in sys.modules:
        sys.modules["hypothesis"] = None  # type: ignore[assignment]


def main(argv: Sequence[str] | None = None) -> int:
    _keep_hypothesis_out()
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["groups"]:
        # The operators' commands: a Kafka admin client, not the broker.
        from coordinator.cli.groups import main as groups_main

        return groups_main(arguments[1:])
    if arguments[:1] == ["transactions"]:
        from coordinator.cli.transactions import main as transactions_main

        return transactions_main(arguments[1:])
    if arguments[:1] == ["faults"]:
        # The test control endpoint's fault rules: an HTTP client, not the broker.
        from coordinator.testkit.cli import main as faults_main

        return faults_main(arguments[1:])
    if arguments[:1] in (["users"], ["acls"]):
        from coordinator.cli.security import main as security_main

        return security_main(arguments[0], arguments[1:])
    argv = arguments
    # Importing the broker makes long-lived objects by the hundred thousand, and the collector
    # kept walking them while they were made (about 80 collections, 15 % of the imports' time);
    # `_tune_gc` freezes them out of collections once the broker has started.
    gc.disable()
    try:
        from coordinator.runtime.broker import Broker
        from coordinator.settings import ConfigError, load, log_setting_warnings
        from protocol.server import new_event_loop
    finally:
        gc.enable()

    configure_logging()
    try:
        settings, args = load(argv, defer_warnings=True)
    except ConfigError as exc:
        print(f"rebalanced: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(log_format=settings["log.format"])
    log_setting_warnings(args.setting_warnings)
    from coordinator.security.listeners import listener_security

    try:
        security = listener_security(settings)
    except ConfigError as exc:
        print(f"rebalanced: configuration error: {exc}", file=sys.stderr)
        return 2
    if settings["metrics.listener"]:
        from coordinator.ops.access import access_from_settings, ssl_context_from_settings

        try:  # checked here too, so a wrong value stops the start before anything listens
            access_from_settings(settings)
            ssl_context_from_settings(settings)
        except ValueError as exc:
            print(f"rebalanced: configuration error: {exc}", file=sys.stderr)
            return 2
    unwritable = _unwritable_data_dir(settings.data_dir)
    if unwritable:
        print(f"rebalanced: {unwritable}", file=sys.stderr)
        return 2
    problem = test_control_problem(settings)
    if problem:
        print(f"rebalanced: configuration error: {problem}", file=sys.stderr)
        return 2
    clock = None
    if settings["test.control.listener"]:
        from coordinator.runtime.test_control import VirtualClock

        clock = VirtualClock()  # the endpoint's `advance` moves it
    broker = Broker(settings, repair=args.repair, clock=clock)
    if clock is not None:
        from coordinator.runtime.test_control import prepare

        prepare(broker)
    loop = new_event_loop()
    loop.set_exception_handler(_log_loop_error)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve(broker, security=security))
    except Exception as exc:
        structlog.get_logger("rebalanced").error("broker failed", error=str(exc))
        print(f"rebalanced: {exc}", file=sys.stderr)
        return 1
    finally:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()
        _LOG_LINES.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
