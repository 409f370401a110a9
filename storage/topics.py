"""The topic registry: which topics exist, with their ids, partition counts and configs.

`TopicStore` owns every `<data_dir>/<topic>-<partition>/` directory whose topic does not start
with the excluded prefix (`__`: internal topics such as the group log are managed by their own
code), plus one metadata file per topic, `<data_dir>/<topic>.topic.json` (format in
`storage/README.md`). The metadata file is the commit point:

* create: make the partition directories, then write the metadata file (atomically);
* add_partitions: make the new directories, then rewrite the metadata file;
* delete: remove the metadata file, then the directories.

So a crash in the middle leaves partition directories that no metadata file claims; `open`
removes them.

Creating a topic or adding partitions is three steps, so that the disk work can run on a worker
thread while the caller's thread keeps serving: `reserve` / `reserve_partitions` check the
request and hold the name (a second create of it, or of a name that folds to it, is refused
meanwhile); `build` / `build_partitions` make the directories, logs and metadata file and touch
nothing shared; `commit` / `commit_partitions` make the result visible, or `release` drops the
reservation after a failed build. `create` and `add_partitions` do all three in one call. The
checks cost the same whatever the number of topics. Kafka-side rules (names, counts) are
checked here; request mapping and error codes are the data plane's.

Raises: `InvalidTopicError`, `TopicExistsError`, `UnknownTopicError`, `InvalidPartitionsError`,
`InvalidConfigError` for bad requests; `CorruptLogError` (open) and `OSError` from disk;
anything else is a bug.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import uuid
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

from storage.descriptors import DescriptorBudget
from storage.fs import REAL_FS, FileSystem
from storage.log import CorruptLogError, InvalidConfigError, LogConfig, PartitionLog

__all__ = [
    "METADATA_SUFFIX",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidTopicError",
    "Topic",
    "TopicExistsError",
    "TopicStore",
    "UnknownTopicError",
    "valid_topic_name",
]

METADATA_SUFFIX = ".topic.json"
METADATA_VERSION = 1
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_PARTITION_DIR = re.compile(r"(.+)-(0|[1-9][0-9]*)")


class InvalidTopicError(ValueError):
    """A name Kafka would refuse (INVALID_TOPIC_EXCEPTION)."""


class TopicExistsError(Exception):
    """CreateTopics for a name already in use (TOPIC_ALREADY_EXISTS)."""


class UnknownTopicError(LookupError):
    """No such topic (UNKNOWN_TOPIC_OR_PARTITION)."""


class InvalidPartitionsError(ValueError):
    """A partition count Kafka would refuse (INVALID_PARTITIONS)."""


def valid_topic_name(name: str) -> bool:
    """Kafka's rule: 1..249 characters of `[a-zA-Z0-9._-]`, and not `.` or `..`."""
    return _LEGAL_NAME.fullmatch(name) is not None and name not in (".", "..")


