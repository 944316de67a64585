"""SafeConsumer's guarantees through kafka-python's API, against the real broker, every protocol."""

from __future__ import annotations

import functools
import gc
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import ConsumerRebalanceListener, Deserializer, OffsetAndMetadata, TopicPartition
from kafka import errors as kerrors
from kafka.consumer.fetcher import ConsumerRecord

from safeconsumer.kafka_python import KafkaConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

from ..support import FULL_GROUP_LIMITS, full_group, poll_each


def protocol_configs(protocol: Protocol) -> dict[str, Any]:
    """kafka-python configs choosing ``protocol`` (KIP-848 through our ``group_protocol``)."""
    if protocol == "consumer":
        return {"group_protocol": "consumer"}
    return {"partition_assignment_strategy": [protocol], "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


def member(kafka: KafkaTestKit, group: str | None, protocol: Protocol, **configs: Any) -> KafkaConsumer:
    base: dict[str, Any] = {
        "bootstrap_servers": kafka.bootstrap_servers,
        "group_id": group,
        "auto_offset_reset": "earliest",
        "api_version": (4, 0, 0),
    }
    return KafkaConsumer(**{**base, **(protocol_configs(protocol) if group else {}), **configs})


@pytest.fixture
def members() -> Iterator[list[KafkaConsumer]]:
    made: list[KafkaConsumer] = []
    yield made
    for c in made:
        c.close(autocommit=False)


def drain(consumers: list[KafkaConsumer], got: dict[int, list[Any]], *, until: Any, timeout: float, what: str) -> None:
    """Poll every consumer (100 ms) until ``until()``; ``got`` collects each one's records by index."""

    def step() -> None:
        for i, c in enumerate(consumers):
            for batch in c.poll(timeout_ms=100).values():
                got.setdefault(i, []).extend(batch)

    wait_until(until, timeout=timeout, what=what, step=step)


class Upper(Deserializer):  # type: ignore[misc]
    def deserialize(self, topic: str, headers: Any, data: bytes | None) -> Any:
        return None if data is None else data.upper()


def test_poll_returns_kafka_python_records_by_partition(
    kafka: KafkaTestKit, protocol: Protocol, members: list[KafkaConsumer]
) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, 20, partitions=2, headers={"h": b"v"})
    c = member(kafka, kafka.name("g"), protocol, value_deserializer=Upper(), max_poll_records=7)
    members.append(c)
    c.subscribe([topic])
    got: dict[int, list[Any]] = {}
    sizes: list[int] = []

    def step() -> None:
        result = c.poll(timeout_ms=200)
        assert all(isinstance(tp, TopicPartition) for tp in result)
        sizes.append(sum(len(b) for b in result.values()))
        for tp, batch in result.items():
            assert all(r.topic == tp.topic and r.partition == tp.partition for r in batch)
            got.setdefault(0, []).extend(batch)

    wait_until(lambda: len(got.get(0, [])) >= 20, timeout=30, what="20 records", step=step)
    records = got[0]
    assert max(sizes) <= 7, "max_poll_records bounds one poll()"
    assert all(isinstance(r, ConsumerRecord) for r in records)
    r = records[0]
    assert r.value == r.value.upper() and r.key is None and r.serialized_key_size == -1
    assert r.headers == [("h", b"v")] and r.serialized_header_size == len("h") + len(b"v")
    assert r.timestamp_type == 0 and r.timestamp > 0 and r.leader_epoch >= 0
    assert sorted(int(x.value) for x in records) == list(range(20))
    assert c.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    assert c.subscription() == {topic}


