"""Static membership (KIP-345, ``group.instance.id``) under every protocol.

A static member restarted within its session timeout gets its partitions back and no peer
rebalances (a dynamic member restarted the same way makes its peer rebalance: the control).
Two live members with one instance id end one of them with a fatal error: under the classic
protocols the broker fences the older member (tests/integration/test_client_boundary.py);
under KIP-848 it refuses the newer one (UNRELEASED_INSTANCE_ID) - here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from safeconsumer import EXIT_FATAL, FatalConsumerError, GroupMaxSizeReachedError, SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol

from ..support import Received, keys, pump, pump_for, set_group_config

ROOT = Path(__file__).resolve().parents[2]


class Rebalances:
    """Counts the rebalance callbacks a member sees."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[tuple[str, int]]]] = []

    def subscribe(self, c: SafeConsumer, topic: str) -> None:
        c.subscribe(
            [topic],
            on_assign=lambda _c, p: self.calls.append(("assign", frozenset(keys(p)))),
            on_revoke=lambda _c, p: self.calls.append(("revoke", frozenset(keys(p)))),
            on_lost=lambda _c, p: self.calls.append(("lost", frozenset(keys(p)))),
        )


@pytest.mark.parametrize(
    ("protocol", "static"),
    [
        ("range", True),
        ("cooperative-sticky", True),
        ("consumer", True),
        ("range", False),
        ("cooperative-sticky", False),
    ],
    ids=["range-static", "cooperative-sticky-static", "consumer-static", "range-dynamic", "cooperative-sticky-dynamic"],
)
def test_a_member_restarted_within_its_session_timeout_rebalances_no_peer_if_static(
    kafka: KafkaTestKit, protocol: Protocol, static: bool
) -> None:
    """The control (dynamic) runs under the classic protocols only: under KIP-848 the broker's
    assignor moves only the partitions of the member that left, and a member rejoining at once
    takes them back, so a dynamic restart need not reach its peers either."""
    topic, group = kafka.create_topic(partitions=4), kafka.name("g")
    instance = {"group.instance.id": kafka.name("worker")} if static else {}

    def worker() -> SafeConsumer:
        c = SafeConsumer({**kafka.consumer_conf(group, protocol), "client.id": "worker", **instance})
        c.subscribe([topic])
        return c

    a, seen = SafeConsumer(kafka.consumer_conf(group, protocol)), Rebalances()
    seen.subscribe(a, topic)
    b = worker()
    ra, rb = Received(), Received()
    try:
        pump([(a, ra), (b, rb)], lambda: len(a.assignment()) == 2 == len(b.assignment()), timeout=60, what="a split")
        pump_for([(a, ra), (b, rb)], 1.0)
        before, owned_by_b = len(seen.calls), keys(b.assignment())
        b.close()
        b, rb = worker(), Received()
        pump([(a, ra), (b, rb)], lambda: len(b.assignment()) == 2, timeout=60, what="the restarted member assigned")
        pump_for([(a, ra), (b, rb)], 3.0)  # a rebalance at A would have happened by now
        if static:
            assert keys(b.assignment()) == owned_by_b, "the static member gets its own partitions back"
            assert seen.calls[before:] == [], f"the peer rebalanced: {seen.calls[before:]}"
        else:
            assert seen.calls[before:], "control: a dynamic member's restart rebalances its peer"
    finally:
        a.close()
        b.close()


def _first_static_member(kafka: KafkaTestKit, partitions: int) -> tuple[str, str, str, SafeConsumer, Received]:
    """A KIP-848 group with one static member owning every partition of a new topic."""
    topic, group, instance = kafka.create_topic(partitions=partitions), kafka.name("g"), kafka.name("worker")
    first = SafeConsumer(kafka.consumer_conf(group, "consumer", group_instance_id=instance))
    first.subscribe([topic])
    r1 = Received()
    pump([(first, r1)], lambda: len(first.assignment()) == partitions, timeout=45, what="the first member assigned")
    return topic, group, instance, first, r1