@dataclass(frozen=True, slots=True)
class PendingTopic:
    """A topic name reserved by `reserve`, not yet built."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str]
    log_config: LogConfig


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionLog]
    configs: dict[str, str]
    log_config: LogConfig = field(default_factory=LogConfig)


class TopicStore:
    """Every user topic under one data directory. See the module docstring."""

    def __init__(
        self,
        data_dir: Path,
        config: LogConfig,
        fs: FileSystem,
        exclude_prefix: str,
        budget: DescriptorBudget | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        self.fs = fs
        # Open segment files of every partition (None: each keeps its active segment open).
        self.budget = budget
        self.exclude_prefix = exclude_prefix
        self._topics: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        # Every name in use or reserved, by its folded form ('.' and '_' alike), and the
        # reservations of topics being built (name -> partitions), of ids, and of topics
        # growing.
        self._folded: dict[str, str] = {}
        self._reserved: dict[str, int] = {}
        self._reserved_ids: set[uuid.UUID] = set()
        self._growing: dict[str, int] = {}
        # Partitions of all topics, reserved ones included (`partition_count`).
        self._partitions_held = 0

    # ---------------------------------------------------------------- open

    @classmethod
    def open(
        cls,
        data_dir: Path,
        config: LogConfig,
        fs: FileSystem = REAL_FS,
        *,
        repair: bool = False,
        exclude_prefix: str = "__",
        budget: DescriptorBudget | None = None,
    ) -> TopicStore:
        """Load every topic under `data_dir` (created if absent) and recover its partitions.
        With a `budget`, partitions open their segment files under it (call this on the
        budget's owner thread).

        Raises `CorruptLogError` for a damaged log or an unreadable metadata file. With
        `repair`, logs are cut at their damage and a topic whose metadata file is unreadable is
        skipped, its directories left alone.
        """
        store = cls(data_dir, config, fs, exclude_prefix, budget)
        fs.makedirs(data_dir)
        names = fs.listdir(data_dir)
        metadata: dict[str, dict[str, object]] = {}
        unreadable: set[str] = set()
        for name in names:
            if name.endswith(METADATA_SUFFIX + ".tmp"):
                fs.remove(data_dir / name)
                continue
            if not name.endswith(METADATA_SUFFIX):
                continue
            owner = name[: -len(METADATA_SUFFIX)]
            if store._excluded(owner) or not valid_topic_name(owner):
                continue
            try:
                metadata[owner] = _read_metadata(fs, data_dir / name, owner)
            except CorruptLogError:
                if not repair:
                    raise
                unreadable.add(owner)

        # Partition directories nobody claims are left over from a create, add_partitions or
        # delete that did not reach its commit point.
        for name in names:
            match = _PARTITION_DIR.fullmatch(name)
            if match is None or not fs.is_dir(data_dir / name):
                continue
            owner, partition = match.group(1), int(match.group(2))
            if store._excluded(owner) or owner in unreadable or not valid_topic_name(owner):
                continue
            meta = metadata.get(owner)
            if meta is None or partition >= _as_int(meta["partitions"]):
                fs.rmtree(data_dir / name)

        try:
            for topic_name in sorted(metadata):
                meta = metadata[topic_name]
                configs = _as_str_dict(meta["configs"])
                log_config = config.with_overrides(configs)
                logs: list[PartitionLog] = []
                topic = Topic(
                    topic_name, uuid.UUID(str(meta["topic_id"])), logs, configs, log_config
                )
                store._register(topic)  # registered first so close() reaches partial opens
                for p in range(_as_int(meta["partitions"])):
                    logs.append(
                        PartitionLog.open(
                            store._partition_dir(topic_name, p), log_config, fs, repair=repair,
                            budget=budget,
                        )
                    )
        except BaseException:
            store._close_quietly()
            raise
        store._partitions_held = sum(len(t.partitions) for t in store._topics.values())
        return store

    # ---------------------------------------------------------------- queries

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def topics(self) -> list[Topic]:
        return list(self._topics.values())

    def is_reserved(self, name: str) -> bool:
        """Whether `name` is being created (reserved, not yet committed)."""
        return name in self._reserved

    def partition_count(self) -> int:
        """Partitions of every topic, those being created or added included."""
        return self._partitions_held

    # ---------------------------------------------------------------- changes

    def create(
        self, name: str, num_partitions: int, configs: dict[str, str] | None = None
    ) -> Topic:
        """Create a topic with a fresh id and empty partitions.

        Raises `InvalidTopicError` (bad or reserved name, or one that collides with an existing
        name once `.` and `_` are treated alike, as Kafka does), `TopicExistsError`,
        `InvalidPartitionsError` (count < 1), `InvalidConfigError`, `OSError`.
        """
        pending = self.reserve(name, num_partitions, configs)
        try:
            topic = self.build(pending)
        except BaseException:
            self.release(pending)
            raise
        self.commit(topic)
        return topic

    def reserve(self, name: str, num_partitions: int,
                configs: dict[str, str] | None = None) -> PendingTopic:
        """Check a create and hold the name until `commit` or `release`. Raises what `create`
        raises, except `OSError`."""
        if not valid_topic_name(name):
            raise InvalidTopicError(
                f"topic name {name!r} is not 1..{MAX_TOPIC_NAME_LENGTH} characters of "
                "[a-zA-Z0-9._-] (and not '.' or '..')"
            )
        if self._excluded(name):
            raise InvalidTopicError(
                f"topic name {name!r}: names starting with {self.exclude_prefix!r} are "
                "reserved for internal topics"
            )
        if name in self._topics or name in self._reserved:
            raise TopicExistsError(f"topic {name!r} already exists")
        folded = _fold(name)
        existing = self._folded.get(folded)
        if existing is not None:
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic {existing!r} "
                "('.' and '_' are treated alike)"
            )
        if num_partitions < 1:
            raise InvalidPartitionsError(f"number of partitions must be at least 1, got "
                                         f"{num_partitions}")
        topic_configs = dict(configs or {})
        log_config = self.config.with_overrides(topic_configs) if topic_configs else self.config
        topic_id = _new_topic_id(self._by_id, self._reserved_ids)
        self._folded[folded] = name
        self._reserved[name] = num_partitions
        self._reserved_ids.add(topic_id)
        self._partitions_held += num_partitions
        return PendingTopic(name, topic_id, num_partitions, topic_configs, log_config)

    def build(self, pending: PendingTopic) -> Topic:
        """The disk work of a reserved create: safe on another thread (it touches nothing
        shared). Raises `OSError`, having removed what it made."""
        topic = Topic(pending.name, pending.topic_id, [], pending.configs, pending.log_config)
        try:
            for p in range(pending.num_partitions):
                topic.partitions.append(
                    self._fresh_partition(pending.name, p, pending.log_config))
            self._write_metadata(topic, pending.num_partitions)
        except BaseException:
            for log in topic.partitions:
                _delete_quietly(log)
            # The partition whose open failed may have left its directory.
            with contextlib.suppress(OSError):
                self.fs.rmtree(self._partition_dir(pending.name, len(topic.partitions)))
            raise
        return topic

    def commit(self, topic: Topic) -> None:
        """Make a built topic visible."""
        self._reserved.pop(topic.name, None)
        self._reserved_ids.discard(topic.topic_id)
        self._register(topic)

    def release(self, pending: PendingTopic) -> None:
        """Drop the reservation of a create whose build failed."""
        if self._reserved.pop(pending.name, None) is not None:
            self._partitions_held -= pending.num_partitions
        self._reserved_ids.discard(pending.topic_id)
        if self._folded.get(_fold(pending.name)) == pending.name:
            del self._folded[_fold(pending.name)]

    def delete(self, name: str) -> None:
        """Delete a topic and its data. Raises `UnknownTopicError`, `OSError`."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        self.fs.remove(self._metadata_path(name))
        self.fs.fsync_dir(self.data_dir)
        del self._topics[name]
        del self._by_id[topic.topic_id]
        self._folded.pop(_fold(name), None)
        self._partitions_held -= len(topic.partitions)
        for log in topic.partitions:
            log.delete()

    def add_partitions(self, name: str, total: int) -> None:
        """Grow a topic to `total` partitions (CreatePartitions).

        Raises `UnknownTopicError`, `InvalidPartitionsError` (not more than now), `OSError`.
        """
        topic = self.reserve_partitions(name, total)
        try:
            added = self.build_partitions(topic, total)
        except BaseException:
            self.release_partitions(name)
            raise
        self.commit_partitions(topic, added)

    def reserve_partitions(self, name: str, total: int) -> Topic:
        """Check an add_partitions and hold the topic until `commit_partitions` (or
        `release_partitions`). Raises what `add_partitions` raises, except `OSError`."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        current = len(topic.partitions)
        if name in self._growing:
            raise InvalidPartitionsError(f"topic {name!r} is already getting partitions")
        if total <= current:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions; the new count must be higher, "
                f"got {total}"
            )
        self._growing[name] = total - current
        self._partitions_held += total - current
        return topic

    def build_partitions(self, topic: Topic, total: int) -> list[PartitionLog]:
        """The disk work of a reserved add_partitions: safe on another thread. Raises
        `OSError`, having removed what it made."""
        added: list[PartitionLog] = []
        current = len(topic.partitions)
        try:
            for p in range(current, total):
                added.append(self._fresh_partition(topic.name, p, topic.log_config))
            self._write_metadata(topic, total)
        except BaseException:
            for log in added:
                _delete_quietly(log)
            with contextlib.suppress(OSError):
                self.fs.rmtree(self._partition_dir(topic.name, current + len(added)))
            raise
        return added

    def commit_partitions(self, topic: Topic, added: list[PartitionLog]) -> None:
        self._growing.pop(topic.name, None)
        topic.partitions.extend(added)

    def release_partitions(self, name: str) -> None:
        self._partitions_held -= self._growing.pop(name, 0)

    def flush_all(self) -> None:
        """fsync every partition that is not offline; raises the first `OSError` after
        trying them all (a failing one goes offline)."""
        first: OSError | None = None
        for topic in list(self._topics.values()):
            for log in topic.partitions:
                if log.offline is not None:
                    continue  # reported when it went offline; never fsynced again
                try:
                    log.flush()
                except OSError as exc:
                    first = first or exc
        if first is not None:
            raise first

    def close(self) -> None:
        """Close every partition; raises the first `OSError` after closing them all."""
        first: OSError | None = None
        for topic in list(self._topics.values()):
            for log in topic.partitions:
                try:
                    log.close()
                except OSError as exc:
                    first = first or exc
        if first is not None:
            raise first

    # ---------------------------------------------------------------- helpers

    def _excluded(self, name: str) -> bool:
        return bool(self.exclude_prefix) and name.startswith(self.exclude_prefix)

    def _register(self, topic: Topic) -> None:
        if topic.topic_id in self._by_id:
            other = self._by_id[topic.topic_id].name
            raise CorruptLogError(
                self._metadata_path(topic.name), 0,
                f"topic id {topic.topic_id} is also used by topic {other!r}",
            )
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic
        self._folded[_fold(topic.name)] = topic.name

    def _partition_dir(self, name: str, partition: int) -> Path:
        return self.data_dir / f"{name}-{partition}"

    def _metadata_path(self, name: str) -> Path:
        return self.data_dir / (name + METADATA_SUFFIX)

    def _fresh_partition(self, name: str, partition: int, config: LogConfig) -> PartitionLog:
        directory = self._partition_dir(name, partition)
        self.fs.rmtree(directory)  # leftovers of an uncommitted create
        return PartitionLog.open(directory, config, self.fs, budget=self.budget)

    def _write_metadata(self, topic: Topic, partitions: int) -> None:
        document = {
            "version": METADATA_VERSION,
            "name": topic.name,
            "topic_id": str(topic.topic_id),
            "partitions": partitions,
            "configs": topic.configs,
        }
        raw = json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"
        self.fs.write_atomic(self._metadata_path(topic.name), raw)

    def _close_quietly(self) -> None:
        for topic in self._topics.values():
            for log in topic.partitions:
                with contextlib.suppress(OSError):
                    log.close()


def _fold(name: str) -> str:
    return name.replace(".", "_")


def _new_topic_id(*taken: Container[uuid.UUID]) -> uuid.UUID:
    while True:
        # A random (version 4) id without a system call each: ids must be unique, not secret.
        topic_id = uuid.UUID(int=random.getrandbits(128), version=4)
        if not any(topic_id in ids for ids in taken):
            return topic_id


def _delete_quietly(log: PartitionLog) -> None:
    with contextlib.suppress(OSError):
        log.delete()


def _as_int(value: object) -> int:
    assert isinstance(value, int)
    return value


def _as_str_dict(value: object) -> dict[str, str]:
    assert isinstance(value, dict)
    return {str(k): str(v) for k, v in value.items()}


def _read_metadata(fs: FileSystem, path: Path, name: str) -> dict[str, object]:
    """Parse and check one topic metadata file; `CorruptLogError(path, 0)` if unusable."""
    try:
        document = json.loads(fs.read_bytes(path))
    except (OSError, ValueError) as exc:
        raise CorruptLogError(path, 0, f"unreadable topic metadata: {exc}") from exc
    problem = _metadata_problem(document, name)
    if problem is not None:
        raise CorruptLogError(path, 0, f"bad topic metadata: {problem}")
    assert isinstance(document, dict)
    return document


def _metadata_problem(document: object, name: str) -> str | None:
    if not isinstance(document, dict):
        return "not a JSON object"
    version = document.get("version")
    if version != METADATA_VERSION:
        return f"unsupported version {version!r} (this broker reads {METADATA_VERSION})"
    if document.get("name") != name:
        return f"name {document.get('name')!r} does not match the file name"
    try:
        uuid.UUID(str(document.get("topic_id")))
    except ValueError:
        return f"topic_id {document.get('topic_id')!r} is not a UUID"
    partitions = document.get("partitions")
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        return f"partitions {partitions!r} is not a positive integer"
    configs = document.get("configs")
    if not isinstance(configs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
    ):
        return "configs is not an object of strings"
    return None
