"""A kafka-python application moved to safeconsumer by changing one import.

    python -m examples.kafka_python_app

The consumer code below is written against kafka-python's API, as it stood before the move: an
iterator loop, a ``ConsumerRebalanceListener`` that commits what was processed before partitions
go, and manual commits with ``OffsetAndMetadata``. Only the import of ``KafkaConsumer`` changed.
It now runs on librdkafka, can use the KIP-848 protocol (``group_protocol='consumer'``), and keeps
every SafeConsumer guarantee (pause intent across rebalances, no record of a paused or lost
partition, offsets stored only once processed).
"""

from __future__ import annotations

import sys
from typing import Any

from kafka import ConsumerRebalanceListener, OffsetAndMetadata, TopicPartition

# Before: from kafka import KafkaConsumer
from safeconsumer.kafka_python import KafkaConsumer
from safeconsumer.testing import KafkaTestKit, start_broker


class CommitOnRevoke(ConsumerRebalanceListener):  # type: ignore[misc]
    """Commits the processed offsets of partitions before they are taken away."""

    def __init__(self, consumer: Any, processed: dict[Any, int]) -> None:
        self.consumer, self.processed = consumer, processed

    def on_partitions_revoked(self, revoked: set[Any]) -> None:
        offsets = {tp: OffsetAndMetadata(self.processed[tp], "", -1) for tp in revoked if tp in self.processed}
        if offsets:
            self.consumer.commit(offsets)

    def on_partitions_assigned(self, assigned: set[Any]) -> None:
        pass


def consume(bootstrap: str, topic: str, group: str, stop_after: int, **configs: Any) -> list[Any]:
    """The application's loop: iterate, handle, commit every 50 records. Returns what it handled."""
    consumer = KafkaConsumer(
        bootstrap_servers=[bootstrap],
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
        value_deserializer=None,
        **configs,
    )
    processed: dict[TopicPartition, int] = {}
    handled: list[Any] = []
    consumer.subscribe([topic], listener=CommitOnRevoke(consumer, processed))
    try:
        for record in consumer:
            handled.append(record)
            processed[TopicPartition(record.topic, record.partition)] = record.offset + 1
            if len(handled) % 50 == 0:
                consumer.commit({tp: OffsetAndMetadata(offset, "", -1) for tp, offset in processed.items()})
            if len(handled) >= stop_after:
                break
        consumer.commit({tp: OffsetAndMetadata(offset, "", -1) for tp, offset in processed.items()})
    finally:
        consumer.close()
    return handled


def run(bootstrap: str, records: int = 300, **configs: Any) -> tuple[int, dict[int, int]]:
    """Produce ``records`` on 3 partitions, consume them with the application; (handled, committed)."""
    kit = KafkaTestKit(bootstrap, prefix="kp-app")
    try:
        topic = kit.create_topic(partitions=3)
        kit.produce(topic, records, partitions=3)
        group = kit.name("billing")
        handled = consume(bootstrap, topic, group, stop_after=records, **configs)
        return len(handled), kit.committed(group, topic, 3)
    finally:
        kit.close()


def main() -> int:
    with start_broker() as broker:
        handled, committed = run(broker.bootstrap_servers)
    print(f"handled {handled} records; committed offsets {committed}", flush=True)
    return 0 if handled == 300 and sum(committed.values()) == 300 else 1


if __name__ == "__main__":
    sys.exit(main())
