"""The exactly-once checker's application (see `eos_app.py`) with aiokafka instead of
confluent-kafka: the same topics, group, transactional id, output and step lines. aiokafka's
`send_offsets_to_transaction` takes only the group id (TxnOffsetCommit v0, no member checks)."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from eos_app import GROUP, INPUT, OUTPUT, TRANSACTIONAL_ID, say  # type: ignore[import-not-found]

API_TIMEOUT_MS = 8000


async def run(bootstrap: str, run_number: int, seed: int, records: int, max_batch: int) -> None:
    rng = random.Random(seed)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=TRANSACTIONAL_ID,
                                transaction_timeout_ms=4000, request_timeout_ms=API_TIMEOUT_MS)
    await producer.start()  # InitProducerId: fences and aborts what a predecessor left open
    consumer = AIOKafkaConsumer(INPUT, bootstrap_servers=bootstrap, group_id=GROUP,
                                group_instance_id="eos-app-instance", session_timeout_ms=6000,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level="read_committed",
                                request_timeout_ms=API_TIMEOUT_MS)
    await consumer.start()
    say("ready")
    transaction = 0
    while True:
        batch = await consumer.getmany(timeout_ms=300, max_records=rng.randint(1, max_batch))
        messages = [m for partition in batch.values() for m in partition]
        if not messages:
            assignment = consumer.assignment()
            if assignment and sum([await consumer.position(tp) for tp in assignment]) >= records:
                say("done")
                return
            continue
        transaction += 1
        async with producer.transaction():
            say(f"begun {transaction}")
            for message in messages:
                await producer.send(OUTPUT, key=f"{message.partition}:{message.offset}".encode(),
                                    value=f"{run_number}:{transaction}".encode(),
                                    partition=message.partition)
            say(f"produced {transaction}")
            positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
            await asyncio.wait_for(producer.send_offsets_to_transaction(positions, GROUP),
                                   API_TIMEOUT_MS / 1000)
            say(f"offsets {transaction}")
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
        asyncio.run(asyncio.wait_for(
            run(args.bootstrap, args.run, args.seed, args.records, args.max_batch), 120))
    except Exception as error:  # any client failure: exit, to be restarted
        say(f"error {type(error).__name__} {error}")
        os._exit(3)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
