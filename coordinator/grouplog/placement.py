"""Which `__consumer_offsets` partition owns a group: abs(Java String.hashCode) % partitions."""

from __future__ import annotations

_INT_MIN = -(2**31)


def java_string_hash(value: str) -> int:
    """Java's `String.hashCode` over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = value.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def kafka_abs(n: int) -> int:
    """Kafka's `Utils.abs`: like abs, except Integer.MIN_VALUE maps to 0 (not to itself)."""
    return 0 if n == _INT_MIN else abs(n)


# num_partitions -> group id -> partition. A dict per partition count, keyed by the group id
# alone: an `lru_cache` entry (its key tuple and link) cost 150 bytes more per group. Emptied
# when full instead of evicting the least recent: a miss costs one hash.
_CACHED: dict[int, dict[str, int]] = {}
_CACHE_SIZE = 4096


def partition_for(group_id: str, num_partitions: int) -> int:
    """Cached: every append to the group log asks, and the hash walks the whole group id."""
    cache = _CACHED.get(num_partitions)
    if cache is None:
        cache = _CACHED[num_partitions] = {}
    partition = cache.get(group_id)
    if partition is None:
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        partition = cache[group_id] = kafka_abs(java_string_hash(group_id)) % num_partitions
    return partition
