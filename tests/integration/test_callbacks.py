"""User rebalance callbacks: explicit-offset assigns, pauses inside them, and exceptions."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import Received, checked_pump, keys


def test_on_assign_may_assign_with_explicit_offsets_and_pause(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol))

    def on_assign(consumer: Any, parts: list[TopicPartition]) -> None:
        start = [TopicPartition(tp.topic, tp.partition, 10) for tp in parts]
        if protocol == "range":
            consumer.assign(start)
        else:
            consumer.incremental_assign(start)
        consumer.pause([TopicPartition(topic, 1)])

    c.subscribe([topic], on_assign=on_assign)
    got = Received()
    checked_pump([(c, got)], lambda: len(got.records) >= 10, timeout=30, what="partition 0 from offset 10")
    assert keys(c.paused()) == {(topic, 1)}
    assert {(r[1], r[2]) for r in got.records} == {(0, o) for o in range(10, 20)}
    c.resume([TopicPartition(topic, 1)])
    checked_pump([(c, got)], lambda: len(got.records) >= 20, timeout=30, what="partition 1 from offset 10")
    assert {(r[1], r[2]) for r in got.records} == {(p, o) for p in (0, 1) for o in range(10, 20)}
    c.close()


class Boom(Exception):
    pass


def test_a_raising_callback_still_updates_state_and_propagates(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    a = SafeConsumer(kafka.consumer_conf(group, protocol))
    raised = {"armed": False}

    def on_revoke(_consumer: Any, parts: list[TopicPartition]) -> None:
        if raised["armed"] and parts:
            raise Boom("from on_revoke")

    a.subscribe([topic], on_revoke=on_revoke)
    ra = Received()
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=30, what="A owns both")
    a.pause(a.assignment())
    raised["armed"] = True
    b, rb = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    b.subscribe([topic])
    errors: list[BaseException] = []

    def step() -> None:
        try:
            ra.add(a.poll(0.05))
        except Boom as exc:
            errors.append(exc)
        rb.add(b.poll(0.05))

    wait_until(lambda: errors, timeout=45, what="the callback's exception from poll()", step=step)
    raised["armed"] = False
    wait_until(lambda: len(b.assignment()) == 1 and len(a.assignment()) == 1, timeout=45, what="a split", step=step)
    (moved,) = keys(b.assignment())
    assert not a.owns(TopicPartition(*moved)), "the revoked partition is still owned"
    assert moved not in a.pause_state().partitions, "the revoked partition kept its mark"
    a.close()
    b.close()


@pytest.mark.parametrize("protocol", ["range"])
def test_eager_marks_survive_for_partitions_that_come_back(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=4)
    group = kafka.name("g")
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    a.subscribe([topic])
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 4, timeout=30, what="A owns all")
    a.pause(a.assignment())
    b, rb = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    b.subscribe([topic])
    checked_pump([(a, ra), (b, rb)], lambda: len(a.assignment()) == 2 == len(b.assignment()), timeout=45, what="split")
    # Everything was revoked (eager); the two partitions A got back keep their marks, the others lost theirs.
    assert a.pause_state().partitions == keys(a.assignment()) == keys(a.paused())
    a.close()
    b.close()
