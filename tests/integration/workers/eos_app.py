"""A consume-transform-produce application with confluent-kafka, for the exactly-once checker.

Run as a script: `python eos_app.py --bootstrap HOST:PORT --run R --seed S --records N`. It
reads topic `eos-in` in group `eos-app` (read_committed, static membership so that a restarted
instance takes its predecessor's place at once) and writes one record to `eos-out` per input
record, keyed by the input's partition and offset and valued with the run and transaction
number, in transactions that also commit the consumer's position (`send_offsets_to_transaction`).
The `transactional.id` is the same in every run, so each start fences and aborts what a killed
predecessor left open.

It prints one line per step (`ready`, `begun T`, `produced T`, `offsets T`, `committed T`) so
that the test can kill it at a chosen point, exits 0 (`done`) once its committed position covers
all N input records, and exits 3 on any client error: the test then starts it again, as a
supervisor would.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

from confluent_kafka import Consumer, KafkaException, Producer

INPUT = "eos-in"
OUTPUT = "eos-out"
GROUP = "eos-app"
TRANSACTIONAL_ID = "eos-app-txn"
API_TIMEOUT = 8.0  # a client stuck longer fails, exits and is restarted


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(bootstrap: str, run_number: int, seed: int, records: int, max_batch: int) -> None:
    rng = random.Random(seed)
    debug = {"debug": os.environ["EOS_APP_DEBUG"]} if os.environ.get("EOS_APP_DEBUG") else {}
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID,
                         "transaction.timeout.ms": 4000, "linger.ms": 0, **debug})
    producer.init_transactions(API_TIMEOUT)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "group.instance.id": "eos-app-instance",
                         "session.timeout.ms": 6000, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([INPUT])
    say("ready")
    transaction = 0
    while True:
        messages = consumer.consume(rng.randint(1, max_batch), 0.3)
        for message in messages:
            if message.error() is not None:
                raise KafkaException(message.error())
        if not messages:
            assignment = consumer.assignment()
            if len(assignment) and sum(
                    max(tp.offset, 0) for tp in consumer.position(assignment)) >= records:
                say("done")
                return
            continue
        transaction += 1
        producer.begin_transaction()
        say(f"begun {transaction}")
        for message in messages:
            producer.produce(OUTPUT, key=f"{message.partition()}:{message.offset()}".encode(),
                             value=f"{run_number}:{transaction}".encode(),
                             partition=message.partition() or 0)
        say(f"produced {transaction}")
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), API_TIMEOUT)
        say(f"offsets {transaction}")
        producer.commit_transaction(API_TIMEOUT)
        say(f"committed {transaction}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--run", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--max-batch", type=int, default=12)
    args = parser.parse_args()
    try:
        run(args.bootstrap, args.run, args.seed, args.records, args.max_batch)
    except KafkaException as error:
        say(f"error {error}")
        sys.stdout.flush()
        os._exit(3)  # no clean close: a crashed application leaves as abruptly as a killed one


if __name__ == "__main__":
    main()
