"""ACLs with Kafka's StandardAuthorizer semantics, and the ACL APIs.

A binding allows or denies one principal (or `User:*`), from one host (or `*`), one operation
on resources named LITERAL (the name, or `*` for all) or PREFIXED. A request is allowed when
its principal is a super user; otherwise when no DENY binding matches it and an ALLOW binding
does (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL
is every operation); a resource no binding names at all follows
`allow.everyone.if.no.acl.found`.

The bindings are kept in `<log.dirs>/acls.json`, replaced atomically and fsynced on every
change, and managed with CreateAcls, DescribeAcls and DeleteAcls (CLUSTER ALTER to change them,
CLUSTER DESCRIBE to read them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from coordinator.security.durable_file import replace_json
from protocol.build import build
from protocol.codec import response_type
from protocol.refusals import RefusalLog

log = structlog.get_logger("rebalanced.security")

DESCRIBE_ACLS = ApiVersionRange(29, 0, 3)  # v0: protocol.legacy_versions
CREATE_ACLS = ApiVersionRange(30, 0, 3)
DELETE_ACLS = ApiVersionRange(31, 0, 3)
FILE_NAME = "acls.json"
# What `authorizer.class.name` may name: Kafka's authorizers, both served by this one.
AUTHORIZER_CLASSES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
})


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Operations whose ALLOW also allows the key (Kafka's implied operations).
_IMPLIED_BY = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                                   Operation.DELETE, Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS,
                                           Operation.ALTER_CONFIGS}),
}
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def names(self, resource_type: int, name: str) -> bool:
        """Whether this binding applies to the resource (`resource_type`, `name`)."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def describe(self) -> str:
        return (f"{Permission(self.permission).name} {self.principal} from {self.host} "
                f"{Operation(self.operation).name} on {ResourceType(self.resource_type).name} "
                f"{PatternType(self.pattern_type).name} {self.resource_name!r}")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: None and ANY match anything; MATCH matches the bindings that
    apply to the named resource."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    @classmethod
    def of(cls, request: Any) -> AclFilter:
        return cls(int(request.resource_type_filter), request.resource_name_filter,
                   int(getattr(request, "pattern_type_filter", PatternType.LITERAL)),
                   request.principal_filter, request.host_filter, int(request.operation),
                   int(request.permission_type))

    def problem(self) -> str | None:
        if 0 in (self.resource_type, self.pattern_type, self.operation, self.permission):
            return "the filter has an UNKNOWN element"
        return None

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and binding.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not binding.names(binding.resource_type,
                                                                      self.resource_name):
                return False
        else:
            if (self.pattern_type != PatternType.ANY
                    and binding.pattern_type != self.pattern_type):
                return False
            if self.resource_name is not None and binding.resource_name != self.resource_name:
                return False
        return ((self.principal is None or binding.principal == self.principal)
                and (self.host is None or binding.host == self.host)
                and (self.operation == Operation.ANY or binding.operation == self.operation)
                and (self.permission == Permission.ANY
                     or binding.permission == self.permission))


class AclStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / FILE_NAME
        self.bindings: list[AclBinding] = []
        if self.path.exists():
            try:
                document = json.loads(self.path.read_text(encoding="utf-8"))
                self.bindings = [AclBinding(**entry) for entry in document["acls"]]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise RuntimeError(f"ACL file {self.path} is unreadable: {exc}") from exc

    def replace(self, bindings: Sequence[AclBinding]) -> None:
        replace_json(self.path, {"version": 1, "acls": [asdict(b) for b in bindings]})
        self.bindings = list(bindings)


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    # What decided: "super user", a binding, or the no-ACL default.
    reason: str


