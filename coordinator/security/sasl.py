"""SaslHandshake (v0-1), SaslAuthenticate (v0-2) and the SCRAM credential APIs
(DescribeUserScramCredentials, AlterUserScramCredentials), with Kafka's SaslServerAuthenticator
semantics: a handshake names an enabled mechanism, then the mechanism's tokens go back and
forth (in SaslAuthenticate requests, or bare after a v0 handshake) until the client is
authenticated. A failure is answered SASL_AUTHENTICATION_FAILED after
`connection.failed.authentication.delay.ms`, logged once (rate-limited), and the connection
closed. With `connections.max.reauth.ms` the session has a lifetime (KIP-368): the client
re-authenticates on the same connection, with the same mechanism and principal, or is closed.
"""

from __future__ import annotations

import asyncio
import math
import struct
import time
from collections import Counter
from typing import Any, cast

import structlog
from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from coordinator.security.mechanisms import Exchange, ListenerSasl, SaslFailure
from coordinator.security.scram_store import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MECHANISM_NUMBERS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramStore,
    credential_from_salted_password,
)
from protocol.build import build
from protocol.codec import response_type
from protocol.connection import Connection, ResponseSlot

log = structlog.get_logger("rebalanced.security")

SASL_HANDSHAKE = ApiVersionRange(17, 0, 1)
SASL_AUTHENTICATE = ApiVersionRange(36, 0, 2)
DESCRIBE_USER_SCRAM_CREDENTIALS = ApiVersionRange(50, 0, 0)
ALTER_USER_SCRAM_CREDENTIALS = ApiVersionRange(51, 0, 0)


class SaslSession:
    """One connection's SASL state (protocol.connection.SaslGate)."""

    __slots__ = ("authenticated", "config", "delay_ms", "exchange", "expires_at", "failed",
                 "mechanism", "principal_name", "raw_tokens")

    def __init__(self, config: ListenerSasl, delay_ms: int) -> None:
        self.config = config
        self.delay_ms = delay_ms
        self.authenticated = False
        self.failed = False
        self.raw_tokens = False
        self.expires_at = math.inf
        self.exchange: Exchange | None = None
        self.mechanism = ""
        self.principal_name = ""

    # bare tokens after a SaslHandshake v0 ------------------------------------------------------

    def raw_token(self, connection: Connection, slot: ResponseSlot, token: bytes) -> None:
        exchange = self.exchange
        assert exchange is not None
        try:
            answer = exchange.step(token)
        except SaslFailure as failure:
            # No Kafka header to carry an error code: the client sees the connection close.
            self._failed(connection, failure, None, lambda: None)
            return
        connection.complete(slot, struct.pack(">i", len(answer)) + answer)
        if exchange.complete:
            self._authenticated(connection, exchange)

    def _authenticated(self, connection: Any, exchange: Exchange) -> int:
        """Record success; returns the session lifetime in ms (0: no limit)."""
        lifetime = self.config.reauth_ms
        if lifetime > 0 and exchange.expires_at_ms is not None:
            lifetime = max(min(lifetime, exchange.expires_at_ms - int(time.time() * 1000)), 1)
        self.expires_at = (asyncio.get_running_loop().time() + lifetime / 1000
                           if lifetime > 0 else math.inf)
        self.authenticated = True
        self.raw_tokens = False
        self.exchange = None
        self.principal_name = exchange.principal
        connection.principal = "User:" + exchange.principal
        connection.authenticated()
        return lifetime

    def _failed(self, connection: Any, failure: SaslFailure, ctx: ClientRequest | None,
                answer: Any) -> None:
        self.failed = True
        connection.refusals.refused(
            "authentication failed", client_id=(ctx.client_id if ctx else "")
            or connection.client_host, api_key=36 if ctx else None,
            api_version=ctx.version if ctx else None, problem="SASL authentication failed",
            advice="check the client's sasl.mechanism, user name and password (or token)",
            mechanism=self.mechanism, user=failure.user, reason=failure.reason,
            connection=connection.id, client_host=connection.client_host,
            listener=connection.listener)

        def answer_and_close() -> None:
            answer()
            connection.close()

        # Kafka delays the answer to a failed authentication, to slow password guessing.
        asyncio.get_running_loop().call_later(self.delay_ms / 1000, answer_and_close)


