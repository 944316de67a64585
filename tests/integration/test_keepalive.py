"""I5: a member inside keepalive() (or parked automatically) outlives max.poll.interval.ms."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import Received, checked_poll, checked_pump, keys, pump

# The smallest librdkafka accepts is session.timeout.ms, 6 s in the test kit's config: a shorter
# session lets a broker slowed by the suite's load (a heartbeat answered in 3.6 s was seen) evict a
# member that did everything right.
MAX_POLL_MS = 6000
WORK = 2 * MAX_POLL_MS / 1000 + 1  # "long work": more than two max.poll intervals
AUTO_PARKED = "parked: keeping the member alive without consuming (auto)"  # logged by "safeconsumer"


class Watch:
    """A peer's view of the group: every rebalance callback it saw."""

    def __init__(self) -> None:
        self.events: list[tuple[str, set[tuple[str, int]]]] = []

    def on_assign(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.events.append(("assign", keys(parts)))

    def on_revoke(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.events.append(("revoke", keys(parts)))


def _conf(kafka: KafkaTestKit, group: str, protocol: Protocol, **extra: Any) -> dict[str, Any]:
    return kafka.consumer_conf(group, protocol, max_poll_interval_ms=MAX_POLL_MS, **extra)


def _two_members(
    kafka: KafkaTestKit, protocol: Protocol, make_a: Any
) -> tuple[str, str, Any, Received, SafeConsumer, Received, Watch]:
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    kafka.produce(topic, 100, partitions=2)
    a, ra = make_a(_conf(kafka, group, protocol)), Received()
    a.subscribe([topic])
    watch = Watch()
    peer, rp = SafeConsumer(_conf(kafka, group, protocol)), Received()
    peer.subscribe([topic], on_assign=watch.on_assign, on_revoke=watch.on_revoke)
    pump([(a, ra), (peer, rp)], lambda: len(a.assignment()) == 1 == len(peer.assignment()), timeout=45, what="split")
    pump([(a, ra), (peer, rp)], lambda: len(ra.records) + len(rp.records) >= 100, timeout=30, what="100 records")

    # The group settled: the broker holds no rebalance round open (cooperative-sticky's follow-up
    # rounds can come after both members see their one partition), and the peer saw no event since
    # the previous check (its callbacks run in the polls between two checks).
    seen = [-1]

    def settled() -> bool:
        count, seen[0] = seen[0], len(watch.events)
        return count == seen[0] and kafka.describe_group(group).state == "STABLE"

    pump([(a, ra), (peer, rp)], settled, timeout=30, what="the group stable")
    return topic, group, a, ra, peer, rp, watch


def _peer_polls_while(peer: Consumer, rp: Received, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        rp.add(peer.poll(0.1))


def test_manual_keepalive_keeps_the_member(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic, group, a, ra, peer, rp, watch = _two_members(kafka, protocol, SafeConsumer)
    before = kafka.describe_group(group)
    events_before = len(watch.events)
    kafka.produce(topic, 100, partitions=2, start=100)
    with a.keepalive():
        assert a.pause_state().parked
        worker = threading.Thread(target=_peer_polls_while, args=(peer, rp, WORK))
        worker.start()
        worker.join()  # the "long work" of A: WORK seconds without a poll
    assert not a.pause_state().parked
    assert len(watch.events) == events_before, f"the peer saw a rebalance: {watch.events[events_before:]}"
    after = kafka.describe_group(group)
    assert after.member_ids == before.member_ids and after.assignment == before.assignment
    checked_pump([(a, ra), (peer, rp)], lambda: len(ra.records) + len(rp.records) >= 200, timeout=30, what="all 200")
    ids = ra.ids() + rp.ids()
    assert sorted(ids) == list(range(200)), "lost or duplicated records"
    assert not [e for e in ra.errors if e.code() == KafkaError._MAX_POLL_EXCEEDED]
    a.close()
    peer.close()


def _next_offsets(received: Received) -> list[TopicPartition]:
    """The offset after the last record handed out, per partition: what the application commits."""
    last: dict[tuple[str, int], int] = {}
    for topic, partition, offset, _ in received.records:
        last[(topic, partition)] = max(offset, last.get((topic, partition), -1))
    return [TopicPartition(t, p, o + 1) for (t, p), o in sorted(last.items())]


def test_a_manual_block_longer_than_keepalive_after_is_not_followed_by_an_automatic_park(
    kafka: KafkaTestKit, protocol: Protocol, caplog: pytest.LogCaptureFixture
) -> None:
    """A keepalive() block outlasting keepalive_after, then polling resumes: no automatic park follows.

    The watchdog parks an application that stopped polling for keepalive_after; the time spent
    inside a keepalive() block is not such a pause, so the application polling right after
    the block must not be parked as if it had been idle all along.
    """
    after = 1.0
    spans = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, 200, partitions=2)
    conf = _conf(kafka, kafka.name("g"), protocol)
    a, ra = SafeConsumer(conf, keepalive_after=after, tracer_provider=tracers), Received()
    a.subscribe([topic])
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 2 and len(ra.records) >= 20, timeout=30, what="A reads")
    caplog.set_level(logging.INFO, logger="safeconsumer")
    with a.keepalive():
        entered = time.monotonic()
        # The application's long work, without a poll: longer than keepalive_after.
        wait_until(lambda: time.monotonic() - entered >= 2 * after, timeout=4 * after, what="the long work")
        assert a.pause_state().parked
        # From here on: whatever parks the consumer after the block is seen.
        logged, back_ns = len(caplog.records), time.time_ns()
    back = time.monotonic()
    # Done with its work, the application commits what it processed and polls again, every 0.05 s.
    a.commit(offsets=_next_offsets(ra), asynchronous=False)
    parked_at: list[float] = []
    while time.monotonic() - back < 2 * after:
        if a.pause_state().parked:
            parked_at.append(round(time.monotonic() - back, 2))
        checked_poll(a, ra, 0.05)
    auto_logs = [
        r.getMessage()
        for r in caplog.records[logged:]
        if r.name.partition(".")[0] == "safeconsumer" and r.getMessage() == AUTO_PARKED
    ]
    auto_spans = [
        s
        for s in spans.get_finished_spans()
        if s.name == "safeconsumer keepalive"
        and (s.attributes or {}).get("safeconsumer.keepalive.mode") == "auto"
        and (s.start_time or 0) >= back_ns
    ]
    assert not parked_at and not auto_logs and not auto_spans, (
        f"parked automatically while the application polled after the block: seen parked at {parked_at[:5]} s "
        f"after it, logged {auto_logs}, {len(auto_spans)} automatic keepalive span(s)"
    )
    checked_pump([(a, ra)], lambda: len(ra.records) >= 200, timeout=30, what="all 200")
    assert sorted(ra.ids()) == list(range(200))
    a.close()
    tracers.shutdown()


def _peer_takes_over(peer: Consumer, rp: Received) -> None:
    wait_until(
        lambda: len(peer.assignment()) == 2,
        timeout=30,
        what="the peer to take over",
        step=lambda: rp.add(peer.poll(0.1)),
    )


def _keepalive_off(conf: dict[str, Any]) -> SafeConsumer:
    return SafeConsumer(conf, keepalive="off")


@pytest.mark.parametrize("make", [Consumer, _keepalive_off], ids=["raw", "keepalive-off"])
def test_without_keepalive_the_busy_member_is_evicted(kafka: KafkaTestKit, protocol: Protocol, make: Any) -> None:
    """Characterization (raw) and the opt-out: A works without polling and loses its partition."""
    _, _, a, _ra, peer, rp, watch = _two_members(kafka, protocol, make)
    events_before = len(watch.events)
    _peer_polls_while(peer, rp, WORK)  # A works without polling
    _peer_takes_over(peer, rp)
    assert len(watch.events) > events_before
    a.close()
    peer.close()


def test_automatic_keepalive_needs_no_code_change(kafka: KafkaTestKit, protocol: Protocol) -> None:
    make = lambda conf: SafeConsumer(conf, keepalive_after=1.0)  # noqa: E731
    topic, _group, a, ra, peer, rp, watch = _two_members(kafka, protocol, make)
    events_before = len(watch.events)
    kafka.produce(topic, 100, partitions=2, start=100)
    _peer_polls_while(peer, rp, WORK)  # A is "processing a record" all this time
    assert len(watch.events) == events_before, f"the peer saw a rebalance: {watch.events[events_before:]}"
    checked_pump([(a, ra), (peer, rp)], lambda: len(ra.records) + len(rp.records) >= 200, timeout=30, what="all 200")
    assert sorted(ra.ids() + rp.ids()) == list(range(200))
    assert not a.pause_state().parked
    a.close()
    peer.close()


def test_keepalive_ceiling_lets_a_stuck_member_go(kafka: KafkaTestKit, protocol: Protocol) -> None:
    make = lambda conf: SafeConsumer(conf, keepalive_after=0.5, keepalive_max=1.0)  # noqa: E731
    _, _, a, _ra, peer, rp, _ = _two_members(kafka, protocol, make)
    _peer_takes_over(peer, rp)
    a.close()
    peer.close()


def test_partitions_moving_during_keepalive_never_reach_the_parked_app(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=4)
    group = kafka.name("g")
    kafka.produce(topic, 200, partitions=4)
    a, ra = SafeConsumer(_conf(kafka, group, protocol)), Received()
    a.subscribe([topic])
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 4 and len(ra.records) >= 20, timeout=30, what="A reads")
    b, rb = SafeConsumer(_conf(kafka, group, protocol)), Received()
    with a.keepalive():
        b.subscribe([topic])
        pump(
            [(b, rb)],
            lambda: len(b.assignment()) >= 1 and len(a.assignment()) + len(b.assignment()) == 4,
            timeout=45,
            what="B joins",
        )
        b.close()
        pump([], lambda: len(a.assignment()) == 4, timeout=45, what="B's partitions back on A while parked")
        assert len(a.paused()) == 0, "parking is not the user's pause intent"
        n = len(ra.records)
    assert len(ra.records) == n
    checked_pump([(a, ra)], lambda: len(set(ra.ids()) | set(rb.ids())) >= 200, timeout=30, what="all records")
    a.close()


@pytest.mark.parametrize("protocol", ["cooperative-sticky"])
def test_pause_calls_inside_keepalive_take_effect_at_exit(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    a, ra = SafeConsumer(_conf(kafka, kafka.name("g"), protocol)), Received()
    a.subscribe([topic])
    checked_pump([(a, ra)], lambda: len(a.assignment()) == 2 and ra.records, timeout=30, what="A reads")
    a.pause()
    with a.keepalive():
        a.pause_topics([topic])
        a.resume()
        assert a.pause_state().consumer is False and a.pause_state().topics == {topic}
    assert len(a.paused()) == 2
    checked_pump([(a, ra)], lambda: True, timeout=1, what="a poll")
    n = len(ra.records)
    a.resume_topics([topic])
    checked_pump([(a, ra)], lambda: len(ra.records) >= 40, timeout=30, what="all after resume")
    assert len(ra.records) > n
    a.close()
