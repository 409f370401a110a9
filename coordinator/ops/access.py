"""Who may read the ops HTTP port, and over what: optional TLS and basic or bearer
authentication for `/metrics` and the group page.

Off by default on a loopback address; on any other address `metrics.authentication` must be
set, to `none` at the least, so exposing the page to a network is a decision, not an accident.
Credentials come from a file (`metrics.credentials.file`), never from the command line, and are
compared in constant time.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMES = ("none", "basic", "bearer")


@dataclass(frozen=True, slots=True)
class OpsAccess:
    scheme: str  # "none" | "basic" | "bearer"
    # What an `Authorization` header's credentials must be, one of: for basic the base64 of
    # `user:password`, for bearer the token.
    accepted: tuple[bytes, ...] = ()

    @property
    def challenge(self) -> str:
        return "Basic realm=\"rebalanced\"" if self.scheme == "basic" else "Bearer"

    def allows(self, head: bytes) -> bool:
        if self.scheme == "none":
            return True
        prefix = b"basic " if self.scheme == "basic" else b"bearer "
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() != b"authorization":
                continue
            value = value.strip()
            if value[:len(prefix)].lower() != prefix:
                return False
            given = value[len(prefix):].strip()
            # Every candidate compared, so the time says nothing about which one nearly matched.
            matches = [hmac.compare_digest(given, wanted) for wanted in self.accepted]
            return any(matches)
        return False


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def access_from_settings(settings: Any) -> OpsAccess:
    """The access rule of `metrics.listener`; ValueError says what is missing or wrong."""
    listener = settings["metrics.listener"]
    host = listener.rpartition(":")[0]
    scheme = settings["metrics.authentication"]
    if not scheme:
        if not is_loopback(host):
            raise ValueError(f"metrics.listener {listener} is not a loopback address: set "
                             "metrics.authentication (basic, bearer, or none to serve the "
                             "page and /metrics to anyone who can reach it)")
        return OpsAccess("none")
    if scheme == "none":
        return OpsAccess("none")
    location = settings["metrics.credentials.file"]
    if not location:
        raise ValueError(f"metrics.authentication={scheme} needs metrics.credentials.file")
    try:
        lines = Path(location).read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read metrics.credentials.file: {exc.strerror}") from None
    entries = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if scheme == "basic":
        if any(":" not in entry for entry in entries):
            raise ValueError("metrics.credentials.file: basic authentication needs "
                             "user:password lines")
        accepted = tuple(base64.b64encode(entry.encode()) for entry in entries)
    else:
        accepted = tuple(entry.encode() for entry in entries)
    if not accepted:
        raise ValueError("metrics.credentials.file holds no credentials")
    return OpsAccess(scheme, accepted)


def ssl_context_from_settings(settings: Any) -> ssl.SSLContext | None:
    """HTTPS on `metrics.listener` when `metrics.ssl.certificate.location` is set."""
    certificate = settings["metrics.ssl.certificate.location"]
    if not certificate:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certificate, settings["metrics.ssl.key.location"] or None)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the metrics.listener certificate: {exc}") from None
    return context
