"""Metadata, CreateTopics, DeleteTopics and CreatePartitions over the topic store.

DeleteTopics deletes a topic's committed offsets from every group too (the broker writes their
tombstones first): it is answered once those are durable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from coordinator.api.context import ApiVersionRange, ClientRequest
from coordinator.dataplane.internal_topic import (
    OFFSETS_TOPIC,
    InternalTopic,
    TopicDirectory,
    offsets_topic,
    offsets_topic_id,
    topic_by_id,
    topic_by_name,
)
from protocol.build import build
from protocol.codec import response_type
from storage.log import InvalidConfigError, LogConfig
from storage.topics import InvalidTopicError, Topic, TopicExistsError, valid_topic_name

METADATA, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 3, 19, 20, 37
METADATA_VERSIONS = ApiVersionRange(METADATA, 0, 13)
CREATE_TOPICS_VERSIONS = ApiVersionRange(CREATE_TOPICS, 0, 7)
DELETE_TOPICS_VERSIONS = ApiVersionRange(DELETE_TOPICS, 0, 6)
CREATE_PARTITIONS_VERSIONS = ApiVersionRange(CREATE_PARTITIONS, 0, 3)


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

    def add_partitions(self, name: str, total: int) -> None: ...


def _partitions(broker: TopicsHost, topic: Topic | InternalTopic) -> list[dict[str, Any]]:
    node = broker.node_id
    return [
        {
            "error_code": ErrorCode.none,
            "partition_index": index,
            "leader_id": node,
            "leader_epoch": 0,
            "replica_nodes": (node,),
            "isr_nodes": (node,),
            "offline_replicas": (),
        }
        for index in range(len(topic.partitions))
    ]


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
    entries: list[dict[str, Any]] = []
    if all_topics:
        entries = [_topic_entry(broker, t) for t in broker.topics.topics()]
        internal = offsets_topic(broker)
        if internal is not None:
            entries.append(_topic_entry(broker, internal))
    else:
        for wanted in requested:
            name = wanted.name
            topic_id = getattr(wanted, "topic_id", None)
            if name is None:
                topic = topic_by_id(broker, topic_id) if topic_id is not None else None
                if topic is None:
                    entries.append({"error_code": ErrorCode.unknown_topic_id, "name": None,
                                    "topic_id": topic_id, "partitions": ()})
                else:
                    entries.append(_topic_entry(broker, topic))
                continue
            topic = topic_by_name(broker, name)
            if topic is None:
                if not valid_topic_name(name) or name.startswith("__"):
                    entries.append({"error_code": ErrorCode.invalid_topic_exception,
                                    "name": name, "partitions": ()})
                    continue
                if allow_create and broker.settings["auto.create.topics.enable"]:
                    topic = broker.create_topic(name, broker.settings["num.partitions"], {},
                                                reason="auto-create on Metadata")
                else:
                    entries.append({"error_code": ErrorCode.unknown_topic_or_partition,
                                    "name": name, "partitions": ()})
                    continue
            entries.append(_topic_entry(broker, topic))
    host, port = broker.advertised_to(ctx.connection.listener)
    ctx.respond(build(
        response_type(METADATA, version),
        throttle_time=0,
        brokers=[{"node_id": broker.node_id, "host": host, "port": port, "rack": None}],
        cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        topics=entries,
        error_code=ErrorCode.none,
    ))


def create_topics(broker: TopicsHost, ctx: ClientRequest, request: Any) -> None:
    results = []
    seen: set[str] = set()
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
        else:
            configs = {c.name: c.value for c in creatable.configs if c.value is not None}
            result.update(num_partitions=partitions, replication_factor=1, configs=())
            try:
                LogConfig().with_overrides(configs)
                if not request.validate_only:
                    topic = broker.create_topic(name, partitions, configs,
                                                reason="CreateTopics")
                    result["topic_id"] = topic.topic_id
            except InvalidConfigError as exc:
                result.update(error_code=ErrorCode.invalid_config, error_message=str(exc))
            except InvalidTopicError as exc:
                result.update(error_code=ErrorCode.invalid_topic_exception,
                              error_message=str(exc))
            except TopicExistsError as exc:
                result.update(error_code=ErrorCode.topic_already_exists, error_message=str(exc))
        seen.add(name)
        results.append(result)
    ctx.respond(build(response_type(CREATE_TOPICS, ctx.version), throttle_time=0,
                      topics=results))


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
        elif not request.validate_only:
            broker.add_partitions(wanted.name, wanted.count)
        results.append(entry)
    ctx.respond(build(response_type(CREATE_PARTITIONS, ctx.version), throttle_time=0,
                      results=results))
