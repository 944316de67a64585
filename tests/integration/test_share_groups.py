"""Share groups (KIP-932): what raw ``confluent_kafka.ShareConsumer`` does, then ``SafeShareConsumer``.

Characterization first (Kafka 4.3.1, confluent-kafka 2.16.1), each the way the issue measured it:
a new group skips what its topic already holds, a lock that runs out during long work hands the
records to a peer while the first member is told its acknowledgement succeeded, a record released
up to the delivery count limit is archived without a trace, and ``close()`` in implicit mode gives
an unfinished batch back. Then SafeShareConsumer's start (S5) and lock overruns (S3), in both
acknowledgement modes.

The test brokers allow short locks (``group.share.min.record.lock.duration.ms``); each test sets
its group's own settings through the admin API.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, Message, ShareConsumer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from safeconsumer.share import LockExpiredError, SafeShareConsumer
from safeconsumer.testing import KafkaTestKit, wait_until

MODES = ("implicit", "explicit")


def _set_group(kafka: KafkaTestKit, group: str, **settings: str) -> None:
    """Set share-group configs (``share_record_lock_duration_ms="2000"`` for the dotted name)."""
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    kafka.admin.incremental_alter_configs([resource])[resource].result(timeout=15)


def _conf(kafka: KafkaTestKit, group: str, mode: str = "implicit") -> dict[str, Any]:
    return {**kafka.client_config, "group.id": group, "share.acknowledgement.mode": mode}


@pytest.fixture
def closing() -> Iterator[list[ShareConsumer]]:
    """Share consumers a test made, closed at its end (each at most once)."""
    made: list[ShareConsumer] = []
    yield made
    for c in made:
        with contextlib.suppress(Exception):  # closed already by the test
            c.close()


def _records(messages: Iterable[Message]) -> list[Message]:
    return [m for m in messages if m.error() is None]


def _read_until(
    c: ShareConsumer, done: Callable[[list[Message]], bool], *, timeout: float, what: str, ack: bool = False
) -> list[Message]:
    got: list[Message] = []

    def step() -> None:
        for m in _records(c.poll(0.5)):
            got.append(m)
            if ack:
                c.acknowledge(m)

    wait_until(lambda: done(got), timeout=timeout, what=what, step=step)
    return got


# -- characterization: raw ShareConsumer ----------------------------------------------------------


def test_raw_new_share_group_skips_the_records_its_topic_holds(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    kafka.produce(topic, 100, partitions=2)
    c = ShareConsumer(_conf(kafka, group))
    closing.append(c)
    c.subscribe([topic])
    # The member is live and reading: what is produced now reaches it, what was there before never does.
    seen: list[Message] = []

    def step() -> None:
        seen.extend(_records(c.poll(0.5)))
        if not seen:
            kafka.produce(topic, 1, partitions=[0], start=100)

    wait_until(lambda: seen, timeout=60, what="a record produced after the subscription", step=step)
    assert [m for m in seen if m.partition() != 0 or (m.offset() or 0) < 50] == [], (
        "a record from before the subscription"
    )


def test_raw_lock_overrun_hands_records_to_a_peer_and_reports_success(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _set_group(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="2000")
    kafka.produce(topic, 20, partitions=1)
    a = ShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(a)
    a.subscribe([topic])
    batch = _read_until(a, lambda got: len(got) > 0, timeout=60, what="member A's batch")
    b = ShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(b)
    b.subscribe([topic])
    # A works on its batch past the lock: B is handed the same records meanwhile.
    again = _read_until(b, lambda got: len(got) >= len(batch), timeout=60, what="B handed A's records", ack=True)
    assert {m.offset() for m in batch} <= {m.offset() for m in again}
    assert all((m.delivery_count() or 0) >= 2 for m in again if m.offset() in {x.offset() for x in batch})
    b.commit_sync(10)
    for m in batch:
        a.acknowledge(m, AcknowledgeType.ACCEPT)
    result = a.commit_sync(10)
    assert result and all(exc is None for exc in result.values()), result  # upstream: success


def test_raw_record_released_up_to_the_limit_is_archived_silently(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _set_group(kafka, group, share_auto_offset_reset="earliest", share_delivery_count_limit="2")
    kafka.produce(topic, 1, partitions=1)
    c = ShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(c)
    c.subscribe([topic])
    counts: list[int] = []

    def step() -> None:
        for m in _records(c.poll(0.5)):
            counts.append(m.delivery_count() or 0)
            c.acknowledge(m, AcknowledgeType.RELEASE)
        c.commit_sync(10)

    wait_until(lambda: len(counts) >= 2, timeout=60, what="two deliveries", step=step)
    assert counts == [1, 2]
    # A third never comes: a marker produced after it is read, the archived record is not.
    kafka.produce(topic, 1, partitions=1, start=1)
    marker: list[Message] = []

    def after() -> None:
        for m in _records(c.poll(0.5)):
            if m.offset() == 1:
                marker.append(m)
            else:
                counts.append(m.delivery_count() or 0)
            c.acknowledge(m)
        c.commit_sync(10)

    wait_until(lambda: marker, timeout=60, what="the marker read", step=after)
    assert counts == [1, 2]


def test_raw_close_in_implicit_mode_gives_an_unfinished_batch_back(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _set_group(kafka, group, share_auto_offset_reset="earliest")
    kafka.produce(topic, 50, partitions=1)
    a = ShareConsumer(_conf(kafka, group))
    a.subscribe([topic])
    batch = _read_until(a, lambda got: len(got) > 0, timeout=60, what="a batch")
    a.close()
    b = ShareConsumer(_conf(kafka, group))
    closing.append(b)
    b.subscribe([topic])
    again = _read_until(b, lambda got: len(got) >= 50, timeout=60, what="all 50 read by the next member")
    redelivered = {m.offset(): m.delivery_count() for m in again}
    assert all(redelivered[m.offset()] == 2 for m in batch)


# -- SafeShareConsumer ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_start_earliest_reads_what_a_new_group_s_topic_holds(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    kafka.produce(topic, 100, partitions=2)
    c = SafeShareConsumer(_conf(kafka, group, mode), start="earliest")
    closing.append(c)
    c.subscribe([topic])
    got = _read_until(c, lambda got: len(got) >= 100, timeout=60, what="the 100 records", ack=mode == "explicit")
    assert len({(m.partition(), m.offset()) for m in got}) == 100
    assert c.group_settings.auto_offset_reset == "earliest"


def test_a_new_group_starting_at_latest_says_what_it_skips(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=2), kafka.name("g")
    kafka.produce(topic, 100, partitions=2)
    c = SafeShareConsumer(_conf(kafka, group))
    closing.append(c)
    c.subscribe([topic])
    skipped = [r.getMessage() for r in caplog.records if "skips the" in r.getMessage()]
    assert len(skipped) == 1 and "100 record(s)" in skipped[0] and topic in skipped[0] and group in skipped[0]


def test_start_never_changes_a_live_group(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    first = SafeShareConsumer(_conf(kafka, group))
    closing.append(first)
    first.subscribe([topic])
    seen: list[Message] = []

    def step() -> None:
        seen.extend(_records(first.poll(0.5)))
        if not seen:
            kafka.produce(topic, 1, partitions=1)

    wait_until(lambda: seen, timeout=60, what="the group live (a record read)", step=step)
    late = SafeShareConsumer(_conf(kafka, group), start="earliest")
    closing.append(late)
    late.subscribe([topic])
    assert late.group_settings.auto_offset_reset == "latest"
    assert any("was not applied" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("mode", MODES)
def test_an_acknowledgement_after_the_lock_ran_out_is_reported(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """S3: a peer took the records while the member worked past the lock. Where upstream answers
    success (pinned above), a WARNING names the records, ``lock_overruns`` counts them and
    ``commit_sync()`` answers LockExpiredError for the partition."""
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _set_group(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="2000")
    kafka.produce(topic, 20, partitions=1)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    closing.append(a)
    a.subscribe([topic])
    assert a.group_settings.lock_ms == 2000
    batch = _read_until(a, lambda got: len(got) > 0, timeout=60, what="a batch")
    peer = ShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(peer)
    peer.subscribe([topic])
    mine = {m.offset() for m in batch}
    _read_until(peer, lambda got: mine <= {m.offset() for m in got}, timeout=60, what="the peer given them", ack=True)
    peer.commit_sync(10)
    if mode == "explicit":
        for m in batch:
            a.acknowledge(m)
    result = a.commit_sync(10)
    errors = [exc for exc in result.values() if exc is not None]
    assert len(errors) == 1 and isinstance(errors[0], LockExpiredError), result
    assert errors[0].args[0].code() == KafkaError.INVALID_RECORD_STATE
    assert a.lock_overruns == len(batch)
    warned = [r.getMessage() for r in caplog.records if "acquisition lock" in r.getMessage()]
    assert len(warned) == 1 and f"{topic} [0]" in warned[0]


@pytest.mark.parametrize("mode", MODES)
def test_a_late_acknowledgement_nobody_took_is_a_lock_expired_error_too(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    """No peer took the records: upstream answers INVALID_RECORD_STATE, which becomes the same
    LockExpiredError (upstream's KafkaError kept)."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    _set_group(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="1000")
    kafka.produce(topic, 5, partitions=1)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    closing.append(a)
    a.subscribe([topic])
    batch = _read_until(a, lambda got: len(got) > 0, timeout=60, what="a batch")
    handed = time.monotonic()
    wait_until(lambda: time.monotonic() - handed > 1.5, timeout=5, what="the work outlasting the lock")
    if mode == "explicit":
        for m in batch:
            a.acknowledge(m)
    result = a.commit_sync(10)
    errors = [exc for exc in result.values() if exc is not None]
    assert len(errors) == 1 and isinstance(errors[0], LockExpiredError), result
    assert errors[0].args[0].code() == KafkaError.INVALID_RECORD_STATE


@pytest.mark.parametrize("mode", MODES)
def test_acknowledgements_within_the_lock_are_upstream_s(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    kafka.produce(topic, 20, partitions=1)
    c = SafeShareConsumer(_conf(kafka, group, mode), start="earliest")
    closing.append(c)
    c.subscribe([topic])
    _read_until(c, lambda got: len(got) >= 20, timeout=60, what="the 20 records", ack=mode == "explicit")
    result = c.commit_sync(10)
    assert all(exc is None for exc in result.values()), result
    assert c.lock_overruns == 0


def test_bad_start_is_refused_by_name(kafka: KafkaTestKit) -> None:
    with pytest.raises(ValueError, match="start must be one of 'earliest', 'latest'"):
        SafeShareConsumer(_conf(kafka, kafka.name("g")), start="beginning")
