"""Share groups record by record (S2, S3, S4): a failure, a retry, a crash or an overrun touches only
the record it concerns, never its neighbours. Each test is written from the application's side (a
batch, a failing record, a crash, a count), in both acknowledgement modes, against the real broker.

The test brokers allow short locks (``group.share.min.record.lock.duration.ms``); each test sets its
group's own lock and delivery limit.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Message, ShareConsumer

from safeconsumer import DeadLetter
from safeconsumer.health._share_look import describe_share_group
from safeconsumer.health.dead_letters import read_dead_letters
from safeconsumer.share import SafeShareConsumer
from safeconsumer.testing import KafkaTestKit, wait_until

from ..support import set_group_config

MODES = ("implicit", "explicit")

#: Each runs on Kafka 4.4.0 and on 4.3.1 (brokers upgrade before clients).
pytestmark = [pytest.mark.xdist_group("share-groups"), pytest.mark.kafka_versions]

#: A lock long enough that a record seen again came back because it was given back, not because
#: its lock ran out.
LONG_LOCK = "60000"


def _conf(kafka: KafkaTestKit, group: str, mode: str) -> dict[str, Any]:
    return {**kafka.client_config, "group.id": group, "share.acknowledgement.mode": mode}


def _one_batch(kafka: KafkaTestKit, topic: str, n: int, *, poison: int | None = None) -> None:
    """``n`` records (values ``b"<i>"``, ``b"poison"`` at offset ``poison``) in one record batch of
    partition 0: a share group acquires it whole, so one poll hands out all ``n``."""
    for i in range(n):
        kafka.producer.produce(topic, value=b"poison" if i == poison else str(i).encode(), partition=0)
    kafka.producer.flush(30)


def _batch(c: ShareConsumer, n: int) -> list[Message]:
    """The first non-empty batch ``c`` polls; it must hold ``n`` records."""
    got: list[Message] = []

    def step() -> None:
        got.extend(m for m in c.poll(0.5) if m.error() is None)

    wait_until(lambda: got, timeout=60, what="a batch", step=step)
    assert len(got) == n, f"the {n} records came in {len(got)}: one batch expected"
    return got


def _read_all(c: ShareConsumer, offsets: set[int], *, timeout: float = 60) -> list[Message]:
    """What peer ``c`` (explicit mode, raw) is handed until it was handed ``offsets``, each accepted."""
    got: list[Message] = []

    def step() -> None:
        for m in c.poll(0.5):
            if m.error() is None:
                got.append(m)
                c.acknowledge(m)
        c.commit_sync(10)

    wait_until(
        lambda: offsets <= {m.offset() for m in got}, timeout=timeout, what=f"{offsets} read by the peer", step=step
    )
    return got


def _work(seconds: float) -> None:
    """The application's work on one record: it takes this long (nothing to wait on but time)."""
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started >= seconds, timeout=seconds + 5, what="the work")


