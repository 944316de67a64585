"""I3: a record fetched but withheld is delivered later, or by the next owner; never committed first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from confluent_kafka import TopicPartition

from safeconsumer import SafeConsumer, delivery_stats
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