class Authorizer:
    def __init__(self, store: AclStore, super_users: Iterable[str],
                 allow_if_no_acl: bool, refusals: RefusalLog | None = None) -> None:
        self.store = store
        # Where a denial is logged (the broker's refusal log, rate-limited per client).
        self.refusals = refusals if refusals is not None else RefusalLog()
        # Called with each denial's `authorization_denied` event (docs/events.md): the runtime
        # journals and counts it. Only denials reach it, never the allowed path.
        self.on_denial: Callable[[dict[str, object]], None] | None = None
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: int,
                  name: str) -> Decision:
        if principal in self.super_users:
            return Decision(True, "super.users")
        host = host.lstrip("/")
        on_resource = [b for b in self.store.bindings if b.names(resource_type, name)]
        if not on_resource:
            return Decision(self.allow_if_no_acl, "allow.everyone.if.no.acl.found="
                            + str(self.allow_if_no_acl).lower())
        allowing = _IMPLIED_BY.get(operation, frozenset({operation}))
        allow: AclBinding | None = None
        for binding in on_resource:
            if binding.principal not in (principal, "User:*") or binding.host not in (
                    host, WILDCARD):
                continue
            if binding.permission == Permission.DENY and binding.operation in (
                    operation, Operation.ALL):
                return Decision(False, binding.describe())
            if binding.permission == Permission.ALLOW and allow is None and (
                    binding.operation == Operation.ALL or binding.operation in allowing):
                allow = binding
        if allow is not None:
            return Decision(True, allow.describe())
        return Decision(False, "no ALLOW binding matches")


    def authorize_any(self, principal: str, host: str, operation: Operation,
                      resource_type: int) -> Decision:
        """Kafka's `authorizeByResourceType`: whether the principal may do `operation` on some
        resource of the type, i.e. an ALLOW binding for it that no DENY binding covers whole
        (an idempotent producer needs WRITE on one topic, or IDEMPOTENT_WRITE on the cluster)."""
        if principal in self.super_users:
            return Decision(True, "super.users")
        host = host.lstrip("/")
        of_type = [b for b in self.store.bindings if b.resource_type == resource_type]
        if not of_type:
            return Decision(self.allow_if_no_acl, "allow.everyone.if.no.acl.found="
                            + str(self.allow_if_no_acl).lower())
        mine = [b for b in of_type
                if b.principal in (principal, "User:*") and b.host in (host, WILDCARD)
                and b.operation in (operation, Operation.ALL)]
        denies = [b for b in mine if b.permission == Permission.DENY]
        for allow in mine:
            if allow.permission != Permission.ALLOW:
                continue
            covered = next((deny for deny in denies if _covers(deny, allow)), None)
            if covered is None:
                return Decision(True, allow.describe())
        return Decision(False, f"no {Operation(operation).name} allowed on any "
                               f"{ResourceType(resource_type).name}")


def _covers(deny: AclBinding, allow: AclBinding) -> bool:
    """Whether every resource `allow` names is also named by `deny`."""
    if deny.pattern_type == PatternType.LITERAL and deny.resource_name == WILDCARD:
        return True
    if deny.pattern_type == PatternType.PREFIXED:
        return allow.resource_name != WILDCARD and allow.resource_name.startswith(
            deny.resource_name)
    return (allow.pattern_type == PatternType.LITERAL
            and allow.resource_name == deny.resource_name)


# The ACL APIs ---------------------------------------------------------------------------------


def _principal(ctx: ClientRequest) -> str:
    return str(getattr(ctx.connection, "principal", "User:ANONYMOUS"))


def _cluster_denied(authorizer: Authorizer | None, ctx: ClientRequest,
                    operation: Operation) -> ErrorCode | None:
    if authorizer is None:
        return ErrorCode.security_disabled
    decision = authorizer.authorize(_principal(ctx), ctx.client_host, operation,
                                    ResourceType.CLUSTER, CLUSTER_NAME)
    if not decision.allowed:
        denied(authorizer, ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, decision)
        return ErrorCode.cluster_authorization_failed
    return None


def denied(authorizer: Authorizer, ctx: ClientRequest, operation: Operation,
           resource_type: int, name: str, decision: Decision) -> None:
    """A denial: one rate-limited log line, one `authorization_denied` event."""
    if authorizer.on_denial is not None:
        event: dict[str, object] = {
            "event": "authorization_denied", "principal": _principal(ctx),
            "client_host": ctx.client_host, "client_id": ctx.client_id,
            "api_key": ctx.header.api_key, "operation": Operation(operation).name,
            "resource_type": ResourceType(resource_type).name, "resource_name": name,
            "decided_by": decision.reason}
        if resource_type == ResourceType.GROUP:
            event["group_id"] = name
        authorizer.on_denial(event)
    authorizer.refusals.refused("authorization denied", client_id=ctx.client_id or ctx.client_host,
                     api_key=ctx.header.api_key, api_version=ctx.version,
                     problem=f"denied {Operation(operation).name} "
                             f"{ResourceType(resource_type).name} {name}",
                     advice="add an ACL for this principal (CreateAcls) or use one that has "
                            "it", principal=_principal(ctx), client_host=ctx.client_host,
                     decided_by=decision.reason)


_NO_AUTHORIZER = "No Authorizer is configured on the broker"


