"""I3: a record fetched but withheld is delivered later, or by the next owner; never committed first."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Message, TopicPartition

from safeconsumer import SafeConsumer, delivery_stats
from safeconsumer.consumer._port import port_of
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import Received, checked_poll, checked_pump, checked_pump_for

ROOT = Path(__file__).resolve().parents[2]


def test_records_withheld_by_a_pause_come_back_first_and_in_order(kafka: KafkaTestKit) -> None:
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, 200, partitions=1)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g")))
    c.assign([TopicPartition(topic, 0, 0)])
    got = Received()
    # poll() reads librdkafka's queue a batch at a time: after two records, more wait in the gate.
    checked_pump([(c, got)], lambda: len(got.records) >= 2, timeout=30, what="two records")
    c.pause([TopicPartition(topic, 0)])
    checked_pump_for([(c, got)], 1.0)
    assert len(got.records) == 2, "records of a paused partition were returned"
    stats = delivery_stats(c)
    assert stats.withheld >= 1 and stats.held == stats.withheld, stats
    assert c.position([TopicPartition(topic, 0)])[0].offset == 2, "position counts only delivered records"
    c.resume([TopicPartition(topic, 0)])
    checked_pump([(c, got)], lambda: len(got.records) >= 200, timeout=30, what="all 200")
    assert [r[2] for r in got.records] == list(range(200))
    assert delivery_stats(c).released == stats.withheld
    c.close()


def test_a_killed_member_never_committed_past_what_it_delivered(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    kafka.produce(topic, 2000, partitions=2)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.member_proc", kafka.bootstrap_servers, topic, group, protocol, "50"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    delivered: dict[int, set[int]] = {0: set(), 1: set()}
    withheld = 0
    assert child.stdout is not None
    try:
        for line in child.stdout:
            kind, *rest = line.split()
            if kind == "R":
                delivered[int(rest[0])].add(int(rest[1]))
            elif kind == "P":
                withheld = int(rest[0])
                if len(delivered[1]) >= 200:
                    break
        assert withheld > 0, "the scenario must withhold records of the paused partition"
        # Let the 100 ms auto-commit run a few times, then kill without any chance to clean up.
        wait_until(lambda: kafka.committed(group, topic, 2)[1] > 0, timeout=30, what="an auto-commit")
        child.kill()
        child.wait(timeout=10)
        for line in child.stdout:  # what it printed before dying
            kind, *rest = line.split()
            if kind == "R":
                delivered[int(rest[0])].add(int(rest[1]))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()

    committed = kafka.committed(group, topic, 2)
    for partition, offsets in delivered.items():
        assert committed[partition] <= max(offsets, default=-1) + 1, (
            f"partition {partition}: committed {committed[partition]} past the last delivered {max(offsets)}"
        )
    nxt, got = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    nxt.subscribe([topic])
    expected = {(p, o) for p in (0, 1) for o in range(1000)}
    before_kill = {(p, o) for p, offs in delivered.items() for o in offs}

    def missing() -> set[tuple[int, int]]:
        return expected - before_kill - {(r[1], r[2]) for r in got.records}

    checked_pump([(nxt, got)], lambda: not missing(), timeout=60, what="the next owner to read the rest")
    checked_poll(nxt, got)
    nxt.close()


@pytest.mark.parametrize("entry", ["poll", "consume_available"])
def test_a_record_read_before_a_revocation_served_by_the_read_ahead_is_not_lost(
    kafka: KafkaTestKit, protocol: Protocol, entry: str
) -> None:
    """The window found by reading the reader: ``poll()`` (and kafka-python's read,
    ``consume_available``) takes its first record with one librdkafka call, which moves
    librdkafka's position past it, then reads ahead with another call. When a revocation is served
    by that second call, the offsets stored in it (and committed as the partition goes) must stay
    at the record, and the record must reach the partition's next owner. It was stored past and
    dropped as unowned: lost.

    In production the revocation comes from a peer joining or leaving at that moment, and the
    store it makes holds a record handed out since the last periodic store (one every 50 ms).
    Here the periodic store is off, a first record is handed out, and when the second arrives
    the member changes its own subscription away from the topic, from inside the read-ahead and
    before librdkafka serves it, so that the revoked partition is known under every protocol;
    the read-ahead then reads until the revocation was served (no other record exists)."""
    topic, other = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1)
    kafka.produce(topic, 1, partitions=1)
    group = kafka.name("g")
    c = SafeConsumer(kafka.consumer_conf(group, protocol))
    c._gate.flush_interval = float("inf")  # offsets are stored only when due for another reason
    got = Received()
    client = c._client
    real_poll, real_consume = client.poll, client.consume
    window = {"armed": False, "served": False, "produced": False}

    def poll(timeout: float) -> Message | None:
        if len(got.records) == 1 and timeout > 0 and not window["produced"]:
            # The second record is produced while the member waits in librdkafka's poll(), so that
            # it arrives through poll() (with records already queued, consume_available reads them
            # with consume() alone, and there is no window).
            window["produced"] = True
            threading.Thread(target=kafka.produce, args=(topic, 1), kwargs={"partitions": 1}).start()
        msg = real_poll(timeout)
        window["armed"] = window["armed"] or (len(got.records) == 1 and msg is not None and msg.error() is None)
        return msg

    def consume(num_messages: int, timeout: float) -> tuple[list[Message], bool]:
        if not window["armed"] or window["served"]:
            return real_consume(num_messages, timeout)
        window["armed"] = False
        epoch = c._table.epoch
        c.subscribe([other])  # librdkafka queues the revocation of the record's partition
        deadline = time.monotonic() + 30
        while True:
            batch, errors = real_consume(num_messages, 0.1)
            assert not [m for m in batch if m.error() is None], "only one record was produced"
            if c._table.epoch != epoch or time.monotonic() > deadline:
                window["served"] = c._table.epoch != epoch
                return batch, errors

    client.poll, client.consume = poll, consume  # type: ignore[method-assign]
    try:
        c.subscribe([topic])

        def step() -> None:
            got.add(c.poll(5) if entry == "poll" else next(iter(port_of(c, "poll").consume_available(10, 5)), None))

        wait_until(lambda: got.records, timeout=60, what="the first record", step=step)
        wait_until(lambda: window["served"], timeout=60, what="a revocation served by the read-ahead", step=step)
        assert [r[2] for r in got.records] == [0], "a record of the revoked partition reached the application"
    finally:
        client.poll, client.consume = real_poll, real_consume  # type: ignore[method-assign]
        c.close()
    committed = kafka.committed(group, topic, 1)[0]
    assert committed <= 1, f"committed {committed}: past the record its owner never handed out"
    nxt = SafeConsumer(kafka.consumer_conf(group, protocol))
    after = Received()
    try:
        nxt.subscribe([topic])
        checked_pump([(nxt, after)], lambda: 1 in {r[2] for r in after.records}, timeout=60, what="the second record")
    finally:
        nxt.close()
