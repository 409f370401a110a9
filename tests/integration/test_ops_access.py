"""The ops HTTP port with TLS and authentication, on a real broker: HTTPS with basic
authentication answers 401 without the right credentials; a bearer token; and a listener on a
non-loopback address is refused at start unless `metrics.authentication` says what it wants."""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess, free_port
from tests.tls_material import Pki

pytestmark = pytest.mark.integration
PROJECT = Path(__file__).resolve().parents[2]


def _wait_for(port: int) -> None:
    """The ops port listens a moment after the Kafka port the broker's start waits for."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _get(url: str, context: ssl.SSLContext | None = None,
         authorization: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, answer.read().decode(), ""
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode(), refused.headers.get(
            "WWW-Authenticate", "")


def test_https_with_basic_authentication(tmp_path: Path) -> None:
    pki = Pki.create(tmp_path / "pki")
    server_pem = pki.issue("ops", server=True, CN="localhost")
    credentials = tmp_path / "ops-users"
    credentials.write_text("# who may read the page\nprometheus:scrape-secret\n")
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", settings={
        "metrics.listener": f"127.0.0.1:{port}",
        "metrics.ssl.certificate.location": str(server_pem),
        "metrics.authentication": "basic",
        "metrics.credentials.file": str(credentials)})
    broker.start()
    _wait_for(port)
    try:
        context = ssl.create_default_context(cafile=str(pki.ca_path))
        context.check_hostname = False  # the address is 127.0.0.1; the chain is verified
        url = f"https://127.0.0.1:{port}/metrics"
        status, _, challenge = _get(url, context)
        assert status == 401 and challenge.startswith("Basic")
        wrong = "Basic " + base64.b64encode(b"prometheus:guess").decode()
        assert _get(url, context, wrong)[0] == 401
        right = "Basic " + base64.b64encode(b"prometheus:scrape-secret").decode()
        status, text, _ = _get(url, context, right)
        assert status == 200 and "rebalanced_requests_total" in text
        assert _get(f"https://127.0.0.1:{port}/", context, right)[0] == 200
        with pytest.raises(OSError):  # plain HTTP on the TLS port: closed, no answer
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
    finally:
        broker.stop()
    log = broker.log_path.read_text(errors="replace")
    assert "scrape-secret" not in log and "Traceback" not in log


def test_bearer_token(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("token-one\n")
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", settings={
        "metrics.listener": f"127.0.0.1:{port}", "metrics.authentication": "bearer",
        "metrics.credentials.file": str(tokens)})
    broker.start()
    _wait_for(port)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        status, _, challenge = _get(url)
        assert status == 401 and challenge == "Bearer"
        assert _get(url, authorization="Bearer token-two")[0] == 401
        assert _get(url, authorization="Bearer token-one")[0] == 200
    finally:
        broker.stop()


def _start_fails(tmp_path: Path, *flags: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", "--log.dirs", str(tmp_path / "data"),
         "--listeners", f"PLAINTEXT://127.0.0.1:{free_port()}", *flags],
        cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    return done.stderr


def test_a_non_loopback_listener_needs_an_explicit_choice(tmp_path: Path) -> None:
    error = _start_fails(tmp_path, "--metrics.listener", f"0.0.0.0:{free_port()}")
    assert "metrics.authentication" in error
    error = _start_fails(tmp_path, "--metrics.listener", f"127.0.0.1:{free_port()}",
                         "--metrics.authentication", "basic")
    assert "metrics.credentials.file" in error
