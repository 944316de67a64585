"""Errors librdkafka *raises* pass the same translation as the error events it returns.

The scenario is a static member fenced by another member with its ``group.instance.id``:
librdkafka then raises ``_FATAL`` from ``commit()`` (the member never polls, so no error
event can reach it first). Static membership under KIP-848 is covered with the group-health
work; here the classic protocols, where this fencing is immediate.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from safeconsumer import EXIT_FATAL, FatalConsumerError, SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import Received, pump

ROOT = Path(__file__).resolve().parents[2]

CLASSIC: list[Protocol] = ["range", "cooperative-sticky"]


def _fence(kafka: KafkaTestKit, topic: str, group: str, protocol: Protocol, instance: str) -> Consumer:
    """Start another member with the same instance id and let it take the partition over."""
    other = Consumer(kafka.consumer_conf(group, protocol, group_instance_id=instance))
    other.subscribe([topic])
    received = Received()
    pump([(other, received)], lambda: bool(other.assignment()), timeout=45, what="the fencing member to be assigned")
    return other


@pytest.mark.parametrize("protocol", CLASSIC)
def test_a_fatal_error_raised_by_commit_stops_the_consumer(
    kafka: KafkaTestKit, protocol: Protocol, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic = kafka.create_topic(partitions=1)
    group = kafka.name("g")
    instance = kafka.name("instance")
    a = SafeConsumer(kafka.consumer_conf(group, protocol, group_instance_id=instance), keepalive="off")
    a.subscribe([topic])
    pump([(a, Received())], lambda: bool(a.assignment()), timeout=45, what="A to be assigned")
    other = _fence(kafka, topic, group, protocol, instance)
    try:
        with pytest.raises(FatalConsumerError) as raised:
            wait_until(
                lambda: a.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False) is None,
                timeout=30,
                what="commit() to fail fatally",
            )
        err = raised.value
        assert err.kafka_error is not None
        assert err.kafka_error.code() in {KafkaError._FATAL, KafkaError.FENCED_INSTANCE_ID}
        assert err.group_id == group
        for call in (lambda: a.poll(0), a.assignment, lambda: a.committed([TopicPartition(topic, 0)])):
            with pytest.raises(FatalConsumerError) as again:
                call()
            assert again.value is err, "every later call raises the same fatal error"
        a.close()  # closing a stopped consumer does nothing
        causes = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"rebalance of group {group!r}")]
        assert any(": fenced;" in m for m in causes), causes
    finally:
        other.close()


@pytest.mark.parametrize("protocol", CLASSIC)
def test_the_exit_policy_applies_to_a_fatal_error_raised_by_commit(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=1)
    group = kafka.name("g")
    instance = kafka.name("instance")
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.fenced_proc",
            kafka.bootstrap_servers,
            topic,
            group,
            protocol,
            instance,
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    other: Consumer | None = None
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "READY"
        other = _fence(kafka, topic, group, protocol, instance)
        child.stdin.write("GO\n")
        child.stdin.flush()
        wait_until(lambda: child.poll() is not None, timeout=30, what="the process to exit")
        out, err = child.communicate(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
        if other is not None:
            other.close()
    assert child.returncode == EXIT_FATAL, (child.returncode, out, err[-2000:])
    assert "still running" not in out
    assert any("CRITICAL" in line and group in line for line in err.splitlines()), err[-2000:]
