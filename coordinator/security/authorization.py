"""ACLs checked as Kafka checks them, in front of the group and topic APIs' handlers.

READ GROUP for JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat and
OffsetCommit (then READ TOPIC for each topic committed to); DESCRIBE GROUP for OffsetFetch
(then DESCRIBE TOPIC: a named topic denied is answered TOPIC_AUTHORIZATION_FAILED, a fetch of
all the group's offsets lists only the topics allowed), DescribeGroups and
ConsumerGroupDescribe, each group of a request on its own (with the
`authorized_operations` a client asks for); DELETE GROUP for DeleteGroups (each group) and
OffsetDelete (then READ TOPIC); ListGroups lists the groups the principal may describe (all
of them with CLUSTER DESCRIBE).
WRITE TOPIC for Produce, READ for Fetch, DESCRIBE for ListOffsets and Metadata (CREATE to
auto-create; the topics' and the cluster's authorized operations when asked for), CREATE for
CreateTopics, DELETE for DeleteTopics, ALTER for CreatePartitions; WRITE on the transactional
id, or IDEMPOTENT_WRITE (or WRITE on some topic) for InitProducerId. A
denied group or topic is answered GROUP_ or TOPIC_AUTHORIZATION_FAILED and logged
(rate-limited).
The transactional APIs as Kafka's KafkaApis: WRITE on the transactional id for
AddPartitionsToTxn (then WRITE on each topic), AddOffsetsToTxn (then READ on the group),
TxnOffsetCommit (then READ on the group and on each topic) and EndTxn
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); DescribeTransactions checks DESCRIBE on each
transactional id and leaves out the topics the principal may not describe; ListTransactions
lists the ids the principal may describe.

Nothing is wrapped unless `authorizer.class.name` is set: without an authorizer the handlers
are the bare ones, and the hot paths pay nothing. With one, a check is one dictionary lookup
once the (principal, host, operation, group) has been decided; the cache is emptied whenever
the ACLs change.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from coordinator.security.acls import (
    CLUSTER_NAME,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    AclStore,
    Authorizer,
    Decision,
    Operation,
    ResourceType,
    create_acls,
    delete_acls,
    denied,
    describe_acls,
)
from coordinator.settings import BrokerSettings
from protocol.build import build
from protocol.codec import decode_response_frame, response_type

Handler = Callable[[ClientRequest, Any], None]
_GROUP_DENIED = ErrorCode.group_authorization_failed
_CACHE_LIMIT = 100_000
_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
_GROUP_OPERATIONS = (Operation.READ, Operation.DELETE, Operation.DESCRIBE)


class GroupGate:
    """Decisions on groups, cached until the ACLs change."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer
        self._store = authorizer.store
        self._cache: dict[tuple[str, str, int, int, str], Decision] = {}
        self._bindings: object = None

    def decide(self, ctx: ClientRequest, operation: Operation, resource_type: int,
               name: str) -> Decision:
        connection = ctx.connection
        principal: str = getattr(connection, "principal", "User:ANONYMOUS")
        bindings = self._store.bindings
        if bindings is not self._bindings:  # the store replaces its list on every change
            self._cache.clear()
            self._bindings = bindings
        key = (principal, connection.client_host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            decision = self._cache[key] = self.authorizer.authorize(
                principal, connection.client_host, operation, resource_type, name)
        return decision

    def operations(self, ctx: ClientRequest, group_id: str) -> int:
        """Kafka's authorized_operations of a group: the bits of READ, DELETE and DESCRIBE
        this principal is allowed."""
        return sum(1 << operation for operation in _GROUP_OPERATIONS
                   if self.decide(ctx, operation, ResourceType.GROUP, group_id).allowed)

    def group(self, ctx: ClientRequest, operation: Operation, group_id: str) -> bool:
        decision = self.decide(ctx, operation, ResourceType.GROUP, group_id)
        if not decision.allowed:
            denied(self.authorizer, ctx, operation, ResourceType.GROUP, group_id,
                   decision)
        return decision.allowed


def _single_group_denial(api_key: int, ctx: ClientRequest, request: Any) -> Any:
    cls = response_type(api_key, ctx.version)
    if api_key == 8:  # OffsetCommit: every partition
        topics = request.topics
        if topics and isinstance(topics[0], tuple):  # the hand-read v8/v9 form
            shaped = [{"name": name, "partitions": [
                {"partition_index": p[0], "error_code": _GROUP_DENIED} for p in partitions]}
                for name, partitions in topics]
        else:
            shaped = [{"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": _GROUP_DENIED}
                for p in t.partitions]} for t in topics]
        return build(cls, throttle_time=0, topics=shaped)
    if api_key == 9:  # OffsetFetch before v8: one group
        return build(cls, throttle_time=0, error_code=_GROUP_DENIED, topics=[])
    return build(cls, throttle_time=0, error_code=_GROUP_DENIED, generation_id=-1,
                 member_id=getattr(request, "member_id", "") or "", member_epoch=-1,
                 error_message="Not authorized to access group", members=[], topics=[])


