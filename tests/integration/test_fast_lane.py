"""poll()'s fast lane: records read ahead in a batch and handed out one by one without the lock.

Everything that changes what may be delivered takes the lane back first; these tests drive
those changes while the lane is full, from the polling thread and from another thread.
"""

from __future__ import annotations

import random
import threading
import time

from confluent_kafka import KafkaError, TopicPartition

from safeconsumer import SafeConsumer, delivery_stats
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import Received, checked_poll, keys, pump


def _ready(c: SafeConsumer, got: Received, parts: int) -> None:
    pump([(c, got)], lambda: len(c.assignment()) == parts and got.records, timeout=45, what="assignment and a record")


def test_pausing_the_partition_of_a_full_lane_stops_it_at_once(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, 2000, partitions=2)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol))
    c.subscribe([topic])
    got = Received()
    try:
        _ready(c, got, 2)
        rounds = 0
        while len(got.records) < 2000 and rounds < 400:
            rounds += 1
            msg = c.poll(1.0)
            got.add(msg)
            if msg is None or msg.error() is not None:
                continue
            tp = TopicPartition(topic, got.records[-1][1])
            c.pause([tp])  # the lane most likely still holds records of tp
            for _ in range(5):
                before = len(got.records)
                checked_poll(c, got, 0.05)
                assert all(r[1] != tp.partition for r in got.records[before:]), "a paused record left the lane"
            c.resume([tp])
        pump([(c, got)], lambda: len(got.records) >= 2000, timeout=30, what="all records")
        _assert_each_once_in_order(got, topic, 2, 2000)
        assert delivery_stats(c).delivered == 2000
    finally:
        c.close()


def test_pause_and_resume_from_another_thread_lose_and_repeat_nothing(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=4)
    kafka.produce(topic, 10000, partitions=4)
    group = kafka.name("g")
    c = SafeConsumer(kafka.consumer_conf(group, protocol, enable_auto_commit=False))
    c.subscribe([topic])
    got = Received()
    stop = threading.Event()
    toggles = 0

    def toggle() -> None:
        nonlocal toggles
        rng = random.Random(7)
        while not stop.is_set():
            tp = TopicPartition(topic, rng.randrange(4))
            c.pause([tp])
            stop.wait(0.001)  # let the poller meet the pause: records are withheld, then released
            c.resume([tp])
            toggles += 1
            stop.wait(0.005)
            if rng.random() < 0.1:
                c.pause_topics([topic])
                stop.wait(0.001)
                c.resume_topics([topic])

    try:
        _ready(c, got, 4)
        thread = threading.Thread(target=toggle, name="toggler")
        thread.start()
        try:

            def step() -> None:
                got.add(c.poll(0.05))
                time.sleep(0)  # hand the GIL over, as an application doing I/O per record does

            wait_until(lambda: len(got.records) >= 10000, timeout=120, what="all records while toggling", step=step)
        finally:
            stop.set()
            thread.join()
        assert toggles > 50, "the toggling thread barely ran: the test proved nothing"
        assert delivery_stats(c).withheld > 0, "no record was ever withheld: the race was not exercised"
        _assert_each_once_in_order(got, topic, 4, 10000)
        assert delivery_stats(c).delivered == 10000
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
        assert sum(tp.offset for tp in committed) == 10000
    finally:
        c.close()


def test_slow_processing_of_a_full_lane_still_reaches_librdkafka(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """64 records at 0.2 s each is 13 s between batches; max.poll.interval.ms is 6 s, and no keepalive."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, 300, partitions=1)
    conf = kafka.consumer_conf(kafka.name("g"), protocol, max_poll_interval_ms=6000)  # the kit's session
    changes: list[str] = []
    c = SafeConsumer(conf, keepalive="off")
    c.subscribe(
        [topic],
        on_revoke=lambda _c, _p: changes.append("revoke"),
        on_lost=lambda _c, _p: changes.append("lost"),
    )
    got = Received()
    try:
        _ready(c, got, 1)
        member = c.memberid()
        end = time.monotonic() + 13  # > 2 x max.poll.interval.ms of slow work
        while time.monotonic() < end:
            got.add(c.poll(1.0))
            time.sleep(0.2)  # the application's per-record processing
        assert not changes, f"the member was evicted: {changes}"
        assert not [e for e in got.errors if e.code() == KafkaError._MAX_POLL_EXCEEDED]
        assert c.memberid() == member
        assert keys(c.assignment()) == {(topic, 0)}
        offsets = [r[2] for r in got.records]
        assert offsets == list(range(len(offsets))) and len(offsets) >= 40
    finally:
        c.close()


def _assert_each_once_in_order(got: Received, topic: str, partitions: int, n: int) -> None:
    assert len(got.records) == n, f"{len(got.records)} records delivered, {n} produced"
    for p in range(partitions):
        offsets = [r[2] for r in got.records if r[0] == topic and r[1] == p]
        assert offsets == list(range(len(offsets))), f"partition {p}: a record lost, repeated or out of order"


def test_assigning_an_owned_partition_again_restarts_it_in_order(kafka: KafkaTestKit) -> None:
    """Records read ahead before assign() with an explicit offset must not be delivered after it."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, 300, partitions=1)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), enable_auto_commit=False))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = Received()
        pump([(c, got)], lambda: len(got.records) >= 10, timeout=30, what="10 records")
        c.assign([TopicPartition(topic, 0, 0)])  # back to the start
        again = Received()
        pump([(c, again)], lambda: len(again.records) >= 300, timeout=30, what="all records again")
        assert [r[2] for r in again.records] == list(range(300)), "read-ahead records survived the re-assign"
    finally:
        c.close()
