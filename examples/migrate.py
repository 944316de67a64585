"""Migrating an existing consumer: change one import, keep the loop.

    python -m examples.migrate

The loop below is the confluent-kafka documentation's basic consume loop, unchanged except
for the import. Everything else - config dict, ``subscribe()``, ``poll()``, ``commit()``,
``close()`` - keeps its meaning; the consumer now also keeps pause intent across rebalances,
never hands out records of partitions it paused or lost, and stays in its group during long
processing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

# Before: from confluent_kafka import Consumer
from safeconsumer import SafeConsumer as Consumer
from safeconsumer.testing import KafkaTestKit, start_broker


def consume_loop(conf: dict[str, Any], topics: list[str], handle: Callable[[Message], None], stop_after: int) -> int:
    """Poll, handle, commit every 100 records; stop after ``stop_after`` records. Returns the count."""
    consumer = Consumer(conf)
    count = 0
    try:
        consumer.subscribe(topics)
        while count < stop_after:
            msg = consumer.poll(timeout=1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(err)
            handle(msg)
            count += 1
            if count % 100 == 0:
                consumer.commit(asynchronous=False)
        if count % 100:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return count


def run(bootstrap: str, records: int = 500) -> tuple[int, dict[int, int]]:
    """Produce ``records``, consume them with the migrated loop; (handled, committed offsets)."""
    kit = KafkaTestKit(bootstrap, prefix="migrate")
    try:
        topic = kit.create_topic(partitions=2)
        kit.produce(topic, records, partitions=2)
        group = kit.name("orders")
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        seen: list[bytes] = []
        handled = consume_loop(conf, [topic], lambda m: seen.append(m.value() or b""), stop_after=records)
        return handled, kit.committed(group, topic, 2)
    finally:
        kit.close()


def main() -> int:
    with start_broker() as broker:
        handled, committed = run(broker.bootstrap_servers)
    print(f"handled {handled} records; committed offsets {committed}", flush=True)
    return 0 if handled == 500 and sum(committed.values()) == 500 else 1


if __name__ == "__main__":
    sys.exit(main())
