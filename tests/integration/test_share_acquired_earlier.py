"""S3 for records whose locks started before ``poll()`` returned them.

librdkafka's share consumer fetches only from inside a poll, one fetch at a time, and a poll that
returns empty leaves one in flight. The broker acquires what that fetch finds when it answers; the
records then wait in librdkafka's queue, their locks running, until the next poll hands them out
at once. Characterized first (raw ``ShareConsumer``), then SafeShareConsumer: a batch whose locks
are past their release point when it comes is given back whole, never processed after its locks;
one that comes within the lock is handed out; and a long ``poll(timeout)`` on a quiet topic does
not count its whole wait against the batch it finally returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, ShareConsumer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from safeconsumer.share import SafeShareConsumer
from safeconsumer.testing import KafkaTestKit, wait_until

from ..cluster import Cluster, running_cluster
from ..support import set_group_config

MODES = ("implicit", "explicit")
#: The groups' acquisition lock: records are given back at ¾ of it (2.25 s).
LOCK_MS = 3000

#: As test_share_groups: one worker runs them one after the other, on Kafka 4.4.0 and on 4.3.1.
pytestmark = [pytest.mark.xdist_group("share-groups"), pytest.mark.kafka_versions]


def _conf(kafka: KafkaTestKit, group: str, mode: str) -> dict[str, Any]:
    return {**kafka.client_config, "group.id": group, "share.acknowledgement.mode": mode}


def _records(messages: Any) -> list[Message]:
    return [m for m in messages if m.error() is None]


def _group(kafka: KafkaTestKit) -> tuple[str, str]:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=str(LOCK_MS))
    return topic, group


def _joined_and_idle(c: ShareConsumer) -> None:
    """Poll the empty topic until the member has joined and a fetch of its own came back empty."""
    joined = time.monotonic()
    wait_until(lambda: time.monotonic() - joined > 3, timeout=10, what="the member joined", step=lambda: c.poll(0.2))


def _in_flight_then_late(kafka: KafkaTestKit, c: ShareConsumer, topic: str) -> float:
    """An empty poll leaves a fetch in flight; records come at once; the application does other work
    past the lock before it polls again. Returns when the records were produced."""
    assert not _records(c.poll(0.05)), "the topic is empty: the poll returns nothing and leaves its fetch"
    kafka.produce(topic, 10, partitions=1)
    produced = time.monotonic()
    wait_until(lambda: time.monotonic() - produced > 4.0, timeout=10, what="other work, past the 3 s lock")
    return produced


@pytest.mark.parametrize("mode", MODES)
def test_raw_records_a_fetch_left_in_flight_acquired_are_handed_out_past_their_locks(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    """The next poll returns them at once, on their first delivery, 4 s after the broker acquired
    them under a 3 s lock; acknowledging them fails (INVALID_RECORD_STATE): the application
    processed records another member may have had."""
    topic, group = _group(kafka)
    c = ShareConsumer(_conf(kafka, group, mode))
    closing.append(c)
    c.subscribe([topic])
    _joined_and_idle(c)
    _in_flight_then_late(kafka, c, topic)
    started = time.monotonic()
    got = _records(c.poll(1.0))
    took = time.monotonic() - started
    assert got and took < 0.5, f"the records waited in librdkafka's queue: {len(got)} in {took:.3f} s"
    assert {m.delivery_count() for m in got} == {1}
    if mode == "explicit":
        for m in got:
            c.acknowledge(m)
    result = c.commit_sync(10)
    errors = [exc for exc in result.values() if exc is not None]
    assert len(errors) == 1 and errors[0].args[0].code() == KafkaError.INVALID_RECORD_STATE, result


def _idle_member(kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str) -> tuple[SafeShareConsumer, str]:
    """A SafeShareConsumer of a new group on a new empty topic, the group's lock read, joined and idle."""
    topic, group = _group(kafka)
    c = SafeShareConsumer(_conf(kafka, group, mode))
    closing.append(c)
    c.subscribe([topic])
    wait_until(lambda: c.group_settings.lock_ms == LOCK_MS, timeout=15, what="the group's lock read")
    _joined_and_idle(c)
    return c, topic


def _settled_in_time(c: SafeShareConsumer, got: list[Message], mode: str) -> None:
    """Acknowledge ``got`` (explicit mode) and commit: every acknowledgement holds."""
    if mode == "explicit":
        for m in got:
            c.acknowledge(m)
    result = c.commit_sync(10)
    assert all(exc is None for exc in result.values()), result