def _single(gate: GroupGate, api_key: int, operation: Operation, handler: Handler) -> Handler:
    def checked(ctx: ClientRequest, request: Any) -> None:
        if gate.group(ctx, operation, request.group_id):
            handler(ctx, request)
        else:
            ctx.respond(_single_group_denial(api_key, ctx, request))

    return checked


class _Merged:
    """A request context whose response gets the denied entries added."""

    def __init__(self, ctx: ClientRequest, merge: Callable[[Any], Any]) -> None:
        self._ctx = ctx
        self._merge = merge

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def respond(self, response: Any) -> None:
        self._ctx.respond(self._merge(response))

    def respond_raw(self, framed: bytes | None) -> None:
        # A hand-encoded answer (OffsetCommit's fast path) is read back, on this rare path
        # only, to add the denied entries.
        if framed is None:
            self._ctx.respond_raw(None)
            return
        ctx = self._ctx
        self.respond(decode_response_frame(ctx.header.api_key, ctx.version, framed))


def _multi(gate: GroupGate, api_key: int, operation: Operation, handler: Handler,
           request_field: str, response_field: str,
           denial: Callable[[str], dict[str, Any]],
           group_of: Callable[[Any], str] = str) -> Handler:
    """Each group of the request checked on its own: the allowed ones go to the handler, the
    denied ones are answered GROUP_AUTHORIZATION_FAILED in the same response."""

    def checked(ctx: ClientRequest, request: Any) -> None:
        entries = getattr(request, request_field)
        allowed: list[Any] = []
        refused: list[Any] = []
        for entry in entries:
            (allowed if gate.group(ctx, operation, group_of(entry)) else refused).append(entry)
        # DescribeGroups and ConsumerGroupDescribe report what the principal may do.
        with_operations = bool(getattr(request, "include_authorized_operations", False))
        if not refused and not with_operations:
            handler(ctx, request)
            return
        only_denials = build(response_type(api_key, ctx.version), throttle_time=0, **{
            response_field: [denial(group_of(entry)) for entry in refused]})
        if not allowed:
            ctx.respond(only_denials)
            return
        denials = tuple(getattr(only_denials, response_field))

        def merge(response: Any) -> Any:
            answered = tuple(getattr(response, response_field))
            if with_operations:
                answered = tuple(
                    dataclasses.replace(entry, authorized_operations=gate.operations(
                        ctx, entry.group_id)) if entry.error_code == ErrorCode.none else entry
                    for entry in answered)
            return dataclasses.replace(response, **{response_field: answered + denials})

        handler(_Merged(ctx, merge),  # type: ignore[arg-type]
                dataclasses.replace(request, **{request_field: tuple(allowed)}))

    return checked


def _describable_only(gate: GroupGate, ctx: ClientRequest, handler: Handler, request: Any,
                      field: str, resource_type: ResourceType,
                      name_of: Callable[[Any], str]) -> None:
    """Run a listing, then keep in the answer's `field` only the entries whose resource the
    principal may describe (left out silently, as Kafka's listings do)."""

    def keep(response: Any) -> Any:
        return dataclasses.replace(response, **{field: tuple(
            entry for entry in getattr(response, field)
            if gate.decide(ctx, Operation.DESCRIBE, resource_type, name_of(entry)).allowed)})

    handler(_Merged(ctx, keep), request)  # type: ignore[arg-type]


def _list_groups(gate: GroupGate, handler: Handler) -> Handler:
    def checked(ctx: ClientRequest, request: Any) -> None:
        if gate.decide(ctx, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME).allowed:
            handler(ctx, request)
            return
        _describable_only(gate, ctx, handler, request, "groups", ResourceType.GROUP,
                          lambda group: group.group_id)

    return checked


