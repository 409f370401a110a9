"""The SASL mechanisms' server side: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (unsecured JWS).

Each exchange is an object fed the client's tokens one at a time (`step`) until `complete`;
a wrong credential raises `SaslFailure` with the message the client is sent (Kafka's) and, for
the log only, why. Nothing here ever holds a password longer than one comparison.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from coordinator.security.scram_store import ScramStore
from coordinator.settings import ConfigError

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


class SaslFailure(Exception):
    """Authentication failed: `message` goes to the client, `reason` to the log."""

    def __init__(self, message: str, reason: str, user: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.user = user


class Exchange(Protocol):
    complete: bool
    principal: str
    # When the credential itself stops being valid (an OAuth token's exp), in epoch ms.
    expires_at_ms: int | None

    def step(self, token: bytes) -> bytes: ...


# JAAS: `module.Name required key="value" key2=value2;`
_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("((?:\\.|[^"\\])*)"|[^\s;"]+)')


def parse_jaas(text: str) -> dict[str, str]:
    """The options of a one-module JAAS entry (`sasl.jaas.config`)."""
    match = re.match(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b",
                     text)
    if match is None:
        raise ConfigError("sasl.jaas.config: expected `<LoginModule> required key=\"value\" "
                          "...;`")
    options: dict[str, str] = {}
    position = match.end()
    while True:
        option = _JAAS_OPTION.match(text, position)
        if option is None:
            break
        value = option.group(3)
        options[option.group(1)] = (re.sub(r"\\(.)", r"\1", value) if value is not None
                                    else option.group(2))
        position = option.end()
    if not text[position:].strip().startswith(";"):
        raise ConfigError("sasl.jaas.config: cannot read the options (each key=\"value\"; "
                          "the entry ends with ';')")
    return options


@dataclass(slots=True)
class PlainExchange:
    """PLAIN (RFC 4616): `authzid NUL user NUL password`, the users those of the listener's
    JAAS `user_<name>="<password>"` options, as Kafka's PlainLoginModule has them."""

    users: Mapping[str, str]
    complete: bool = False
    principal: str = ""
    expires_at_ms: int | None = None

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens",
                              "malformed PLAIN message")
        authzid, user_bytes, password_bytes = parts
        user = user_bytes.decode("utf-8", "replace")
        if not user:
            raise SaslFailure("Authentication failed: username not specified", "empty user")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password_bytes):
            raise SaslFailure("Authentication failed: Invalid username or password",
                              "unknown user" if expected is None else "wrong password", user)
        if authzid and authzid != user_bytes:
            raise SaslFailure("Authentication failed: Client requested an authorization id "
                              "that is different from username", "authorization id differs",
                              user)
        self.complete = True
        self.principal = user
        return b""


# Kafka's client-first message: `n,[a=authzid],n=user,r=nonce[,extensions]`.
_SCRAM_CLIENT_FIRST = re.compile(r"n,(?:a=([^,]*))?,(n=([^,]*),r=[^,]*)((?:,[A-Za-z0-9]+=[^,]*)*)"
                                 r"\Z")


def _scram_name(escaped: str) -> str:
    return escaped.replace("=2C", ",").replace("=3D", "=")


class ScramExchange:
    """SCRAM-SHA-256/512 (RFC 5802) with Kafka's rules: channel binding is refused, an
    authorization id must equal the user, `tokenauth` is the only extension (and, with no
    delegation tokens here, fails). The exchange itself is `scramp`'s."""

    __slots__ = ("_server", "_user", "complete", "expires_at_ms", "mechanism", "principal",
                 "store")

    def __init__(self, mechanism: str, store: ScramStore) -> None:
        self.mechanism = mechanism
        self.store = store
        self.complete = False
        self.principal = ""
        self.expires_at_ms: int | None = None
        self._server: object | None = None
        self._user = ""

    def step(self, token: bytes) -> bytes:
        from scramp import ScramException, ScramMechanism

        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Authentication failed: Invalid SCRAM message",
                              "SCRAM message is not UTF-8", self._user) from None
        try:
            if self._server is None:
                return self._first(message, ScramMechanism)
            server = self._server
            server.set_client_final(message)  # type: ignore[attr-defined]
            final = server.get_server_final()  # type: ignore[attr-defined]
        except ScramException as exc:
            raise SaslFailure("Authentication failed during authentication due to invalid "
                              "credentials with SASL mechanism " + self.mechanism,
                              f"SCRAM: {exc}", self._user) from None
        self.complete = True
        self.principal = self._user
        return str(final).encode()

    def _first(self, message: str, mechanism_type: type) -> bytes:
        match = _SCRAM_CLIENT_FIRST.match(message)
        if match is None:
            raise SaslFailure("Authentication failed: Invalid SCRAM client first message",
                              "malformed SCRAM client-first (or channel binding asked for)")
        authzid, _, escaped_user, extensions = match.groups()
        user = _scram_name(escaped_user)
        self._user = user
        if authzid is not None and authzid != "":
            # Kafka accepts an authorization id equal to the user; the exchange library takes
            # only the empty one, which every Kafka client sends.
            raise SaslFailure("Authentication failed: Authorization id is not supported",
                              "SCRAM authorization id given", user)
        keys = [part.split("=", 1)[0] for part in extensions.split(",") if part]
        if any(key != "tokenauth" for key in keys):
            raise SaslFailure("Authentication failed: Unsupported extensions",
                              f"SCRAM extensions {keys}", user)
        if keys:
            raise SaslFailure("Authentication failed: delegation tokens are not supported",
                              "SCRAM tokenauth extension", user)
        credential = self.store.lookup(user, self.mechanism)
        if credential is None:
            raise SaslFailure("Authentication failed during authentication due to invalid "
                              "credentials with SASL mechanism " + self.mechanism,
                              "unknown SCRAM user", user)

        def auth_info(_: str) -> tuple[bytes, bytes, bytes, int]:
            return (credential.salt, credential.stored_key, credential.server_key,
                    credential.iterations)

        server = mechanism_type(self.mechanism).make_server(auth_info)
        server.set_client_first(message)
        self._server = server
        return str(server.get_server_first()).encode()