@pytest.fixture
def peer_of(kafka: KafkaTestKit, closing: list[ShareConsumer]) -> Iterator[Any]:
    def make(group: str, topic: str) -> ShareConsumer:
        peer = ShareConsumer(_conf(kafka, group, "explicit"))
        closing.append(peer)
        peer.subscribe([topic])
        return peer

    yield make


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ending", ["close", "exception then close"])
def test_a_crash_after_handle_redoes_only_what_handle_did_not_finish(
    kafka: KafkaTestKit, peer_of: Any, mode: str, ending: str
) -> None:
    """The application handles 10 records of a 50-record batch; the handler raises on the 11th (no
    policy) or the application stops there, and closes: the next member gets the 40 it never
    finished, never the 10 ``handle()`` finished."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    _one_batch(kafka, topic, 50)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    a.subscribe([topic])
    batch = _batch(a, 50)
    for m in batch[:10]:
        a.handle(m, lambda _m: None)
    if ending == "exception then close":

        def boom(_m: Message) -> None:
            raise RuntimeError("the handler failed")

        with pytest.raises(RuntimeError, match="the handler failed"):
            a.handle(batch[10], boom)
    a.close()
    peer = peer_of(group, topic)
    by_peer = _read_all(peer, set(range(10, 50)))
    kafka.produce(topic, 1, partitions=1, start=50)  # a marker: what the peer is handed before it is all there is
    by_peer += _read_all(peer, {50})
    offsets = Counter(m.offset() for m in by_peer)
    assert set(offsets) == set(range(10, 51)), "the peer was handed a record handle() had finished"
    assert all(m.delivery_count() == 2 for m in by_peer if (m.offset() or 0) < 50)


@pytest.mark.parametrize("mode", MODES)
def test_one_poison_record_never_sends_its_neighbours_round_their_deliveries(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """Lock 4 s, delivery limit 3, 30 records in one batch, the 8th always fails under a policy whose
    retries (backoff 1 s, doubling) cannot fit in the lock: the record is released for redelivery
    when its next attempt would not fit, its neighbours are processed once each on their first
    delivery, none reaches the dead-letter topic, and the failing record is dead-lettered on its
    last delivery."""
    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, group, dlt = kafka.create_topic(partitions=1), kafka.name("g"), kafka.create_topic(partitions=1)
    set_group_config(
        kafka,
        group,
        share_auto_offset_reset="earliest",
        share_record_lock_duration_ms="4000",
        share_delivery_count_limit="3",
    )
    _one_batch(kafka, topic, 30, poison=7)
    c = SafeShareConsumer(_conf(kafka, group, mode), poison=DeadLetter(dlt, retries=6, backoff=1.0))
    closing.append(c)
    c.subscribe([topic])
    wait_until(lambda: c.group_settings.lock_ms == 4000, timeout=15, what="the group's lock read")
    processed: list[tuple[int, int]] = []  # (offset, delivery count)

    def process(m: Message) -> None:
        if m.value() == b"poison":
            raise ValueError("a poison record")
        processed.append((m.offset() or 0, m.delivery_count() or 0))

    def step() -> None:
        for m in c.poll(0.5):
            if m.error() is None:
                c.handle(m, process)

    wait_until(
        lambda: c.poison.dead_lettered == 1 and len(processed) >= 29,
        timeout=90,
        what="the good records processed and the poison record dead-lettered",
        step=step,
    )
    c.commit_sync(10)
    assert sorted(processed) == [(o, 1) for o in range(30) if o != 7], "a good record processed twice or late"
    copies = read_dead_letters(kafka.client_config, dlt, 10)
    assert {view.original_offset for view, _ in copies} == {7}, "a good record reached the dead-letter topic"
    assert [view.stage for view, _ in copies].count("process") == 1
    assert c.lock_overruns == 0
    said = [r.getMessage() for r in caplog.records if "offset 7" in r.getMessage()]
    assert any("for redelivery" in s for s in said), said
    assert not any("revoked" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("mode", MODES)
def test_what_handle_finished_is_sent_before_a_retry_waits(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    """The records ``handle()`` finished before a failing one are acknowledged to the broker before
    the policy's first wait: while the failing record's retry runs, the group's lag (the records not
    acknowledged yet; the start the broker reports moves one write late) counts them done."""
    topic, group, dlt = kafka.create_topic(partitions=1), kafka.name("g"), kafka.create_topic(partitions=1)
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    _one_batch(kafka, topic, 10, poison=5)
    c = SafeShareConsumer(_conf(kafka, group, mode), poison=DeadLetter(dlt, retries=1, backoff=0.2))
    closing.append(c)
    c.subscribe([topic])
    batch = _batch(c, 10)
    lags: list[int | None] = []

    def lag() -> int | None:
        described = describe_share_group(kafka.client_config, kafka.bootstrap_servers, group, 10)
        assert described is not None
        return next(p.lag for p in described.partitions if p.topic == topic)

    def process(m: Message) -> None:
        if m.value() != b"poison":
            return
        if lags:  # the retry: the five finished records were acknowledged during the wait before it
            wait_until(lambda: lag() == 5, timeout=20, what="the broker counting the finished records done")
        lags.append(lag())
        raise ValueError("a poison record")

    for m in batch[:6]:
        c.handle(m, process)
    assert len(lags) == 2 and c.poison.dead_lettered == 1
    assert lags[0] in (None, 10)  # at the first attempt's failure nothing was sent yet


@pytest.mark.parametrize("mode", MODES)
def test_lock_overruns_count_only_the_records_acknowledged_late(
    kafka: KafkaTestKit, closing: list[ShareConsumer], caplog: pytest.LogCaptureFixture, mode: str, peer_of: Any
) -> None:
    """A member works past the lock on the first record of a 20-record batch; the 19 others go back
    in time (the peer does them): one overrun, and the WARNING names that record only."""
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="3000")
    _one_batch(kafka, topic, 20)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    closing.append(a)
    a.subscribe([topic])
    wait_until(lambda: a.group_settings.lock_ms == 3000, timeout=15, what="the group's lock read")
    batch: Any = wait_until(lambda: a.poll(0.5) or None, timeout=60, what="a batch")
    assert len(batch) == 20
    for m in batch:  # long work on the first record; the rest was given back meanwhile
        with a.keepalive():
            _work(4.5)
        if mode == "explicit":
            a.acknowledge(m)
    assert a.released_early == 19
    # The peer gets the 19 (and the first one too once its lock ran out: that is the overrun).
    by_peer = _read_all(peer_of(group, topic), set(range(1, 20)))
    assert all(m.delivery_count() == 2 for m in by_peer)
    a.commit_sync(10)
    assert a.lock_overruns == 1
    warned = [r.getMessage() for r in caplog.records if "acquisition lock" in r.getMessage()]
    assert len(warned) == 1 and "1 record(s)" in warned[0] and f"{topic} [0] @ 0" in warned[0], warned
    assert f"{topic} [0] @ 0.." not in warned[0]


@pytest.mark.parametrize("mode", MODES)
def test_an_acknowledgement_close_sends_after_the_lock_is_an_overrun(
    kafka: KafkaTestKit, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """A member stopped during slow work: the acknowledgement of what it finished goes from
    ``close()``, after the lock ran out; it is counted and said like any other."""
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="2000")
    _one_batch(kafka, topic, 1)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    a.subscribe([topic])
    wait_until(lambda: a.group_settings.lock_ms == 2000, timeout=15, what="the group's lock read")
    [m] = _batch(a, 1)
    _work(3.0)
    if mode == "explicit":
        a.acknowledge(m)
        a.close()
    else:
        a.handle(m, lambda _m: None)  # finished after its lock: accepted (and sent) late
        a.close()
    assert a.lock_overruns == 1
    assert [r for r in caplog.records if "acquisition lock" in r.getMessage()], (
        "no WARNING for the late acknowledgement"
    )


@pytest.mark.parametrize("mode", MODES)
def test_what_handle_finished_is_sent_while_a_slow_handler_outlasts_the_lock(
    kafka: KafkaTestKit, peer_of: Any, mode: str
) -> None:
    """Ten records handled at once, then a handler works 4.5 s on the eleventh under a 3 s lock
    (no keepalive block): the ten are acknowledged on time, while the slow one runs, and the rest
    goes back; only the slow record is late, and no peer is handed the ten."""
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="3000")
    _one_batch(kafka, topic, 20)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    a.subscribe([topic])
    wait_until(lambda: a.group_settings.lock_ms == 3000, timeout=15, what="the group's lock read")
    _ten_handled_then_a_slow_one(kafka, a, peer_of, group, topic)


def _ten_handled_then_a_slow_one(
    kafka: KafkaTestKit, a: SafeShareConsumer, peer_of: Any, group: str, topic: str
) -> None:
    """``a``'s first batch (the 20 records of :func:`_one_batch`): ten handled at once, then a handler
    works 4.5 s on the eleventh under the group's 3 s lock. The ten are acknowledged on time, the rest
    goes back, only the slow record is late, and the peer is never handed the ten."""
    batch: Any = wait_until(lambda: a.poll(0.5) or None, timeout=60, what="a batch")
    assert len(batch) == 20
    for m in batch:  # the iterator stops once the rest went back
        a.handle(m, lambda record: None if (record.offset() or 0) < 10 else _work(4.5))
    assert a.released_early == 9
    assert a.lock_overruns == 1
    a.close()
    peer = peer_of(group, topic)
    by_peer = _read_all(peer, set(range(11, 20)))
    kafka.produce(topic, 1, partitions=1, start=20)  # a marker: what the peer is handed before it is all there is
    by_peer += _read_all(peer, {20})
    assert {m.offset() for m in by_peer} <= set(range(10, 21)), "a peer was handed a record handle() had finished"


@pytest.mark.parametrize("mode", MODES)
def test_a_member_that_cannot_read_its_group_s_settings_holds_a_batch_on_the_shortest_lock(
    kafka: KafkaTestKit, peer_of: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The long share soak: a member started while a broker was down could not read its group's
    settings (the admin request timed out), held its batches on Kafka's default 30 s lock under the
    group's 3 s one, and the records it had finished before a slow one were acknowledged after their
    lock: a peer processed them again, and no overrun was counted. Until the settings are read, a
    batch is held on the shortest lock a broker allows (1 s): here as in the slow-handler test above,
    the ten finished records go in time, the rest goes back, and only the slow record is late."""
    from confluent_kafka import KafkaError, KafkaException

    from safeconsumer.group import _share

    def unanswered(*_args: Any, **_kwargs: Any) -> Any:  # the cluster's admin API does not answer
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller"))

    monkeypatch.setattr(_share, "read_settings", unanswered)
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="3000")
    _one_batch(kafka, topic, 20)
    a = SafeShareConsumer(_conf(kafka, group, mode))
    a.subscribe([topic])
    assert not a.group_settings.read and a.group_settings.lock_ms == 30_000, "the settings were read before the test"
    _ten_handled_then_a_slow_one(kafka, a, peer_of, group, topic)
    assert not a.group_settings.read, "the settings were read during the test"


