"""What the raw confluent_kafka client does: the problems safeconsumer exists to fix.

These pin down librdkafka's behaviour (FACTS.md). If a confluent-kafka release changes
one of them, the test fails and tells us the library's assumptions need a second look.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from safeconsumer.testing import KafkaTestKit, Protocol

from ..support import Received, pump, pump_for

#: Each runs on Kafka 4.4.0 and on 4.3.1 (brokers upgrade before clients).
pytestmark = pytest.mark.kafka_versions


def _moved_and_stayed(
    kafka: KafkaTestKit, make: Callable[[dict[str, object]], Consumer], protocol: Protocol
) -> tuple[Consumer, Received, str, TopicPartition, TopicPartition]:
    """Member A pauses both partitions; B joins, takes one (M) and leaves; A resumes the other (S)."""
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    a, ra = make(kafka.consumer_conf(group, protocol)), Received()
    a.subscribe([topic])
    pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=30, what="A owns both partitions")
    a.pause(a.assignment())
    b, rb = make(kafka.consumer_conf(group, protocol)), Received()
    b.subscribe([topic])
    members = [(a, ra), (b, rb)]
    pump(members, lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1, timeout=45, what="a split")
    (moved,) = b.assignment()
    (stayed,) = a.assignment()
    b.close()
    pump([(a, ra)], lambda: len(a.assignment()) == 2, timeout=45, what="the moved partition back on A")
    a.resume([TopicPartition(topic, stayed.partition)])
    return a, ra, topic, TopicPartition(topic, moved.partition), TopicPartition(topic, stayed.partition)


def test_raw_pause_is_stale_after_revoke_and_reassign(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """librdkafka keeps the app-pause flag of a partition that left and came back: it never resumes."""
    a, ra, topic, moved, stayed = _moved_and_stayed(kafka, Consumer, protocol)
    try:
        kafka.produce(topic, 20, partitions=[moved.partition, stayed.partition])
        pump([(a, ra)], lambda: (topic, stayed.partition) in ra.partitions(), timeout=30, what="records of S")
        pump_for([(a, ra)], 3.0)
        assert (topic, moved.partition) not in ra.partitions(), "the moved partition was not left paused"
        a.resume([moved])
        pump([(a, ra)], lambda: (topic, moved.partition) in ra.partitions(), timeout=30, what="M after resume")
    finally:
        a.close()


def test_raw_pause_purges_prefetched_records(kafka: KafkaTestKit) -> None:
    """pause() drops what librdkafka already fetched; resume() refetches from the app position."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, 100, partitions=1)
    c = Consumer(kafka.consumer_conf(kafka.name("g"), "range"))
    tp = TopicPartition(topic, 0, 0)
    c.assign([tp])
    got = Received()
    try:
        pump([(c, got)], lambda: got.records, timeout=30, what="the first record")
        # librdkafka fetches in batches: the rest of the 100 records are queued locally now.
        c.pause([TopicPartition(topic, 0)])
        before = len(got.records)
        pump_for([(c, got)], 2.0)
        assert len(got.records) == before, "poll() returned prefetched records of a paused partition"
        c.resume([TopicPartition(topic, 0)])
        pump([(c, got)], lambda: len(got.records) >= 100, timeout=30, what="the rest after resume")
        assert [r[2] for r in got.records] == list(range(100)), "resume must refetch from the app position"
    finally:
        c.close()


def _fill_group(kafka: KafkaTestKit, group: str, topic: str, protocol: Protocol) -> list[tuple[Consumer, Received]]:
    members = []
    for _ in range(2):
        c = Consumer(kafka.consumer_conf(group, protocol))
        c.subscribe([topic])
        members.append((c, Received()))
    pump(members, lambda: all(c.assignment() for c, _ in members), timeout=45, what="two members in the group")
    return members


