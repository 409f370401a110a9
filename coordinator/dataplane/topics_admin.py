"""Metadata, CreateTopics, DeleteTopics and CreatePartitions over the topic store.

Creating a topic or partitions takes directories, files and fsyncs: that work runs on the
broker's topic-admin thread (`Broker.begin_create_topic`), never on the event loop. A Metadata
request that auto-creates answers LEADER_NOT_AVAILABLE for the topic at once, as Kafka does
while the controller creates it (clients ask again); CreateTopics and CreatePartitions are
answered when their topics are built. Beyond `max.broker.partitions` they get
POLICY_VIOLATION (auto-create: UNKNOWN_TOPIC_OR_PARTITION, as with auto-create off), and a
client over its KIP-599 `controller.mutation.rate` quota THROTTLING_QUOTA_EXCEEDED.

DeleteTopics deletes a topic's committed offsets from every group too (the broker writes their
tombstones first): it is answered once those are durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol, get_args, get_type_hints

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest, respond_in_slices
from coordinator.dataplane.internal_topic import (
    OFFSETS_TOPIC,
    InternalTopic,
    TopicDirectory,
    offsets_topic,
    offsets_topic_id,
    topic_by_id,
    topic_by_name,
)
from coordinator.dataplane.mutation_quota import MutationQuota
from protocol.build import build
from protocol.codec import response_type
from storage.log import InvalidConfigError, LogConfig
from storage.topics import (
    InvalidPartitionsError,
    InvalidTopicError,
    Topic,
    TopicExistsError,
    valid_topic_name,
)

METADATA, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 3, 19, 20, 37
METADATA_VERSIONS = ApiVersionRange(METADATA, 0, 13)
CREATE_TOPICS_VERSIONS = ApiVersionRange(CREATE_TOPICS, 0, 7)
DELETE_TOPICS_VERSIONS = ApiVersionRange(DELETE_TOPICS, 0, 6)
CREATE_PARTITIONS_VERSIONS = ApiVersionRange(CREATE_PARTITIONS, 0, 3)


class PartitionLimitError(Exception):
    """A create or add would take the broker past `max.broker.partitions`."""


class Settings(Protocol):
    def __getitem__(self, name: str) -> Any: ...


class TopicsHost(TopicDirectory, Protocol):
    """What Metadata and the topic admin APIs use of the broker."""

    @property
    def node_id(self) -> int: ...

    def advertised_to(self, listener: str) -> tuple[str, int]:
        """The address a client that came in on `listener` is told to use."""
        ...

    @property
    def settings(self) -> Settings:
        """`auto.create.topics.enable` and `num.partitions`."""
        ...

    def create_topic(self, name: str, partitions: int, configs: dict[str, str], *,
                     reason: str) -> Topic: ...

    def delete_topics(self, names: Sequence[str],
                      done: Callable[[dict[str, ErrorCode]], None]) -> None:
        """Delete topics, and every group's committed offsets of them first; `done` gets each
        topic's error code once that is durable (or failed)."""
        ...

    def begin_create_topic(self, name: str, partitions: int, configs: dict[str, str], *,
                           reason: str) -> asyncio.Future[Topic]: ...

    def begin_add_partitions(self, name: str, total: int) -> asyncio.Future[None]: ...

    @property
    def mutation_quota(self) -> MutationQuota: ...

    def add_partitions(self, name: str, total: int) -> None: ...


def _partitions(broker: TopicsHost, topic: Topic | InternalTopic) -> list[dict[str, Any]]:
    node = broker.node_id
    return [
        _offline_partition(node, index) if getattr(partition, "offline", None) is not None else
        {
            "error_code": ErrorCode.none,
            "partition_index": index,
            "leader_id": node,
            "leader_epoch": 0,
            "replica_nodes": (node,),
            "isr_nodes": (node,),
            "offline_replicas": (),
        }
        for index, partition in enumerate(topic.partitions)
    ]


def _offline_partition(node: int, index: int) -> dict[str, Any]:
    """A partition whose log a disk error took offline, as Kafka describes a partition whose
    only replica's log directory failed: no leader (LEADER_NOT_AVAILABLE, leader -1), the
    replica listed offline. Clients stop sending it Produce and Fetch and keep asking."""
    return {
        "error_code": ErrorCode.leader_not_available,
        "partition_index": index,
        "leader_id": -1,
        "leader_epoch": 0,
        "replica_nodes": (node,),
        "isr_nodes": (node,),
        "offline_replicas": (node,),
    }


def _topic_entry(broker: TopicsHost, topic: Topic | InternalTopic) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": getattr(topic, "is_internal", False),
        "partitions": _partitions(broker, topic),
    }


