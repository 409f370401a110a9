"""Stock clients for the kit's tests: a confluent-kafka consumer polled on its own thread."""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(10)


class PolledConsumer:
    """A consumer whose `poll` loop runs on a thread, as an application's would; librdkafka
    heartbeats on its own thread meanwhile."""

    def __init__(self, bootstrap: str, group: str, topic: str, **config: Any) -> None:
        settings = {"bootstrap.servers": bootstrap, "group.id": group,
                    "auto.offset.reset": "earliest", "heartbeat.interval.ms": 200,
                    "session.timeout.ms": 6000, **config}
        # None drops a default (the consumer protocol refuses the session settings).
        self.consumer = Consumer({k: v for k, v in settings.items() if v is not None})
        self.consumer.subscribe([topic])
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self.consumer.poll(0.05)
            if message is not None and message.error():
                self.errors.append(message.error())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()

    def __enter__(self) -> PolledConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
