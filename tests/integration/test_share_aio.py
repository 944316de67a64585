"""SafeAIOShareConsumer against the real broker, in both acknowledgement modes.

Each test runs its coroutine with ``asyncio.run``. The groups' locks are long (60 s), so a record
handed out again within the tests' deadlines was given back, not left to run out its lock.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from typing import Any

import pytest
from confluent_kafka import Message, ShareConsumer

from safeconsumer import DeadLetter
from safeconsumer.aio import SafeAIOShareConsumer
from safeconsumer.testing import KafkaTestKit

from ..support import set_group_config
from .test_share_groups import LONG_LOCK, MODES, _conf, _peer_reads, _read_until

#: Each runs on Kafka 4.4.0 and on 4.3.1 (brokers upgrade before clients).
pytestmark = [pytest.mark.xdist_group("share-groups"), pytest.mark.kafka_versions]


def _prepared(kafka: KafkaTestKit, records: int) -> tuple[str, str]:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms=LONG_LOCK)
    kafka.produce(topic, records, partitions=1)
    return topic, group


async def _read(c: SafeAIOShareConsumer, count: int, *, ack: bool, timeout: float = 60) -> list[Message]:
    got: list[Message] = []

    async def reading() -> None:
        while len(got) < count:
            for m in await c.poll(0.5):
                if m.error() is None:
                    got.append(m)
                    if ack:
                        await c.acknowledge(m)

    await asyncio.wait_for(reading(), timeout)
    return got


@pytest.mark.parametrize("mode", MODES)
def test_records_are_read_and_acknowledged_without_blocking_the_loop(kafka: KafkaTestKit, mode: str) -> None:
    topic, group = _prepared(kafka, 30)

    async def main() -> tuple[list[int], Any, float]:
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:  # the loop stays free while the consumer waits for the broker
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        beat = asyncio.create_task(ticker())
        loop = asyncio.get_running_loop()
        began = loop.time()
        async with SafeAIOShareConsumer(_conf(kafka, group, mode)) as c:
            await c.subscribe([topic])
            assert await c.subscription() == [topic]
            got = await _read(c, 30, ack=mode == "explicit")
            result = await c.commit_sync(10)
        took = loop.time() - began
        stop.set()
        await beat
        return sorted(m.offset() or 0 for m in got), result, ticks / took

    offsets, result, tick_rate = asyncio.run(main())
    assert offsets == list(range(30))
    assert result and all(exc is None for exc in result.values()), result
    assert tick_rate > 20, f"the event loop ran {tick_rate:.1f} ticks a second: it was blocked"


@pytest.mark.parametrize("when", ["after librdkafka returned", "while librdkafka worked"])
@pytest.mark.parametrize("mode", MODES)
def test_a_cancelled_poll_gives_its_batch_back_at_once(
    kafka: KafkaTestKit, closing: list[ShareConsumer], mode: str, when: str
) -> None:
    topic, group = _prepared(kafka, 10)

    async def main() -> tuple[int, list[Message]]:
        loop = asyncio.get_running_loop()
        cancelled = threading.Event()
        async with SafeAIOShareConsumer(_conf(kafka, group, mode)) as c:
            await c.subscribe([topic])
            real_poll = c.consumer.poll
            got: list[int] = []
            task: asyncio.Task[Any] | None = None

            def poll(*args: Any, **kwargs: Any) -> Any:
                messages = real_poll(*args, **kwargs)
                if len(messages) and task is not None:
                    got.append(len(messages))
                    # The caller is cancelled now: before this call returns, or after.
                    loop.call_soon_threadsafe(task.cancel)
                    if when == "while librdkafka worked":
                        assert cancelled.wait(10), "the poll's task was not cancelled"
                return messages

            c.consumer.poll = poll  # type: ignore[method-assign]

            async def until_records() -> None:
                while not got:
                    await c.poll(0.5)

            task = asyncio.create_task(until_records())
            await asyncio.wait([task], timeout=60)
            cancelled.set()
            assert task.cancelled(), "the poll was not cancelled"
            assert got, "no batch came"
            # The next call runs after the batch went back: a commit accepts nothing of it.
            await c.commit_sync(10)
            # While this consumer is still open (its close() gives back what it holds): a peer has them.
            peer = _peer_reads(kafka, group, topic, closing)
            again = await asyncio.to_thread(
                _read_until, peer, lambda got: len(got) >= 10, timeout=30, what="all 10 read by the peer", ack=True
            )
            return got[0], again

    handed, again = asyncio.run(main())
    assert handed >= 1
    assert sorted(m.offset() or 0 for m in again) == list(range(10))
    assert all(m.delivery_count() == 2 for m in again if (m.offset() or 0) < handed), "a record was kept or accepted"


@pytest.mark.parametrize("mode", MODES)
def test_handle_runs_a_coroutine_and_dead_letters_what_fails(kafka: KafkaTestKit, mode: str) -> None:
    topic, group = _prepared(kafka, 3)
    dlt = kafka.create_topic(partitions=1)

    async def main() -> tuple[list[int], int]:
        handled: list[int] = []

        async def process(m: Message) -> None:
            await asyncio.sleep(0)
            if m.offset() == 1:
                raise ValueError("poison")
            handled.append(m.offset() or 0)

        async with SafeAIOShareConsumer(
            _conf(kafka, group, mode), poison=DeadLetter(dlt, retries=1, backoff=0.05)
        ) as c:
            await c.subscribe([topic])

            async def reading() -> None:
                while sorted(handled) != [0, 2] or c.consumer.poison.dead_lettered != 1:
                    for m in await c.poll(0.5):
                        if m.error() is None:
                            await c.handle(m, process)
                    await c.commit_sync(10)

            await asyncio.wait_for(reading(), 60)
            # Rejected, never handed out again: a marker produced after it is, alone.
            kafka.produce(topic, 1, partitions=1, start=3)

            async def marker() -> None:
                while 3 not in handled:
                    for m in await c.poll(0.5):
                        if m.error() is None:
                            await c.handle(m, process)
                    await c.commit_sync(10)

            await asyncio.wait_for(marker(), 30)
            return sorted(handled), c.consumer.poison.dead_lettered

    handled, dead_lettered = asyncio.run(main())
    assert handled == [0, 2, 3] and dead_lettered == 1
    assert kafka.end_offsets(dlt) == {0: 1}


def test_calls_after_close_raise_upstreams_errors(kafka: KafkaTestKit) -> None:
    group = kafka.name("g")

    async def main() -> list[tuple[type[BaseException], tuple[Any, ...]]]:
        c = SafeAIOShareConsumer(_conf(kafka, group))
        await c.close()
        errors: list[tuple[type[BaseException], tuple[Any, ...]]] = []
        for call in (lambda: c.poll(0.1), lambda: c.subscribe(["t"]), lambda: c.commit_sync(1)):
            try:
                await call()
            except Exception as exc:  # noqa: BLE001 - compared with upstream's below
                errors.append((type(exc), exc.args))
        return errors

    ours = asyncio.run(main())
    raw = ShareConsumer(_conf(kafka, group))
    raw.close()
    theirs: list[tuple[type[BaseException], tuple[Any, ...]]] = []
    for call in (lambda: raw.poll(0.1), lambda: raw.subscribe(["t"]), lambda: raw.commit_sync(1)):
        try:
            call()
        except Exception as exc:  # noqa: BLE001
            theirs.append((type(exc), exc.args))
    assert len(theirs) == 3
    assert [(t.__name__, a) for t, a in ours] == [(t.__name__, a) for t, a in theirs]


@pytest.mark.parametrize("mode", MODES)
def test_a_dropped_consumer_is_freed_where_it_is_dropped_and_its_batch_goes_back(
    kafka: KafkaTestKit, closing: list[ShareConsumer], collector_off: None, mode: str
) -> None:
    topic, group = _prepared(kafka, 10)

    async def main() -> tuple[weakref.ref[SafeAIOShareConsumer], weakref.ref[Any], int]:
        c = SafeAIOShareConsumer(_conf(kafka, group, mode))
        await c.subscribe([topic])
        handed = len(await _read(c, 1, ack=False))
        refs = weakref.ref(c), weakref.ref(c.consumer)
        del c
        return *refs, handed

    dropped, underneath, handed = asyncio.run(main())
    # The executor's thread lets go of its last call's work item just after the loop got its
    # result: reference counting frees the consumer then, without a collection.
    deadline = time.monotonic() + 5
    while dropped() is not None or underneath() is not None:
        assert time.monotonic() < deadline, "a cycle or a thread keeps the dropped consumer alive"
        time.sleep(0.01)
    assert handed >= 1
    peer = _peer_reads(kafka, group, topic, closing)
    again = _read_until(peer, lambda got: len(got) >= 10, timeout=30, what="all 10 read by the peer", ack=True)
    assert sorted(m.offset() or 0 for m in again) == list(range(10))
    deadline = time.monotonic() + 10
    while any(t.name.startswith("safeconsumer-aio-share") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the dropped consumer's executor thread never ended"
        time.sleep(0.05)


async def _a_batch(c: SafeAIOShareConsumer) -> Any:
    for _ in range(120):
        batch = await c.poll(0.5)
        if len(batch):
            return batch
    raise AssertionError("no batch within 60 s")


@pytest.mark.parametrize("mode", MODES)
def test_keepalive_gives_back_the_rest_of_the_batch_during_a_long_await(kafka: KafkaTestKit, mode: str) -> None:
    topic, group = kafka.create_topic(partitions=1), kafka.name("g")
    set_group_config(kafka, group, share_auto_offset_reset="earliest", share_record_lock_duration_ms="4000")
    kafka.produce(topic, 20, partitions=1)

    async def main() -> tuple[int, int, list[int], int]:
        async with SafeAIOShareConsumer(_conf(kafka, group, mode)) as c:
            await c.subscribe([topic])
            deadline = time.monotonic() + 15
            while c.consumer.group_settings.lock_ms != 4000:  # read at the subscription, off the loop
                assert time.monotonic() < deadline, "the group's lock was never read"
                await asyncio.sleep(0.05)
            batch = await _a_batch(c)
            first = next(iter(batch))
            async with c.keepalive():  # long work on the first record: past 3 s the rest goes back
                deadline = time.monotonic() + 10
                while c.released_early == 0:
                    assert time.monotonic() < deadline, "the rest was never given back"
                    await asyncio.sleep(0.05)
            if mode == "explicit":
                await c.acknowledge(first)
            result = await c.commit_sync(10)
            assert all(exc is None for exc in result.values()), result
            return len(batch), c.released_early, [m.offset() or 0 for m in batch], first.offset() or 0

    size, released, handed, first = asyncio.run(main())
    assert size > 1
    assert released == size - 1
    assert handed == [first]  # the iterator hands out nothing given back


def test_pause_topics_gives_back_what_was_not_reached(kafka: KafkaTestKit) -> None:
    topic, group = _prepared(kafka, 20)

    async def main() -> tuple[int, list[int], list[str], list[Message], int]:
        async with SafeAIOShareConsumer(_conf(kafka, group)) as c:
            await c.subscribe([topic])
            batch = await _a_batch(c)
            size = len(batch)
            first = next(iter(batch))
            await c.pause_topics(topic)
            paused = await c.paused_topics()
            handed = [m.offset() or 0 for m in batch]
            await c.poll(0.1)  # accepts the one record reached
            await c.resume_topics(topic)
            rest = await _read(c, 19, ack=False)
            return first.offset() or 0, handed, paused, rest, size

    first, handed, paused, rest, size = asyncio.run(main())
    assert paused == [topic]
    assert handed == [first]  # the rest given back, never handed out
    assert first not in {m.offset() for m in rest}
    assert sorted(m.offset() or 0 for m in rest) == [o for o in range(20) if o != first]
    assert all(m.delivery_count() == 2 for m in rest if (m.offset() or 0) < size)


def test_handle_and_keepalive_after_close_are_clear_errors_and_run_nothing(kafka: KafkaTestKit) -> None:
    ran: list[Message] = []

    async def process(m: Message) -> None:
        ran.append(m)

    async def main() -> None:
        c = SafeAIOShareConsumer(_conf(kafka, kafka.name("g")))
        await c.close()
        with pytest.raises(RuntimeError, match=r"handle\(\) on a closed SafeShareConsumer"):
            await c.handle(Message(topic="t", partition=0, offset=0), process)
        with pytest.raises(RuntimeError, match=r"keepalive\(\) on a closed SafeShareConsumer"):
            async with c.keepalive():
                pass

    asyncio.run(main())
    assert ran == []