def metadata(broker: TopicsHost, ctx: ClientRequest, request: Any) -> None:
    version = ctx.version
    requested = request.topics
    # v0 has no null: an empty list meant "all topics" until v1 made null mean that.
    all_topics = requested is None or (version == 0 and not requested)
    allow_create = getattr(request, "allow_auto_topic_creation", True)
    if all_topics:
        internal = offsets_topic(broker)
        _all_topics_in_slices(broker, ctx, [*broker.topics.topics(),
                                            *([internal] if internal is not None else [])])
        return
    if len(requested) <= NAMES_PER_TURN:
        _respond_metadata(broker, ctx, [_requested_entry(broker, wanted, allow_create)
                                        for wanted in requested])
        return
    # Many names (each may start a topic's creation, ~20 us on the loop): a slice per loop
    # turn, so that one request cannot hold every group up.
    entries: list[Any] = []
    loop = asyncio.get_running_loop()

    def step(start: int) -> None:
        end = min(start + NAMES_PER_TURN, len(requested))
        entries.extend(_requested_entry(broker, wanted, allow_create)
                       for wanted in requested[start:end])
        if end < len(requested):
            loop.call_soon(step, end)
        else:
            _respond_metadata(broker, ctx, entries)

    step(0)


# Topic names a Metadata request describes (or starts creating) per event-loop turn.
NAMES_PER_TURN = 250


def metadata_error_values(broker: TopicsHost, ctx: ClientRequest, request: Any,
                          error: ErrorCode) -> dict[str, Any]:
    """Every requested topic answered `error` with no partitions, as Kafka's error response
    does; the brokers are listed as in any Metadata answer."""
    host, port = broker.advertised_to(ctx.connection.listener)
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": broker.node_id, "host": host, "port": port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": [{"error_code": error, "name": wanted.name,
                    "topic_id": getattr(wanted, "topic_id", None), "is_internal": False,
                    "partitions": ()} for wanted in request.topics or ()],
        "error_code": ErrorCode.none,
    }


def _requested_entry(broker: TopicsHost, wanted: Any, allow_create: bool) -> Any:
    """The Metadata answer for one requested topic (by name, or by id from v10)."""
    name = wanted.name
    topic_id = getattr(wanted, "topic_id", None)
    if name is None:
        topic = topic_by_id(broker, topic_id) if topic_id is not None else None
        if topic is None:
            return {"error_code": ErrorCode.unknown_topic_id, "name": None,
                    "topic_id": topic_id, "partitions": ()}
        return _topic_entry(broker, topic)
    topic = topic_by_name(broker, name)
    if topic is not None:
        return _topic_entry(broker, topic)
    if not valid_topic_name(name) or name.startswith("__"):
        return {"error_code": ErrorCode.invalid_topic_exception, "name": name, "partitions": ()}
    if broker.topics.is_reserved(name):
        error = ErrorCode.leader_not_available  # being created
    elif allow_create and broker.settings["auto.create.topics.enable"]:
        error = _auto_create(broker, name)
    else:
        error = ErrorCode.unknown_topic_or_partition
    return {"error_code": error, "name": name, "partitions": ()}


