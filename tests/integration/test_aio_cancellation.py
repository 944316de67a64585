"""I8 for cancelled asyncio calls: what a cancelled ``poll()``/``consume()`` got never counts as
processed, whatever the application awaits next (issue: "safer", part 1).

A cancellation can meet a receive at three points: before its work starts (nothing read), while
librdkafka works for it (the work sees the cancellation and gives the records back under the
consumer's lock), and after the work returned but before the caller resumed (the event loop was
busy: the records were handed out, to nobody). Each point is set up deterministically below; then
the application awaits each coroutine that stores or commits, and the group's committed offset
must stay at what the application really received.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

import pytest
from confluent_kafka import Consumer, TopicPartition

from safeconsumer import delivery_stats
from safeconsumer.aio import SafeAIOConsumer
from safeconsumer.consumer._port import port_of
from safeconsumer.testing import KafkaTestKit, Protocol

from ..support import Received

# The "during" cases cancel a call found waiting inside librdkafka by probing the consumer's lock, and
# need the records produced meanwhile to reach it within its timeout: under make test's parallel load
# two of them failed once each (the work returned before the records came), and passed alone every
# time. Timing-sensitive stimuli: they run alone, after the parallel phase.
pytestmark = pytest.mark.serial

Point = Literal["before", "during", "after"]
FIRST = 50  # records the application receives before the cancelled call
BATCH = 100  # what the cancelled consume() asks for (and gets, at the points that read)
#: How long the lock must stay held for the "during" case to take it as the work waiting in librdkafka.
HELD_FOR = 0.3


async def _receive_exactly(c: SafeAIOConsumer, got: Received, count: int, *, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(got.records) < count:
        assert time.monotonic() < deadline, f"only {len(got.records)} of {count} records within {timeout}s"
        for msg in await c.consume(count - len(got.records), 1.0):
            got.add(msg)
    assert len(got.records) == count


async def _cancel_a_consume(c: SafeAIOConsumer, kafka: KafkaTestKit, topic: str, point: Point) -> None:
    """A ``consume(BATCH, ...)`` whose caller is cancelled at ``point``; BATCH more records exist after it."""
    if point == "before":
        kafka.produce(topic, BATCH, start=FIRST)
        task = asyncio.ensure_future(c.consume(BATCH, 5))
        task.cancel()  # before the coroutine ran at all
    elif point == "during":
        # Nothing to read yet: the work waits inside librdkafka (holding the consumer's lock); the
        # caller is cancelled there, then the records arrive and the work returns them to nobody.
        task = asyncio.ensure_future(c.consume(BATCH, 10))
        lock: Any = port_of(c.consumer, "poll").async_link().lock  # an RLock
        # Held for a while, not for a moment: another short holder of the lock (a read-ahead of
        # the aio adapter, say) must not pass for the waiting work.
        deadline = time.monotonic() + 30
        held_since: float | None = None
        while held_since is None or time.monotonic() - held_since < HELD_FOR:
            if lock.acquire(blocking=False):
                lock.release()
                held_since = None
            elif held_since is None:
                held_since = time.monotonic()
            assert time.monotonic() < deadline, "the consume() never reached librdkafka"
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        kafka.produce(topic, BATCH, start=FIRST)
        c.consumer.paused()  # takes the lock: the work has returned by now
        tp = TopicPartition(topic, 0)
        assert Consumer.position(c.consumer, [tp])[0].offset == FIRST + BATCH, "librdkafka gave the work the batch"
    else:
        kafka.produce(topic, BATCH, start=FIRST)
        delivered = delivery_stats(c.consumer).delivered
        task = asyncio.ensure_future(c.consume(BATCH, 5))
        await asyncio.sleep(0)  # the coroutine runs and hands its work to the executor
        # The loop is busy from here on (this blocks it): the work returns, its caller cannot resume.
        deadline = time.monotonic() + 30
        while delivery_stats(c.consumer).delivered < delivered + BATCH:
            assert time.monotonic() < deadline, "the consume() never got its records"
            time.sleep(0.005)
        c.consumer.paused()  # takes the lock: the work has returned its result by now
        task.cancel()
    result = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(result[0], asyncio.CancelledError), f"the consume() was not cancelled: {result[0]!r}"


@pytest.mark.parametrize("point", ["before", "during", "after"])
def test_a_cancelled_consume_is_never_committed_by_what_the_app_awaits_next(
    kafka: KafkaTestKit, protocol: Protocol, point: Point
) -> None:
    """position(), commit(), then the rest read in order, then close(): every offset the group
    commits is one the application reached."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, FIRST)
    group = kafka.name("g")

    async def main() -> None:
        c = SafeAIOConsumer(kafka.consumer_conf(group, protocol))
        await c.subscribe([topic])
        got = Received()
        await _receive_exactly(c, got, FIRST)
        await _cancel_a_consume(c, kafka, topic, point)
        assert [tp.offset for tp in await c.position([TopicPartition(topic, 0)])] == [FIRST]
        assert [tp.offset for tp in await c.commit(asynchronous=False)] == [FIRST]
        assert kafka.committed(group, topic, 1) == {0: FIRST}
        await _receive_exactly(c, got, FIRST + BATCH)
        assert [r[2] for r in got.records] == list(range(FIRST + BATCH)), "lost, repeated or reordered"
        await c.close()
        assert kafka.committed(group, topic, 1) == {0: FIRST + BATCH}

    asyncio.run(main())


@pytest.mark.parametrize("point", ["during", "after"])
@pytest.mark.parametrize("then", ["close", "unsubscribe", "store_offsets"])
def test_a_cancelled_consume_is_never_stored_by_close_unsubscribe_or_a_store(
    kafka: KafkaTestKit, protocol: Protocol, point: Point, then: str
) -> None:
    """Right after the cancellation the application closes, unsubscribes, or stores the offset of
    the last record it received and commits: the group's committed offset stays at what it
    received, and the next member reads the cancelled records."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, FIRST)
    group = kafka.name("g")

    async def main() -> None:
        # The application's own store needs the automatic one off (else upstream refuses it).
        extra = {"enable_auto_offset_store": False} if then == "store_offsets" else {}
        c = SafeAIOConsumer(kafka.consumer_conf(group, protocol, **extra))
        await c.subscribe([topic])
        got = Received()
        last = None
        deadline = time.monotonic() + 60
        while len(got.records) < FIRST:
            assert time.monotonic() < deadline
            for msg in await c.consume(FIRST - len(got.records), 1.0):
                got.add(msg)
                last = msg
        await _cancel_a_consume(c, kafka, topic, point)
        if then == "unsubscribe":
            await c.unsubscribe()
        elif then == "store_offsets":
            assert last is not None
            await c.store_offsets(message=last)
            await c.commit(asynchronous=False)
        await c.close()
        assert kafka.committed(group, topic, 1) == {0: FIRST}
        nxt = SafeAIOConsumer(kafka.consumer_conf(group, protocol))
        await nxt.subscribe([topic])
        rest = Received()
        await _receive_exactly(nxt, rest, BATCH)
        assert [r[2] for r in rest.records] == list(range(FIRST, FIRST + BATCH))
        await nxt.close()

    asyncio.run(main())
