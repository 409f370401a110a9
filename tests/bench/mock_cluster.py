"""Hold a librdkafka mock cluster open in its own process and print its bootstrap address.

The mock cluster lives inside the librdkafka handle that created it, so this helper keeps that
handle alive until its standard input closes (or it is terminated). It prints one line,
`BOOTSTRAP host:port`, then serves commands read from standard input, one per line:

    topic NAME PARTITIONS   -> `OK` or `ERR code`  (the mock has no CreateTopics API)

The cluster is made through librdkafka's C mock API (`rd_kafka_mock_cluster_new`, loaded from
the library confluent-kafka ships) so that topics can be created with a partition count; if that
is unavailable it falls back to a producer with `test.mock.num.brokers` (auto-created topics get
the mock's default partition count). The benchmark measures this whole process as "the mock
broker"; it holds one idle librdkafka handle besides the mock.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path
from typing import Any


def _librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    candidates = sorted(libs.glob("librdkafka*.so*"))
    lib = ctypes.CDLL(str(candidates[0]) if candidates else "librdkafka.so.1")
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.restype = ctypes.c_int
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                               ctypes.c_int]
    return lib


class _CMock:
    def __init__(self) -> None:
        self.lib = _librdkafka()
        errstr = ctypes.create_string_buffer(512)
        conf = self.lib.rd_kafka_conf_new()
        # The handle only hosts the mock; it never connects, so silence its config warning.
        self.lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        self.rk = self.lib.rd_kafka_new(0, conf, errstr, len(errstr))  # 0: RD_KAFKA_PRODUCER
        if not self.rk:
            raise RuntimeError(errstr.value.decode(errors="replace"))
        self.cluster = self.lib.rd_kafka_mock_cluster_new(self.rk, 1)
        if not self.cluster:
            raise RuntimeError("rd_kafka_mock_cluster_new failed")

    def bootstrap(self) -> str:
        return str(self.lib.rd_kafka_mock_cluster_bootstraps(self.cluster).decode())

    def create_topic(self, name: str, partitions: int) -> int:
        return int(self.lib.rd_kafka_mock_topic_create(self.cluster, name.encode(), partitions,
                                                       1))


def _fallback() -> tuple[Any, str]:
    from confluent_kafka import Producer

    producer = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    metadata = producer.list_topics(timeout=10)
    host, port = sorted((b.host, b.port) for b in metadata.brokers.values())[0]
    return producer, f"{host}:{port}"


def main() -> int:
    mock: _CMock | None
    keep: Any
    try:
        mock = _CMock()
        keep, bootstrap = mock, mock.bootstrap().split(",")[0]
    except (OSError, AttributeError, RuntimeError, IndexError) as exc:
        print(f"C mock API unavailable ({exc}); using test.mock.num.brokers", file=sys.stderr)
        mock = None
        keep, bootstrap = _fallback()
    print(f"BOOTSTRAP {bootstrap}", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "topic":
            if mock is None:
                print("ERR unsupported", flush=True)
                continue
            err = mock.create_topic(parts[1], int(parts[2]))
            print("OK" if err == 0 else f"ERR {err}", flush=True)
        else:
            print("ERR unknown command", flush=True)
    del keep
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
