"""SafeDeserializingShareConsumer against the real broker, in both acknowledgement modes.

Raw ``DeserializingShareConsumer`` first (characterized: a record it cannot deserialize is handed
out with its raw bytes and an error, the rest of the batch deserialized), then ours: the same with
no policy; with ``Skip()`` or ``DeadLetter(...)`` the record is rejected (dead-lettered first) and
never reaches the application.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Consumer, DeserializingShareConsumer, KafkaError, Message, ShareConsumer
from confluent_kafka.serialization import SerializationContext

from safeconsumer import DeadLetter, DeadLetterError, SafeDeserializingShareConsumer, Skip
from safeconsumer.testing import KafkaTestKit, unique_name, wait_until

from ..support import set_group_config

MODES = ("implicit", "explicit")

#: Each runs on Kafka 4.4.0 and on 4.3.1 (brokers upgrade before clients).
pytestmark = [pytest.mark.xdist_group("share-groups"), pytest.mark.kafka_versions]


def _decode(value: bytes | None, _ctx: SerializationContext) -> str:
    if value == b"bad":
        raise ValueError("not a number")
    return (value or b"").decode()


def _conf(kafka: KafkaTestKit, group: str, mode: str) -> dict[str, Any]:
    return {
        **kafka.client_config,
        "group.id": group,
        "share.acknowledgement.mode": mode,
        "value.deserializer": _decode,
    }


def _topic_with_a_bad_record(kafka: KafkaTestKit) -> tuple[str, str]:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest")
    for value in (b"0", b"bad", b"2"):
        kafka.producer.produce(topic, value=value, partition=0)
    assert kafka.producer.flush(30) == 0
    return topic, group


def _read(c: ShareConsumer, count: int, *, ack: bool) -> list[Message]:
    """At least ``count`` records (errors included), each acknowledged in explicit mode when ``ack``
    (a record that could not be deserialized REJECTed, as upstream's docs advise)."""
    got: list[Message] = []

    def step() -> None:
        for m in c.poll(0.5):
            got.append(m)
            if ack:
                c.acknowledge(m, AcknowledgeType.REJECT if m.error() is not None else AcknowledgeType.ACCEPT)

    wait_until(lambda: len(got) >= count, timeout=60, what=f"{count} records", step=step)
    return got


def _values(messages: list[Message]) -> list[Any]:
    return [m.value() if m.error() is None else ("error", m.error().code(), m.value()) for m in messages]  # type: ignore[union-attr]


def _rejected(kafka: KafkaTestKit, c: ShareConsumer, topic: str, group: str, mode: str) -> list[int]:
    """After ``c`` settled its batch and closed: the offsets a new member of the group acquires up to
    a marker produced now (a rejected record is archived, a released one delivered again first)."""
    if mode == "implicit":
        c.poll(0.5)  # coming back accepts (or, for ours, settles) what was handed out
    else:
        c.commit_sync(10.0)
    c.close()
    kafka.producer.produce(topic, value=b"3", partition=0)
    assert kafka.producer.flush(30) == 0
    peer = ShareConsumer({**kafka.client_config, "group.id": group})
    try:
        peer.subscribe([topic])
        seen: list[int] = []

        def step() -> None:
            seen.extend(m.offset() or 0 for m in peer.poll(0.5))

        wait_until(lambda: 3 in seen, timeout=60, what="the marker", step=step)
        return seen
    finally:
        peer.close()


def test_raw_hands_out_a_record_it_cannot_deserialize_with_its_bytes_and_an_error(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    topic, group = _topic_with_a_bad_record(kafka)
    c = DeserializingShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(c)
    c.subscribe([topic])
    got = _read(c, 3, ack=True)
    assert _values(got) == ["0", ("error", KafkaError._VALUE_DESERIALIZATION, b"bad"), "2"]
    assert c.commit_sync(10.0) is not None


@pytest.mark.parametrize("mode", MODES)
def test_without_a_policy_ours_hands_it_out_as_upstream_does(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    topic, group = _topic_with_a_bad_record(kafka)
    c = SafeDeserializingShareConsumer(_conf(kafka, group, mode))
    closing.append(c)
    c.subscribe([topic])
    got = _read(c, 3, ack=mode == "explicit")
    assert _values(got) == ["0", ("error", KafkaError._VALUE_DESERIALIZATION, b"bad"), "2"]
    # Acknowledged like any record: REJECTed by the application in explicit mode, accepted in
    # implicit mode when it comes back. Either way it is settled, never delivered again.
    assert 1 not in _rejected(kafka, c, topic, group, mode)


@pytest.mark.parametrize("mode", MODES)
def test_dead_letter_writes_it_rejects_it_and_the_application_never_sees_it(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = _topic_with_a_bad_record(kafka)
    dlt = kafka.create_topic(partitions=1)
    c = SafeDeserializingShareConsumer(_conf(kafka, group, mode), poison=DeadLetter(dlt))
    closing.append(c)
    c.subscribe([topic])
    got = _read(c, 2, ack=mode == "explicit")
    assert _values(got) == ["0", "2"]
    assert c.poison.dead_lettered == 1
    copy = _read_one(kafka, dlt)
    assert (copy.value(), copy.offset()) == (b"bad", 0)  # the raw bytes, not a deserialized value
    assert any("dead-lettered a record that failed to deserialize" in r.getMessage() for r in caplog.records)
    assert _rejected(kafka, c, topic, group, mode) == [3], "the rejected record was delivered again"


def test_skip_rejects_it_with_a_warning(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = _topic_with_a_bad_record(kafka)
    c = SafeDeserializingShareConsumer(_conf(kafka, group, "implicit"), poison=Skip())
    closing.append(c)
    c.subscribe([topic])
    assert _values(_read(c, 2, ack=False)) == ["0", "2"]
    assert c.poison.skipped == 1
    assert [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()] == [
        f"skipped a record that failed to deserialize: {topic} [0] at offset 1"
        " (confluent_kafka.error.ValueDeserializationError)"
    ]
    assert _rejected(kafka, c, topic, group, "implicit") == [3]


def test_a_dead_letter_topic_that_cannot_be_written_releases_the_whole_batch(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    """S2: poll() raises DeadLetterError and nothing of the batch was handed out: all of it is released
    at once (a peer acquires it, delivery count 2), none of it accepted."""
    topic, group = _topic_with_a_bad_record(kafka)
    missing = kafka.name("dlq")  # not created: the broker does not create topics on its own
    policy = DeadLetter(missing, timeout=3, producer_config={"message.timeout.ms": 2500})
    c = SafeDeserializingShareConsumer(_conf(kafka, group, "implicit"), poison=policy)
    closing.append(c)
    c.subscribe([topic])
    with pytest.raises(DeadLetterError, match=missing):
        wait_until(lambda: bool(c.poll(0.5)), timeout=60, what="a batch")
    peer = ShareConsumer({**kafka.client_config, "group.id": group})
    closing.append(peer)
    peer.subscribe([topic])
    again: list[Message] = []
    wait_until(lambda: len(again) >= 3, timeout=60, what="the batch again", step=lambda: again.extend(peer.poll(0.5)))
    assert sorted((m.offset(), m.delivery_count()) for m in again) == [(0, 2), (1, 2), (2, 2)]


def _read_one(kafka: KafkaTestKit, topic: str) -> Message:
    c = Consumer({**kafka.client_config, "group.id": unique_name("read"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[Message] = []
    try:
        wait_until(
            lambda: got,
            timeout=30,
            what=f"a record of {topic}",
            step=lambda: got.extend(m for m in [c.poll(0.2)] if m is not None and m.error() is None),
        )
    finally:
        c.close()
    return got[0]
