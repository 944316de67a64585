"""The reader decides what leaves after its last call into librdkafka (found by the soak).

A ``consume()`` that starts with records waiting (read ahead by ``poll()``, or withheld) makes a
real call that may serve a rebalance. Records of a partition revoked by that call must not be
returned (I2), and, under KIP-848 where the new owner starts from the committed offset, must not
have been stored (I3).
"""

from __future__ import annotations

from confluent_kafka import TopicPartition

from safeconsumer import SafeConsumer, delivery_stats
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import Received, pump, pump_for


def test_consume_never_returns_records_of_a_partition_revoked_during_the_call(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    a.subscribe([topic])
    pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=45, what="A to own both partitions")
    kafka.produce(topic, 40, partitions=2)

    def fetched(partition: int) -> bool:
        return a.get_watermark_offsets(TopicPartition(topic, partition), cached=True)[1] == 20

    # Both partitions' records are in librdkafka's queue before A's next call, so the read-ahead
    # batch holds records of both: whichever partition moves to B has records waiting in A.
    wait_until(lambda: fetched(0) and fetched(1), timeout=30, what="both partitions fetched")
    first = a.poll(5.0)
    assert first is not None and first.error() is None
    b, rb = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    b.subscribe([topic])
    try:
        # A does not call in ("it is processing") while B joins. B cannot be assigned before A
        # serves the revocation, which A does inside the consume() under test: a fixed window.
        pump_for([(b, rb)], 3.0)
        before = delivery_stats(a)
        batch = a.consume(100, 1.0)
        unowned = [(m.partition(), m.offset()) for m in batch if m.error() is None and not a.owns(m)]
        assert not unowned, f"I2: consume() returned {len(unowned)} record(s) of partitions A no longer owns"
        after = delivery_stats(a)
        purged = (after.purged_revoked + after.purged_unowned) - (before.purged_revoked + before.purged_unowned)
        assert purged > 0, "no record of the revoked partition was waiting: the scenario proved nothing"
    finally:
        a.close()
        b.close()
