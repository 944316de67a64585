"""I1, I2, I3, I4 and I7 against the real broker, under every rebalance protocol."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from safeconsumer import ConsumerClosedError, InvalidPauseRequest, PauseStateError, SafeConsumer, delivery_stats
from safeconsumer.testing import KafkaTestKit, Protocol

from ..support import Received, checked_pump, checked_pump_for, keys


def _both_own(x: SafeConsumer, y: SafeConsumer) -> Callable[[], bool]:
    return lambda: bool(x.assignment()) and bool(y.assignment())


def _commit_stored(consumer: Any) -> None:
    """Commit what was stored; like the raw client, a sync commit with nothing stored raises _NO_OFFSET."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


def _tp(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


@pytest.mark.parametrize("commits", ["auto", "manual"])
def test_kafka_13463_paused_partitions_stay_paused_and_nothing_is_lost(
    kafka: KafkaTestKit, protocol: Protocol, commits: str
) -> None:
    topic = kafka.create_topic(partitions=4)
    group = kafka.name("g")
    kafka.produce(topic, 400, partitions=4)
    extra: dict[str, Any] = {} if commits == "auto" else {"enable_auto_commit": False}

    def commit_on_revoke(consumer: Any, _partitions: list[TopicPartition]) -> None:
        if commits == "manual":
            _commit_stored(consumer)

    def member() -> tuple[SafeConsumer, Received]:
        c = SafeConsumer(kafka.consumer_conf(group, protocol, **extra))
        c.subscribe([topic], on_revoke=commit_on_revoke)
        return c, Received()

    a, ra = member()
    members = [(a, ra)]
    checked_pump(members, lambda: len(a.assignment()) == 4, timeout=30, what="A owns 4 partitions")
    a.pause(_tp(topic, 0, 1))
    checked_pump(members, lambda: len(ra.records) >= 200, timeout=30, what="A reads the unpaused half")
    assert ra.partitions() == {(topic, 2), (topic, 3)}

    b, rb = member()
    members.append((b, rb))
    try:
        checked_pump(
            members,
            lambda: a.assignment() and b.assignment() and len(keys(a.assignment()) | keys(b.assignment())) == 4,
            timeout=45,
            what="a split",
        )
        kafka.produce(topic, 400, partitions=4, start=400)
        # Whatever A still owns of p0/p1 is still paused: I1 is checked on every record.
        checked_pump_for(members, 3.0)
        if commits == "manual":
            for c, _ in members:
                _commit_stored(c)
    finally:
        b.close()
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 4, timeout=45, what="A owns all again")
    a.resume(_tp(topic, 0, 1, 2, 3))
    assert a.paused() == []
    checked_pump([(a, ra)], lambda: len(set(ra.ids()) | set(rb.ids())) >= 800, timeout=60, what="every record")
    if commits == "manual":
        _commit_stored(a)
    a.close()
    every = Counter(ra.ids() + rb.ids())
    assert set(every) == set(range(800)), "records were lost"
    assert max(every.values()) == 1, f"duplicates: {[k for k, n in every.items() if n > 1][:10]}"


def test_a_partition_that_left_and_came_back_is_consumed(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """librdkafka's stale pause flag is cleared: a moved partition loses its partition mark."""
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    a.subscribe([topic])
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=30, what="A owns both")
    a.pause(a.assignment())
    b, rb = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    b.subscribe([topic])
    members = [(a, ra), (b, rb)]
    checked_pump(members, lambda: len(a.assignment()) == 1 == len(b.assignment()), timeout=45, what="a split")
    (moved,) = keys(b.assignment())
    (stayed,) = keys(a.assignment())
    assert a.pause_state().partitions == {stayed}, "the mark of the partition that left must go"
    b.close()
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=45, what="the moved partition back")
    assert keys(a.paused()) == {stayed}
    kafka.produce(topic, 20, partitions=[moved[1], stayed[1]])
    checked_pump([(a, ra)], lambda: moved in ra.partitions(), timeout=30, what="records of the returned partition")
    checked_pump_for([(a, ra)], 1.0)
    assert stayed not in ra.partitions()
    a.close()


def test_topic_mark_covers_a_partition_that_comes_back(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    a.subscribe([topic])
    a.pause_topics([topic])
    kafka.produce(topic, 20, partitions=2)
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=30, what="A owns both")
    b, rb = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    b.subscribe([topic])
    checked_pump([(a, ra), (b, rb)], lambda: len(b.assignment()) == 1, timeout=45, what="a split")
    b.close()
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=45, what="both back on A")
    assert len(a.paused()) == 2
    checked_pump_for([(a, ra)], 2.0)
    assert not ra.records
    a.resume_topics(topic)
    checked_pump([(a, ra)], lambda: len(set(ra.ids()) | set(rb.ids())) >= 20, timeout=30, what="all after resume")
    a.close()


