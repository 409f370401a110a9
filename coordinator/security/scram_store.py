"""SCRAM credentials, kept durably by the broker as Kafka keeps them in its metadata: per user
and mechanism the salt, the stored key, the server key and the iteration count, never the
password.

The file is `<log.dirs>/scram-credentials.json`, replaced atomically (written aside, fsynced,
renamed) by AlterUserScramCredentials or by `rebalanced users scram`; a broker reads it again
when it changed, so either may write it while the broker runs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

import structlog

from coordinator.security.durable_file import replace_json

log = structlog.get_logger("rebalanced.security")

FILE_NAME = "scram-credentials.json"
# Kafka's mechanism ids in Describe/AlterUserScramCredentials, and its iteration bounds.
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_NUMBERS = {name: number for number, name in MECHANISM_IDS.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """RFC 5802's keys from SaltedPassword (what AlterUserScramCredentials carries)."""
    digest = _HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", digest)
    return ScramCredential(salt, hashlib.new(digest, client_key).digest(),
                           hmac.digest(salted_password, b"Server Key", digest), iterations)


def credential_from_password(mechanism: str, password: str, iterations: int,
                             salt: bytes | None = None) -> ScramCredential:
    from scramp import ScramMechanism

    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt or secrets.token_bytes(32))
    return ScramCredential(salt, stored_key, server_key, count)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class ScramStore:
    """The credentials file of one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE_NAME
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._stamp: tuple[int, int] | None = None

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        """Every user's credentials by mechanism, read again if the file changed."""
        stamp = self._stat()
        if stamp != self._stamp:
            self._users = self._read() if stamp is not None else {}
            self._stamp = stamp
        return self._users

    def _read(self) -> dict[str, dict[str, ScramCredential]]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
            users: dict[str, dict[str, ScramCredential]] = {}
            for user, mechanisms in document["users"].items():
                users[user] = {
                    mechanism: ScramCredential(base64.b64decode(c["salt"]),
                                               base64.b64decode(c["stored_key"]),
                                               base64.b64decode(c["server_key"]),
                                               int(c["iterations"]))
                    for mechanism, c in mechanisms.items() if mechanism in _HASHES}
            return users
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Keep what was read before: a broken file must not lock every SCRAM user out.
            log.error("SCRAM credentials file unreadable; previous credentials kept",
                      path=str(self.path), error=str(exc))
            return self._users

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users().get(user, {}).get(mechanism)

    def write(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        """Replace the file durably with `users`."""
        document = {"version": 1, "users": {
            user: {mechanism: {"salt": _b64(c.salt), "stored_key": _b64(c.stored_key),
                               "server_key": _b64(c.server_key), "iterations": c.iterations}
                   for mechanism, c in sorted(mechanisms.items())}
            for user, mechanisms in sorted(users.items()) if mechanisms}}
        replace_json(self.path, document)
        self._users = {user: dict(m) for user, m in users.items() if m}
        self._stamp = self._stat()
