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

import logging
import re
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Message, ShareConsumer

from safeconsumer import DeadLetter, Skip
from safeconsumer.health.dead_letters import read_dead_letters
from safeconsumer.share import LockExpiredError, SafeShareConsumer
from safeconsumer.testing import KafkaTestKit, wait_until

from ..support import produce_in_small_batches, set_group_config

MODES = ("implicit", "explicit")

#: One worker runs them one after the other in ``make test``'s parallel phase: each holds share-group
#: members heartbeating every 0.5 s, and timing-sensitive tests elsewhere must not starve.
#: Each runs on Kafka 4.4.0 and on 4.3.1 (brokers upgrade before clients).
pytestmark = [pytest.mark.xdist_group("share-groups"), pytest.mark.kafka_versions]


def _conf(kafka: KafkaTestKit, group: str, mode: str = "implicit") -> dict[str, Any]:
    return {**kafka.client_config, "group.id": group, "share.acknowledgement.mode": mode}


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
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="2000")
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
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_delivery_count_limit="2")
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
    set_group_config(kafka, group, share_auto_offset_reset="earliest")
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


def test_raw_a_member_that_stops_polling_acquires_nothing_more(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    """librdkafka acquires records for a poll, not in the background: a member that took a batch,
    acknowledged it and then works without polling holds none of what is produced meanwhile (a peer
    gets it all on its first delivery). What a SIGKILL can take with it is what a fetch acquired
    for a poll that had not returned it yet."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="3000")
    kafka.produce(topic, 10, partitions=1)
    a = ShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(a)
    a.subscribe([topic])
    batch = _read_until(a, lambda got: len(got) >= 10, timeout=60, what="A's records", ack=True)
    a.commit_sync(10)
    kafka.produce(topic, 50, partitions=1, start=10)
    produced = time.monotonic()
    wait_until(lambda: time.monotonic() - produced > 5, timeout=10, what="A working without polling, past a lock")
    peer = ShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(peer)
    peer.subscribe([topic])
    got = _read_until(peer, lambda got: len(got) >= 50, timeout=60, what="the 50 read by the peer", ack=True)
    assert {m.offset() for m in got} == set(range(10, 60)) and len(batch) == 10
    assert all(m.delivery_count() == 1 for m in got), "A's librdkafka had acquired records while it did not poll"


def test_raw_max_poll_records_bounds_a_poll_by_record_batches_not_records(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    """``max.poll.records`` is best effort: the broker acquires whole record batches. One producer
    batch of 100 records comes in one poll of a member asking for 10; batches of 10 come 10 a poll
    (what ``ShareConsumeTask``'s docs and tests rely on to spread records over tasks)."""
    whole, small, group = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest")
    kafka.produce(whole, 100, partitions=1)  # one flush: one record batch
    produce_in_small_batches(kafka, small, 100)  # flushed every 10 records: ten batches
    c = ShareConsumer({**_conf(kafka, group), "max.poll.records": 10})
    closing.append(c)
    c.subscribe([whole])
    sizes: list[int] = []
    wait_until(
        lambda: sizes, timeout=60, what="a batch", step=lambda: sizes.extend(filter(None, [len(_records(c.poll(0.5)))]))
    )
    assert sizes[0] == 100, sizes
    c.subscribe([small])
    got: list[int] = []
    wait_until(
        lambda: sum(got) >= 100,
        timeout=60,
        what="the ten batches",
        step=lambda: got.extend(filter(None, [len(_records(c.poll(0.5)))])),
    )
    assert max(got) <= 10 and len(got) >= 10, got


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
    c.subscribe([topic])  # the group is looked at on a thread of its own
    wait_until(lambda: any("skips the" in r.getMessage() for r in caplog.records), timeout=15, what="the warning")
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
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="2000")
    kafka.produce(topic, 20, partitions=1)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    closing.append(a)
    a.subscribe([topic])
    wait_until(lambda: a.group_settings.lock_ms == 2000, timeout=15, what="the group's lock read")
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
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="1000")
    kafka.produce(topic, 5, partitions=1)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    closing.append(a)
    a.subscribe([topic])
    wait_until(lambda: a.group_settings.lock_ms == 1000, timeout=15, what="the group's lock read")
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


