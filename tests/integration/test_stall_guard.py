"""I11: an owned partition that should fetch and does not is found, reported and started again.

The stall is made the way librdkafka #5591 ends (a pause left inside librdkafka while the
application's intent says resumed): the test pauses the partition with confluent_kafka's own
``Consumer.pause`` on the SafeConsumer's handle, behind SafeConsumer's back. The raw client
shows what that means (characterization): the partition never fetches again, with no error.
SafeConsumer finds it within its bound (here 2 s: ``socket.timeout.ms=2000``,
``fetch.wait.max.ms=100``), logs one WARNING naming it, counts it, and assigns it again from its
position: every record once, in order, under every protocol, with ``subscribe()`` and ``assign()``.

A healthy consumer is never "healed": idle partitions, partitions paused by intent, and an
application slower than its fetches all make zero stalls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import Received, checked_pump, pump, pump_for
from .test_observability import Otel

#: A stall bound of 2 s (see safeconsumer.consumer._stall.stall_bound).
FAST: dict[str, Any] = {"socket_timeout_ms": 2000, "fetch_wait_max_ms": 100, "enable_auto_commit": False}
BOUND = 2.0


def _stall_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "stalled" in r.getMessage()]


def _offsets(got: Received, topic: str, partition: int = 0) -> list[int]:
    return [r[2] for r in got.records if (r[0], r[1]) == (topic, partition)]


@pytest.fixture
def otel() -> Iterator[Otel]:
    yield Otel()


@pytest.mark.kafka_versions
def test_raw_partition_paused_inside_librdkafka_never_fetches(kafka: KafkaTestKit) -> None:
    """Characterization: what #5591 leaves behind. Nothing reports it; the records wait for ever."""
    topic = kafka.create_topic()
    kafka.produce(topic, 10)
    c = Consumer(kafka.consumer_conf(kafka.name("g"), **FAST))
    got = Received()
    try:
        c.assign([TopicPartition(topic, 0)])
        pump([(c, got)], lambda: len(got.records) == 10, timeout=30, what="the first records")
        c.pause([TopicPartition(topic, 0)])
        kafka.produce(topic, 10, start=10)
        pump_for([(c, got)], 4 * BOUND)
        assert len(got.records) == 10 and not got.errors, "a partition paused inside librdkafka fetched"
    finally:
        c.close()


@pytest.mark.parametrize("mode", ["subscribe", "assign"])
def test_a_stalled_partition_is_found_reported_and_started_again(
    kafka: KafkaTestKit, protocol: Protocol, mode: str, caplog: pytest.LogCaptureFixture, otel: Otel
) -> None:
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, other = kafka.create_topic(partitions=2), kafka.create_topic()
    kafka.produce(topic, 40, partitions=2)
    kafka.produce(other, 5)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol, **FAST), **otel.options())
    got = Received()
    try:
        if mode == "subscribe":
            c.subscribe([topic, other])
        else:
            c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(other, 0)])
        c.pause([TopicPartition(other, 0)])  # paused by intent: never "healed"
        checked_pump([(c, got)], lambda: len(got.records) == 40, timeout=60, what="the first records")
        # The stall: librdkafka pauses partition 0 behind SafeConsumer's back (intent: resumed).
        Consumer.pause(c, [TopicPartition(topic, 0)])
        started = time.monotonic()
        kafka.produce(topic, 40, partitions=2, start=40)
        checked_pump([(c, got)], lambda: len(got.records) == 80, timeout=60, what="every record, the stalled included")
        took = time.monotonic() - started
        for partition in (0, 1):
            assert _offsets(got, topic, partition) == list(range(40)), (
                f"partition {partition}: lost, repeated or reordered"
            )
        assert not _offsets(got, other), "a record of a partition paused by intent was delivered"
        warnings = _stall_warnings(caplog)
        assert len(warnings) == 1 and f"{topic}[0]" in warnings[0], warnings
        assert "offset 20" in warnings[0], f"not started again from its position: {warnings[0]}"
        assert otel.value("safeconsumer.stalls", **{"messaging.destination.name": topic}) == 1
        assert [
            (s.attributes or {}).get("messaging.destination.partition.id") for s in otel.spans("safeconsumer stall")
        ] == ["0"]
        assert took < 8 * BOUND, f"the stall lasted {took:.1f}s, bound {BOUND}s"
        assert c.pause_state().partitions == {(other, 0)} and {(tp.topic, tp.partition) for tp in c.paused()} == {
            (other, 0)
        }
        c.resume([TopicPartition(other, 0)])
        checked_pump([(c, got)], lambda: len(_offsets(got, other)) == 5, timeout=30, what="the resumed partition")
    finally:
        c.close()