def test_a_paused_topic_stays_paused_across_rebalances_and_nothing_is_lost(
    kafka: KafkaTestKit, protocol: Protocol, members: list[KafkaConsumer]
) -> None:
    """kafka-python pauses partitions only, and a rebalance forgets them; pause_topics() is intent (I1, I4)."""
    orders, audit = kafka.create_topic(partitions=2), kafka.create_topic(partitions=2)
    group = kafka.name("g")
    a = member(kafka, group, protocol)
    members.append(a)
    a.subscribe([orders, audit])
    a.pause_topics(audit)
    kafka.produce(orders, 100, partitions=2)
    kafka.produce(audit, 100, partitions=2)
    got: dict[int, list[Any]] = {}
    drain([a], got, until=lambda: len(got.get(0, [])) >= 100, timeout=30, what="A reads orders")
    b = member(kafka, group, protocol)
    members.append(b)
    b.subscribe([orders, audit])
    b.pause_topics(audit)
    drain(
        [a, b],
        got,
        until=lambda: a.assignment() and b.assignment() and len(a.assignment() | b.assignment()) == 4,
        timeout=45,
        what="a split",
    )
    b.close()
    drain([a], got, until=lambda: len(a.assignment()) == 4, timeout=45, what="A owns all again")
    assert all(r.topic == orders for rs in got.values() for r in rs), "a record of the paused topic was returned"
    assert a.paused() == {TopicPartition(audit, 0), TopicPartition(audit, 1)}
    a.resume_topics(audit)
    drain([a], got, until=lambda: sum(r.topic == audit for r in got[0]) >= 100, timeout=30, what="audit after resume")
    assert sorted(int(r.value) for r in got[0] if r.topic == audit) == list(range(100))


