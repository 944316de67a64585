"""The share group's own dead-letter queue in the broker (KIP-1191, Kafka 4.4), raw then SafeShareConsumer.

Characterization first (raw ``confluent_kafka.ShareConsumer``, explicit mode): what Kafka 4.4.0
copies to a group's DLQ and how (a REJECT, a record past the delivery limit, what a SIGKILLed member
held on its last delivery, headers only without ``copy.record.enable``), the two misconfigurations
that archive records without a copy and without a word to any client (a topic not enabled for
groups, a name without the brokers' ``dlq.`` prefix), and Kafka 4.3.1 refusing the group config.
Then SafeShareConsumer (S4) relying on the broker's DLQ where it can, in both acknowledgement modes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Message, ShareConsumer

from safeconsumer import DeadLetter
from safeconsumer.health.dead_letters import read_dead_letters, replay
from safeconsumer.share import SafeShareConsumer
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


def _failed_writes(broker: Any) -> int:
    """How many DLQ writes the broker logged as failed ("Failed to write to DLQ") so far."""
    return str(broker.log_path.read_text(errors="replace")).count("Failed to write to DLQ")


def _five_records_with_a_broker_dlq(kafka: KafkaTestKit) -> tuple[str, str, str]:
    """A topic holding 5 records in one batch, and a group (lock 2 s, limit 2, from the earliest
    record) whose broker DLQ is usable: (topic, group, DLQ topic)."""
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
    return topic, group, dlq


def _marker_read(
    kafka: KafkaTestKit, c: ShareConsumer, topic: str, at: int, seen: list[Message], *, explicit: bool = True
) -> None:
    """Produce a marker at offset ``at`` and poll ``c`` (accepting) until it comes; what else comes is in ``seen``."""
    kafka.produce(topic, 1, partitions=1, start=at)
    marker: list[Message] = []

    def step() -> None:
        for m in _records(c.poll(0.5)):
            (marker if m.offset() == at else seen).append(m)
            if explicit:
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
    topic, group, dlq = _five_records_with_a_broker_dlq(kafka)
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


# -- SafeShareConsumer ------------------------------------------------------------------------------


def _safe(
    kafka: KafkaTestKit, group: str, mode: str, dlq: str, closing: list[ShareConsumer], **options: Any
) -> SafeShareConsumer:
    c = SafeShareConsumer(_conf(kafka, group, mode), poison=DeadLetter(dlq, retries=0), **options)
    closing.append(c)
    return c


def _fails_on_zero(m: Message) -> None:
    if m.offset() == 0:
        raise ValueError("offset 0 always fails")


def _handle_until(c: SafeShareConsumer, n: int) -> list[Message]:
    """Poll ``c`` and ``handle()`` each record with :func:`_fails_on_zero` until ``n`` were handled."""
    got: list[Message] = []

    def step() -> None:
        for m in _records(c.poll(0.5)):
            got.append(m)
            c.handle(m, _fails_on_zero)
        c.commit_sync(10)

    wait_until(lambda: len(got) >= n, timeout=60, what=f"{n} records handled", step=step)
    return got


@pytest.mark.kafka_versions("4.4.0")
@pytest.mark.parametrize("mode", MODES)
def test_the_broker_copies_what_fails_and_the_consumer_copies_nothing(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """S4 with the broker's DLQ: of 5 records on their last delivery (limit 2), the one that fails is
    rejected and copied once, by the broker; the 4 good ones are never copied (no "may be processed"
    copies), and ``dead-letters`` reads the broker's copy."""
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(
        kafka,
        group,
        share_auto_offset_reset="earliest",
        share_delivery_count_limit="2",
        share_record_lock_duration_ms=LONG_LOCK,
    )
    dlq = broker_dlq(kafka, group)
    _one_batch(kafka, topic, 5)
    first = ShareConsumer(_conf(kafka, group))  # takes the batch and gives it back: the next delivery is the last
    first.subscribe([topic])
    taken: list[Message] = []
    wait_until(
        lambda: taken, timeout=60, what="the first delivery", step=lambda: taken.extend(_records(first.poll(0.5)))
    )
    for m in taken:
        first.acknowledge(m, AcknowledgeType.RELEASE)
    first.commit_sync(10)
    first.close()
    c = _safe(kafka, group, mode, dlq, closing)
    c.subscribe([topic])
    assert "the broker writes the dead-letter copies" in caplog.text  # settled before subscribe() returned
    again = _handle_until(c, 5)  # the last deliveries
    assert {m.delivery_count() for m in again} == {2}
    (copy,) = _copies(kafka, dlq, 1)
    assert _headers(copy)["__dlq.errors.offset"] == "0" and copy.value() == b"0"
    assert not any(k.startswith("safeconsumer.") for k in _headers(copy))
    ((view, _m),) = read_dead_letters(kafka.client_config, dlq, 20)
    assert (view.original_topic, view.original_offset, view.group) == (topic, 0, group)
    assert view.stage == "rejected" and view.by_broker and not view.may_be_processed
    seen: list[Message] = []
    _marker_read(kafka, c, topic, 5, seen, explicit=mode == "explicit")
    assert seen == [] and kafka.end_offsets(dlq) == {0: 1}, "one copy, and nothing handed out again"
    assert replay(kafka.client_config, [(view, _m)], 10) == 1
    ((_v, back),) = [(v, m) for v, m in read_dead_letters(kafka.client_config, topic, 20) if m.offset() == 6]
    assert back.value() == b"0" and back.key() == b"k0" and back.headers() is None, "replayed without __dlq headers"