@pytest.fixture(scope="module")
def cluster(kafka_version: str) -> Iterator[Cluster]:
    with running_cluster(version=kafka_version) as c:
        yield c


def test_raw_a_poll_that_returned_records_left_no_fetch_in_flight(cluster: Cluster, closing: list[Any]) -> None:
    """What the timing rests on: librdkafka fetches from one broker at a time. Records wait on two
    partitions led by different brokers; after a poll returned one broker's, the poll 4 s later
    (past the 3 s lock) returns the other's, fetched then: their acknowledgements hold."""
    kafka = KafkaTestKit(cluster.bootstrap_servers, prefix="one-fetch")
    closing.append(kafka)
    topic, group = kafka.name("t"), kafka.name("g")
    kafka.admin.create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=-1, replica_assignment=[[1], [2]])]
    )[topic].result(30)
    kafka.wait_for_partitions(topic, 2)
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=str(LOCK_MS))
    kafka.produce(topic, 40, partitions=2)
    c = ShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(c)
    c.subscribe([topic])
    first: list[Message] = []
    wait_until(lambda: first, timeout=60, what="a first batch", step=lambda: first.extend(_records(c.poll(0.5))))
    assert len({m.partition() for m in first}) == 1, "one poll, one broker's records"
    for m in first:
        c.acknowledge(m)
    returned = time.monotonic()
    wait_until(lambda: time.monotonic() - returned > 4.0, timeout=10, what="other work, past the 3 s lock")
    second = _records(c.poll(5.0))
    assert second and {m.partition() for m in second}.isdisjoint({m.partition() for m in first})
    assert {m.delivery_count() for m in second} == {1}
    for m in second:
        c.acknowledge(m)
    result = c.commit_sync(10)
    assert all(exc is None for exc in result.values()), f"the second broker's records were acquired earlier: {result}"


@pytest.mark.parametrize("mode", MODES)
def test_a_batch_acquired_past_its_release_point_is_given_back_unprocessed(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """S3: the poll hands out none of it and gives it all back with a WARNING; the next polls get
    the records again (second delivery), fresh, and their acknowledgements hold."""
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    c, topic = _idle_member(kafka, closing, mode)
    _in_flight_then_late(kafka, c, topic)
    assert not _records(c.poll(1.0)), "records acquired 4 s ago under a 3 s lock were handed out"
    assert c.released_early == 10
    warned = [r.getMessage() for r in caplog.records if "acquired" in r.getMessage()]
    assert len(warned) == 1 and "gave back 10 record(s) unprocessed" in warned[0], warned
    got: list[Message] = []

    def step() -> None:
        for m in _records(c.poll(0.5)):
            got.append(m)
            if mode == "explicit":
                c.acknowledge(m)

    wait_until(lambda: len(got) >= 10, timeout=30, what="the records again", step=step)
    assert sorted(m.offset() or 0 for m in got) == list(range(10))
    assert {m.delivery_count() for m in got} == {2}
    _settled_in_time(c, [], mode)  # (acknowledged as they came)
    assert c.lock_overruns == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_batch_acquired_within_its_lock_is_handed_out(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    """The same sequence, the application back after 1 s: the records are handed out (first
    delivery) and their acknowledgements hold."""
    c, topic = _idle_member(kafka, closing, mode)
    assert not _records(c.poll(0.05))
    kafka.produce(topic, 10, partitions=1)
    produced = time.monotonic()
    wait_until(lambda: time.monotonic() - produced > 1.0, timeout=5, what="other work, within the lock")
    got = _records(c.poll(1.0))
    assert sorted(m.offset() or 0 for m in got) == list(range(10)) and {m.delivery_count() for m in got} == {1}
    _settled_in_time(c, got, mode)
    assert c.released_early == 0 and c.lock_overruns == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_long_poll_on_a_quiet_topic_does_not_count_its_wait_against_the_batch(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    """``poll(10)`` whose records come 4 s into the call (longer than the 3 s lock): they are handed
    out, not given back as if acquired when the call began."""
    c, topic = _idle_member(kafka, closing, mode)
    later = threading.Timer(4.0, kafka.produce, args=(topic, 10), kwargs={"partitions": 1})
    later.start()
    try:
        started = time.monotonic()
        got = _records(c.poll(10.0))
        took = time.monotonic() - started
    finally:
        later.join()
    assert took > 3.5 and got, f"{len(got)} record(s) after {took:.1f} s"
    assert {m.delivery_count() for m in got} == {1} and c.released_early == 0
    _settled_in_time(c, got, mode)
