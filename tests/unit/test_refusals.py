"""Refusal warnings: once per client, API, version and problem per minute, with a count."""

from __future__ import annotations

import structlog

from protocol.refusals import RefusalLog, api_name, client_id_of


def test_repeats_within_the_window_are_counted_and_reported_on_the_next_line() -> None:
    now = [0.0]
    refusals = RefusalLog(window_ms=60_000, clock_ms=lambda: now[0])
    refusals.supported = {1: (0, 16)}
    with structlog.testing.capture_logs() as logs:
        for _ in range(500):
            refusals.refuse_version(client_id="legacy-app", api_key=1, api_version=17)
        refusals.refuse_version(client_id="other-app", api_key=1, api_version=17)
        now[0] = 61_000
        refusals.refuse_version(client_id="legacy-app", api_key=1, api_version=17)
    assert [(e["client_id"], e["suppressed"]) for e in logs] == [
        ("legacy-app", 0), ("other-app", 0), ("legacy-app", 499)]
    first = logs[0]
    assert (first["api"], first["api_version"]) == ("Fetch", 17)
    assert "v0-v16" in first["advice"] and "ApiVersions" in first["advice"]


def test_advice_names_what_to_change() -> None:
    refusals = RefusalLog()
    refusals.supported = {8: (0, 9)}
    assert "does not implement" in refusals.version_advice(57, 0)
    assert "at most v9" in refusals.version_advice(8, 10)


def test_client_id_and_api_names() -> None:
    frame = bytes.fromhex("000100020000000100036162630000")
    assert client_id_of(frame) == "abc"
    assert client_id_of(b"\x00\x01") == ""
    assert (api_name(8), api_name(None)) == ("OffsetCommit", "unknown")