def test_a_poll_result_is_stored_only_once_the_application_comes_back(
    kafka: KafkaTestKit, protocol: Protocol, members: list[KafkaConsumer]
) -> None:
    """I8 with kafka-python's batch shape: a process that dies holding a poll() result never
    commits it (auto-commit on); the next member gets every record of it."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, 60, partitions=1)
    group = kafka.name("g")
    a = member(kafka, group, protocol, auto_commit_interval_ms=100, max_poll_records=20)
    a.subscribe([topic])
    got: list[Any] = []
    last: list[Any] = []

    def step() -> None:
        batch = [r for rs in a.poll(timeout_ms=100).values() for r in rs]
        if batch:
            got.extend(batch)
            last[:] = batch

    wait_until(lambda: len(got) >= 30, timeout=30, what="A reads at least two batches", step=step)
    processed = len(got) - len(last)  # A came back after these; the last batch it still holds
    assert processed > 0
    # A dies holding its last batch (the with-block raised, say): what it processed is committed,
    # what it held is not.
    a.close(autocommit=False)
    assert kafka.committed(group, topic, 1)[0] == processed
    b = member(kafka, group, protocol)
    members.append(b)
    b.subscribe([topic])
    again: dict[int, list[Any]] = {}
    drain([b], again, until=lambda: len(again.get(0, [])) >= 60 - processed, timeout=30, what="B reads the rest")
    assert [int(r.value) for r in again[0]] == list(range(processed, 60))


def test_the_listener_gets_kafka_types_and_may_commit_in_revocation(
    kafka: KafkaTestKit, protocol: Protocol, members: list[KafkaConsumer]
) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, 40, partitions=2)
    group = kafka.name("g")
    seen: list[tuple[str, set[Any]]] = []

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def __init__(self, consumer: KafkaConsumer) -> None:
            self.consumer = consumer

        def on_partitions_revoked(self, revoked: set[Any]) -> None:
            seen.append(("revoked", revoked))
            self.consumer.commit()

        def on_partitions_assigned(self, assigned: set[Any]) -> None:
            seen.append(("assigned", assigned))

    a = member(kafka, group, protocol, enable_auto_commit=False)
    members.append(a)
    a.subscribe([topic], listener=Listener(a))
    got: dict[int, list[Any]] = {}
    drain([a], got, until=lambda: len(got.get(0, [])) >= 40, timeout=30, what="A reads everything")
    b = member(kafka, group, protocol, enable_auto_commit=False)
    members.append(b)
    b.subscribe([topic])
    drain([a, b], got, until=lambda: len(b.assignment()) == 1, timeout=45, what="B gets a partition")
    revoked = [tps for kind, tps in seen if kind == "revoked" and tps]
    assert revoked and all(isinstance(tp, TopicPartition) for tps in revoked for tp in tps)
    assert isinstance(seen[0][1], set) and seen[0][0] == "assigned"
    # The revoked partition's processed offset was committed in the listener: B reads nothing of it again.
    assert sum(kafka.committed(group, topic, 2).values()) == 40
    assert not got.get(1)


def test_group_id_none_reads_every_partition_without_a_group(kafka: KafkaTestKit, members: list[KafkaConsumer]) -> None:
    topic = kafka.create_topic(partitions=3)
    kafka.produce(topic, 30, partitions=3)
    c = member(kafka, None, "range")
    members.append(c)
    c.subscribe([topic])
    got: dict[int, list[Any]] = {}
    drain([c], got, until=lambda: len(got.get(0, [])) >= 30, timeout=30, what="30 records")
    assert len(c.assignment()) == 3
    with pytest.raises(kerrors.IllegalStateError):
        c.commit()
    with pytest.raises(kerrors.IllegalStateError):
        c.committed(TopicPartition(topic, 0))


def test_commit_async_resolves_its_future_in_a_later_poll(
    kafka: KafkaTestKit, protocol: Protocol, members: list[KafkaConsumer]
) -> None:
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, 10, partitions=1)
    group = kafka.name("g")
    c = member(kafka, group, protocol, enable_auto_commit=False)
    members.append(c)
    c.subscribe([topic])
    got: dict[int, list[Any]] = {}
    drain([c], got, until=lambda: len(got.get(0, [])) >= 10, timeout=30, what="10 records")
    calls: list[tuple[Any, Any]] = []
    tp = TopicPartition(topic, 0)
    future = c.commit_async({tp: OffsetAndMetadata(7, "note", -1)}, callback=lambda o, r: calls.append((o, r)))
    wait_until(lambda: future.is_done, timeout=15, what="the commit's future", step=lambda: c.poll(timeout_ms=100))
    assert future.succeeded() and calls and calls[0][1] is None
    assert c.committed(tp) == 7
    assert c.committed(tp, metadata=True).metadata == "note"
    assert c.position(tp) == 10


def test_group_max_size_is_fatal_through_this_api(full_group_kafka: KafkaTestKit, protocol: Protocol) -> None:
    kafka = full_group_kafka
    topic, group, others = full_group(kafka, protocol)
    third = member(kafka, group, protocol)
    third.subscribe([topic])
    raised: list[BaseException] = []

    def step() -> None:
        poll_each(others)
        try:
            third.poll(timeout_ms=100)
        except kerrors.GroupMaxSizeReachedError as exc:
            raised.append(exc)

    try:
        wait_until(lambda: raised, timeout=15, what="GroupMaxSizeReachedError", step=step)
        with pytest.raises(kerrors.GroupMaxSizeReachedError):
            third.poll(timeout_ms=0)
    finally:
        third.close()
        for c, _ in others:
            c.close()
    assert FULL_GROUP_LIMITS["group.max.size"] == "2"


def test_a_dropped_consumer_is_freed_where_it_is_dropped(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """I10 through the adapter: no cycle through librdkafka's callbacks, no thread of ours left."""
    topic = kafka.create_topic(partitions=1)
    before = set(threading.enumerate())
    c = member(kafka, kafka.name("g"), protocol)
    c.subscribe([topic])
    wait_until(c.assignment, timeout=30, what="assigned", step=functools.partial(c.poll, timeout_ms=100))
    ref = weakref.ref(c)
    gc.disable()
    try:
        del c
        assert ref() is None, "the dropped KafkaConsumer is still alive"
    finally:
        gc.enable()
    wait_until(
        lambda: not [t for t in set(threading.enumerate()) - before if t.name.startswith("safeconsumer")],
        timeout=15,
        what="safeconsumer threads to end",
    )


class StrictUtf8(Deserializer):  # type: ignore[misc]
    def deserialize(self, topic: str, headers: Any, data: bytes | None) -> Any:
        if data is not None and data.startswith(b"poison"):
            raise ValueError("not a record of ours")
        return None if data is None else data.decode()