def _respond_metadata(broker: TopicsHost, ctx: ClientRequest, topics: list[Any]) -> None:
    host, port = broker.advertised_to(ctx.connection.listener)
    respond_in_slices(ctx, {
        "throttle_time": 0,
        "brokers": [{"node_id": broker.node_id, "host": host, "port": port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "error_code": ErrorCode.none,
    })


# Partitions an all-topics Metadata answer describes per event-loop turn (~10 us each).
PARTITIONS_PER_TURN = 2_000
_topic_types: dict[type, type] = {}


def _all_topics_in_slices(broker: TopicsHost, ctx: ClientRequest,
                          topics: list[Topic | InternalTopic]) -> None:
    """Answer a Metadata request for every topic, describing `PARTITIONS_PER_TURN` partitions
    per loop turn: with thousands of topics one answer must not hold every group up. A small
    cluster is answered at once, as before."""
    response = response_type(METADATA, ctx.version)
    topic_type = _topic_types.get(response)
    if topic_type is None:
        topic_type = _topic_types[response] = get_args(get_type_hints(response)["topics"])[0]
    described: list[Any] = []

    def step(start: int) -> None:
        end, partitions = start, 0
        while end < len(topics) and partitions < PARTITIONS_PER_TURN:
            partitions += len(topics[end].partitions) + 1
            described.append(build(topic_type, _topic_entry(broker, topics[end])))
            end += 1
        if end < len(topics):
            asyncio.get_running_loop().call_soon(step, end)
        else:
            _respond_metadata(broker, ctx, described)

    step(0)


def _auto_create(broker: TopicsHost, name: str) -> ErrorCode:
    """Start creating `name` for a Metadata request: LEADER_NOT_AVAILABLE while it is built."""
    try:
        created = broker.begin_create_topic(name, broker.settings["num.partitions"], {},
                                            reason="auto-create on Metadata")
    except TopicExistsError:
        pass
    except InvalidTopicError:
        return ErrorCode.invalid_topic_exception
    except (InvalidPartitionsError, PartitionLimitError):
        return ErrorCode.unknown_topic_or_partition
    # Nobody waits for it: a failed build is logged by the broker, and the next Metadata
    # request tries again.
    created.add_done_callback(lambda done: done.cancelled() or done.exception())
    return ErrorCode.leader_not_available


def create_topics(broker: TopicsHost, ctx: ClientRequest, request: Any) -> None:
    results = []
    seen: set[str] = set()
    building: list[tuple[dict[str, Any], asyncio.Future[Topic]]] = []
    throttle_ms = broker.mutation_quota.throttle_ms(ctx.client_id or "")
    for creatable in request.topics:
        name = creatable.name
        result: dict[str, Any] = {"name": name, "error_code": ErrorCode.none,
                                  "error_message": None, "topic_id": None}
        partitions = creatable.num_partitions
        if partitions == -1:
            partitions = len(creatable.assignments) or broker.settings["num.partitions"]
        replication = creatable.replication_factor
        if name in seen:
            result.update(error_code=ErrorCode.invalid_request,
                          error_message=f"topic {name} appears twice in the request")
        elif name == OFFSETS_TOPIC:
            result.update(error_code=ErrorCode.topic_already_exists,
                          error_message=f"Topic '{name}' already exists.")
        elif not valid_topic_name(name) or name.startswith("__"):
            result.update(error_code=ErrorCode.invalid_topic_exception,
                          error_message=f"invalid topic name {name!r}")
        elif broker.topics.get(name) is not None:
            result.update(error_code=ErrorCode.topic_already_exists,
                          error_message=f"Topic '{name}' already exists.")
        elif partitions <= 0:
            result.update(error_code=ErrorCode.invalid_partitions,
                          error_message="Number of partitions must be larger than 0.")
        elif replication not in (-1, 1):
            result.update(error_code=ErrorCode.invalid_replication_factor,
                          error_message=f"Replication factor: {replication} larger than "
                                        "available brokers: 1.")
        elif throttle_ms and ctx.version >= 6 and not request.validate_only:
            result.update(error_code=ErrorCode.throttling_quota_exceeded,
                          error_message="The throttling quota has been exceeded.")
        else:
            configs = {c.name: c.value for c in creatable.configs if c.value is not None}
            result.update(num_partitions=partitions, replication_factor=1, configs=())
            try:
                LogConfig().with_overrides(configs)
                if not request.validate_only:
                    building.append((result, broker.begin_create_topic(
                        name, partitions, configs, reason="CreateTopics")))
                    broker.mutation_quota.record(ctx.client_id or "", partitions)
            except InvalidConfigError as exc:
                result.update(error_code=ErrorCode.invalid_config, error_message=str(exc))
            except InvalidTopicError as exc:
                result.update(error_code=ErrorCode.invalid_topic_exception,
                              error_message=str(exc))
            except TopicExistsError as exc:
                result.update(error_code=ErrorCode.topic_already_exists, error_message=str(exc))
            except PartitionLimitError as exc:
                result.update(error_code=ErrorCode.policy_violation, error_message=str(exc))
        seen.add(name)
        results.append(result)

    answered = False

    def respond() -> None:
        nonlocal answered
        if answered:
            return
        answered = True
        for result, future in building:
            if not future.done():
                # Kafka answers REQUEST_TIMED_OUT for a topic not created within the request's
                # timeout; its creation carries on.
                result.update(error_code=ErrorCode.request_timed_out,
                              error_message="the topic is still being created")
            elif future.exception() is None:
                result["topic_id"] = future.result().topic_id
            else:
                # The disk refused (EMFILE, ENOSPC): nothing of the topic is left behind.
                result.update(error_code=ErrorCode.unknown_server_error,
                              error_message=f"could not create the topic: {future.exception()}",
                              num_partitions=-1, replication_factor=-1)
        ctx.respond(build(response_type(CREATE_TOPICS, ctx.version), throttle_time=throttle_ms,
                          topics=results))

    if not building:
        respond()
        return
    asyncio.gather(*(f for _, f in building), return_exceptions=True).add_done_callback(
        lambda _: respond())
    timeout_field: Any = getattr(request, "timeout", 0)
    timeout = (timeout_field.total_seconds() if hasattr(timeout_field, "total_seconds")
               else (timeout_field or 0) / 1000)
    if timeout > 0:
        asyncio.get_running_loop().call_later(timeout, respond)


def delete_topics(broker: TopicsHost, ctx: ClientRequest, request: Any) -> None:
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    doomed: dict[str, dict[str, Any]] = {}  # topic name -> its entry in `results`
    for name, topic_id in wanted:
        if name == OFFSETS_TOPIC or (topic_id is not None
                                     and topic_id == offsets_topic_id(broker)):
            # The group log cannot be deleted: Kafka refuses internal topics here too.
            results.append({"name": OFFSETS_TOPIC, "topic_id": offsets_topic_id(broker),
                            "error_code": ErrorCode.topic_authorization_failed,
                            "error_message": f"cannot delete internal topic {OFFSETS_TOPIC}"})
            continue
        topic = broker.topics.get(name) if name is not None else broker.topics.by_id(topic_id)
        if topic is None:
            code = (ErrorCode.unknown_topic_id if name is None
                    else ErrorCode.unknown_topic_or_partition)
            results.append({"name": name, "topic_id": topic_id, "error_code": code})
            continue
        if topic.name in doomed:
            results.append({"name": name, "topic_id": topic_id,
                            "error_code": ErrorCode.invalid_request,
                            "error_message": "Duplicate topic name."})
            continue
        entry = {"name": topic.name, "topic_id": topic.topic_id, "error_code": ErrorCode.none,
                 "error_message": None}
        doomed[topic.name] = entry
        results.append(entry)

    def deleted(errors: dict[str, ErrorCode]) -> None:
        for name, code in errors.items():
            entry = doomed[name]
            entry["error_code"] = code
            if code is not ErrorCode.none:
                entry["error_message"] = _DELETE_FAILED.get(code)
        ctx.respond(build(response_type(DELETE_TOPICS, ctx.version), throttle_time=0,
                          responses=results))

    if doomed:
        broker.delete_topics(list(doomed), deleted)
    else:
        deleted({})


_DELETE_FAILED = {
    ErrorCode.kafka_storage_error: "the group log did not take the tombstones of the topic's "
                                   "committed offsets; nothing was deleted",
    ErrorCode.coordinator_load_in_progress: "the group log is loading; retry",
}


def create_partitions(broker: TopicsHost, ctx: ClientRequest, request: Any) -> None:
    results = []
    building: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
    throttle_ms = broker.mutation_quota.throttle_ms(ctx.client_id or "")
    for wanted in request.topics:
        topic = broker.topics.get(wanted.name)
        entry: dict[str, Any] = {"name": wanted.name, "error_code": ErrorCode.none,
                                 "error_message": None}
        if topic is None:
            entry.update(error_code=ErrorCode.unknown_topic_or_partition,
                         error_message=f"The topic '{wanted.name}' does not exist.")
        elif wanted.count <= len(topic.partitions):
            entry.update(error_code=ErrorCode.invalid_partitions,
                         error_message=f"Topic currently has {len(topic.partitions)} partitions, "
                                       f"which is higher than the requested {wanted.count}.")
        elif throttle_ms and ctx.version >= 3 and not request.validate_only:
            entry.update(error_code=ErrorCode.throttling_quota_exceeded,
                         error_message="The throttling quota has been exceeded.")
        elif not request.validate_only:
            try:
                building.append((entry, broker.begin_add_partitions(wanted.name, wanted.count)))
                broker.mutation_quota.record(ctx.client_id or "",
                                             wanted.count - len(topic.partitions))
            except PartitionLimitError as exc:
                entry.update(error_code=ErrorCode.policy_violation, error_message=str(exc))
            except InvalidPartitionsError as exc:
                entry.update(error_code=ErrorCode.invalid_partitions, error_message=str(exc))
        results.append(entry)

    def respond() -> None:
        ctx.respond(build(response_type(CREATE_PARTITIONS, ctx.version),
                          throttle_time=throttle_ms, results=results))

    if not building:
        respond()
        return

    def built(_: asyncio.Future[list[BaseException | None]]) -> None:
        for entry, future in building:
            error = future.exception()
            if error is not None:
                entry.update(error_code=ErrorCode.unknown_server_error,
                             error_message=f"could not add the partitions: {error}")
        respond()

    asyncio.gather(*(f for _, f in building), return_exceptions=True).add_done_callback(built)
