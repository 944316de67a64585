"""SafeConsumer is a drop-in: same methods, same returns, callbacks get the SafeConsumer itself."""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from safeconsumer import ConsumerClosedError, SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, consumer_generation

from ..support import Received, pump


def test_callbacks_receive_the_safeconsumer(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=2)
    seen: list[tuple[str, object, list[tuple[str, int]]]] = []
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol))

    def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        seen.append(("assign", consumer, [(tp.topic, tp.partition) for tp in partitions]))
        assert all(consumer.owns(tp) for tp in partitions)  # type: ignore[attr-defined]

    def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        seen.append(("revoke", consumer, [(tp.topic, tp.partition) for tp in partitions]))

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    got = Received()
    pump([(c, got)], c.assignment, timeout=30, what="an assignment")
    assert seen[0][0] == "assign" and seen[0][1] is c
    assert consumer_generation(c) >= 1
    assert c.memberid()
    c.close()
    assert seen[-1][0] == "revoke" and seen[-1][1] is c


def test_methods_keep_their_return_types(kafka: KafkaTestKit) -> None:
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, 10, partitions=1)
    group = kafka.name("g")
    with SafeConsumer(kafka.consumer_conf(group, "range", enable_auto_commit=False)) as c:
        assert isinstance(c, confluent_kafka.Consumer)
        tp = TopicPartition(topic, 0, 0)
        c.assign([tp])
        assert [(t.topic, t.partition) for t in c.assignment()] == [(topic, 0)]
        msgs: list[Message] = []
        while len(msgs) < 10:
            msgs += [m for m in c.consume(10, 5.0) if m.error() is None]
        assert all(isinstance(m, Message) for m in msgs)
        assert [m.offset() for m in msgs] == list(range(10))
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 10)
        assert c.position([TopicPartition(topic, 0)])[0].offset == 10
        result = c.commit(message=msgs[4], asynchronous=False)
        assert isinstance(result, list) and result[0].offset == 5
        assert c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 5
        assert c.commit(asynchronous=False) is not None
        assert topic in c.list_topics(topic, timeout=10).topics
        assert c.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=10)[0].offset == 0
        assert isinstance(c.cluster_id(timeout=10), str)
        c.seek(TopicPartition(topic, 0, 3))
        first = None
        while first is None:
            m = c.poll(5.0)
            first = m if m is not None and m.error() is None else None
        assert first.offset() == 3
        c.unassign()
        assert c.assignment() == []
    # The context manager closed it; later calls raise a RuntimeError naming the method.
    with pytest.raises(ConsumerClosedError, match=r"closed: cannot call poll\(\)"):
        c.poll(0)
    with pytest.raises(RuntimeError):
        c.assignment()
    c.close()  # idempotent, as confluent_kafka's


def test_bad_input_raises_what_confluent_kafka_raises(kafka: KafkaTestKit) -> None:
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g")))
    try:
        with pytest.raises(TypeError):
            c.subscribe("not-a-list")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="on_assign expects a callable"):
            c.subscribe(["t"], on_assign=42)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="requires list of TopicPartition"):  # upstream's own message
            c.assign("t")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            c.pause(["t"])  # type: ignore[list-item]
    finally:
        c.close()
    with pytest.raises(KafkaException, match="No such configuration property"):
        SafeConsumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "x", "no.such.key": 1})
    with pytest.raises(ValueError, match=r"group\.id must be set"):
        SafeConsumer({"bootstrap.servers": kafka.bootstrap_servers})


def test_keyword_config_is_merged_like_confluent_kafka(kafka: KafkaTestKit) -> None:
    settings: dict[str, Any] = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": kafka.name("g")}
    c = SafeConsumer(**settings)
    c.close()
    group: dict[str, Any] = {"group.id": kafka.name("g")}
    c = SafeConsumer({"bootstrap.servers": kafka.bootstrap_servers}, **group)
    c.close()