@dataclass(frozen=True, slots=True)
class UnsecuredJwsOptions:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler options (from the JAAS entry)."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    clock_skew_ms: int = 0

    @classmethod
    def from_jaas(cls, options: Mapping[str, str]) -> UnsecuredJwsOptions:
        try:
            skew = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0"))
        except ValueError:
            raise ConfigError("unsecuredValidatorAllowableClockSkewMs must be an integer") \
                from None
        return cls(options.get("unsecuredValidatorPrincipalClaimName", "sub") or "sub",
                   options.get("unsecuredValidatorScopeClaimName", "scope") or "scope",
                   tuple(options.get("unsecuredValidatorRequiredScope", "").replace(
                       ",", " ").split()), skew)


def _b64url_json(part: str) -> object:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


@dataclass(slots=True)
class OAuthBearerExchange:
    """OAUTHBEARER (RFC 7628) with Kafka's unsecured-JWS validator, for development setups:
    the token's header says `alg: none`, its claims name the principal and an `exp` in the
    future. A rejected token is answered with the RFC's error challenge; the client's `%x01`
    that follows ends the exchange with SASL_AUTHENTICATION_FAILED."""

    options: UnsecuredJwsOptions
    clock_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    complete: bool = False
    principal: str = ""
    expires_at_ms: int | None = None
    _failure: SaslFailure | None = None

    def step(self, token: bytes) -> bytes:
        if self._failure is not None:
            raise self._failure
        try:
            self._validate(token)
        except SaslFailure as failure:
            self._failure = failure
            return json.dumps({"status": "invalid_token"}).encode()
        self.complete = True
        return b""

    def _validate(self, token: bytes) -> None:
        text = token.decode("utf-8", "replace")
        match = re.fullmatch(r"n,(?:a=([^,]*))?,\x01(.*)\x01", text, re.S)
        if match is None:
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER client first "
                              "message", "malformed OAUTHBEARER message")
        authzid = match.group(1)
        pairs = dict(pair.split("=", 1) for pair in match.group(2).split("\x01")
                     if "=" in pair)
        auth = pairs.get("auth", "")
        if not auth.startswith("Bearer "):
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                              "no Bearer token")
        parts = auth[len("Bearer "):].strip().split(".")
        if len(parts) != 3:
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                              "not a compact JWS")
        try:
            header, claims = _b64url_json(parts[0]), _b64url_json(parts[1])
        except (ValueError, binascii.Error):
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                              "JWS header or claims not base64url JSON") from None
        if not isinstance(header, dict) or header.get("alg") != "none":
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                              "only unsecured tokens (alg none) are validated here")
        if not isinstance(claims, dict):
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                              "claims are not a JSON object")
        principal = claims.get(self.options.principal_claim)
        if not isinstance(principal, str) or not principal:
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                              f"no {self.options.principal_claim} claim")
        expires = claims.get("exp")
        if not isinstance(expires, (int, float)) or isinstance(expires, bool):
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                              "no exp claim", principal)
        now = self.clock_ms()
        expires_ms = int(expires * 1000)
        if expires_ms + self.options.clock_skew_ms <= now:
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                              "token expired", principal)
        issued = claims.get("iat")
        if isinstance(issued, (int, float)) and issued * 1000 > now + self.options.clock_skew_ms:
            raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                              "token issued in the future", principal)
        if self.options.required_scope:
            scope = claims.get(self.options.scope_claim, [])
            granted = set(scope.split() if isinstance(scope, str) else scope)
            if not set(self.options.required_scope) <= granted:
                raise SaslFailure("Authentication failed: Invalid OAUTHBEARER token",
                                  "required scope missing", principal)
        if authzid and authzid != principal:
            raise SaslFailure("Authentication failed: Authorization id differs from the "
                              "token's principal", "authorization id differs", principal)
        self.principal = principal
        self.expires_at_ms = expires_ms


@dataclass(frozen=True, slots=True)
class ListenerSasl:
    """What one SASL listener accepts: its mechanisms (in `sasl.enabled.mechanisms` order) and
    their configuration."""

    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    oauth: UnsecuredJwsOptions
    scram: ScramStore
    reauth_ms: int

    def exchange(self, mechanism: str) -> Exchange:
        if mechanism == "PLAIN":
            return PlainExchange(self.plain_users)
        if mechanism == "OAUTHBEARER":
            return OAuthBearerExchange(self.oauth)
        return ScramExchange(mechanism, self.scram)