@pytest.mark.parametrize("mode", MODES)
def test_a_cancelled_await_of_handle_releases_only_what_it_did_not_finish(
    kafka: KafkaTestKit, peer_of: Any, mode: str
) -> None:
    """asyncio: three records handled, the fourth's handler cancelled while it awaits, the consumer
    closed: the next member gets the fourth (given back at once) and the six not reached, never the
    three ``handle()`` finished."""
    import asyncio

    from safeconsumer.aio import SafeAIOShareConsumer

    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    _one_batch(kafka, topic, 10)

    async def main() -> None:
        c = SafeAIOShareConsumer(_conf(kafka, group, mode))
        await c.subscribe([topic])
        batch: list[Message] = []
        while not batch:
            batch = [m for m in await c.poll(0.5) if m.error() is None]
        assert len(batch) == 10
        for m in batch[:3]:
            await c.handle(m, lambda _m: None)
        started = asyncio.Event()

        async def forever(_m: Message) -> None:
            started.set()
            await asyncio.Event().wait()

        task = asyncio.create_task(c.handle(batch[3], forever))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await c.close()

    asyncio.run(main())
    peer = peer_of(group, topic)
    by_peer = _read_all(peer, set(range(3, 10)))
    kafka.produce(topic, 1, partitions=1, start=10)  # a marker: what the peer is handed before it is all there is
    by_peer += _read_all(peer, {10})
    assert {m.offset() for m in by_peer} == set(range(3, 11)), "a peer was handed a record handle() had finished"
    assert all(m.delivery_count() == 2 for m in by_peer if (m.offset() or 0) < 10)


