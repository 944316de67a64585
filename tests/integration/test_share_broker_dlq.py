"""The share group's own dead-letter queue in the broker (KIP-1191, Kafka 4.4), raw then SafeShareConsumer.

Characterization first (raw ``confluent_kafka.ShareConsumer``, explicit mode): what Kafka 4.4.0
copies to a group's DLQ and how (a REJECT, a record past the delivery limit, what a SIGKILLed member
held on its last delivery, headers only without ``copy.record.enable``), the two misconfigurations
that archive records without a copy and without a word to any client (a topic not enabled for
groups, a name without the brokers' ``dlq.`` prefix), and Kafka 4.3.1 refusing the group config.
Then SafeShareConsumer (S4) relying on the broker's DLQ where it can, in both acknowledgement modes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Message, ShareConsumer

from safeconsumer.health.dead_letters import read_dead_letters
from safeconsumer.testing import KafkaTestKit, wait_until

from ..support import broker_dlq, kill_after, set_group_config, start_share_member

MODES = ("implicit", "explicit")

pytestmark = pytest.mark.xdist_group("share-groups")

#: Long enough that no lock runs out unless the test means it to.
LONG_LOCK = "60000"


def _conf(kafka: KafkaTestKit, group: str, mode: str = "explicit") -> dict[str, Any]:
    return {**kafka.client_config, "group.id": group, "share.acknowledgement.mode": mode}


def _records(messages: Iterable[Message]) -> list[Message]:
    return [m for m in messages if m.error() is None]


def _one_batch(kafka: KafkaTestKit, topic: str, n: int) -> None:
    """``n`` records (keys ``k<i>``, values ``b"<i>"``) in one record batch of partition 0."""
    for i in range(n):
        kafka.producer.produce(topic, key=f"k{i}".encode(), value=str(i).encode(), partition=0, headers=[("h", b"x")])
    kafka.producer.flush(30)


def _copies(kafka: KafkaTestKit, dlq: str, n: int, *, timeout: float = 60) -> list[Message]:
    """The first ``n`` records of ``dlq`` once it holds ``n`` (waited for: the broker writes after the ack)."""
    wait_until(lambda: sum(kafka.end_offsets(dlq).values()) >= n, timeout=timeout, what=f"{n} copies in {dlq}")
    return [m for _view, m in read_dead_letters(kafka.client_config, dlq, 20)][:n]


def _headers(m: Message) -> dict[str, str]:
    raw: Any = m.headers() or []
    return {k: v.decode() for k, v in raw if isinstance(v, bytes)}


def _marker_read(kafka: KafkaTestKit, c: ShareConsumer, topic: str, at: int, seen: list[Message]) -> None:
    """Produce a marker at offset ``at`` and poll ``c`` (accepting) until it comes; what else comes is in ``seen``."""
    kafka.produce(topic, 1, partitions=1, start=at)
    marker: list[Message] = []

    def step() -> None:
        for m in _records(c.poll(0.5)):
            (marker if m.offset() == at else seen).append(m)
            c.acknowledge(m)
        c.commit_sync(10)

    wait_until(lambda: marker, timeout=60, what="the marker read", step=step)


# -- characterization: raw ShareConsumer -------------------------------------------------------------


@pytest.mark.kafka_versions("4.4.0")
def test_raw_broker_dlq_copies_a_rejected_record_and_one_past_the_limit(
    kafka: KafkaTestKit, kafka_version: str, closing: list[ShareConsumer]
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_delivery_count_limit="2")
    dlq = broker_dlq(kafka, group)
    _one_batch(kafka, topic, 3)
    c = ShareConsumer(_conf(kafka, group))
    closing.append(c)
    c.subscribe([topic])
    counts: dict[int, list[int]] = {}
    produced_at = time.time() * 1000

    def step() -> None:
        for m in _records(c.poll(0.5)):
            counts.setdefault(m.offset() or 0, []).append(m.delivery_count() or 0)
            kind = {0: AcknowledgeType.REJECT, 1: AcknowledgeType.RELEASE}.get(m.offset() or 0, AcknowledgeType.ACCEPT)
            c.acknowledge(m, kind)
        c.commit_sync(10)

    wait_until(lambda: len(counts.get(1, [])) >= 2, timeout=60, what="offset 1 released twice", step=step)
    rejected, archived = sorted(_copies(kafka, dlq, 2), key=lambda m: _headers(m)["__dlq.errors.offset"])
    assert counts == {0: [1], 1: [1, 2], 2: [1]}
    for copy, offset, count, why in ((rejected, 0, 1, "Offset rejected by client."), (archived, 1, 2, "exceeded")):
        assert copy.value() == str(offset).encode() and copy.key() == f"k{offset}".encode()
        headers = _headers(copy)
        assert "h" not in headers, "Kafka 4.4.0 leaves the record's own headers out of its copy"
        assert headers["__dlq.errors.topic"] == topic and headers["__dlq.errors.partition"] == "0"
        assert headers["__dlq.errors.offset"] == str(offset) and headers["__dlq.errors.group"] == group
        assert headers["__dlq.errors.delivery.count"] == str(count) and why in headers["__dlq.errors.message"]
        assert copy.timestamp()[1] >= produced_at, "the copy's timestamp is when the broker wrote it"


@pytest.mark.kafka_versions("4.4.0")
def test_raw_broker_dlq_copies_what_a_sigkilled_member_held_on_its_last_delivery(kafka: KafkaTestKit) -> None:
    """No client alive: a member SIGKILLed holding 5 records on their first delivery, the next one
    SIGKILLed holding them on their last (limit 2): the broker copies all 5 when their locks run out."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(
        kafka,
        group,
        share_auto_offset_reset="earliest",
        share_delivery_count_limit="2",
        share_record_lock_duration_ms="2000",
    )
    dlq = broker_dlq(kafka, group)
    _one_batch(kafka, topic, 5)
    assert sorted(kill_after(start_share_member(kafka, topic, group), 5, delivery=1)) == [(i, 1) for i in range(5)]
    assert sorted(kill_after(start_share_member(kafka, topic, group), 5, delivery=2)) == [(i, 2) for i in range(5)]
    copies = _copies(kafka, dlq, 5)
    assert sorted(int(_headers(m)["__dlq.errors.offset"]) for m in copies) == list(range(5))
    assert {_headers(m)["__dlq.errors.delivery.count"] for m in copies} == {"2"}


