"""The `metrics.listener` HTTP endpoint: `/metrics` (Prometheus) and `/` (the group page).

A minimal HTTP/1.1 server on the broker's event loop: one GET per connection. The data is
copied on the loop (bounded), and formatting runs in a worker thread, so a scrape never holds
the loop for long. Anything but a GET of a known path gets a 4xx answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from coordinator.ops import metrics as om
from coordinator.ops import page

log = structlog.get_logger("rebalanced.ops")

_MAX_REQUEST_BYTES = 16 * 1024
_READ_TIMEOUT_S = 10.0


class OpsServer:
    def __init__(self, broker: Any, metrics: om.BrokerMetrics,
                 connections: Callable[[], int]) -> None:
        self._broker = broker
        self._metrics = metrics
        self._connections = connections
        self._server: asyncio.base_events.Server | None = None
        self._exposition_cache: dict[str, Any] = {}

    async def start(self, host: str, port: int) -> int:
        # prometheus-client is imported at start, not by the first scrape (the import takes
        # tens of milliseconds of the broker's CPU while it serves).
        import prometheus_client  # noqa: F401

        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True)
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            status, content_type, body = await self._answer(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            writer.close()
            return
        except Exception:
            log.exception("ops request failed")
            status, content_type, body = "500 Internal Server Error", "text/plain", b"error\n"
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                     f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                     "Connection: close\r\n\r\n".encode() + body)
        try:
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _answer(self, head: bytes) -> tuple[str, str, bytes]:
        if len(head) > _MAX_REQUEST_BYTES:
            return "431 Request Header Fields Too Large", "text/plain", b"too large\n"
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(request_line) != 3:
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target, _ = request_line
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        path = target.split("?", 1)[0]
        loop = asyncio.get_running_loop()
        now_ms = self._broker.wall_ms()
        if path == "/metrics":
            runtime = self._broker.groups
            snap = self._metrics.snapshot(runtime.manager.groups.values(),
                                          _num_offsets(runtime.offsets), self._connections(),
                                          now_ms, runtime.manager.consumer.groups.values())
            body = await loop.run_in_executor(None, om.exposition, snap,
                                              self._exposition_cache)
            return "200 OK", "text/plain; version=0.0.4; charset=utf-8", body
        if path in ("/", "/index.html"):
            page_snap = page.snapshot(self._broker, self._metrics, now_ms)
            html = await loop.run_in_executor(None, page.render, page_snap)
            return "200 OK", "text/html; charset=utf-8", html.encode()
        return "404 Not Found", "text/plain", b"not found: try / or /metrics\n"


def _num_offsets(offsets: Any) -> int:
    """Committed offsets held, for Kafka's NumOffsets."""
    table = getattr(offsets, "_offsets", {})
    return sum(len(partitions) for topics in table.values() for partitions in topics.values())
