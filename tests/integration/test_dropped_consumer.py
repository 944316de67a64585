"""I10: a consumer dropped without close() is released where it is dropped, like upstream's.

An application that subscribes, polls until assigned and drops its consumer without close()
(a script, an exception without ``with``, a test) must not keep a member in the group: no
reference cycle may keep the SafeConsumer (or SafeAIOConsumer) alive until a garbage collection,
and no thread of ours may keep it alive or polling. Freed by reference counting, librdkafka's
destroy leaves the group, and the next member gets every record about as soon as after raw
``confluent_kafka.Consumer``.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer

from safeconsumer import SafeConsumer
from safeconsumer.aio import SafeAIOConsumer
from safeconsumer.testing import KafkaTestKit, Protocol

RECORDS = 200
#: Longer than any rebalance here: a member kept alive after its application dropped it would
#: hold its partitions at least this long (until the broker evicts it).
MAX_POLL_MS = 30_000


def _our_threads_end(before: set[threading.Thread], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ours = [t.name for t in set(threading.enumerate()) - before if t.name.startswith("safeconsumer")]
        if not ours:
            return
        assert time.monotonic() < deadline, f"threads of the dropped consumer still run: {ours}"
        time.sleep(0.05)


def _assigned(c: Consumer, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not c.assignment():
        assert time.monotonic() < deadline, "never assigned"
        c.poll(0.1)


def _refuse(_consumer: object, _partitions: object) -> None:
    raise RuntimeError("the application's on_revoke failed")


@pytest.mark.parametrize("how", ["dropped", "close() raised"])
def test_a_dropped_consumer_is_freed_at_once_and_its_threads_end(
    kafka: KafkaTestKit, protocol: Protocol, collector_off: None, how: str
) -> None:
    """Dropped without close(), or after a close() that raised (the application's on_revoke
    failed: close() raises it once librdkafka closed, as upstream's close() raises it)."""
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, 10)
    before = set(threading.enumerate())
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol))  # keepalive="auto": its thread runs
    c.subscribe([topic], on_revoke=_refuse)
    _assigned(c)
    c.poll(0.5)
    assert any(t.name == "safeconsumer-keeper" for t in set(threading.enumerate()) - before)
    if how == "close() raised":
        with pytest.raises(RuntimeError, match="on_revoke failed"):
            c.close()
    dropped = weakref.ref(c)
    del c
    assert dropped() is None, "a reference cycle or a thread keeps the dropped consumer alive"
    _our_threads_end(before)


def _seconds_until_the_next_member_has_everything(
    kafka: KafkaTestKit, protocol: Protocol, make: Callable[[dict[str, object]], Consumer]
) -> float:
    """A first member (``make``) polls until assigned, then is dropped; seconds from the drop until
    a second member (raw) has every record. The first member commits nothing."""
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, RECORDS, partitions=2)
    group = kafka.name("g")
    first = make(kafka.consumer_conf(group, protocol, enable_auto_commit=False, max_poll_interval_ms=MAX_POLL_MS))
    first.subscribe([topic])
    _assigned(first)
    nxt = Consumer(kafka.consumer_conf(group, protocol, max_poll_interval_ms=MAX_POLL_MS))
    try:
        nxt.subscribe([topic])
        nxt.poll(0.5)  # it joins while the first member still owns everything
        dropped = time.monotonic()
        del first
        got: set[tuple[int, int]] = set()
        while len(got) < RECORDS:
            assert time.monotonic() - dropped < 3 * MAX_POLL_MS / 1000, f"{len(got)} of {RECORDS} records"
            msg = nxt.poll(0.2)
            if msg is not None and msg.error() is None:
                got.add((msg.partition(), msg.offset()))  # type: ignore[arg-type]
        return time.monotonic() - dropped
    finally:
        nxt.close()


def test_the_next_member_gets_every_record_about_as_soon_as_after_a_dropped_raw_consumer(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    raw = _seconds_until_the_next_member_has_everything(kafka, protocol, Consumer)
    safe = _seconds_until_the_next_member_has_everything(kafka, protocol, SafeConsumer)
    assert safe <= raw + 5, f"after a dropped SafeConsumer {safe:.1f}s, after a dropped raw Consumer {raw:.1f}s"


def test_a_dropped_aio_consumer_is_freed_at_once_and_its_threads_end(
    kafka: KafkaTestKit, protocol: Protocol, collector_off: None
) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, 10)
    before = set(threading.enumerate())

    async def main() -> tuple[weakref.ref[SafeAIOConsumer], weakref.ref[SafeConsumer]]:
        c = SafeAIOConsumer(kafka.consumer_conf(kafka.name("g"), protocol))
        me = weakref.ref(c)
        called: list[bool] = []

        async def on_assign(consumer: SafeAIOConsumer, partitions: object) -> None:
            called.append(consumer is me())  # the callback gets this consumer (held weakly underneath)

        await c.subscribe([topic], on_assign=on_assign)
        deadline = time.monotonic() + 60
        while not await c.assignment():
            assert time.monotonic() < deadline, "never assigned"
            await c.poll(0.1)
        assert called and all(called)
        refs = me, weakref.ref(c.consumer)
        del c
        return refs

    dropped, underneath = asyncio.run(main())
    # The executor's thread lets go of its last call's work item just after the loop got its
    # result: reference counting frees the consumer then, without a collection.
    deadline = time.monotonic() + 5
    while dropped() is not None or underneath() is not None:
        assert time.monotonic() < deadline, "a cycle or a thread keeps the dropped consumer alive"
        time.sleep(0.01)
    _our_threads_end(before)


class _Weakly(Consumer):
    """A raw consumer that a weak reference can watch (``Consumer`` itself cannot be)."""


def test_characterization_upstream_keeps_a_consumer_whose_close_raised_from_on_revoke(
    kafka: KafkaTestKit, collector_off: None
) -> None:
    """Why SafeConsumer keeps an application callback's exception out of librdkafka during close():
    when on_revoke raises inside a raw consumer's close() called from a function, confluent_kafka
    keeps that consumer alive after its last reference goes, also through a collection (a
    reference the C extension keeps, not a cycle). This test fails once confluent_kafka frees it."""
    topic = kafka.create_topic(partitions=1)
    c = _Weakly(kafka.consumer_conf(kafka.name("g")))
    c.subscribe([topic], on_revoke=_refuse)
    _assigned(c)

    def close(consumer: Consumer) -> None:
        consumer.close()

    with pytest.raises(RuntimeError, match="on_revoke failed"):
        close(c)
    dropped = weakref.ref(c)
    del c
    gc.collect()
    assert dropped() is not None, "confluent_kafka now frees a consumer whose close() raised"
