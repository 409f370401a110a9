"""The Kafka admin calls the `groups` commands make, through confluent-kafka's AdminClient.

Any Kafka-compatible broker answers them (this one, Apache Kafka, Redpanda). Every call is
bounded by the command's timeout, and every failure becomes an `AdminError` whose message is one
line for the operator. The broker address is checked with a plain TCP connect first, so an
unreachable broker is reported within the connect timeout instead of after librdkafka's retries.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
TopicPartition = tuple[str, int]

_NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: no committed offset

# The broker's Docker image leaves the admin clients out: the broker never imports them.
_MISSING_CLIENTS = ("confluent-kafka and kafka-python are not installed (the broker's Docker "
                    "image leaves them out): run `rebalanced groups` where `pip install .` "
                    "installed it, against the broker's published port")


class AdminError(Exception):
    """A failure to report as one line, then exit non-zero."""


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str  # Kafka's spelling: Stable, Empty, PreparingRebalance, ...
    group_type: str
    protocol: str  # the assignor
    coordinator: tuple[int, str, int]  # node id, host, port
    members: tuple[Member, ...] = field(default=())


_STATE_NAMES = {
    "STABLE": "Stable", "EMPTY": "Empty", "DEAD": "Dead",
    "PREPARING_REBALANCE": "PreparingRebalance",
    "COMPLETING_REBALANCE": "CompletingRebalance",
    "UNKNOWN": "Unknown",
}


def _silent_logger() -> logging.Logger:
    """librdkafka's own log lines (connection refused, retries) would interleave with the
    command's output; failures reach the operator through `AdminError` instead."""
    logger = logging.getLogger("rebalanced.cli.librdkafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def split_bootstrap(text: str) -> tuple[str, int]:
    first = text.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise AdminError(f"invalid --bootstrap-server {text!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


# librdkafka's security settings -> kafka-python's (delete-offsets goes through kafka-python).
_KAFKA_PYTHON_NAMES = {
    "security.protocol": "security_protocol", "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
}


def kafka_python_admin(bootstrap: str, timeout_s: float, security: Mapping[str, str],
                       client_id: str) -> Any:
    """kafka-python's admin client, for the calls confluent-kafka's Python AdminClient does
    not expose; `security` holds librdkafka's names (from --command-config)."""
    try:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError
    except ImportError:
        raise AdminError(_MISSING_CLIENTS) from None
    timeout_ms = int(timeout_s * 1000)
    try:
        return KafkaAdminClient(bootstrap_servers=bootstrap,
                                request_timeout_ms=max(timeout_ms, 1000),
                                bootstrap_timeout_ms=max(timeout_ms, 1000),
                                client_id=client_id,
                                **{_KAFKA_PYTHON_NAMES[key]: value
                                   for key, value in security.items()
                                   if key in _KAFKA_PYTHON_NAMES})
    except KafkaError as exc:
        raise AdminError(f"cannot reach a broker at {bootstrap}: "
                         f"{kafka_python_error_text(exc)}") from None


class GroupAdmin:
    def __init__(self, bootstrap: str, timeout_s: float,
                 security: Mapping[str, str] | None = None) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        # librdkafka settings from --command-config (security.protocol, sasl.*, ssl.*).
        self.security = dict(security or {})
        host, port = split_bootstrap(bootstrap)
        try:
            from confluent_kafka.admin import AdminClient
        except ImportError:
            raise AdminError(_MISSING_CLIENTS) from None
        try:
            with socket.create_connection((host, port), timeout=min(timeout_s, 5.0)):
                pass
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise AdminError(f"cannot reach a broker at {bootstrap}: {reason}") from None

        timeout_ms = int(timeout_s * 1000)
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
            "socket.timeout.ms": max(timeout_ms, 10),
            "logger": _silent_logger(),
            "log.connection.close": False,
            **self.security,
        }
        self._client = AdminClient(config)

    # calls --------------------------------------------------------------------------------

    def _wait(self, future: Future[T], what: str) -> T:
        from confluent_kafka import KafkaException

        try:
            return future.result(timeout=self.timeout_s + 1.0)
        except KafkaException as exc:
            raise AdminError(f"{what} failed: {_kafka_error_text(exc)}") from None
        except TimeoutError:
            raise AdminError(f"{what}: no answer from {self.bootstrap} within "
                             f"{self.timeout_s:g} s") from None

    def list_groups(self) -> list[tuple[str, str, str]]:
        """(group id, state, type) of every group, sorted by id."""
        result = self._wait(self._client.list_consumer_groups(request_timeout=self.timeout_s),
                            "listing groups")
        if result.errors and not result.valid:
            raise AdminError(f"listing groups failed: {_kafka_error_text(result.errors[0])}")
        return sorted((g.group_id, _state_name(g.state), _type_name(getattr(g, "type", None)))
                      for g in result.valid)

    def describe(self, group_id: str) -> GroupDescription:
        return self.describe_with_offsets(group_id, with_offsets=False)[0]

    def describe_with_offsets(self, group_id: str, with_offsets: bool = True
                              ) -> tuple[GroupDescription, dict[TopicPartition, int]]:
        """The group and its committed offsets, both requests in flight at once."""
        futures = self._client.describe_consumer_groups([group_id],
                                                        request_timeout=self.timeout_s)
        offsets_future = self._committed_future(group_id) if with_offsets else None
        description = self._description(group_id, futures[group_id])
        committed = (self._committed_result(group_id, offsets_future)
                     if offsets_future is not None else {})
        return description, committed

    def _description(self, group_id: str, future: Future[Any]) -> GroupDescription:
        description = self._wait(future, f"describing group {group_id!r}")
        members = tuple(
            Member(
                member_id=m.member_id, client_id=m.client_id or "", host=m.host or "",
                group_instance_id=m.group_instance_id,
                assignment=tuple(sorted((tp.topic, tp.partition)
                                        for tp in (m.assignment.topic_partitions
                                                   if m.assignment else ()))),
            )
            for m in description.members
        )
        coordinator = description.coordinator
        return GroupDescription(
            group_id=group_id,
            state=_state_name(description.state),
            group_type=_type_name(getattr(description, "type", None)),
            protocol=description.partition_assignor or "",
            coordinator=((coordinator.id, coordinator.host, coordinator.port)
                         if coordinator is not None else (-1, "", -1)),
            members=members,
        )

    def committed(self, group_id: str) -> dict[TopicPartition, int]:
        """The group's committed offsets (partitions without one are left out)."""
        return self._committed_result(group_id, self._committed_future(group_id))

    def _committed_future(self, group_id: str) -> Future[Any]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self._client.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout_s)
        return futures[group_id]  # type: ignore[no-any-return]

    def _committed_result(self, group_id: str, future: Future[Any]
                          ) -> dict[TopicPartition, int]:
        result = self._wait(future, f"fetching the offsets of {group_id!r}")
        out: dict[TopicPartition, int] = {}
        for tp in result.topic_partitions or ():
            if tp.error is not None:
                raise AdminError(f"fetching the offsets of {group_id!r} failed for "
                                 f"{tp.topic}:{tp.partition}: {tp.error.str()}")
            if tp.offset != _NO_OFFSET and tp.offset >= 0:
                out[(tp.topic, tp.partition)] = tp.offset
        return out

    def topics(self) -> dict[str, int]:
        """Topic -> partition count, internal topics included."""
        from confluent_kafka import KafkaException

        try:
            metadata = self._client.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise AdminError(f"reading topic metadata failed: {_kafka_error_text(exc)}"
                             ) from None
        return {name: len(t.partitions) for name, t in metadata.topics.items()
                if t.error is None}

    def list_offsets(self, partitions: Iterable[TopicPartition], spec: str,
                     timestamp_ms: int = 0) -> dict[TopicPartition, int]:
        """Earliest, latest or by-timestamp offsets in one request per broker."""
        return self._offsets_result(self._offsets_futures(partitions, spec, timestamp_ms), spec)

    def _offsets_futures(self, partitions: Iterable[TopicPartition], spec: str,
                         timestamp_ms: int = 0) -> dict[Any, Future[Any]]:
        from confluent_kafka import TopicPartition as KafkaTopicPartition
        from confluent_kafka.admin import OffsetSpec

        wanted = list(partitions)
        if not wanted:
            return {}
        offset_spec = {"earliest": OffsetSpec.earliest, "latest": OffsetSpec.latest}.get(spec)
        chosen = (offset_spec() if offset_spec is not None
                  else OffsetSpec.for_timestamp(timestamp_ms))
        return self._client.list_offsets(  # type: ignore[no-any-return]
            {KafkaTopicPartition(t, p): chosen for t, p in wanted},
            request_timeout=self.timeout_s)

    def _offsets_result(self, futures: dict[Any, Future[Any]], spec: str
                        ) -> dict[TopicPartition, int]:
        from confluent_kafka import KafkaException

        out: dict[TopicPartition, int] = {}
        for tp, future in futures.items():
            try:
                info = future.result(timeout=self.timeout_s + 1.0)
            except KafkaException as exc:
                raise AdminError(f"listing {spec} offsets of {tp.topic}:{tp.partition} failed: "
                                 f"{_kafka_error_text(exc)}") from None
            except TimeoutError:
                raise AdminError(f"listing offsets: no answer from {self.bootstrap} within "
                                 f"{self.timeout_s:g} s") from None
            out[(tp.topic, tp.partition)] = info.offset
        return out

    def describe_with_log_ends(self, group_id: str) -> tuple[
            GroupDescription, dict[TopicPartition, int], dict[TopicPartition, int]]:
        """The group, its committed offsets and the log-end offsets of its partitions, with
        the requests overlapped: the log ends of the committed partitions are asked for as
        soon as the offsets arrive, while the group description may still be on its way."""
        describe = self._client.describe_consumer_groups([group_id],
                                                         request_timeout=self.timeout_s)
        committed = self._committed_result(group_id, self._committed_future(group_id))
        ends_of_committed = self._offsets_futures(sorted(committed), "latest")
        description = self._description(group_id, describe[group_id])
        assigned = {tp for m in description.members for tp in m.assignment}
        log_ends = self._offsets_result(ends_of_committed, "latest")
        log_ends.update(self.list_offsets(sorted(assigned - set(committed)), "latest"))
        return description, committed, log_ends

    def alter_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit all the new offsets in one OffsetCommit request."""
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        request = ConsumerGroupTopicPartitions(
            group_id, [KafkaTopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
        futures = self._client.alter_consumer_group_offsets([request],
                                                            request_timeout=self.timeout_s)
        result = self._wait(futures[group_id], f"resetting the offsets of {group_id!r}")
        failed = [tp for tp in result.topic_partitions or () if tp.error is not None]
        if failed:
            tp = failed[0]
            raise AdminError(f"resetting the offsets of {group_id!r} failed for "
                             f"{tp.topic}:{tp.partition}: {tp.error.str()}")

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, str | None]:
        """group -> None when deleted, else the error text."""
        from confluent_kafka import KafkaException

        futures = self._client.delete_consumer_groups(list(group_ids),
                                                      request_timeout=self.timeout_s)
        out: dict[str, str | None] = {}
        for group_id, future in futures.items():
            try:
                future.result(timeout=self.timeout_s + 1.0)
                out[group_id] = None
            except KafkaException as exc:
                out[group_id] = _kafka_error_text(exc)
            except TimeoutError:
                out[group_id] = f"no answer within {self.timeout_s:g} s"
        return out

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]
                       ) -> dict[TopicPartition, str | None]:
        """OffsetDelete. confluent-kafka's Python AdminClient does not expose it, so this one
        call goes through kafka-python's admin client, which does."""
        try:
            from kafka import TopicPartition as KPTopicPartition
            from kafka.errors import KafkaError
        except ImportError:
            raise AdminError(_MISSING_CLIENTS) from None

        client = kafka_python_admin(self.bootstrap, self.timeout_s, self.security,
                                    "rebalanced-groups")
        try:
            answer = client.delete_group_offsets(
                group_id, [KPTopicPartition(t, p) for t, p in partitions])
        except KafkaError as exc:
            raise AdminError(f"deleting offsets of {group_id!r} failed: "
                             f"{kafka_python_error_text(exc)}") from None
        finally:
            client.close()
        out: dict[TopicPartition, str | None] = {}
        for tp, error in answer.items():
            name = getattr(error, "__name__", str(error))
            out[(tp.topic, tp.partition)] = None if name == "NoError" else kafka_python_error_text(
                error)
        return out

    def close(self) -> None:
        self._client = None  # type: ignore[assignment]


def _state_name(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return _STATE_NAMES.get(name, name.title().replace("_", ""))


def _type_name(group_type: Any) -> str:
    if group_type is None:
        return "classic"
    name = getattr(group_type, "name", str(group_type)).lower()
    return "classic" if name in ("unknown", "") else name


def _kafka_error_text(exc: Any) -> str:
    error = exc.args[0] if getattr(exc, "args", None) else exc
    text = error.str() if hasattr(error, "str") else str(error)
    name = error.name() if hasattr(error, "name") else ""
    text = " ".join(str(text).split())
    return f"{name}: {text}" if name and name not in text else text


def kafka_python_error_text(error: Any) -> str:
    name = getattr(error, "__name__", None) or type(error).__name__
    description = getattr(error, "description", "") or ""
    message = str(error) if not isinstance(error, type) else ""
    if message.startswith(f"{name}: "):  # kafka-python's errors name their class themselves
        message = message[len(name) + 2:]
    parts = [name] + [p for p in (message, description) if p and p != name]
    return " ".join(": ".join(parts).split())