@pytest.mark.parametrize("protocol", ["range", "cooperative-sticky"])
def test_raw_group_max_size_is_a_repeated_poll_error_under_classic(
    full_group_kafka: KafkaTestKit, protocol: Protocol
) -> None:
    kafka = full_group_kafka
    topic = kafka.create_topic(partitions=3)
    group = kafka.name("g")
    members = _fill_group(kafka, group, topic, protocol)
    third, r3 = Consumer(kafka.consumer_conf(group, protocol)), Received()
    third.subscribe([topic])
    try:
        pump(
            [*members, (third, r3)],
            lambda: sum(e.code() == KafkaError.GROUP_MAX_SIZE_REACHED for e in r3.errors) >= 3,
            timeout=30,
            what="GROUP_MAX_SIZE_REACHED three times",
        )
        assert all(not e.fatal() for e in r3.errors), "classic protocol: the error is not fatal"
        assert third.assignment() == []
    finally:
        for c, _ in [*members, (third, r3)]:
            c.close()


def test_raw_group_max_size_is_a_fatal_event_under_kip848(full_group_kafka: KafkaTestKit) -> None:
    """KIP-848: librdkafka raises a fatal error, which poll() *returns* as a _FATAL event (it does not raise)."""
    kafka = full_group_kafka
    topic = kafka.create_topic(partitions=3)
    group = kafka.name("g")
    members = _fill_group(kafka, group, topic, "consumer")
    third, r3 = Consumer(kafka.consumer_conf(group, "consumer")), Received()
    third.subscribe([topic])
    try:
        pump(
            [*members, (third, r3)],
            lambda: any(e.code() == KafkaError._FATAL for e in r3.errors),
            timeout=30,
            what="a _FATAL event from poll()",
        )
        fatal = next(e for e in r3.errors if e.code() == KafkaError._FATAL)
        assert "maximum size" in fatal.str(), fatal
        assert third.assignment() == []
    finally:
        for c, _ in [*members, (third, r3)]:
            c.close()


# -- record size limits (what the doctor's record_size finding rests on) ----------------------
BIG = 3 << 20  # one record larger than every consumer fetch limit tried below


@pytest.fixture
def big_record_topic(kafka: KafkaTestKit) -> str:
    """A topic allowing 8 MiB records, holding one record of 3 MiB then a small one."""
    topic = kafka.name("big")
    futures = kafka.admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": str(8 << 20)})])
    futures[topic].result()
    kafka.wait_for_partitions(topic, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "message.max.bytes": 8 << 20})
    producer.produce(topic, b"\x00" * BIG, partition=0)
    producer.produce(topic, b"small", partition=0)
    assert producer.flush(30) == 0, "the records were not acked"
    return topic


def _read(conf: dict[str, object], topic: str, seconds: float) -> tuple[list[int], list[KafkaError]]:
    """Sizes of the records read from offset 0 within ``seconds`` (assign, no group), and error_cb's errors."""
    errors: list[KafkaError] = []
    c = Consumer({**conf, "error_cb": errors.append})
    c.assign([TopicPartition(topic, 0, 0)])
    sizes: list[int] = []
    deadline = time.monotonic() + seconds
    try:
        while len(sizes) < 2 and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                sizes.append(len(msg.value() or b""))
    finally:
        c.close()
    return sizes, errors


@pytest.mark.parametrize(
    "limits",
    [
        {"max.partition.fetch.bytes": 65536},
        {"fetch.max.bytes": 1 << 20, "message.max.bytes": 1 << 20},
    ],
    ids=["max.partition.fetch.bytes", "fetch.max.bytes"],
)
def test_raw_record_larger_than_a_fetch_size_limit_is_still_delivered(
    kafka: KafkaTestKit, big_record_topic: str, limits: dict[str, object]
) -> None:
    """Fetch v3+ (KIP-74): the broker returns a first batch larger than either fetch limit; it arrives."""
    conf = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": kafka.name("g"), **limits}
    sizes, _ = _read(conf, big_record_topic, 30)
    assert sizes == [BIG, 5], f"the 3 MiB record and the next one arrive with {limits}"