def test_regex_topic_pause_covers_a_topic_created_later(kafka: KafkaTestKit, protocol: Protocol) -> None:
    prefix = kafka.name("rx")
    plain = kafka.create_topic(f"{prefix}-plain", partitions=1)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol, topic_metadata_refresh_interval_ms=500))
    received = Received()
    c.subscribe([f"^{re.escape(prefix)}-.*"])
    c.pause_topics([re.compile(f"^{re.escape(prefix)}-late")])
    late = kafka.create_topic(f"{prefix}-late", partitions=2)
    kafka.produce(late, 10, partitions=2)
    kafka.produce(plain, 10, partitions=1)
    checked_pump(
        [(c, received)],
        lambda: len(c.assignment()) == 3 and len(received.records) >= 10,
        timeout=60,
        what="both topics assigned and the plain one read",
    )
    assert keys(c.paused()) == {(late, 0), (late, 1)}
    checked_pump_for([(c, received)], 1.0)
    assert {t for t, _ in received.partitions()} == {plain}
    c.resume_topics([re.compile(f"^{re.escape(prefix)}-late")])
    checked_pump([(c, received)], lambda: len(received.records) >= 20, timeout=30, what="the late topic's records")
    c.close()


def test_consumer_pause_holds_across_several_rebalances(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=3)
    group = kafka.name("g")
    kafka.produce(topic, 90, partitions=3)
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    a.subscribe([topic])
    a.pause()
    others: list[tuple[SafeConsumer, Received]] = []
    for round_ in range(2):
        checked_pump([(a, ra), *others], lambda: len(a.assignment()) == 3, timeout=45, what=f"A owns all ({round_})")
        assert len(a.paused()) == 3 and a.pause_state().consumer
        b, rb = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
        b.subscribe([topic])
        others.append((b, rb))
        checked_pump([(a, ra), *others], _both_own(a, b), timeout=45, what="a split")
        assert keys(a.paused()) == keys(a.assignment())
        b.close()
        others.clear()
        assert not ra.records, "A returned a record while paused"
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 3, timeout=45, what="A owns all")
    a.resume()
    checked_pump([(a, ra)], lambda: len(ra.records) >= 1, timeout=30, what="records after resume")
    a.close()


def test_commit_of_a_moved_partition_does_not_touch_its_offset(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    kafka.produce(topic, 40, partitions=2)
    # The application stores its own offsets: with the automatic store on, store_offsets() is
    # refused by confluent_kafka itself (and so by SafeConsumer).
    conf = kafka.consumer_conf(group, protocol, enable_auto_commit=False, enable_auto_offset_store=False)
    a, ra = SafeConsumer(conf), Received()
    kept: dict[tuple[str, int], Any] = {}

    def remember(msg: Any) -> None:
        if msg is not None and msg.error() is None:
            kept[(msg.topic(), msg.partition())] = msg

    a.subscribe([topic])
    while len(kept) < 2:
        msg = a.poll(1.0)
        remember(msg)
        ra.add(msg)
    b = SafeConsumer(conf)
    b.subscribe([topic])
    rb = Received()
    checked_pump([(a, ra), (b, rb)], lambda: len(a.assignment()) == 1 == len(b.assignment()), timeout=45, what="split")
    (moved,) = keys(b.assignment())
    before = kafka.committed(group, topic, 2)[moved[1]]
    assert a.commit(message=kept[moved], asynchronous=False) == []
    a.store_offsets(offsets=[TopicPartition(moved[0], moved[1], 39)])
    assert delivery_stats(a).offsets_dropped == 2
    _commit_stored(a)
    assert kafka.committed(group, topic, 2)[moved[1]] == before
    b.close()
    a.close()


def test_bad_pause_requests_name_the_problem(kafka: KafkaTestKit) -> None:
    topic = kafka.create_topic(partitions=1)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g")))
    with pytest.raises(PauseStateError, match="subscription or an assignment"):
        c.pause_topics([topic])
    c.subscribe([topic])
    with pytest.raises(InvalidPauseRequest, match="can never deliver"):
        c.pause_topics(["other-topic"])
    with pytest.raises(InvalidPauseRequest, match="invalid topic regex"):
        c.pause_topics(["^(unclosed"])
    with pytest.raises(InvalidPauseRequest, match="empty"):
        c.pause_topics([""])
    with pytest.raises(TypeError):
        c.pause([topic])  # type: ignore[list-item]
    c.close()
    for call in (c.pause, c.resume, c.paused, c.pause_state):
        with pytest.raises(ConsumerClosedError):
            call()
    with pytest.raises(ConsumerClosedError):
        c.pause_topics([topic])