@pytest.mark.kafka_versions("4.4.0")
def test_a_sigkilled_safe_member_loses_nothing_with_the_broker_dlq(kafka: KafkaTestKit) -> None:
    """The window "Not yet" listed on 4.3 closes: SafeShareConsumer members SIGKILLed holding records
    (the second on their last delivery) leave the copies to the broker, one per record."""
    topic, group, dlq = _five_records_with_a_broker_dlq(kafka)
    kill_after(start_share_member(kafka, topic, group, safe=dlq), 5, delivery=1)
    kill_after(start_share_member(kafka, topic, group, safe=dlq), 5, delivery=2)
    copies = _copies(kafka, dlq, 5)
    assert sorted(int(_headers(m)["__dlq.errors.offset"]) for m in copies) == list(range(5))
    assert kafka.end_offsets(dlq) == {0: 5}


@pytest.mark.kafka_versions("4.4.0")
@pytest.mark.parametrize("wrong", ["topic not enabled for groups", "name without the dlq. prefix", "headers only"])
def test_a_broker_dlq_that_cannot_copy_is_reported_and_the_consumer_copies_itself(
    kafka: KafkaTestKit, kafka_broker: Any, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture, wrong: str
) -> None:
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    if wrong == "topic not enabled for groups":
        dlq, fix = broker_dlq(kafka, group, enabled=False), "errors.deadletterqueue.group.enable=true"
    elif wrong == "headers only":
        dlq, fix = broker_dlq(kafka, group, copy_record=False), "errors.deadletterqueue.copy.record.enable=true"
    else:
        dlq, fix = broker_dlq(kafka, group, topic=kafka.name("no-prefix")), "errors.deadletterqueue.topic.name.prefix"
    _one_batch(kafka, topic, 2)
    failed_before = _failed_writes(kafka_broker)
    c = _safe(kafka, group, "explicit", dlq, closing)
    c.subscribe([topic])
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "not relied on" in r.getMessage()
    ]
    assert len(warnings) == 1 and fix in warnings[0], caplog.text
    _handle_until(c, 2)
    (copy,) = _copies(kafka, dlq, 1)
    assert _headers(copy)["safeconsumer.dlt.original.offset"] == "0"
    if wrong == "headers only":  # the broker also copies what the consumer rejects: its headers
        wait_until(lambda: kafka.end_offsets(dlq) == {0: 2}, timeout=60, what="the broker's headers-only copy")
    else:  # the broker's own attempt at the REJECT fails (logged), and writes nothing
        wait_until(
            lambda: _failed_writes(kafka_broker) > failed_before, timeout=60, what="the broker's failed DLQ write"
        )
        assert kafka.end_offsets(dlq) == {0: 1}


@pytest.mark.kafka_versions("4.4.0")
def test_group_dlq_makes_the_topic_the_dlq_of_a_new_group_only(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, new, live = kafka.create_topic(partitions=1), kafka.name("new"), kafka.name("live")
    dlq = f"dlq.{kafka.name('d')}"
    kafka.create_topic(dlq, config={"errors.deadletterqueue.group.enable": "true"})
    c = _safe(kafka, new, "implicit", dlq, closing, group_dlq=True)
    c.subscribe([topic])
    assert c.group_settings.dlq.topic == dlq and c.group_settings.dlq.copy_record
    assert c.dead_letters_by_broker
    other = broker_dlq(kafka, live)
    d = _safe(kafka, live, "implicit", dlq, closing, group_dlq=True)
    d.subscribe([topic])
    assert f"has the dead-letter queue {other!r}; group_dlq=True was not applied" in caplog.text
    assert d.group_settings.dlq.topic == other and not d.dead_letters_by_broker


@pytest.mark.kafka_versions("4.3.1")
def test_on_kafka_4_3_the_consumer_copies_itself_and_group_dlq_says_why_not(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, group, dlt = kafka.create_topic(partitions=1), kafka.name("g"), kafka.create_topic(partitions=1)
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    _one_batch(kafka, topic, 2)
    c = _safe(kafka, group, "explicit", dlt, closing, group_dlq=True)
    c.subscribe([topic])
    assert "the cluster has no share-group dead-letter queue" in caplog.text
    _handle_until(c, 2)
    (copy,) = _copies(kafka, dlt, 1)
    assert _headers(copy)["safeconsumer.dlt.original.offset"] == "0"


def test_group_dlq_needs_a_dead_letter_policy(kafka: KafkaTestKit) -> None:
    conf = _conf(kafka, kafka.name("g"))
    with pytest.raises(ValueError, match=r"group_dlq=True needs poison=DeadLetter\(topic\)"):
        SafeShareConsumer(conf, group_dlq=True)
    with pytest.raises(TypeError, match="group_dlq must be a bool, not str"):
        SafeShareConsumer(conf, poison=DeadLetter("dlq.x"), group_dlq="yes")  # type: ignore[arg-type]