def test_a_record_the_deserializer_refuses_is_dead_lettered_through_this_api(
    kafka: KafkaTestKit, protocol: Protocol, members: list[KafkaConsumer]
) -> None:
    from confluent_kafka import Consumer

    from safeconsumer import DeadLetter

    topic, dlq, group = kafka.create_topic(), kafka.create_topic(), kafka.name("g")
    for value in (b"0", b"1", b"poison", b"3"):
        kafka.producer.produce(topic, value=value, partition=0)
    assert kafka.producer.flush(30) == 0
    c = member(kafka, group, protocol, value_deserializer=StrictUtf8(), poison=DeadLetter(dlq))
    members.append(c)
    c.subscribe([topic])
    got: dict[int, list[Any]] = {}
    drain([c], got, until=lambda: len(got.get(0, [])) >= 3, timeout=30, what="3 records")
    assert [r.value for r in got[0]] == ["0", "1", "3"]
    c.close()
    assert kafka.committed(group, topic, 1) == {0: 4}
    reader = Consumer({**kafka.client_config, "group.id": kafka.name("r"), "auto.offset.reset": "earliest"})
    reader.subscribe([dlq])
    dead: list[Any] = []
    try:
        wait_until(
            lambda: dead,
            timeout=30,
            what="the dead-lettered record",
            step=lambda: dead.extend(m for m in [reader.poll(0.2)] if m is not None and m.error() is None),
        )
    finally:
        reader.close()
    assert dead[0].value() == b"poison"
    assert dict(dead[0].headers())["safeconsumer.dlt.original.offset"] == b"2"


def test_keepalive_through_this_api_keeps_a_busy_member_in_its_group(
    kafka: KafkaTestKit, protocol: Protocol, members: list[KafkaConsumer]
) -> None:
    """I5: work over twice as long as max_poll_interval_ms inside keepalive(); the peer sees no rebalance."""
    import time

    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    kafka.produce(topic, 40, partitions=2)
    short: dict[str, Any] = {"max_poll_interval_ms": 6000}  # the kit's session: load must not evict
    seen: list[str] = []

    class Watch(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: set[Any]) -> None:
            seen.append("revoked")

        def on_partitions_assigned(self, assigned: set[Any]) -> None:
            seen.append("assigned")

    a, b = member(kafka, group, protocol, **short), member(kafka, group, protocol, **short)
    members.extend([a, b])
    a.subscribe([topic])
    b.subscribe([topic], listener=Watch())
    got: dict[int, list[Any]] = {}
    drain([a, b], got, until=lambda: len(got.get(0, [])) + len(got.get(1, [])) >= 40, timeout=45, what="40 records")
    drain([a, b], got, until=lambda: len(a.assignment()) == 1 == len(b.assignment()), timeout=45, what="a split")
    before, mine = list(seen), a.assignment()

    def work() -> None:
        with a.keepalive():
            time.sleep(13)  # the long work itself, over 2 x max_poll_interval_ms

    worker = threading.Thread(target=work)
    worker.start()
    while worker.is_alive():
        for batch in b.poll(timeout_ms=100).values():
            got.setdefault(1, []).extend(batch)
    worker.join()
    drain([a, b], got, until=lambda: True, timeout=5, what="one more poll each")
    assert seen == before, f"the peer saw a rebalance while A worked: {seen[len(before) :]}"
    assert a.assignment() == mine


def test_telemetry_through_this_api(kafka: KafkaTestKit, protocol: Protocol, members: list[KafkaConsumer]) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    topic = kafka.create_topic()
    kafka.produce(topic, 10, partitions=1)
    reader = InMemoryMetricReader()
    c = member(kafka, kafka.name("g"), protocol, meter_provider=MeterProvider(metric_readers=[reader]))
    members.append(c)
    c.subscribe([topic])
    got: dict[int, list[Any]] = {}
    drain([c], got, until=lambda: len(got.get(0, [])) >= 10, timeout=30, what="10 records")
    c.poll(timeout_ms=0)  # come back after them
    data = reader.get_metrics_data()
    assert data is not None
    values = {
        m.name: sum(p.value for p in m.data.data_points)  # type: ignore[union-attr,misc]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert values.get("safeconsumer.rebalances", 0) >= 1
    assert values.get("messaging.client.consumed.messages", 0) >= 10
