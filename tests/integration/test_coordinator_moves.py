"""The group coordinator moves: an assign()-ed partition still starts from its committed offset.

A consumer that assign()s a partition without an offset starts where its group committed:
librdkafka first fetches that offset from the coordinator it knows. When the coordinator has
moved (its offsets partition has a new leader), the fetch fails as a whole with NOT_COORDINATOR;
librdkafka reports an error event, finds the new coordinator, but never fetches the offset
again: the partition stays assigned and never fetches (librdkafka #5586). The same happens on
a broker that is still loading its offsets partition (a fresh or restarted broker).

Shown here on a cluster of two brokers (one also the controller), where the leader of
``__consumer_offsets``' single partition is moved at will: first what the raw client does
(characterization), then that a SafeConsumer starts those partitions anyway, from their
committed offsets, pause marks kept, under every protocol setting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from safeconsumer import SafeConsumer
from safeconsumer.consumer._requery import FAILED_OFFSET_FETCH
from safeconsumer.testing import KafkaTestKit, Protocol, WaitTimeout

from ..cluster import Cluster, running_cluster
from ..support import Received, checked_pump, keys, pump, pump_for

RECORDS = 100
DELIVERED = 5


@pytest.fixture(scope="module")
def cluster(kafka_version: str) -> Iterator[Cluster]:
    with running_cluster(version=kafka_version) as c:
        yield c


@pytest.fixture
def kit(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[KafkaTestKit]:
    k = KafkaTestKit(cluster.bootstrap_servers, prefix=request.node.name.replace("[", "-").strip("]")[:50])
    yield k
    k.close()


def _offsets(received: Received, topic: str) -> list[int]:
    return [r[2] for r in received.records if r[0] == topic]


def _failed_fetches(received: Received) -> list[KafkaError]:
    return [e for e in received.errors if e.str().startswith(FAILED_OFFSET_FETCH)]


@pytest.mark.kafka_versions
def test_raw_assigned_partition_never_fetches_after_its_committed_offset_fetch_fails(
    cluster: Cluster, kit: KafkaTestKit
) -> None:
    """Characterization (librdkafka #5586): the fetch fails once, is never retried; only assigning again helps."""
    topic, group = kit.create_topic(), kit.name("g")
    kit.produce(topic, RECORDS, partitions=1)
    c = Consumer(kit.consumer_conf(group, enable_auto_commit=False))
    got = Received()
    try:
        c.assign([TopicPartition(topic, 0)])
        pump([(c, got)], lambda: len(got.records) >= DELIVERED, timeout=60, what="the first records")
        c.commit(offsets=[TopicPartition(topic, 0, DELIVERED)], asynchronous=False)
        cluster.move_coordinator()
        c.unassign()
        c.assign([TopicPartition(topic, 0)])
        start = len(got.records)
        pump([(c, got)], lambda: _failed_fetches(got), timeout=30, what="the failed committed-offset fetch")
        assert _failed_fetches(got)[0].code() == KafkaError.NOT_COORDINATOR, got.errors
        pump_for([(c, got)], 8.0)
        assert len(got.records) == start, "librdkafka fetched the committed offset again (#5586 fixed?)"
        assert len(_failed_fetches(got)) == 1, f"librdkafka retried the fetch: {got.errors}"
        # seek() is no way out: librdkafka refuses it for a partition waiting for its offset.
        with pytest.raises(KafkaException) as refused:
            c.seek(TopicPartition(topic, 0, DELIVERED))
        assert refused.value.args[0].code() == KafkaError._STATE, refused.value
        # The way out: remove the partition and add it back, which fetches the offset again.
        c.incremental_unassign([TopicPartition(topic, 0)])
        c.incremental_assign([TopicPartition(topic, 0)])
        pump([(c, got)], lambda: RECORDS - 1 in _offsets(got, topic), timeout=60, what="the rest after assigning again")
        assert _offsets(got, topic)[start:] == list(range(DELIVERED, RECORDS))
    finally:
        c.close()


@pytest.mark.parametrize("call", ["poll", "consume"])
def test_a_partition_whose_committed_offset_fetch_failed_is_started_from_that_offset(
    cluster: Cluster, kit: KafkaTestKit, protocol: Protocol, call: str
) -> None:
    """SafeConsumer assigns it again, also while the application blocks in poll() or consume():
    read on from the committed offset; a paused one stays paused."""
    topic, held, group = kit.create_topic(), kit.create_topic(), kit.name("g")
    kit.produce(topic, RECORDS, partitions=1)
    kit.produce(held, 20, partitions=1)
    c = SafeConsumer(kit.consumer_conf(group, protocol, enable_auto_commit=False))
    got = Received()
    try:
        c.assign([TopicPartition(topic, 0), TopicPartition(held, 0)])
        c.pause([TopicPartition(held, 0)])
        checked_pump([(c, got)], lambda: len(got.records) >= DELIVERED, timeout=60, what="the first records")
        c.commit(offsets=[TopicPartition(topic, 0, DELIVERED), TopicPartition(held, 0, 3)], asynchronous=False)
        cluster.move_coordinator()
        c.unassign()
        c.assign([TopicPartition(topic, 0), TopicPartition(held, 0)])
        c.pause([TopicPartition(held, 0)])
        start = len(got.records)
        checked_pump([(c, got)], lambda: _failed_fetches(got), timeout=30, what="the failed committed-offset fetch")
        assert len(got.records) == start
        # One blocking call: the partitions are assigned again while it waits, and it returns a record.
        if call == "poll":
            first = c.poll(20)
        else:
            batch = c.consume(1, 20)
            first = batch[0] if batch else None
        assert first is not None and first.error() is None, f"{call}(20) gave {first and first.error()}"
        assert (first.topic(), first.offset()) == (topic, DELIVERED), "not read on from the committed offset"
        got.add(first)
        checked_pump([(c, got)], lambda: RECORDS - 1 in _offsets(got, topic), timeout=60, what="the rest of the topic")
        assert _offsets(got, topic)[start:] == list(range(DELIVERED, RECORDS)), "not read on from the committed offset"
        assert keys(c.paused()) == {(held, 0)} and c.pause_state().partitions == {(held, 0)}
        assert not _offsets(got, held), "a record of a paused partition was delivered"
        c.resume([TopicPartition(held, 0)])
        checked_pump([(c, got)], lambda: 19 in _offsets(got, held), timeout=60, what="the paused one, resumed")
        assert _offsets(got, held) == list(range(3, 20)), "the paused partition did not start from its committed offset"
    finally:
        c.close()


#: A classic member heartbeats every 0.5 s in the kit's config and would learn of the move (and
#: find the new coordinator) before its offset fetch: here it learns only from that fetch.
SLOW_HEARTBEAT = {"heartbeat_interval_ms": 10000, "session_timeout_ms": 45000}


def _fetch_committed_again(c: Consumer, protocol: Protocol, tp: TopicPartition) -> None:
    """Have librdkafka fetch the committed offset of subscribed ``tp`` again, as a rebalance that
    gives it back does, through confluent_kafka's own methods on the handle (the group is not told)."""
    if protocol == "range":
        Consumer.assign(c, [tp])  # eager: librdkafka takes only whole assignments
    else:
        Consumer.incremental_unassign(c, [tp])
        Consumer.incremental_assign(c, [tp])


def _subscribed_fetch_fails(
    cluster: Cluster,
    kit: KafkaTestKit,
    c: Consumer,
    got: Received,
    *,
    protocol: Protocol,
    topic: str,
    pumping: Callable[..., object],
) -> int:
    """Subscribe ``c``, read the first DELIVERED records and commit them, move the coordinator, have
    librdkafka fetch the committed offset again (it fails: shown by its error event), then produce
    the rest. Returns how many records ``got`` held before.

    A member that heartbeats between the move and its fetch (KIP-848 members heartbeat every
    0.5 s here; a loaded machine widens the gap) finds the new coordinator first, and its fetch
    succeeds: nothing to show, nothing read (no record is past the committed offset yet). The
    coordinator is then moved again, up to three times."""
    c.subscribe([topic])
    pumping([(c, got)], lambda: len(got.records) == DELIVERED, timeout=60, what="the first records")
    c.commit(offsets=[TopicPartition(topic, 0, DELIVERED)], asynchronous=False)
    start = len(got.records)
    for attempt in range(3):
        cluster.move_coordinator()
        _fetch_committed_again(c, protocol, TopicPartition(topic, 0, OFFSET_INVALID))
        try:
            pumping([(c, got)], lambda: _failed_fetches(got), timeout=15, what="the failed committed-offset fetch")
            break
        except WaitTimeout:
            if attempt == 2:
                raise
    assert len(got.records) == start, "a record past the committed offset was read before it was produced"
    kit.produce(topic, RECORDS - DELIVERED, partitions=1, start=DELIVERED)
    return start


@pytest.mark.kafka_versions
def test_raw_subscribed_partition_never_fetches_after_its_committed_offset_fetch_fails(
    cluster: Cluster, kit: KafkaTestKit
) -> None:
    """Characterization (librdkafka #5586 under subscribe()): the same failure, no retry, nothing fetched."""
    topic, group = kit.create_topic(), kit.name("g")
    kit.produce(topic, DELIVERED, partitions=1)
    c = Consumer(kit.consumer_conf(group, "cooperative-sticky", enable_auto_commit=False, **SLOW_HEARTBEAT))
    got = Received()
    try:
        start = _subscribed_fetch_fails(cluster, kit, c, got, protocol="cooperative-sticky", topic=topic, pumping=pump)
        pump_for([(c, got)], 8.0)
        assert len(got.records) == start, "librdkafka fetched the committed offset again (#5586 fixed?)"
        assert len(_failed_fetches(got)) == 1, f"librdkafka retried the fetch: {got.errors}"
    finally:
        c.close()


def test_under_subscribe_the_stall_guard_starts_a_partition_whose_committed_offset_fetch_failed(
    cluster: Cluster, kit: KafkaTestKit, protocol: Protocol, caplog: pytest.LogCaptureFixture
) -> None:
    """SafeConsumer, subscribed: the error event names the cause, the stall guard assigns the partition
    again without waiting for a second look, and it reads on from its committed offset."""
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, group = kit.create_topic(), kit.name("g")
    kit.produce(topic, DELIVERED, partitions=1)
    slow = SLOW_HEARTBEAT if protocol != "consumer" else {}
    conf = kit.consumer_conf(
        group, protocol, enable_auto_commit=False, socket_timeout_ms=2000, fetch_wait_max_ms=100, **slow
    )
    c = SafeConsumer(conf)
    got = Received()
    try:
        start = _subscribed_fetch_fails(cluster, kit, c, got, protocol=protocol, topic=topic, pumping=checked_pump)
        checked_pump([(c, got)], lambda: RECORDS - 1 in _offsets(got, topic), timeout=60, what="the rest of the topic")
        assert _failed_fetches(got), "the committed-offset fetch did not fail: nothing was shown"
        assert _offsets(got, topic)[start:] == list(range(DELIVERED, RECORDS)), "not read on from the committed offset"
        stalls = [r.getMessage() for r in caplog.records if "stalled" in r.getMessage()]
        assert len(stalls) == 1 and "#5586" in stalls[0] and f"{topic}[0]" in stalls[0], stalls
    finally:
        c.close()
