"""A partition resumed inside a rebalance callback while records of it are withheld.

Applications that worked around librdkafka's stale pause flag resume their partitions in
``on_assign``. With SafeConsumer the partition may hold withheld records then (read while it was
paused), and librdkafka starts fetching it again the moment it is resumed, inside the very call
that ran the callback. The withheld records must still go first: per partition, records reach the
application in offset order, each once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, TopicPartition

from safeconsumer import SafeConsumer, delivery_stats
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import Received, pump


@contextmanager
def _peer(kafka: KafkaTestKit, group: str, protocol: Protocol, topic: str) -> Iterator[Consumer]:
    """A plain member of ``group`` consuming ``topic`` (another topic: the partition under test
    stays with the consumer under test, or comes back to it in the same eager rebalance)."""
    peer = Consumer(kafka.consumer_conf(group, protocol))
    peer.subscribe([topic])
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [peer.poll(0.1) for _ in iter(stop.is_set, True)], name="peer")
    thread.start()
    try:
        yield peer
    finally:
        stop.set()
        thread.join()
        peer.close()


def test_records_withheld_before_a_resume_in_on_assign_go_first(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic, other = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1)
    kafka.produce(topic, 40, partitions=1)
    group = kafka.name("g")
    tp = TopicPartition(topic, 0)
    resume_in_callback = threading.Event()
    resumed_there: list[str] = []

    def on_assign(consumer: SafeConsumer, _partitions: list[TopicPartition]) -> None:
        if resume_in_callback.is_set() and not resumed_there:
            consumer.resume([tp])  # the workaround for a stale pause flag, kept by migrating apps
            resumed_there.append("on_assign")

    c = SafeConsumer(kafka.consumer_conf(group, protocol, enable_auto_commit=False))
    got = Received()
    try:
        c.subscribe([topic], on_assign=on_assign)
        pump([(c, got)], lambda: got.records, timeout=45, what="the first record")
        c.pause([tp])
        # Polling on while paused: what was read ahead of the partition is withheld.
        pump([(c, got)], lambda: delivery_stats(c).held >= 5, timeout=30, what="records withheld")
        held_before = delivery_stats(c).held
        kafka.produce(topic, 20, partitions=1, start=40)  # more to fetch once it is resumed
        resume_in_callback.set()
        with _peer(kafka, group, protocol, other):
            if protocol == "range":
                # The eager rebalance revokes the partition and gives it back: on_assign runs.
                wait_until(lambda: resumed_there, timeout=60, what="on_assign", step=lambda: got.add(c.poll(0.1)))
            else:
                # A peer of another topic may bring this member no callback at all (KIP-848);
                # then the application resumes once the peer is in, as it would anyway.
                wait_until(
                    lambda: resumed_there or _settled_with_the_peer(kafka, group),
                    timeout=60,
                    what="the peer's rebalance",
                    step=lambda: got.add(c.poll(0.1)),
                )
                if not resumed_there:
                    c.resume([tp])
            pump([(c, got)], lambda: len(got.records) >= 60, timeout=60, what="all 60 records")
    finally:
        c.close()
    offsets = [r[2] for r in got.records]
    assert offsets == sorted(offsets), f"out of order: {offsets}"
    assert offsets == list(range(60)), f"missing or repeated records: {offsets}"
    assert held_before >= 5
    if protocol == "range":
        assert resumed_there == ["on_assign"], "the eager rebalance gave the partition back without a callback"


def _settled_with_the_peer(kafka: KafkaTestKit, group: str) -> bool:
    snapshot = kafka.describe_group(group)
    return snapshot.state == "STABLE" and len(snapshot.members) == 2 and all(m.assignment for m in snapshot.members)
