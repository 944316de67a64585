"""The harness can drive rebalances under every protocol, and SafeConsumer consumes exactly N."""

from __future__ import annotations

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol

from ..support import Received, keys, pump


def test_consumes_exactly_n_then_splits_and_rejoins(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=4)
    group = kafka.name("g")
    kafka.produce(topic, 200, partitions=4)

    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    a.subscribe([topic])
    try:
        pump([(a, ra)], lambda: len(ra.records) >= 200, timeout=30, what="first member reads 200 records")
        assert sorted(ra.ids()) == list(range(200))

        b, rb = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
        b.subscribe([topic])
        members = [(a, ra), (b, rb)]
        try:
            pump(
                members,
                lambda: a.assignment() and b.assignment() and len(keys(a.assignment()) | keys(b.assignment())) == 4,
                timeout=45,
                what="the partitions to split between two members",
            )
            assert not keys(a.assignment()) & keys(b.assignment())
            kafka.produce(topic, 200, partitions=4, start=200)
            pump(members, lambda: len(ra.records) + len(rb.records) >= 400, timeout=30, what="400 records in all")
            assert rb.records, "the second member consumed nothing"
        finally:
            b.close()

        pump([(a, ra)], lambda: len(a.assignment()) == 4, timeout=45, what="all partitions back on the first member")
        kafka.produce(topic, 100, partitions=4, start=400)
        pump([(a, ra)], lambda: len(ra.records) + len(rb.records) >= 500, timeout=30, what="500 records in all")
        every = sorted(ra.ids() + rb.ids())
        assert every == list(range(500)), "records were lost or delivered twice"
    finally:
        a.close()