def _offset_fetch_topics(gate: GroupGate, handler: Handler) -> Handler:
    """DESCRIBE on each topic, as Kafka checks OffsetFetch once the group is allowed: a named
    topic the principal may not describe is answered TOPIC_AUTHORIZATION_FAILED on each of its
    partitions; a fetch of all the group's offsets lists only the topics it may describe."""

    def visible(ctx: ClientRequest, name: str) -> bool:
        return gate.decide(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name).allowed

    def denial_topics(version: int, multi: bool, topics: list[Any]) -> tuple[Any, ...]:
        shaped = [{"name": t.name, "partitions": [
            {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": "", "error_code": _TOPIC_DENIED} for index in t.partition_indexes]}
            for t in topics]
        cls = response_type(9, version)
        if multi:
            return tuple(build(cls, throttle_time=0, groups=[
                {"group_id": "", "topics": shaped}]).groups[0].topics)
        return tuple(build(cls, throttle_time=0, topics=shaped).topics)

    def checked(ctx: ClientRequest, request: Any) -> None:
        multi = ctx.version >= 8
        groups = request.groups if multi else (request,)
        if all(g.topics is not None and all(visible(ctx, t.name) for t in g.topics)
               for g in groups):
            handler(ctx, request)  # the usual path: every topic named and allowed
            return
        denials: dict[str, tuple[Any, ...]] = {}
        all_topics: set[str] = set()
        narrowed: list[Any] = []
        for group in groups:
            if group.topics is None:
                all_topics.add(group.group_id)
                narrowed.append(group)
                continue
            allowed: list[Any] = []
            refused: list[Any] = []
            for topic in group.topics:
                (allowed if _topic_allowed(gate, ctx, Operation.DESCRIBE, topic.name)
                 else refused).append(topic)
            if refused:
                denials[group.group_id] = denial_topics(ctx.version, multi, refused)
            narrowed.append(dataclasses.replace(group, topics=tuple(allowed)))

        def fix(entry: Any, group_id: str) -> Any:
            if getattr(entry, "error_code", ErrorCode.none) != ErrorCode.none:
                return entry  # the group's own error answers the whole group
            topics = tuple(entry.topics)
            if group_id in all_topics:
                topics = tuple(t for t in topics if visible(ctx, t.name))
            return dataclasses.replace(entry, topics=topics + denials.get(group_id, ()))

        def merge(response: Any) -> Any:
            if multi:
                return dataclasses.replace(response, groups=tuple(
                    fix(g, g.group_id) for g in response.groups))
            return fix(response, request.group_id)

        handler(_Merged(ctx, merge),  # type: ignore[arg-type]
                dataclasses.replace(request, groups=tuple(narrowed)) if multi
                else narrowed[0])

    return checked


def _offset_fetch(gate: GroupGate, handler: Handler) -> Handler:
    handler = _offset_fetch_topics(gate, handler)
    single = _single(gate, 9, Operation.DESCRIBE, handler)
    multi = _multi(gate, 9, Operation.DESCRIBE, handler, "groups", "groups",
                   lambda group: {"group_id": group, "error_code": _GROUP_DENIED,
                                  "topics": []},
                   group_of=lambda entry: entry.group_id)

    def checked(ctx: ClientRequest, request: Any) -> None:
        (multi if ctx.version >= 8 else single)(ctx, request)

    return checked


# Topics --------------------------------------------------------------------------------------

_TOPIC_DENIED = ErrorCode.topic_authorization_failed


def _topic_allowed(gate: GroupGate, ctx: ClientRequest, operation: Operation,
                   name: str) -> bool:
    decision = gate.decide(ctx, operation, ResourceType.TOPIC, name)
    if not decision.allowed:
        denied(gate.authorizer, ctx, operation, ResourceType.TOPIC, name, decision)
    return decision.allowed


def _per_topic(gate: GroupGate, api_key: int, operation: Operation, handler: Handler,
               request_field: Callable[[int], str], response_field: str,
               name_of: Callable[[Any], str | None],
               denial: Callable[[Any, str], dict[str, Any]],
               cluster_operation: Operation | None = None) -> Handler:
    """Each topic of the request checked on its own (or all at once by `cluster_operation`
    on the cluster): the allowed ones go to the handler, the denied ones are answered
    TOPIC_AUTHORIZATION_FAILED in the same response."""

    def checked(ctx: ClientRequest, request: Any) -> None:
        if cluster_operation is not None and gate.decide(
                ctx, cluster_operation, ResourceType.CLUSTER, CLUSTER_NAME).allowed:
            handler(ctx, request)
            return
        field = request_field(ctx.version)
        allowed: list[Any] = []
        refused: list[tuple[Any, str]] = []
        for entry in getattr(request, field):
            name = name_of(entry)
            if name is None or _topic_allowed(gate, ctx, operation, name):
                allowed.append(entry)  # an unknown topic id is the handler's to answer
            else:
                refused.append((entry, name))
        if not refused:
            handler(ctx, request)
            return
        if api_key == 0 and int(request.acks) == 0:
            # Produce without acknowledgements has no answer to carry the error: Kafka closes.
            close = getattr(ctx.connection, "close", None)
            if close is not None:
                close()
            return
        only_denials = build(response_type(api_key, ctx.version), throttle_time=0, **{
            response_field: [denial(entry, name) for entry, name in refused]})
        if not allowed:
            ctx.respond(only_denials)
            return
        denials = tuple(getattr(only_denials, response_field))

        def merge(response: Any) -> Any:
            return dataclasses.replace(response, **{
                response_field: tuple(getattr(response, response_field)) + denials})

        handler(_Merged(ctx, merge),  # type: ignore[arg-type]
                dataclasses.replace(request, **{field: tuple(allowed)}))

    return checked


def _offset_commit_topics(gate: GroupGate, handler: Handler, api_key: int = 8,
                          group_operation: Operation = Operation.READ) -> Handler:
    """`group_operation` on the group (READ for OffsetCommit, DELETE for OffsetDelete), then
    READ on each topic: a denied topic's partitions are answered TOPIC_AUTHORIZATION_FAILED.
    One cached decision per group and topic on the allowed path."""

    def name_of(topic: Any) -> str:
        return str(topic[0] if isinstance(topic, tuple) else topic.name)

    def denial(topic: Any, name: str) -> dict[str, Any]:
        indexes = ([p[0] for p in topic[1]] if isinstance(topic, tuple)
                   else [p.partition_index for p in topic.partitions])
        return {"name": name, "partitions": [
            {"partition_index": index, "error_code": _TOPIC_DENIED} for index in indexes]}

    per_topic = _per_topic(gate, api_key, Operation.READ, handler, lambda v: "topics",
                           "topics", name_of, denial)

    decide = gate.decide

    def checked(ctx: ClientRequest, request: Any) -> None:
        # The group first, as Kafka: a denied group answers every partition with its error.
        if not gate.group(ctx, group_operation, request.group_id):
            ctx.respond(_single_group_denial(api_key, ctx, request))
            return
        for topic in request.topics:
            if not decide(ctx, Operation.READ, ResourceType.TOPIC, name_of(topic)).allowed:
                per_topic(ctx, request)  # the rare path: split, answer, merge
                return
        handler(ctx, request)

    return checked


def _metadata(gate: GroupGate, broker: Any, handler: Handler) -> Handler:
    """DESCRIBE on each topic named (TOPIC_AUTHORIZATION_FAILED otherwise), CREATE (on the
    cluster or the topic) to have it auto-created; all topics: those the principal may
    DESCRIBE."""

    def visible(ctx: ClientRequest, name: str) -> bool:
        return gate.decide(ctx, Operation.DESCRIBE, ResourceType.TOPIC, name).allowed

    def checked(ctx: ClientRequest, request: Any) -> None:
        topic_operations = getattr(request, "include_topic_authorized_operations", False)
        cluster_operations = getattr(request, "include_cluster_authorized_operations", False)
        if topic_operations or cluster_operations:
            asked = ctx
            ctx = _Merged(asked, lambda response: _with_authorized_operations(  # type: ignore[assignment]
                gate, asked, response, topic_operations, cluster_operations))
        topics = request.topics
        if topics is None or (ctx.version == 0 and not topics):
            def keep(response: Any) -> Any:
                return dataclasses.replace(response, topics=tuple(
                    t for t in response.topics if t.name is None or visible(ctx, t.name)))

            handler(_Merged(ctx, keep), request)  # type: ignore[arg-type]
            return
        creates = bool(getattr(request, "allow_auto_topic_creation", True))
        may_create_all = creates and gate.decide(ctx, Operation.CREATE, ResourceType.CLUSTER,
                                                 CLUSTER_NAME).allowed
        allowed: list[Any] = []
        refused: list[str] = []
        for entry in topics:
            name = entry.name
            if name is None:
                allowed.append(entry)
            elif not _topic_allowed(gate, ctx, Operation.DESCRIBE, name) or (
                    creates and not may_create_all and broker.topics.get(name) is None
                    and not _topic_allowed(gate, ctx, Operation.CREATE, name)):
                refused.append(name)
            else:
                allowed.append(entry)
        if not refused:
            handler(ctx, request)
            return
        denials = tuple(build(response_type(3, ctx.version), topics=[
            {"name": name, "error_code": _TOPIC_DENIED, "partitions": [],
             "is_internal": False} for name in refused]).topics)

        def merge(response: Any) -> Any:
            # With no topic allowed the handler was asked for none (v0: for all, whose
            # listing is dropped here); the brokers and the cluster are still its answer.
            answered = tuple(response.topics) if allowed else ()
            return dataclasses.replace(response, topics=answered + denials)

        handler(_Merged(ctx, merge),  # type: ignore[arg-type]
                dataclasses.replace(request, topics=tuple(allowed)))

    return checked


# What Kafka reports in Metadata's authorized operations (its resources' supported operations).
_TOPIC_OPERATIONS = (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                     Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                     Operation.ALTER_CONFIGS)
_CLUSTER_OPERATIONS = (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                       Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                       Operation.DESCRIBE)


def _operations_bits(gate: GroupGate, ctx: ClientRequest, operations: tuple[Operation, ...],
                     resource_type: int, name: str) -> int:
    return sum(1 << operation for operation in operations
               if gate.decide(ctx, operation, resource_type, name).allowed)


def _with_authorized_operations(gate: GroupGate, ctx: ClientRequest, response: Any,
                                topics: bool, cluster: bool) -> Any:
    """Metadata's `topic_authorized_operations` of each topic answered (a denied one keeps
    Kafka's "not asked" value) and, up to v10, the `cluster_authorized_operations`."""
    changes: dict[str, Any] = {}
    if topics:
        changes["topics"] = tuple(
            dataclasses.replace(topic, topic_authorized_operations=_operations_bits(
                gate, ctx, _TOPIC_OPERATIONS, ResourceType.TOPIC, topic.name))
            if topic.error_code == ErrorCode.none and topic.name is not None else topic
            for topic in response.topics)
    if cluster and hasattr(response, "cluster_authorized_operations"):
        changes["cluster_authorized_operations"] = _operations_bits(
            gate, ctx, _CLUSTER_OPERATIONS, ResourceType.CLUSTER, CLUSTER_NAME)
    return dataclasses.replace(response, **changes)


def _init_producer_id(gate: GroupGate, handler: Handler) -> Handler:
    """As Kafka: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without
    one, IDEMPOTENT_WRITE on the cluster or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED)."""
    authorizer = gate.authorizer

    def refuse(ctx: ClientRequest, error: ErrorCode) -> None:
        ctx.respond(build(response_type(22, ctx.version), throttle_time=0, error_code=error,
                          producer_id=-1, producer_epoch=-1))

    def checked(ctx: ClientRequest, request: Any) -> None:
        transactional_id = request.transactional_id
        if transactional_id is not None:
            decision = gate.decide(ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                   transactional_id)
            if not decision.allowed:
                denied(authorizer, ctx, Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                       transactional_id, decision)
                refuse(ctx, ErrorCode.transactional_id_authorization_failed)
                return
        elif not gate.decide(ctx, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                             CLUSTER_NAME).allowed:
            principal = str(getattr(ctx.connection, "principal", "User:ANONYMOUS"))
            decision = authorizer.authorize_any(principal, ctx.client_host, Operation.WRITE,
                                                ResourceType.TOPIC)
            if not decision.allowed:
                denied(authorizer, ctx, Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                       CLUSTER_NAME, decision)
                refuse(ctx, ErrorCode.cluster_authorization_failed)
                return
        handler(ctx, request)

    return checked


# Transactions ---------------------------------------------------------------------------------

_TXN_DENIED = ErrorCode.transactional_id_authorization_failed
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def _transactional_id_allowed(gate: GroupGate, ctx: ClientRequest, operation: Operation,
                              transactional_id: str) -> bool:
    decision = gate.decide(ctx, operation, ResourceType.TRANSACTIONAL_ID, transactional_id)
    if not decision.allowed:
        denied(gate.authorizer, ctx, operation, ResourceType.TRANSACTIONAL_ID, transactional_id,
               decision)
    return decision.allowed


def _add_partitions_to_txn(gate: GroupGate, broker: Any, handler: Handler) -> Handler:
    """WRITE on the transactional id, then WRITE on each topic (an internal topic never
    passes). Any partition refused fails the whole request, as Kafka: the refused ones are
    answered TOPIC_AUTHORIZATION_FAILED, unknown ones UNKNOWN_TOPIC_OR_PARTITION, the others
    OPERATION_NOT_ATTEMPTED."""

    def exists(name: str, partition: int) -> bool:
        topic = broker.topics.get(name)
        return topic is not None and 0 <= partition < len(topic.partitions)

    def respond(ctx: ClientRequest, request: Any,
                error_of: Callable[[str, int], ErrorCode]) -> None:
        ctx.respond(build(response_type(24, ctx.version), throttle_time=0,
                          results_by_topic_v3_and_below=[
                              {"name": t.name, "results_by_partition": [
                                  {"partition_index": p,
                                   "partition_error_code": error_of(t.name, p)}
                                  for p in t.partitions]}
                              for t in request.v3_and_below_topics]))

    def checked(ctx: ClientRequest, request: Any) -> None:
        if not _transactional_id_allowed(gate, ctx, Operation.WRITE,
                                         request.v3_and_below_transactional_id):
            respond(ctx, request, lambda name, p: _TXN_DENIED)
            return
        refused = {t.name for t in request.v3_and_below_topics
                   if t.name in _INTERNAL_TOPICS
                   or not _topic_allowed(gate, ctx, Operation.WRITE, t.name)}
        if not refused:
            handler(ctx, request)
            return
        respond(ctx, request, lambda name, p: (
            _TOPIC_DENIED if name in refused
            else ErrorCode.operation_not_attempted if exists(name, p)
            else ErrorCode.unknown_topic_or_partition))

    return checked


def _single_error(api_key: int, checks: Callable[[ClientRequest, Any], ErrorCode | None],
                  handler: Handler) -> Handler:
    """AddOffsetsToTxn and EndTxn: one error code answers the request."""

    def checked(ctx: ClientRequest, request: Any) -> None:
        error = checks(ctx, request)
        if error is None:
            handler(ctx, request)
        else:
            ctx.respond(build(response_type(api_key, ctx.version), throttle_time=0,
                              error_code=error))

    return checked


def _add_offsets_to_txn(gate: GroupGate, handler: Handler) -> Handler:
    def checks(ctx: ClientRequest, request: Any) -> ErrorCode | None:
        if not _transactional_id_allowed(gate, ctx, Operation.WRITE, request.transactional_id):
            return _TXN_DENIED
        if not gate.group(ctx, Operation.READ, request.group_id):
            return _GROUP_DENIED
        return None

    return _single_error(25, checks, handler)


def _end_txn(gate: GroupGate, handler: Handler) -> Handler:
    def checks(ctx: ClientRequest, request: Any) -> ErrorCode | None:
        if not _transactional_id_allowed(gate, ctx, Operation.WRITE, request.transactional_id):
            return _TXN_DENIED
        return None

    return _single_error(26, checks, handler)


def _txn_offset_commit(gate: GroupGate, handler: Handler) -> Handler:
    """WRITE on the transactional id, READ on the group (each refusal answers every
    partition), then READ on each topic: a refused topic's partitions are answered
    TOPIC_AUTHORIZATION_FAILED and the others committed, as Kafka."""

    def denial(topic: Any, name: str) -> dict[str, Any]:
        return {"name": name, "partitions": [
            {"partition_index": p.partition_index, "error_code": _TOPIC_DENIED}
            for p in topic.partitions]}

    per_topic = _per_topic(gate, 28, Operation.READ, handler, lambda v: "topics", "topics",
                           lambda t: t.name, denial)

    def checked(ctx: ClientRequest, request: Any) -> None:
        error = None
        if not _transactional_id_allowed(gate, ctx, Operation.WRITE, request.transactional_id):
            error = _TXN_DENIED
        elif not gate.group(ctx, Operation.READ, request.group_id):
            error = _GROUP_DENIED
        if error is None:
            per_topic(ctx, request)
            return
        ctx.respond(build(response_type(28, ctx.version), throttle_time=0, topics=[
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": error}
                for p in t.partitions]} for t in request.topics]))

    return checked


def _describe_transactions(gate: GroupGate, handler: Handler) -> Handler:
    """DESCRIBE on each transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise);
    an allowed id's answer keeps only the topics the principal may describe."""

    def checked(ctx: ClientRequest, request: Any) -> None:
        allowed_ids = [_transactional_id_allowed(gate, ctx, Operation.DESCRIBE, tid)
                       for tid in request.transactional_ids]
        cls = response_type(65, ctx.version)

        def merge(response: Any) -> Any:
            answered = iter(response.transaction_states)
            states: list[Any] = []
            for tid, allowed in zip(request.transactional_ids, allowed_ids, strict=True):
                if not allowed:
                    states.append(build(cls, throttle_time=0, transaction_states=[{
                        "error_code": _TXN_DENIED, "transactional_id": tid,
                        "transaction_state": "", "transaction_timeout": 0,
                        "transaction_start_time": _EPOCH, "producer_id": 0,
                        "producer_epoch": 0, "topics": []}]).transaction_states[0])
                    continue
                entry = next(answered)
                topics = tuple(t for t in entry.topics if gate.decide(
                    ctx, Operation.DESCRIBE, ResourceType.TOPIC, t.topic).allowed)
                states.append(entry if len(topics) == len(entry.topics)
                              else dataclasses.replace(entry, topics=topics))
            return dataclasses.replace(response, transaction_states=tuple(states))

        handler(_Merged(ctx, merge),  # type: ignore[arg-type]
                dataclasses.replace(request, transactional_ids=tuple(
                    tid for tid, allowed in zip(request.transactional_ids, allowed_ids,
                                                strict=True) if allowed)))

    return checked


def _list_transactions(gate: GroupGate, handler: Handler) -> Handler:
    """Only the transactional ids the principal may describe."""

    def checked(ctx: ClientRequest, request: Any) -> None:
        _describable_only(gate, ctx, handler, request, "transaction_states",
                          ResourceType.TRANSACTIONAL_ID, lambda state: state.transactional_id)

    return checked


def _install_transaction_checks(gate: GroupGate, broker: Any,
                                wrap: Callable[[int, Callable[[Handler], Handler]], None]
                                ) -> None:
    wrap(24, lambda h: _add_partitions_to_txn(gate, broker, h))
    wrap(25, lambda h: _add_offsets_to_txn(gate, h))
    wrap(26, lambda h: _end_txn(gate, h))
    wrap(28, lambda h: _txn_offset_commit(gate, h))
    wrap(65, lambda h: _describe_transactions(gate, h))
    wrap(66, lambda h: _list_transactions(gate, h))


def _install_topic_checks(gate: GroupGate, broker: Any,
                          wrap: Callable[[int, Callable[[Handler], Handler]], None]) -> None:
    wrap(0, lambda h: _per_topic(
        gate, 0, Operation.WRITE, h, lambda v: "topic_data", "responses",
        lambda t: t.name, lambda t, name: {"name": name, "partition_responses": [
            {"index": p.index, "error_code": _TOPIC_DENIED, "base_offset": -1}
            for p in t.partition_data]}))
    wrap(3, lambda h: _metadata(gate, broker, h))

    def fetched_name(entry: Any) -> str | None:
        name = getattr(entry, "topic", None)  # by name before v13, by id from v13
        if name is not None:
            return str(name)
        topic_id = getattr(entry, "topic_id", None)
        topic = broker.topics.by_id(topic_id) if topic_id is not None else None
        return topic.name if topic is not None else None

    # Fetch is sessionless here (session id 0): filtering a request changes no session.
    wrap(1, lambda h: _per_topic(
        gate, 1, Operation.READ, h, lambda v: "topics", "responses", fetched_name,
        lambda t, name: {"topic": name, "topic_id": getattr(t, "topic_id", None),
                         "partitions": [{"partition_index": p.partition,
                                         "error_code": _TOPIC_DENIED, "high_watermark": -1,
                                         "records": b""} for p in t.partitions]}))
    wrap(2, lambda h: _per_topic(
        gate, 2, Operation.DESCRIBE, h, lambda v: "topics", "topics", lambda t: t.name,
        lambda t, name: {"name": name, "partitions": [
            {"partition_index": p.partition_index, "error_code": _TOPIC_DENIED,
             "timestamp": -1, "offset": -1, "old_style_offsets": []}
            for p in t.partitions]}))
    wrap(19, lambda h: _per_topic(
        gate, 19, Operation.CREATE, h, lambda v: "topics", "topics", lambda t: t.name,
        lambda t, name: {"name": name, "error_code": _TOPIC_DENIED,
                         "error_message": "Authorization failed.", "num_partitions": -1,
                         "replication_factor": -1, "configs": []},
        cluster_operation=Operation.CREATE))

    def deleted_name(entry: Any) -> str | None:
        if isinstance(entry, str):
            return entry
        if entry.name:
            return str(entry.name)
        topic = broker.topics.by_id(entry.topic_id) if entry.topic_id else None
        return topic.name if topic is not None else None

    wrap(20, lambda h: _per_topic(
        gate, 20, Operation.DELETE, h, lambda v: "topics" if v >= 6 else "topic_names",
        "responses", deleted_name,
        lambda t, name: {"name": name, "topic_id": getattr(t, "topic_id", None),
                         "error_code": _TOPIC_DENIED}))
    wrap(37, lambda h: _per_topic(
        gate, 37, Operation.ALTER, h, lambda v: "topics", "results", lambda t: t.name,
        lambda t, name: {"name": name, "error_code": _TOPIC_DENIED,
                         "error_message": "Authorization failed."}))


def install(broker: Any, settings: BrokerSettings) -> Authorizer | None:
    """Serve the ACL APIs on `broker` and, with `authorizer.class.name` set, check the group
    APIs (call once every API is registered)."""
    authorizer = None
    if settings["authorizer.class.name"]:
        authorizer = Authorizer(AclStore(settings.data_dir), settings["super.users"],
                                settings["allow.everyone.if.no.acl.found"], broker.refusals)
    broker.register(CREATE_ACLS, lambda ctx, req: create_acls(ctx, req, authorizer))
    broker.register(DESCRIBE_ACLS, lambda ctx, req: describe_acls(ctx, req, authorizer))
    broker.register(DELETE_ACLS, lambda ctx, req: delete_acls(ctx, req, authorizer))
    if authorizer is None:
        return None
    gate = GroupGate(authorizer)
    served = broker.served_versions()

    def wrap(api_key: int, make: Callable[[Handler], Handler]) -> None:
        handler = broker.handler_of(api_key)
        if handler is None or api_key not in served:
            return
        low, high = served[api_key]
        broker.register(ApiVersionRange(api_key, low, high), make(handler))

    def read_group(api_key: int) -> Callable[[Handler], Handler]:
        return lambda handler: _single(gate, api_key, Operation.READ, handler)

    for api_key in (11, 14, 12, 13, 68):
        wrap(api_key, read_group(api_key))
    wrap(8, lambda h: _offset_commit_topics(gate, h))
    wrap(47, lambda h: _offset_commit_topics(gate, h, 47, Operation.DELETE))
    wrap(9, lambda h: _offset_fetch(gate, h))
    wrap(15, lambda h: _multi(gate, 15, Operation.DESCRIBE, h, "groups", "groups",
                              lambda g: {"group_id": g, "error_code": _GROUP_DENIED,
                                         "group_state": "", "protocol_type": "",
                                         "protocol_data": "", "members": []}))
    wrap(69, lambda h: _multi(gate, 69, Operation.DESCRIBE, h, "group_ids", "groups",
                              lambda g: {"group_id": g, "error_code": _GROUP_DENIED,
                                         "error_message": "Not authorized to describe the "
                                         "group", "group_state": "", "assignor_name": "",
                                         "members": []}))
    wrap(42, lambda h: _multi(gate, 42, Operation.DELETE, h, "groups_names", "results",
                              lambda g: {"group_id": g, "error_code": _GROUP_DENIED}))
    wrap(16, lambda h: _list_groups(gate, h))
    wrap(22, lambda h: _init_producer_id(gate, h))
    _install_topic_checks(gate, broker, wrap)
    _install_transaction_checks(gate, broker, wrap)
    return authorizer