def test_raw_record_larger_than_receive_message_max_bytes_stalls_the_partition(
    kafka: KafkaTestKit, big_record_topic: str
) -> None:
    """A fetch response above receive.message.max.bytes is refused whole, and re-fetched forever.

    poll() returns nothing (no record, no error event): the only signs are error_cb's _BAD_MSG
    naming receive.message.max.bytes and the connection's reconnects.
    """
    conf = {
        "bootstrap.servers": kafka.bootstrap_servers,
        "group.id": kafka.name("g"),
        "receive.message.max.bytes": 2 << 20,
        "fetch.max.bytes": 1 << 20,
        "message.max.bytes": 1 << 20,
    }
    sizes, errors = _read(conf, big_record_topic, 8)
    assert sizes == [], "no record gets past a response larger than receive.message.max.bytes"
    bad = [e for e in errors if e.code() == KafkaError._BAD_MSG]
    assert len(bad) >= 1 and "receive.message.max.bytes" in bad[0].str(), errors
    assert not any(e.fatal() for e in errors), "the stall is not fatal: it never ends by itself"


def test_raw_receive_message_max_bytes_must_exceed_fetch_max_bytes() -> None:
    """librdkafka refuses a config whose receive limit cannot hold one fetch response."""
    with pytest.raises(KafkaException, match=r"receive.message.max.bytes. must be >= .fetch.max.bytes. \+ 512"):
        Consumer({"group.id": "g", "receive.message.max.bytes": 2 << 20, "fetch.max.bytes": 2 << 20})


def test_raw_static_member_restarted_into_its_full_group_is_refused(
    full_group_kafka: KafkaTestKit, protocol: Protocol, kafka_version: str
) -> None:
    """KAFKA-20601 as Kafka 4.3.1 behaves: a static member restarted while its previous incarnation
    still holds its place is refused by a full group with GROUP_MAX_SIZE_REACHED - under the classic
    protocols too, not only KIP-848 (FACTS.md said KIP-848, fixed 2026-05). Kafka 4.4.0 admits it
    under ``group.protocol=consumer`` (it takes its previous incarnation's place) and still refuses
    it under the classic protocols."""
    kafka = full_group_kafka
    topic, group, instance = kafka.create_topic(partitions=2), kafka.name("g"), kafka.name("w")
    a, ra = Consumer(kafka.consumer_conf(group, protocol)), Received()
    b, rb = Consumer(kafka.consumer_conf(group, protocol, group_instance_id=instance)), Received()
    for c in (a, b):
        c.subscribe([topic])
    pump([(a, ra), (b, rb)], lambda: len(a.assignment()) == 1 == len(b.assignment()), timeout=45, what="a split")
    b.close()
    b, rb = Consumer(kafka.consumer_conf(group, protocol, group_instance_id=instance)), Received()
    b.subscribe([topic])
    try:
        if protocol == "consumer" and kafka_version != "4.3.1":
            pump([(a, ra), (b, rb)], lambda: len(b.assignment()) == 1, timeout=30, what="the restarted member admitted")
            assert rb.errors == [] and len(a.assignment()) == 1
            return
        pump(
            [(a, ra), (b, rb)],
            lambda: any(e.code() in (KafkaError.GROUP_MAX_SIZE_REACHED, KafkaError._FATAL) for e in rb.errors),
            timeout=30,
            what="the restarted static member refused",
        )
        refusal = next(e for e in rb.errors if e.code() in (KafkaError.GROUP_MAX_SIZE_REACHED, KafkaError._FATAL))
        if refusal.code() == KafkaError._FATAL:
            assert protocol == "consumer" and "maximum size" in refusal.str(), refusal
        assert b.assignment() == []
    finally:
        a.close()
        b.close()