def test_healthy_consumers_are_never_healed(
    kafka: KafkaTestKit, protocol: Protocol, caplog: pytest.LogCaptureFixture, otel: Otel
) -> None:
    """Idle partitions, a partition paused by intent with records waiting, and an application much
    slower than its fetches (records queued behind other partitions' for many bounds): no stall."""
    caplog.set_level(logging.INFO, logger="safeconsumer")
    busy, idle, held = kafka.create_topic(partitions=3), kafka.create_topic(partitions=2), kafka.create_topic()
    kafka.produce(busy, 600, partitions=3)
    kafka.produce(held, 10)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol, **FAST), **otel.options())
    got = Received()
    try:
        c.subscribe([busy, idle, held])
        c.pause_topics([held])
        deadline = time.monotonic() + 6 * BOUND
        while time.monotonic() < deadline:  # slow: one record per 20 ms, 600 records need 12 s
            msg = c.poll(0.1)
            got.add(msg)
            if msg is not None:
                time.sleep(0.02)
        pump_for([(c, got)], 3 * BOUND)  # the rest, then idle
        assert not _stall_warnings(caplog)
        assert otel.value("safeconsumer.stalls") == 0
        assert not [r for r in got.records if r[0] == held]
    finally:
        c.close()


def test_an_empty_value_record_is_returned_while_the_guard_is_due(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """poll(timeout) waits in slices while the guard is due: a record whose value is empty (length 0)
    still ends the wait and is returned."""
    topic = kafka.create_topic()
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol, **FAST))
    try:
        c.subscribe([topic])
        wait_until(lambda: c.poll(0.2) is None and c.assignment(), timeout=30, what="the assignment")
        kafka.producer.produce(topic, value=b"")
        kafka.producer.flush(10)
        msg = c.poll(3 * BOUND)
        assert msg is not None and msg.error() is None and msg.value() == b"", msg
    finally:
        c.close()


def test_transaction_markers_and_an_open_transaction_are_not_stalls(
    kafka: KafkaTestKit, protocol: Protocol, caplog: pytest.LogCaptureFixture
) -> None:
    """librdkafka's position passes control records and aborted records, and the end offset it asks
    for under read_committed (the default) is the last stable offset: a partition waiting behind an
    open transaction, or ending in markers, is idle, never "healed" (characterized on the raw
    handle too: position == end in each case)."""
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic = kafka.create_topic()
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": kafka.name("tx")})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "open"):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"{outcome}-{i}".encode())
        producer.flush(10)
        if outcome == "commit":
            producer.commit_transaction(30)
        elif outcome == "abort":
            producer.abort_transaction(30)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol, **FAST))
    got = Received()
    try:
        c.assign([TopicPartition(topic, 0)])
        checked_pump([(c, got)], lambda: len(got.records) == 5, timeout=30, what="the committed records")
        pump_for([(c, got)], 4 * BOUND)
        assert [r[3] for r in got.records] == [f"commit-{i}".encode() for i in range(5)]
        tp = TopicPartition(topic, 0)
        position = Consumer.position(c, [tp])[0].offset
        end = Consumer.offsets_for_times(c, [TopicPartition(topic, 0, -1)], 10)[0].offset
        assert position == end == 12, (position, end)  # 5 + marker, 5 aborted + marker: the open ones wait
        assert not _stall_warnings(caplog)
    finally:
        c.close()
        producer.abort_transaction(30)
