"""`rebalanced`: start the broker with settings from a file, the environment and flags."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import Sequence

import structlog

import coordinator.without_hypothesis  # noqa: F401  (first: before anything imports kio)
from coordinator.runtime import Broker
from coordinator.settings import ConfigError, load
from protocol.server import KafkaServer, install_signal_handlers, new_event_loop

# Log lines are written through a buffer flushed every 100 ms (and at exit) rather than one
# write syscall per line: a join storm logs an event per member.
_LOG_STREAM = open(sys.stderr.fileno(), "w", buffering=1 << 16, closefd=False)  # noqa: SIM115
_LOG_FLUSH_SECONDS = 0.1


def configure_logging(level: int = logging.INFO) -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(_LOG_STREAM),
        cache_logger_on_first_use=True,
    )


async def _flush_logs_periodically() -> None:
    while True:
        await asyncio.sleep(_LOG_FLUSH_SECONDS)
        _LOG_STREAM.flush()


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


async def serve(broker: Broker, server_factory: type[KafkaServer] = KafkaServer) -> None:
    started = time.monotonic()
    flusher = asyncio.get_running_loop().create_task(_flush_logs_periodically())
    settings = broker.settings
    host, port = settings.listen
    await broker.start()
    _tune_gc()
    server = server_factory(broker, host=host, port=port,
                            max_frame_bytes=settings["socket.request.max.bytes"],
                            max_in_flight=settings["queued.max.requests"],
                            idle_ms=settings["connections.max.idle.ms"],
                            max_connections=settings["max.connections"],
                            max_connections_per_ip=settings["max.connections.per.ip"],
                            max_buffered_bytes=settings["queued.max.request.bytes"])
    bound = await server.start()
    log = structlog.get_logger("rebalanced")
    log.info("broker started", host=host, port=bound, node_id=broker.node_id,
             data_dir=str(broker.data_dir), startup_ms=round((time.monotonic() - started) * 1000))
    install_signal_handlers(broker.stop_requested.set)
    await broker.stop_requested.wait()
    log.info("broker stopping")
    await server.stop()
    await broker.stop()
    log.info("broker stopped")
    flusher.cancel()
    if broker.failure is not None:
        raise broker.failure


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    try:
        settings, args = load(argv)
    except ConfigError as exc:
        print(f"rebalanced: configuration error: {exc}", file=sys.stderr)
        return 2
    broker = Broker(settings, repair=args.repair)
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(serve(broker))
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
        _LOG_STREAM.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