def create_acls(ctx: ClientRequest, request: Any, authorizer: Authorizer | None) -> None:
    cls = response_type(CREATE_ACLS.api_key, ctx.version)
    error = _cluster_denied(authorizer, ctx, Operation.ALTER)
    if error is not None or authorizer is None:
        message = _NO_AUTHORIZER if error == ErrorCode.security_disabled else None
        ctx.respond(build(cls, throttle_time=0, results=[
            {"error_code": error, "error_message": message} for _ in request.creations]))
        return
    before = list(authorizer.store.bindings)
    bindings = list(before)
    results: list[dict[str, Any]] = []
    for creation in request.creations:
        binding = AclBinding(int(creation.resource_type), creation.resource_name,
                             int(getattr(creation, "resource_pattern_type",
                                         PatternType.LITERAL)),
                             creation.principal, creation.host, int(creation.operation),
                             int(creation.permission_type))
        problem = _invalid(binding)
        if problem is not None:
            results.append({"error_code": ErrorCode.invalid_request, "error_message": problem})
            continue
        if binding not in bindings:
            bindings.append(binding)
        results.append({"error_code": ErrorCode.none, "error_message": None})
    if len(bindings) != len(authorizer.store.bindings):
        try:
            authorizer.store.replace(bindings)
        except OSError as exc:
            log.error("ACLs not written", path=str(authorizer.store.path), error=str(exc))
            results = [{"error_code": ErrorCode.kafka_storage_error,
                        "error_message": "ACLs not written"} for _ in results]
        else:
            log.info("ACLs created", principal=_principal(ctx), client_host=ctx.client_host,
                     acls=[b.describe() for b in bindings[len(before):]])
    ctx.respond(build(cls, throttle_time=0, results=results))


def _invalid(binding: AclBinding) -> str | None:
    if binding.resource_type not in {t.value for t in ResourceType} - {0, 1}:
        return "Invalid resource type"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid pattern type: ACLs are LITERAL or PREFIXED"
    if binding.operation not in {o.value for o in Operation} - {0, 1}:
        return "Invalid operation"
    if binding.permission not in (Permission.ALLOW, Permission.DENY):
        return "Invalid permission type"
    kind, sep, name = binding.principal.partition(":")
    if not sep or not kind or not name:
        return f"Invalid principal {binding.principal!r}: expected Type:name (User:alice)"
    if not binding.host or not binding.resource_name:
        return "Empty host or resource name"
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only CLUSTER resource is {CLUSTER_NAME}"
    return None


def describe_acls(ctx: ClientRequest, request: Any, authorizer: Authorizer | None) -> None:
    cls = response_type(DESCRIBE_ACLS.api_key, ctx.version)
    error = _cluster_denied(authorizer, ctx, Operation.DESCRIBE)
    acl_filter = AclFilter.of(request)
    if error is None and acl_filter.problem() is not None:
        error = ErrorCode.invalid_request
    if error is not None or authorizer is None:
        ctx.respond(build(cls, throttle_time=0, error_code=error, error_message=(
            _NO_AUTHORIZER if error == ErrorCode.security_disabled else acl_filter.problem()),
            resources=[]))
        return
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for binding in authorizer.store.bindings:
        if acl_filter.matches(binding):
            key = (binding.resource_type, binding.resource_name, binding.pattern_type)
            grouped.setdefault(key, []).append(binding)
    ctx.respond(build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None,
                      resources=[{"resource_type": t, "resource_name": n, "pattern_type": p,
                                  "acls": [{"principal": b.principal, "host": b.host,
                                            "operation": b.operation,
                                            "permission_type": b.permission}
                                           for b in bindings]}
                                 for (t, n, p), bindings in grouped.items()]))


def delete_acls(ctx: ClientRequest, request: Any, authorizer: Authorizer | None) -> None:
    cls = response_type(DELETE_ACLS.api_key, ctx.version)
    error = _cluster_denied(authorizer, ctx, Operation.ALTER)
    if error is not None or authorizer is None:
        ctx.respond(build(cls, throttle_time=0, filter_results=[
            {"error_code": error, "error_message": _NO_AUTHORIZER
             if error == ErrorCode.security_disabled else None, "matching_acls": []}
            for _ in request.filters]))
        return
    remaining = list(authorizer.store.bindings)
    results: list[dict[str, Any]] = []
    for entry in request.filters:
        acl_filter = AclFilter.of(entry)
        if acl_filter.problem() is not None:
            results.append({"error_code": ErrorCode.invalid_request,
                            "error_message": acl_filter.problem(), "matching_acls": []})
            continue
        matched = [b for b in authorizer.store.bindings if acl_filter.matches(b)]
        remaining = [b for b in remaining if b not in matched]
        results.append({"error_code": ErrorCode.none, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.none, "error_message": None,
             "resource_type": b.resource_type, "resource_name": b.resource_name,
             "pattern_type": b.pattern_type, "principal": b.principal, "host": b.host,
             "operation": b.operation, "permission_type": b.permission} for b in matched]})
    if len(remaining) != len(authorizer.store.bindings):
        try:
            authorizer.store.replace(remaining)
        except OSError as exc:
            log.error("ACLs not written", path=str(authorizer.store.path), error=str(exc))
            results = [{"error_code": ErrorCode.kafka_storage_error,
                        "error_message": "ACLs not written", "matching_acls": []}
                       for _ in results]
        else:
            log.info("ACLs deleted", principal=_principal(ctx), client_host=ctx.client_host,
                     deleted=len(authorizer.store.bindings) - len(remaining))
    ctx.respond(build(cls, throttle_time=0, filter_results=results))