def _session(ctx: ClientRequest) -> tuple[Any, SaslSession | None]:
    connection = cast(Any, ctx.connection)
    return connection, getattr(connection, "sasl", None)


def handshake(ctx: ClientRequest, request: Any) -> None:
    cls = response_type(SASL_HANDSHAKE.api_key, ctx.version)
    connection, session = _session(ctx)
    if session is None:
        # Kafka answers a handshake on a listener without SASL with ILLEGAL_SASL_STATE.
        ctx.respond(build(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=()))
        return
    enabled = session.config.mechanisms
    mechanism = request.mechanism
    if session.authenticated:
        if session.config.reauth_ms <= 0 or ctx.version == 0:
            ctx.respond(build(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=enabled))
            return
        if mechanism != session.mechanism:
            # A re-authentication keeps the mechanism (KIP-368).
            ctx.respond(build(cls, error_code=ErrorCode.unsupported_sasl_mechanism,
                              mechanisms=(session.mechanism,)))
            connection.close()
            return
    elif session.exchange is not None:
        ctx.respond(build(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=enabled))
        connection.close()
        return
    if mechanism not in enabled:
        connection.refusals.refused(
            "connection closed on bad input", client_id=ctx.client_id or ctx.client_host,
            api_key=SASL_HANDSHAKE.api_key, api_version=ctx.version,
            problem="unsupported SASL mechanism",
            advice=f"set the client's sasl.mechanism to one of {', '.join(enabled)}",
            mechanism=mechanism, connection=connection.id, client_host=ctx.client_host,
            listener=connection.listener)
        ctx.respond(build(cls, error_code=ErrorCode.unsupported_sasl_mechanism,
                          mechanisms=enabled))
        connection.close()
        return
    session.mechanism = mechanism
    session.exchange = session.config.exchange(mechanism)
    session.raw_tokens = ctx.version == 0
    ctx.respond(build(cls, error_code=ErrorCode.none, mechanisms=enabled))


def authenticate(ctx: ClientRequest, request: Any) -> None:
    cls = response_type(SASL_AUTHENTICATE.api_key, ctx.version)
    connection, session = _session(ctx)
    if session is None or session.exchange is None:
        ctx.respond(build(cls, error_code=ErrorCode.illegal_sasl_state,
                          error_message="SaslAuthenticate without a SaslHandshake naming a "
                          "mechanism" if session is None or not session.authenticated
                          else "SaslAuthenticate after successful authentication",
                          auth_bytes=b""))
        if session is not None and not session.authenticated:
            connection.close()
        return
    exchange = session.exchange
    try:
        answer = exchange.step(bytes(request.auth_bytes))
        if (exchange.complete and session.authenticated
                and exchange.principal != session.principal_name):
            raise SaslFailure("Cannot change principals during re-authentication",
                              "re-authentication as another principal", exchange.principal)
    except SaslFailure as failure:
        response = build(cls, error_code=ErrorCode.sasl_authentication_failed,
                         error_message=failure.message, auth_bytes=b"")
        session._failed(connection, failure, ctx, lambda: ctx.respond(response))
        return
    lifetime = session._authenticated(connection, exchange) if exchange.complete else 0
    ctx.respond(build(cls, error_code=ErrorCode.none, error_message=None, auth_bytes=answer,
                      session_lifetime=lifetime))


# SCRAM credentials ----------------------------------------------------------------------------


def describe_scram(ctx: ClientRequest, request: Any, store: ScramStore) -> None:
    cls = response_type(DESCRIBE_USER_SCRAM_CREDENTIALS.api_key, ctx.version)
    users = store.users()
    # No list, or an empty one, asks for every user (Kafka).
    asked = [user.name for user in request.users or ()] or sorted(users)
    results = []
    duplicates = {name for name, count in Counter(asked).items() if count > 1}
    for name in dict.fromkeys(asked):
        credentials = users.get(name)
        if name in duplicates:
            results.append({"user": name, "error_code": ErrorCode.duplicate_resource,
                            "error_message": "Cannot describe SCRAM credentials for the same "
                            "user twice in a single request", "credential_infos": ()})
        elif not credentials:
            results.append({"user": name, "error_code": ErrorCode.resource_not_found,
                            "error_message": f"Attempt to describe nonexistent SCRAM "
                            f"credential for user: {name}", "credential_infos": ()})
        else:
            results.append({"user": name, "error_code": ErrorCode.none, "error_message": None,
                            "credential_infos": [
                                {"mechanism": MECHANISM_NUMBERS[m], "iterations": c.iterations}
                                for m, c in sorted(credentials.items())]})
    ctx.respond(build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None,
                      results=results))


