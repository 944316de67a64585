"""Every rebalance explained: its cause in one INFO line, on the counter and on a span (issue: group health).

Real broker, every protocol: this member joining and leaving, a peer joining and leaving (named
by member id and client id), this member evicted for exceeding ``max.poll.interval.ms``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from safeconsumer import SafeConsumer
from safeconsumer.testing import GroupSnapshot, KafkaTestKit, Protocol, wait_until

from ..support import Received, pump
from .test_observability import Otel

CAUSE_LINE = "rebalance of group"


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.shutdown()


def _causes(caplog: pytest.LogCaptureFixture, group: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and r.getMessage().startswith(f"{CAUSE_LINE} {group!r}")
    ]


def _counted(otel: Otel, cause: str) -> float:
    return otel.value("safeconsumer.rebalances", **{"safeconsumer.rebalance.cause": cause})


def test_join_peer_join_peer_leave_and_leave_are_explained(
    kafka: KafkaTestKit, protocol: Protocol, otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    topic = kafka.create_topic(partitions=4)
    kafka.produce(topic, 40, partitions=4)
    group = kafka.name("g")
    a = SafeConsumer({**kafka.consumer_conf(group, protocol), "client.id": "app-a"}, **otel.options())
    a.subscribe([topic])
    got = Received()
    b: Consumer | None = None
    try:
        pump([(a, got)], lambda: len(a.assignment()) == 4, timeout=45, what="A owns every partition")
        wait_until(lambda: any(": joined;" in m for m in _causes(caplog, group)), timeout=10, what="A's join line")
        assert _counted(otel, "joined") >= 1

        b = peer = Consumer({**kafka.consumer_conf(group, protocol), "client.id": "peer-b"})
        b.subscribe([topic])

        def b_joined_is_explained() -> bool:
            got.add(a.poll(0.05))
            peer.poll(0.05)
            return any(": peer joined: joined member" in m for m in _causes(caplog, group))

        wait_until(b_joined_is_explained, timeout=60, what="A's line naming the peer that joined")
        line = next(m for m in _causes(caplog, group) if ": peer joined" in m)
        assert b.memberid() in line and "client.id peer-b" in line, line
        assert _counted(otel, "peer_joined") >= 1
        spans = [s for s in otel.spans("safeconsumer rebalance explained") if s.attributes]
        assert any(s.attributes.get("safeconsumer.rebalance.cause") == "peer_joined" for s in spans if s.attributes)
        b_id = b.memberid()
        b.close()
        b = None

        def b_left_is_explained() -> bool:
            got.add(a.poll(0.05))
            return any(": peer left: left member" in m for m in _causes(caplog, group))

        wait_until(b_left_is_explained, timeout=60, what="A's line naming the peer that left")
        line = next(m for m in _causes(caplog, group) if ": peer left" in m)
        assert b_id is not None and b_id in line and "client.id peer-b" in line, line
        assert _counted(otel, "peer_left") >= 1
    finally:
        if b is not None:  # a failed step must not leave a subscribed client to the garbage collector
            b.close()
        a.close()
    assert any(": left;" in m for m in _causes(caplog, group)), _causes(caplog, group)
    assert _counted(otel, "left") >= 1
    assert _counted(otel, "unknown") == 0, [(a, p.value) for a, p in otel.points("safeconsumer.rebalances")]
    causes = {a.get("safeconsumer.rebalance.cause") for a, _ in otel.points("safeconsumer.rebalances")}
    assert None not in causes, "a rebalance callback was counted without its cause"


def test_a_joining_peer_is_described_owning_nothing_while_the_group_rebalances(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """What the explainer's baseline builds on: from the moment a peer is in the broker's
    answer until this member took part in the rebalance it started, the group is not STABLE
    and the peer owns nothing (while this member keeps what it owned)."""
    topic = kafka.create_topic(partitions=4)
    group = kafka.name("g")
    a = Consumer(kafka.consumer_conf(group, protocol))
    a.subscribe([topic])
    b = Consumer(kafka.consumer_conf(group, protocol))
    try:
        wait_until(lambda: len(a.assignment()) == 4, step=lambda: a.poll(0.1), timeout=45, what="A owning all")
        a_id = a.memberid()
        assert kafka.describe_group(group).state == "STABLE"
        b.subscribe([topic])

        def with_b() -> GroupSnapshot | None:
            s = kafka.describe_group(group)
            return s if len(s.members) == 2 else None

        snapshot = wait_until(
            with_b,
            step=lambda: b.poll(0.1),  # A does not poll: it cannot take part in the rebalance yet
            timeout=30,
            what="B in the group's description",
        )
        assert snapshot is not None and snapshot.state != "STABLE", snapshot
        owned = snapshot.assignment
        assert a_id is not None and len(owned[a_id]) == 4, snapshot
        (b_id,) = snapshot.member_ids - {a_id}
        assert owned[b_id] == frozenset(), snapshot
        wait_until(
            lambda: kafka.describe_group(group).state == "STABLE" and len(b.assignment()) > 0,
            step=lambda: (a.poll(0.05), b.poll(0.05)),
            timeout=45,
            what="the rebalance finished once A polled",
        )
    finally:
        b.close()
        a.close()


def test_a_max_poll_eviction_is_explained(
    kafka: KafkaTestKit, protocol: Protocol, otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="safeconsumer")
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, 5, partitions=1)
    group = kafka.name("g")
    conf = kafka.consumer_conf(group, protocol, max_poll_interval_ms=3000)
    if protocol != "consumer":
        conf.update({"session.timeout.ms": 3000, "heartbeat.interval.ms": 300})
    c = SafeConsumer(conf, keepalive="off", **otel.options())
    c.subscribe([topic])
    got = Received()
    try:
        pump([(c, got)], lambda: bool(c.assignment()), timeout=45, what="an assignment")
        time.sleep(4.5)  # the application's work: longer than max.poll.interval.ms, no keepalive

        def explained(text: str, times: int = 1) -> bool:
            got.add(c.poll(0.2))
            return sum(text in m for m in _causes(caplog, group)) >= times

        wait_until(lambda: explained(": max poll exceeded;"), timeout=30, what="the eviction explained")
        assert _counted(otel, "max_poll_exceeded") >= 1
        wait_until(lambda: explained(": joined;", 2), timeout=45, what="the member joining again")
    finally:
        c.close()