#: A backlog whose poison records (1 in 50) would have passed the old default count limit, 100 per
#: 60 s, within seconds.
DRAIN = 6_000


@pytest.mark.parametrize("mode", MODES)
def test_a_healthy_drain_never_trips_the_dead_letter_limit(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    """A share member drains 6,000 records with 1 poison record in 50 (120 dead letters) as fast as
    it goes, under the default policy: every record processed or dead-lettered, never stopped."""
    topic, group, dlt = kafka.create_topic(partitions=1), kafka.name("g"), kafka.create_topic(partitions=1)
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    for i in range(DRAIN):
        kafka.producer.produce(topic, value=b"poison" if i % 50 == 49 else str(i).encode(), partition=0)
    kafka.producer.flush(30)
    c = SafeShareConsumer(_conf(kafka, group, mode), poison=DeadLetter(dlt, retries=0))
    closing.append(c)
    c.subscribe([topic])
    handled: list[int] = []

    def process(m: Message) -> None:
        if m.value() == b"poison":
            raise ValueError("a poison record")
        handled.append(m.offset() or 0)

    def step() -> None:
        for m in c.poll(0.5):
            if m.error() is None:
                c.handle(m, process)

    wait_until(lambda: len(handled) + c.poison.dead_lettered >= DRAIN, timeout=180, what="the drain", step=step)
    assert c.poison.dead_lettered == DRAIN // 50 and sorted(handled) == [i for i in range(DRAIN) if i % 50 != 49]


@pytest.mark.parametrize("mode", MODES)
def test_a_handler_failing_everything_stops_the_share_consumer(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str
) -> None:
    from safeconsumer import PoisonLimitError

    topic, group, dlt = kafka.create_topic(partitions=1), kafka.name("g"), kafka.create_topic(partitions=1)
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    _one_batch(kafka, topic, 500)
    c = SafeShareConsumer(_conf(kafka, group, mode), poison=DeadLetter(dlt, retries=0))
    closing.append(c)
    c.subscribe([topic])
    raised: list[PoisonLimitError] = []

    def broken(_m: Message) -> None:
        raise RuntimeError("a bad deploy")

    def step() -> None:
        try:
            for m in c.poll(0.5):
                if m.error() is None:
                    c.handle(m, broken)
        except PoisonLimitError as exc:
            raised.append(exc)

    wait_until(lambda: raised, timeout=60, what="PoisonLimitError", step=step)
    assert "max_dead_letter_ratio" in str(raised[0]) and kafka.end_offsets(dlt) == {0: 51}
    with pytest.raises(PoisonLimitError):
        c.poll(0)


def test_a_batch_on_its_last_delivery_is_copied_whole_before_the_application_sees_it(
    kafka: KafkaTestKit, closing: list[ShareConsumer]
) -> None:
    """S4 for a whole batch: 20 records on their last delivery (limit 2) are all in the dead-letter
    topic when ``poll()`` returns them, written in one round trip."""
    topic, group, dlt = kafka.create_topic(partitions=1), kafka.name("g"), kafka.create_topic(partitions=1)
    set_group_config(
        kafka,
        group,
        share_auto_offset_reset="earliest",
        share_record_lock_duration_ms=LONG_LOCK,
        share_delivery_count_limit="2",
    )
    _one_batch(kafka, topic, 20)
    c = SafeShareConsumer(_conf(kafka, group, "explicit"), poison=DeadLetter(dlt))
    closing.append(c)
    c.subscribe([topic])
    wait_until(lambda: c.group_settings.delivery_limit == 2, timeout=10, what="the limit read")
    first = _batch(c, 20)
    for m in first:
        c.acknowledge(m, AcknowledgeType.RELEASE)
    c.commit_sync(10)
    second = _batch(c, 20)
    assert all(m.delivery_count() == 2 for m in second)
    assert kafka.end_offsets(dlt) == {0: 20}
    copies = read_dead_letters(kafka.client_config, dlt, 20)
    assert sorted(view.original_offset or 0 for view, _ in copies) == list(range(20))
    assert {view.stage for view, _ in copies} == {"last-delivery"}