def _a_batch(c: ShareConsumer) -> Any:
    """The first non-empty batch ``c`` polls."""
    batch: Any = wait_until(lambda: c.poll(0.5) or None, timeout=60, what="a batch")
    return batch


def _work(seconds: float) -> None:
    """The application's work on one record: it takes this long (nothing to wait on but time)."""
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started >= seconds, timeout=seconds + 5, what="the work")


# -- S2, S3, S4 ----------------------------------------------------------------------------------

#: A lock long enough that a record seen again within a test came back because it was given back,
#: not because its lock ran out.
LONG_LOCK = "60000"


def _peer_reads(kafka: KafkaTestKit, group: str, topic: str, closing: list[ShareConsumer]) -> ShareConsumer:
    peer = ShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(peer)
    peer.subscribe([topic])
    return peer


@pytest.mark.parametrize("mode", MODES)
def test_close_gives_back_what_the_application_never_came_back_after(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    kafka.produce(topic, 30, partitions=1)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    a.subscribe([topic])
    batch = _read_until(a, lambda got: len(got) > 0, timeout=60, what="a batch")
    a.close()
    peer = _peer_reads(kafka, group, topic, closing)
    again = _read_until(peer, lambda got: len(got) >= 30, timeout=30, what="all 30 read by the peer", ack=True)
    counts = {m.offset(): m.delivery_count() for m in again}
    assert all(counts[m.offset()] == 2 for m in batch), "a record of the batch was kept or accepted"


@pytest.mark.parametrize("mode", MODES)
def test_a_handler_that_raises_gives_its_record_back_at_once(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    kafka.produce(topic, 1, partitions=1)
    c = SafeShareConsumer(_conf(kafka, group, mode))
    closing.append(c)
    c.subscribe([topic])
    first = _read_until(c, lambda got: len(got) > 0, timeout=60, what="the record")[0]

    def boom(_m: Message) -> None:
        raise RuntimeError("cannot process")

    with pytest.raises(RuntimeError, match="cannot process"):
        c.handle(first, boom)
    again = _read_until(
        c, lambda got: len(got) > 0, timeout=20, what="the record handed out again", ack=mode == "explicit"
    )
    assert again[0].offset() == first.offset() and again[0].delivery_count() == 2


def _handling_step(c: SafeShareConsumer, handled: list[int], *, poison_at: int) -> Callable[[], None]:
    """One poll whose records go through ``handle()``: the record at ``poison_at`` fails, the others
    are noted in ``handled``; then a commit."""

    def process(m: Message) -> None:
        if m.offset() == poison_at:
            raise ValueError("poison")
        handled.append(m.offset() or 0)

    def step() -> None:
        for m in c.poll(0.5):
            if m.error() is None:
                c.handle(m, process)
        c.commit_sync(10)

    return step


@pytest.mark.parametrize("mode", MODES)
def test_skip_rejects_a_failed_record_with_a_warning(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    kafka.produce(topic, 3, partitions=1)
    c = SafeShareConsumer(_conf(kafka, group, mode), poison=Skip())
    closing.append(c)
    c.subscribe([topic])
    handled: list[int] = []
    step = _handling_step(c, handled, poison_at=1)

    wait_until(lambda: sorted(handled) == [0, 2], timeout=60, what="the good records handled", step=step)
    assert c.poison.skipped == 1
    assert any("skipped a record that failed to process" in r.getMessage() for r in caplog.records)
    # Rejected: never delivered again, while a marker produced after it is.
    kafka.produce(topic, 1, partitions=1, start=3)
    wait_until(lambda: 3 in handled, timeout=30, what="the marker handled", step=step)
    assert sorted(handled) == [0, 2, 3]


@pytest.mark.parametrize("mode", MODES)
def test_dead_letter_writes_a_failed_record_before_rejecting_it(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    topic, group, dlt = kafka.create_topic(partitions=1), kafka.name("g"), kafka.create_topic(partitions=1)
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    kafka.produce(topic, 3, partitions=1)
    c = SafeShareConsumer(_conf(kafka, group, mode), poison=DeadLetter(dlt, retries=1, backoff=0.05))
    closing.append(c)
    c.subscribe([topic])
    handled: list[int] = []
    step = _handling_step(c, handled, poison_at=1)

    wait_until(lambda: c.poison.dead_lettered == 1 and sorted(handled) == [0, 2], timeout=60, what="done", step=step)
    assert kafka.end_offsets(dlt) == {0: 1}
    kafka.produce(topic, 1, partitions=1, start=3)
    wait_until(lambda: 3 in handled, timeout=30, what="the marker handled", step=step)
    assert sorted(handled) == [0, 2, 3] and c.poison.dead_lettered == 1


def test_a_record_on_its_last_delivery_is_in_the_dead_letter_topic_before_the_application_sees_it(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    """S4: with the group's limit at 2, the second delivery is the last: the broker archives the
    record if it is not accepted then. A copy is written first, whatever the application does next."""
    topic, group, dlt = kafka.create_topic(partitions=1), kafka.name("g"), kafka.create_topic(partitions=1)
    set_group_config(
        kafka,
        group,
        share_auto_offset_reset="earliest",
        share_record_lock_duration_ms=LONG_LOCK,
        share_delivery_count_limit="2",
    )
    kafka.produce(topic, 1, partitions=1)
    c = SafeShareConsumer(_conf(kafka, group, "explicit"), poison=DeadLetter(dlt))
    closing.append(c)
    c.subscribe([topic])
    wait_until(lambda: c.group_settings.delivery_limit == 2, timeout=10, what="the limit read")
    first = _read_until(c, lambda got: len(got) > 0, timeout=60, what="the first delivery")[0]
    assert kafka.end_offsets(dlt) == {0: 0}  # not the last delivery: no copy
    c.acknowledge(first, AcknowledgeType.RELEASE)
    c.commit_sync(10)
    second = _read_until(c, lambda got: len(got) > 0, timeout=30, what="the second delivery")[0]
    assert second.delivery_count() == 2
    assert kafka.end_offsets(dlt) == {0: 1}  # copied before it was handed out
    c.close()  # the process stops without processing it: the copy is what is left
    # The dead-letters tool says what the copy is: taken before processing, it may also have been processed.
    ((view, _),) = read_dead_letters(kafka.client_config, dlt, 10)
    assert (view.stage, view.original_topic, view.original_offset, view.group) == ("last-delivery", topic, 0, group)
    assert view.may_be_processed is True


def test_a_slow_loop_gives_back_what_it_has_not_reached_before_the_locks_run_out(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    """S3, implicit mode, no help from the application: the batch's iterator stops handing out
    records once the batch held its locks for 3/4 of the lock; what it did not hand out goes to a
    peer at once, and nothing is processed twice."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="4000")
    kafka.produce(topic, 20, partitions=1)
    a = SafeShareConsumer(_conf(kafka, group))
    closing.append(a)
    a.subscribe([topic])
    wait_until(lambda: a.group_settings.lock_ms == 4000, timeout=15, what="the group's lock read")
    batch = _a_batch(a)
    handed = len(batch)
    processed_by_a: list[int] = []
    for m in batch:  # 1 s of work per record: the lock (4 s) cannot cover the batch
        processed_by_a.append(m.offset() or 0)
        _work(1.0)
    assert 0 < len(processed_by_a) < handed
    assert a.released_early == handed - len(processed_by_a)
    assert all(exc is None for exc in a.commit_sync(10).values())  # accepts what A processed, within its locks
    assert a.lock_overruns == 0
    a.close()
    peer = _peer_reads(kafka, group, topic, closing)
    rest = 20 - len(processed_by_a)
    by_peer = _read_until(peer, lambda got: len(got) >= rest, timeout=30, what="the peer read the rest", ack=True)
    assert not {m.offset() for m in by_peer} & set(processed_by_a), "a record was processed twice"


def test_keepalive_gives_back_the_rest_of_the_batch_during_long_work(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="4000")
    kafka.produce(topic, 20, partitions=1)
    a = SafeShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(a)
    a.subscribe([topic])
    wait_until(lambda: a.group_settings.lock_ms == 4000, timeout=15, what="the group's lock read")
    batch = _a_batch(a)
    assert len(batch) > 1
    first = next(iter(batch))
    with a.keepalive():  # long work on the first record: past 3 s the rest goes back
        wait_until(lambda: a.released_early > 0, timeout=10, what="the rest given back")
    assert a.released_early == len(batch) - 1
    assert [m.offset() for m in batch] == [first.offset()]  # the iterator hands out nothing given back
    a.acknowledge(first)
    assert all(exc is None for exc in a.commit_sync(10).values())


def test_implicit_mode_refuses_acknowledge_with_upstream_s_exact_error(kafka: KafkaTestKit) -> None:
    from confluent_kafka import IllegalStateException

    conf = _conf(kafka, kafka.name("g"))
    raw, ours = ShareConsumer(conf), SafeShareConsumer(conf)
    try:
        calls: list[Callable[[ShareConsumer], object]] = [
            lambda c: c.acknowledge_offset("t", 0, 0),
            lambda c: c.acknowledge(Message(topic="t", partition=0, offset=0)),
            lambda c: c.acknowledge("not a message"),  # type: ignore[arg-type]
        ]
        for call in calls:
            with pytest.raises(Exception) as upstream:
                call(raw)
            with pytest.raises(Exception) as mine:
                call(ours)
            assert type(mine.value) is type(upstream.value) and mine.value.args == upstream.value.args
        assert isinstance(upstream.value, TypeError)
        with pytest.raises(IllegalStateException):
            ours.acknowledge_offset("t", 0, 0)
    finally:
        raw.close()
        ours.close()


def test_a_poison_policy_of_the_wrong_type_is_refused_by_name(kafka: KafkaTestKit) -> None:
    with pytest.raises(TypeError, match="poison must be None, Skip"):
        SafeShareConsumer(_conf(kafka, kafka.name("g")), poison="skip")


# -- S6 pause ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["name", "regex", "consumer"])
def test_a_paused_topic_delivers_nothing_and_loses_nothing(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str, how: str
) -> None:
    """Paused before anything was acquired: not one record of it comes until it is resumed, then
    every one comes on its first delivery (pausing counted no delivery)."""
    keep, stop, group = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    c = SafeShareConsumer(_conf(kafka, group, mode))
    closing.append(c)
    if how == "name":
        c.pause_topics(stop)
    elif how == "regex":
        c.pause_topics(re.compile(re.escape(stop)))
    c.subscribe([keep, stop])
    if how == "consumer":
        c.pause()
    kafka.produce(keep, 10, partitions=1)
    kafka.produce(stop, 10, partitions=1)
    got: list[Message] = []

    def step() -> None:
        for m in c.poll(0.5):
            if m.error() is None:
                got.append(m)
                if mode == "explicit":
                    c.acknowledge(m)

    if how != "consumer":
        wait_until(lambda: len(got) >= 10, timeout=60, what="the unpaused topic's records", step=step)
        assert {m.topic() for m in got} == {keep}
        assert c.paused_topics() == [stop] and sorted(c.subscription()) == sorted([keep, stop])
        c.resume_topics(re.compile(re.escape(stop)) if how == "regex" else stop)
    else:
        wait_until(lambda: c.paused_topics() == sorted([keep, stop]), timeout=5, what="both paused")
        step()
        assert got == []
        c.resume()
    wait_until(lambda: len(got) >= 20, timeout=60, what="every record after the resume", step=step)
    assert sorted((m.topic(), m.offset()) for m in got) == sorted([(t, o) for t in (keep, stop) for o in range(10)])
    assert all(m.delivery_count() == 1 for m in got if m.topic() == stop)


def test_pausing_gives_back_what_was_handed_out_and_not_reached(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    """Records of a topic acquired before it was paused go back at once (not at lock expiry); the
    acquisition counted their delivery, so they come again with delivery count 2 after the resume."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    kafka.produce(topic, 20, partitions=1)
    c = SafeShareConsumer(_conf(kafka, group))
    closing.append(c)
    c.subscribe([topic])
    batch = _a_batch(c)
    first = next(iter(batch))
    c.pause_topics(topic)
    assert [m.offset() for m in batch] == [first.offset()]  # the rest given back, never handed out
    c.poll(0.1)  # accepts the one record reached
    c.resume_topics(topic)
    got = _read_until(c, lambda got: len(got) >= 19, timeout=60, what="the rest after the resume")
    assert first.offset() not in {m.offset() for m in got}
    assert all(m.delivery_count() == 2 for m in got if (m.offset() or 0) < len(batch))


def test_pause_after_close_is_a_clear_error(kafka: KafkaTestKit) -> None:
    c = SafeShareConsumer(_conf(kafka, kafka.name("g")))
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        c.pause_topics("t")
    with pytest.raises(ValueError, match="topics is empty"):
        SafeShareConsumer(_conf(kafka, kafka.name("g"))).pause_topics([])


@pytest.mark.parametrize("mode", MODES)
def test_a_dropped_consumer_is_destroyed_with_its_last_reference(kafka: KafkaTestKit, mode: str) -> None:
    """S8: no reference cycle keeps it (the poison handler and the batches it hands out hold it
    weakly), so it goes when the application drops it, as a raw ShareConsumer does."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest")
    kafka.produce(topic, 5, partitions=1)
    c = SafeShareConsumer(_conf(kafka, group, mode), poison=Skip())
    c.subscribe([topic])
    batch = _a_batch(c)
    ref = weakref.ref(c)
    del c
    assert ref() is None, "something still holds the dropped consumer"
    assert len(list(batch)) > 0  # a batch outliving its consumer still iterates


def test_raw_a_local_acknowledgement_can_be_overridden_until_it_is_sent(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    """Why SafeShareConsumer's close() sends the application's acknowledgements before it releases
    the rest: a record acknowledged but not yet committed takes a second acknowledgement silently."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest")
    kafka.produce(topic, 3, partitions=1)
    c = ShareConsumer(_conf(kafka, group, "explicit"))
    closing.append(c)
    c.subscribe([topic])
    batch = _read_until(c, lambda got: len(got) > 0, timeout=60, what="a batch")
    c.acknowledge(batch[0], AcknowledgeType.ACCEPT)
    c.acknowledge(batch[0], AcknowledgeType.RELEASE)  # no error: the first acknowledgement is replaced
    for m in batch[1:]:
        c.acknowledge(m)
    assert all(exc is None for exc in c.commit_sync(10).values())
    from confluent_kafka import IllegalStateException

    with pytest.raises(IllegalStateException):
        c.acknowledge(batch[0], AcknowledgeType.RELEASE)  # sent: no longer in flight


def test_close_in_explicit_mode_keeps_the_application_s_acknowledgements(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    kafka.produce(topic, 10, partitions=1)
    a = SafeShareConsumer(_conf(kafka, group, "explicit"))
    a.subscribe([topic])
    batch = _read_until(a, lambda got: len(got) >= 2, timeout=60, what="a batch of two or more")
    a.acknowledge(batch[0])  # processed: accepted, not committed yet
    a.close()
    peer = _peer_reads(kafka, group, topic, closing)
    rest = _read_until(peer, lambda got: len(got) >= 9, timeout=30, what="the other nine", ack=True)
    assert batch[0].offset() not in {m.offset() for m in rest}
    assert {m.offset() for m in batch[1:]} <= {m.offset() for m in rest}


# -- past max.poll.interval.ms (S3) ----------------------------------------------------------------

#: The member's max.poll.interval.ms in these tests: the work below (6 s) outlasts it.
MAX_POLL_MS = 3000


def test_raw_past_max_poll_interval_leaves_the_group_raises_once_and_keeps_its_records_locked(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    """librdkafka takes the member out of its group; the records it holds stay locked (a peer gets
    none of them while their lock runs); its late acknowledgements are kept (reported as success,
    and no record comes again); its next poll() raises _MAX_POLL_EXCEEDED, the one after rejoins."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    kafka.produce(topic, 10, partitions=1)
    a = ShareConsumer({**_conf(kafka, group, "explicit"), "max.poll.interval.ms": MAX_POLL_MS})
    closing.append(a)
    a.subscribe([topic])
    batch = _read_until(a, lambda got: len(got) == 10, timeout=60, what="A's batch")
    peer = _peer_reads(kafka, group, topic, closing)
    took: list[Message] = []
    started = time.monotonic()
    wait_until(  # A works 6 s without polling; the peer polls meanwhile
        lambda: time.monotonic() - started >= 2 * MAX_POLL_MS / 1000,
        timeout=30,
        what="A's work",
        step=lambda: took.extend(_records(peer.poll(0.5))),
    )
    assert took == [], "a peer took records of a member that left its group while their lock held"
    for m in batch:
        a.acknowledge(m)
    assert all(e is None for e in a.commit_sync(10.0).values())
    with pytest.raises(KafkaException) as raised:
        a.poll(1.0)
    assert raised.value.args[0].code() == KafkaError._MAX_POLL_EXCEEDED
    kafka.produce(topic, 1, partitions=1, start=10)
    seen = _read_until(peer, lambda got: any(m.offset() == 10 for m in got), timeout=60, what="the marker", ack=True)
    assert [m.offset() for m in seen] == [10], "an acknowledged record came again"


@pytest.mark.parametrize("mode", MODES)
def test_past_max_poll_interval_ours_says_so_gives_back_what_it_had_not_reached_and_keeps_the_rest(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The application processes 2 of 10 records, then works 6 s with max.poll.interval.ms at 3 s
    and a 60 s lock. The 8 it never reached go back at 3/4 of the interval (implicit mode: from the
    watch, while it works; explicit mode, where only the application's thread acknowledges: at its
    next call), a peer takes them at once; the poll() after the work raises upstream's
    _MAX_POLL_EXCEEDED with one WARNING naming the group; the 2 processed never come again."""
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    kafka.produce(topic, 10, partitions=1)
    a = SafeShareConsumer({**_conf(kafka, group, mode), "max.poll.interval.ms": MAX_POLL_MS})
    closing.append(a)
    a.subscribe([topic])
    wait_until(lambda: a.group_settings.lock_ms == int(LONG_LOCK), timeout=15, what="the group's lock read")
    batch: Any = wait_until(lambda: ((b := a.poll(0.5)) and len(b) == 10 and b) or None, timeout=60, what="the batch")
    it = iter(batch)
    processed = [next(it), next(it)]
    if mode == "explicit":
        for m in processed:
            a.acknowledge(m)
    peer = _peer_reads(kafka, group, topic, closing)
    took: list[Message] = []

    def peer_step() -> None:
        for m in _records(peer.poll(0.5)):
            took.append(m)
            peer.acknowledge(m)

    started = time.monotonic()
    wait_until(
        lambda: time.monotonic() - started >= 2 * MAX_POLL_MS / 1000, timeout=30, what="A's work", step=peer_step
    )
    if mode == "implicit":
        assert sorted(m.offset() or 0 for m in took) == list(range(2, 10)), "given back while the application worked"
    with pytest.raises(KafkaException) as raised:
        a.poll(1.0)
    assert raised.value.args[0].code() == KafkaError._MAX_POLL_EXCEEDED
    warnings = [r.getMessage() for r in caplog.records if "max.poll.interval.ms" in r.getMessage()]
    assert len(warnings) == 1 and repr(group) in warnings[0] and "left its group" in warnings[0]
    wait_until(lambda: len(took) >= 8, timeout=30, what="the 8 not reached, at the peer", step=peer_step)
    assert sorted(m.offset() or 0 for m in took) == list(range(2, 10))
    assert {m.delivery_count() for m in took} == {2}
    kafka.produce(topic, 1, partitions=1, start=10)
    wait_until(lambda: any(m.offset() == 10 for m in took), timeout=60, what="the marker", step=peer_step)
    a.poll(0.5)  # A rejoins
    assert [m.offset() for m in took if (m.offset() or 0) < 2] == [], "a processed record came again"
