"""Warnings about refused requests: one line per client, API, version and problem per minute.

A client that keeps sending a request the broker refuses (a version it does not serve, a frame
it cannot decode) usually does so on every reconnect, many times a second. Logging each one
buries everything else, so the first refusal of a kind is logged with what the client should
change, repeats within `window_ms` are only counted, and the next line after the window carries
that count (`suppressed`).

Each broker owns one `RefusalLog` and hands it to its server's connections and to the group
runtime, so they share the per-minute budget; nothing of it is process-wide.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from kio.index import api_key_map

log = structlog.get_logger("rebalanced.refusals")

WINDOW_MS = 60_000
_MAX_KEYS = 10_000  # distinct (client, api, version, problem) remembered at once
_I16 = struct.Struct(">h")


def api_name(api_key: int | None) -> str:
    """Kafka's name of an API ("OffsetCommit"), or "api_key N" for keys kio does not know."""
    if api_key is None:
        return "unknown"
    name = api_key_map.get(api_key)  # type: ignore[call-overload]
    if name is None:
        return f"api_key {api_key}"
    return "".join(part.capitalize() for part in str(name).split("_"))


def client_id_of(frame: bytes | memoryview) -> str:
    """The client id of a request frame, best effort: every request header version carries it
    as an int16-length string right after the 8 fixed bytes."""
    if len(frame) < 10:
        return ""
    (length,) = _I16.unpack_from(frame, 8)
    if length < 0 or 10 + length > len(frame):
        return ""
    return bytes(frame[10:10 + length]).decode("utf-8", "replace")


@dataclass(slots=True)
class _Seen:
    logged_at_ms: float
    suppressed: int = 0


class RefusalLog:
    def __init__(self, window_ms: int = WINDOW_MS,
                 clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000) -> None:
        self.window_ms = window_ms
        self._clock_ms = clock_ms
        self._seen: dict[tuple[str, int | None, int | None, str], _Seen] = {}
        # api key -> (min, max) version served; the owning broker fills it in.
        self.supported: dict[int, tuple[int, int]] = {}

    def version_advice(self, api_key: int, api_version: int) -> str:
        """What a client sending an unserved (api_key, api_version) should change."""
        name = api_name(api_key)
        served = self.supported.get(api_key)
        if served is None:
            return (f"this broker does not implement {name}: turn off the client feature that "
                    "sends it, or point that client at a full Kafka cluster")
        low, high = served
        if api_version > high:
            return (f"this broker serves {name} v{low}-v{high}: let the client negotiate "
                    f"versions with ApiVersions, or pin it to at most v{high}")
        return (f"this broker serves {name} v{low}-v{high}: configure the client for a newer "
                "broker version (kafka-python api_version, librdkafka broker.version.fallback)")

    def refuse_version(self, *, client_id: str, api_key: int, api_version: int,
                       **fields: object) -> bool:
        return self.refused("connection closed on bad input", client_id=client_id,
                            api_key=api_key, api_version=api_version,
                            problem="unsupported version",
                            advice=self.version_advice(api_key, api_version), **fields)

    def refused(self, message: str, *, client_id: str, api_key: int | None,
                api_version: int | None, problem: str, advice: str, **fields: object) -> bool:
        """Log `message` unless this (client, API, version, problem) was logged within the
        window; returns whether it was logged."""
        key = (client_id, api_key, api_version, problem)
        now = self._clock_ms()
        seen = self._seen.get(key)
        if seen is not None and now - seen.logged_at_ms < self.window_ms:
            seen.suppressed += 1
            return False
        suppressed = seen.suppressed if seen is not None else 0
        if seen is None and len(self._seen) >= _MAX_KEYS:
            self._forget_old(now)
        self._seen[key] = _Seen(now)
        log.warning(message, client_id=client_id, api=api_name(api_key), api_key=api_key,
                    api_version=api_version, problem=problem, advice=advice,
                    suppressed=suppressed, window_s=self.window_ms // 1000, **fields)
        return True

    def _forget_old(self, now: float) -> None:
        stale = [k for k, v in self._seen.items() if now - v.logged_at_ms >= self.window_ms]
        for k in stale:
            del self._seen[k]
        if len(self._seen) >= _MAX_KEYS:
            self._seen.clear()