@pytest.mark.kafka_versions("4.4.0")
def test_raw_broker_dlq_without_copy_record_writes_headers_only(
    kafka: KafkaTestKit, kafka_version: str, closing: list[ShareConsumer]
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest")
    dlq = broker_dlq(kafka, group, copy_record=False)
    _one_batch(kafka, topic, 1)
    c = ShareConsumer(_conf(kafka, group))
    closing.append(c)
    c.subscribe([topic])

    def step() -> None:
        for m in _records(c.poll(0.5)):
            c.acknowledge(m, AcknowledgeType.REJECT)
        c.commit_sync(10)

    wait_until(lambda: sum(kafka.end_offsets(dlq).values()) >= 1, timeout=60, what="the copy", step=step)
    (copy,) = _copies(kafka, dlq, 1)
    assert copy.value() is None and copy.key() is None
    assert _headers(copy)["__dlq.errors.offset"] == "0"


@pytest.mark.kafka_versions("4.4.0")
@pytest.mark.parametrize("wrong", ["topic not enabled for groups", "name without the dlq. prefix"])
def test_raw_misconfigured_broker_dlq_archives_without_a_copy_or_a_word(
    kafka: KafkaTestKit, kafka_version: str, kafka_broker: Any, closing: list[ShareConsumer], wrong: str
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest")
    if wrong == "topic not enabled for groups":
        dlq = broker_dlq(kafka, group, enabled=False)
    else:
        dlq = broker_dlq(kafka, group, topic=kafka.name("no-prefix"))
    _one_batch(kafka, topic, 1)
    c = ShareConsumer(_conf(kafka, group))
    closing.append(c)
    c.subscribe([topic])
    answers: list[Any] = []

    def step() -> None:
        for m in _records(c.poll(0.5)):
            c.acknowledge(m, AcknowledgeType.REJECT)
            answers.append(c.commit_sync(10))

    wait_until(lambda: answers, timeout=60, what="the REJECT sent", step=step)
    assert all(exc is None for exc in answers[0].values()), answers  # the client hears of nothing
    expected = "DLQ is not enabled" if wrong == "topic not enabled for groups" else "does not comply with the DLQ"

    def logged() -> bool:
        return expected in kafka_broker.log_path.read_text(errors="replace")

    wait_until(logged, timeout=60, what=f"the broker's log of the failed write ({expected!r})")
    assert kafka.end_offsets(dlq) == {0: 0}
    seen: list[Message] = []
    _marker_read(kafka, c, topic, 1, seen)
    assert seen == [], "the rejected record is archived: never handed out again"


@pytest.mark.kafka_versions("4.3.1")
def test_raw_kafka_4_3_refuses_the_group_dlq_config(kafka: KafkaTestKit, kafka_version: str) -> None:
    with pytest.raises(KafkaException, match=r"Unknown group config name: errors\.deadletterqueue\.topic\.name"):
        set_group_config(kafka, kafka.name("g"), errors_deadletterqueue_topic_name="dlq.x")


@pytest.mark.kafka_versions
def test_raw_records_on_their_last_delivery_come_one_per_fetch(
    kafka: KafkaTestKit, kafka_version: str, closing: list[ShareConsumer]
) -> None:
    """6 records of one batch released to their last delivery (limit 3) come back one per poll, on
    4.3.1 and on 4.4.0 (broker WARN "should be delivered alone in this fetch")."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(
        kafka,
        group,
        share_auto_offset_reset="earliest",
        share_delivery_count_limit="3",
        share_record_lock_duration_ms=LONG_LOCK,
    )
    _one_batch(kafka, topic, 6)
    c = ShareConsumer(_conf(kafka, group))
    closing.append(c)
    c.subscribe([topic])
    polls: list[list[tuple[int, int]]] = []

    def step() -> None:
        got = _records(c.poll(0.5))
        if got:
            polls.append([(m.offset() or 0, m.delivery_count() or 0) for m in got])
        for m in got:
            last = (m.delivery_count() or 0) >= 3
            c.acknowledge(m, AcknowledgeType.ACCEPT if last else AcknowledgeType.RELEASE)
        c.commit_sync(10)

    wait_until(
        lambda: sum(1 for p in polls for _o, d in p if d == 3) >= 6, timeout=90, what="6 last deliveries", step=step
    )
    last = [p for p in polls if any(d == 3 for _o, d in p)]
    assert [len(p) for p in last] == [1] * 6, polls