def alter_scram(ctx: ClientRequest, request: Any, store: ScramStore) -> None:
    cls = response_type(ALTER_USER_SCRAM_CREDENTIALS.api_key, ctx.version)
    users = {user: dict(mechanisms) for user, mechanisms in store.users().items()}
    pairs = [(d.name, int(d.mechanism)) for d in request.deletions] + [
        (u.name, int(u.mechanism)) for u in request.upsertions]
    names = [name for name, _ in pairs]
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for name, _ in (pair for pair, count in Counter(pairs).items() if count > 1):
        errors[name] = (ErrorCode.duplicate_resource, "A user credential cannot be altered "
                        "twice in the same request")
    changes: list[tuple[str, str, ScramCredential | None]] = []
    for deletion in request.deletions:
        mechanism = MECHANISM_IDS.get(int(deletion.mechanism))
        if deletion.name in errors:
            continue
        if not deletion.name:
            errors[deletion.name] = (ErrorCode.unacceptable_credential, "Username must not "
                                     "be empty")
        elif mechanism is None:
            errors[deletion.name] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM "
                                     "mechanism")
        elif mechanism not in users.get(deletion.name, {}):
            errors[deletion.name] = (ErrorCode.resource_not_found, "Attempt to delete a user "
                                     "credential that does not exist")
        else:
            changes.append((deletion.name, mechanism, None))
    for upsertion in request.upsertions:
        mechanism = MECHANISM_IDS.get(int(upsertion.mechanism))
        iterations = int(upsertion.iterations)
        if upsertion.name in errors:
            continue
        if not upsertion.name:
            errors[upsertion.name] = (ErrorCode.unacceptable_credential, "Username must not "
                                      "be empty")
        elif mechanism is None:
            errors[upsertion.name] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM "
                                      "mechanism")
        elif iterations < MIN_ITERATIONS:
            errors[upsertion.name] = (ErrorCode.unacceptable_credential, "Too few iterations")
        elif iterations > MAX_ITERATIONS:
            errors[upsertion.name] = (ErrorCode.unacceptable_credential, "Too many iterations")
        else:
            changes.append((upsertion.name, mechanism, credential_from_salted_password(
                mechanism, bytes(upsertion.salt), bytes(upsertion.salted_password),
                iterations)))
    if changes:
        for name, mechanism, credential in changes:
            if credential is None:
                users[name].pop(mechanism, None)
            else:
                users.setdefault(name, {})[mechanism] = credential
        try:
            store.write(users)
        except OSError as exc:
            log.error("SCRAM credentials not written", path=str(store.path), error=str(exc))
            for name, _, _ in changes:
                errors[name] = (ErrorCode.kafka_storage_error, "credentials not written")
        else:
            log.info("SCRAM credentials altered", client_host=ctx.client_host,
                     users=sorted({name for name, _, _ in changes}))
    results = [{"user": name, "error_code": errors.get(name, (ErrorCode.none, None))[0],
                "error_message": errors.get(name, (ErrorCode.none, None))[1]}
               for name in dict.fromkeys(names)]
    ctx.respond(build(cls, throttle_time=0, results=results))


def register(broker: Any, store: ScramStore) -> None:
    """Serve the SASL and SCRAM credential APIs on `broker`."""
    broker.register(SASL_HANDSHAKE, handshake)
    broker.register(SASL_AUTHENTICATE, authenticate)
    broker.register(DESCRIBE_USER_SCRAM_CREDENTIALS,
                    lambda ctx, request: describe_scram(ctx, request, store))
    broker.register(ALTER_USER_SCRAM_CREDENTIALS,
                    lambda ctx, request: alter_scram(ctx, request, store))