def test_a_second_live_member_with_the_instance_id_is_refused_under_kip848(kafka: KafkaTestKit) -> None:
    topic, group, instance, first, r1 = _first_static_member(kafka, 2)
    second = SafeConsumer(kafka.consumer_conf(group, "consumer", group_instance_id=instance))
    second.subscribe([topic])
    try:
        with pytest.raises(FatalConsumerError) as raised:
            pump([(first, r1), (second, Received())], lambda: False, timeout=30, what="a fatal error")
        err = raised.value
        assert err.kafka_error is not None
        assert "another live member uses its group.instance.id" in str(err), str(err)
        pump_for([(first, r1)], 2.0, check=True)
        assert len(first.assignment()) == 2, "the first member keeps its partitions"
        first.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        first.close()
        second.close()


def test_the_exit_policy_applies_to_a_refused_static_member_under_kip848(kafka: KafkaTestKit) -> None:
    topic, group, instance, first, r1 = _first_static_member(kafka, 1)
    args = [kafka.bootstrap_servers, topic, group, "consumer", instance, "--second"]
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.fenced_proc", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pump([(first, r1)], lambda: child.poll() is not None, timeout=45, what="the second process to exit")
        out, err = child.communicate(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
        first.close()
    assert child.returncode == EXIT_FATAL, (child.returncode, out, err[-2000:])


@pytest.mark.kafka_versions
def test_a_static_member_restarted_into_its_full_group_is_refused_then_admitted_after_its_session(
    full_group_kafka: KafkaTestKit, protocol: Protocol, kafka_version: str
) -> None:
    """KAFKA-20601, as Kafka 4.3.1 behaves under both protocols (4.4.0 under the classic ones): a
    static member restarted while its previous incarnation still holds its place is refused by a
    full group (GROUP_MAX_SIZE_REACHED): I6 makes that fatal, with advice for static members.
    Restarted once the old session has expired (the broker then counts one member), it is admitted.
    Kafka 4.4.0 under ``group.protocol=consumer`` admits the restarted member at once (its previous
    incarnation's place), as the characterization pins: nothing to refuse, nothing fatal."""
    kafka = full_group_kafka
    topic, group, instance = kafka.create_topic(partitions=2), kafka.name("g"), kafka.name("worker")
    # The refusal needs the restart to reach the broker before the old incarnation's session ends;
    # with the suite's 6 s sessions a loaded machine (CI) restarted too late and was simply admitted.
    # 20 s leaves room under load; the last steps wait for that expiry.
    session = {"session_timeout_ms": 20000} if protocol != "consumer" else {}
    if protocol == "consumer":
        set_group_config(kafka, group, consumer_session_timeout_ms="20000")

    def worker() -> SafeConsumer:
        c = SafeConsumer(kafka.consumer_conf(group, protocol, group_instance_id=instance, **session))
        c.subscribe([topic])
        return c

    a, b = SafeConsumer(kafka.consumer_conf(group, protocol)), worker()
    a.subscribe([topic])
    ra, rb = Received(), Received()
    try:
        pump([(a, ra), (b, rb)], lambda: len(a.assignment()) == 1 == len(b.assignment()), timeout=60, what="a split")
        b.close()
        b, rb = worker(), Received()
        if protocol == "consumer" and kafka_version != "4.3.1":
            pump([(a, ra), (b, rb)], lambda: len(b.assignment()) == 1, timeout=60, what="the static member admitted")
            pump_for([(a, ra), (b, rb)], 2.0, check=True)
            return
        with pytest.raises(GroupMaxSizeReachedError) as raised:
            pump([(a, ra), (b, rb)], lambda: False, timeout=30, what="the restarted static member refused")
        assert f"static (group.instance.id {instance!r})" in str(raised.value) and "KAFKA-20601" in str(raised.value)
        # The way out: restart once the old incarnation's session has expired.
        pump([(a, ra)], lambda: len(kafka.describe_group(group).member_ids) == 1, timeout=60, what="one member")
        b, rb = worker(), Received()
        pump([(a, ra), (b, rb)], lambda: len(b.assignment()) == 1, timeout=60, what="the static member admitted")
        pump_for([(a, ra), (b, rb)], 2.0, check=True)
    finally:
        a.close()
        b.close()
