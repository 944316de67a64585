"""SafeAIOConsumer against the real broker, under every protocol (issue: asyncio drop-in).

Each test runs its coroutine with ``asyncio.run``; the loop's responsiveness is measured by a
ticker task where it matters.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.aio import AIOConsumer

from safeconsumer import delivery_stats
from safeconsumer.aio import SafeAIOConsumer
from safeconsumer.testing import KafkaTestKit, Protocol

from ..support import Received


async def _until(condition: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"


def test_every_aioconsumer_method_is_there_with_its_signature() -> None:
    """Fails when the installed AIOConsumer gains a public method SafeAIOConsumer lacks."""
    theirs = {n: m for n, m in inspect.getmembers(AIOConsumer) if not n.startswith("_") and callable(m)}
    for name, method in theirs.items():
        mine = getattr(SafeAIOConsumer, name, None)
        assert mine is not None, f"SafeAIOConsumer lacks AIOConsumer.{name}"
        assert inspect.iscoroutinefunction(mine) == inspect.iscoroutinefunction(method), name
    for name in ("__aenter__", "__aexit__"):
        assert inspect.iscoroutinefunction(getattr(SafeAIOConsumer, name))
    upstream = list(inspect.signature(AIOConsumer.__init__).parameters)
    assert list(inspect.signature(SafeAIOConsumer.__init__).parameters)[: len(upstream)] == upstream


def test_bad_input_is_refused_as_upstream_refuses_it() -> None:
    async def main() -> None:
        for cls in (AIOConsumer, SafeAIOConsumer):
            try:
                cls({"group.id": "g"}, max_workers=0)
            except ValueError as exc:
                assert str(exc) == "max_workers must be at least 1"
            else:
                raise AssertionError(f"{cls.__name__} accepted max_workers=0")

    asyncio.run(main())
    try:
        SafeAIOConsumer({"group.id": "g"})
    except RuntimeError as exc:
        assert "no running event loop" in str(exc)
    else:
        raise AssertionError("created outside a running loop")


def test_records_pause_marks_and_callbacks_across_a_peer_joining_and_leaving(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """I1-I4 through the async facade: a topic mark set from inside on_assign (a re-entrant call)
    and a partition mark survive a peer joining and leaving; every record arrives exactly once;
    nothing of a paused partition is returned."""
    topic, held = kafka.create_topic(partitions=2), kafka.create_topic(partitions=1)
    group = kafka.name("g")
    kafka.produce(topic, 200, partitions=2)
    kafka.produce(held, 20, partitions=1)

    async def main() -> None:
        c = SafeAIOConsumer(kafka.consumer_conf(group, protocol))
        moves: list[str] = []
        lags: list[float] = []

        async def on_assign(consumer: SafeAIOConsumer, partitions: list[TopicPartition]) -> None:
            assert consumer is c
            moves.append("assign")
            await consumer.pause_topics([held])  # a call back into the consumer, from its callback

        async def on_revoke(consumer: SafeAIOConsumer, partitions: list[TopicPartition]) -> None:
            moves.append("revoke")

        async def ticker() -> None:
            while True:
                start = time.monotonic()
                await asyncio.sleep(0.01)
                lags.append(time.monotonic() - start - 0.01)

        tick = asyncio.create_task(ticker())
        got = Received()

        async def read(timeout: float = 0.2) -> None:
            for msg in await c.consume(50, timeout):
                if msg.error() is None:
                    paused = {(tp.topic, tp.partition) for tp in await c.paused()}
                    assert (msg.topic(), msg.partition()) not in paused, "I1: a record of a paused partition"
                    assert await c.owns(msg), "I2: a record of an unowned partition"
                got.add(msg)

        await c.subscribe([topic, held], on_assign=on_assign, on_revoke=on_revoke)

        async def has_some() -> bool:
            await read()
            return len(got.records) >= 50

        await _until(has_some, timeout=45, what="the first records")
        peer, rp = Consumer(kafka.consumer_conf(group, protocol)), Received()
        peer.subscribe([topic, held])

        async def shared() -> bool:
            await read()
            rp.add(await asyncio.to_thread(peer.poll, 0.1))
            return bool(peer.assignment()) and len(await c.assignment()) < 3

        await _until(shared, timeout=60, what="the peer to get partitions")
        await asyncio.to_thread(peer.close)

        async def all_back() -> bool:
            await read()
            return len(await c.assignment()) == 3 and len(got.records) + len(rp.records) >= 200

        await _until(all_back, timeout=60, what="every partition back and every record read")
        assert [tp.topic for tp in await c.paused()] == [held]
        ours = [r for r in got.records if r[0] == topic]
        theirs = [r for r in rp.records if r[0] == topic]
        assert not [r for r in got.records if r[0] == held], "records of the paused topic were returned"
        assert sorted(int(r[3]) for r in ours + theirs) >= list(range(200))
        assert len({(r[1], r[2]) for r in ours}) == len(ours), "a record was returned twice"
        assert "revoke" in moves and moves.count("assign") >= 2
        tick.cancel()
        await c.close()
        assert max(lags) < 0.5, f"the event loop was blocked for {max(lags):.2f}s"

    asyncio.run(main())


def test_cancelled_polls_and_consumes_lose_nothing(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """Cancellation (task.cancel, asyncio.timeout) while librdkafka works: every record still
    arrives exactly once, in order per partition, and the committed offsets cover only those."""
    topic = kafka.create_topic(partitions=2)
    records = 400
    kafka.produce(topic, records, partitions=2)
    group = kafka.name("g")

    async def main() -> None:
        c = SafeAIOConsumer(kafka.consumer_conf(group, protocol))
        await c.subscribe([topic])
        got = Received()
        cancelled = 0
        deadline = time.monotonic() + 90
        while len(got.records) < records:
            assert time.monotonic() < deadline, f"only {len(got.records)} of {records} records"
            call: Callable[[], Awaitable[Any]] = (lambda: c.consume(7, 0.5)) if cancelled % 2 else (lambda: c.poll(0.5))
            task = asyncio.ensure_future(call())
            await asyncio.sleep(0.0005 * (cancelled % 5))
            if not task.done():
                task.cancel()
                cancelled += 1
            try:
                result = await task
            except asyncio.CancelledError:
                continue
            for msg in result if isinstance(result, list) else [result]:
                got.add(msg)
            try:
                async with asyncio.timeout(0.001):
                    got.add(await c.poll(0.5))
            except TimeoutError:
                cancelled += 1
        assert cancelled > 10, f"only {cancelled} calls were cancelled: the test proved little"
        per_partition: dict[int, list[int]] = {}
        for _t, partition, offset, _v in got.records:
            per_partition.setdefault(partition, []).append(offset)
        for partition, offsets in per_partition.items():
            assert offsets == list(range(len(offsets))), f"partition {partition}: lost, repeated or reordered"
        assert len(got.records) == records
        await c.close()

    asyncio.run(main())


def test_close_from_another_task_while_a_poll_waits_leaves_no_thread(kafka: KafkaTestKit, protocol: Protocol) -> None:
    topic = kafka.create_topic(partitions=1)

    async def main() -> None:
        before = {t.ident for t in threading.enumerate()}
        c = SafeAIOConsumer(kafka.consumer_conf(kafka.name("g"), protocol))
        await c.subscribe([topic])
        waiting = asyncio.create_task(c.poll(3.0))
        await asyncio.sleep(0.2)
        await asyncio.wait_for(c.close(), timeout=30)
        assert await waiting is None
        try:
            await c.poll(0)
        except RuntimeError as exc:
            assert str(exc).startswith("Consumer closed")
        else:
            raise AssertionError("poll() after close() did not raise")
        left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        assert not left, f"threads left behind after close(): {left}"

    asyncio.run(main())


def test_a_coroutine_awaiting_longer_than_max_poll_interval_stays_in_the_group(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """I5: ``await asyncio.sleep(2 x max.poll.interval.ms)`` outside and inside ``keepalive()``."""
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    max_poll = 6.0  # no shorter than the kit's 6 s session: a broker slowed by the suite's load must not evict
    extra: dict[str, Any] = {"max_poll_interval_ms": int(max_poll * 1000)}

    async def main() -> None:
        c = SafeAIOConsumer(kafka.consumer_conf(group, protocol, **extra), keepalive_after=1.0)
        moves: list[str] = []

        async def note(_c: SafeAIOConsumer, partitions: list[TopicPartition]) -> None:
            moves.append(f"{len(partitions)}")

        await c.subscribe([topic], on_revoke=note, on_lost=note)

        async def assigned() -> bool:
            await c.poll(0.2)
            return len(await c.assignment()) == 2

        await _until(assigned, timeout=45, what="the assignment")
        await asyncio.sleep(2 * max_poll)  # the automatic keepalive
        assert await c.poll(0.5) is None
        async with c.keepalive():
            await asyncio.sleep(2 * max_poll)
        assert await c.poll(0.5) is None
        assert moves == [], f"the member was evicted: {moves}"
        assert len(await c.assignment()) == 2
        await c.close()

    asyncio.run(main())


def test_a_consumer_mark_and_partition_marks_across_a_peer_joining_and_leaving(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    """``await pause()`` (the whole consumer) and ``await pause([tp])`` are intent (I4): through two
    rebalances nothing is returned (I1) and every owned partition stays paused; after
    ``await resume()`` the partition that stayed keeps its mark, the one that went to the peer
    (and came back in a later rebalance) lost it."""
    topic = kafka.create_topic(partitions=2)
    group = kafka.name("g")
    kafka.produce(topic, 100, partitions=2)

    async def main() -> None:
        c = SafeAIOConsumer(kafka.consumer_conf(group, protocol))
        await c.subscribe([topic])
        got = Received()

        async def owns_both() -> bool:
            await c.poll(0.1)
            return len(await c.assignment()) == 2

        await _until(owns_both, timeout=45, what="the assignment")
        await c.pause()
        await c.pause([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        # The peer commits nothing: the partition it reads comes back to c with all 50 records.
        peer = Consumer(kafka.consumer_conf(group, protocol, enable_auto_commit=False))
        peer.subscribe([topic])

        async def quiet_poll() -> None:
            msg = await c.poll(0.1)
            assert msg is None or msg.error() is not None, "I1: a record returned while the consumer is paused"
            assert {(tp.topic, tp.partition) for tp in await c.paused()} == {
                (tp.topic, tp.partition) for tp in await c.assignment()
            }, "an owned partition is not paused under the consumer mark"

        async def shared() -> bool:
            await quiet_poll()
            await asyncio.to_thread(peer.poll, 0.1)
            return bool(peer.assignment()) and len(await c.assignment()) == 1

        await _until(shared, timeout=60, what="the peer to take a partition")
        kept = (await c.assignment())[0].partition
        await asyncio.to_thread(peer.close)

        async def both_back() -> bool:
            await quiet_poll()
            return len(await c.assignment()) == 2

        await _until(both_back, timeout=60, what="both partitions back")
        await c.resume()
        state = await c.pause_state()
        assert not state.consumer
        assert [tp.partition for tp in await c.paused()] == [kept], f"marks after two rebalances: {state}"
        moved = 1 - kept

        async def moved_partition_read() -> bool:
            msg = await c.poll(0.2)
            got.add(msg)
            assert msg is None or msg.error() is not None or msg.partition() == moved, "a record of a marked partition"
            return len(got.records) >= 50

        await _until(moved_partition_read, timeout=60, what="the unmarked partition's records")
        await c.close()

    asyncio.run(main())


def test_a_member_s_commit_for_a_partition_it_does_not_own_is_dropped(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """I7 through the async facade: the owned partition's offset is committed, the other dropped."""
    mine, other = kafka.create_topic(partitions=1), kafka.create_topic(partitions=1)
    group = kafka.name("g")
    kafka.produce(mine, 5, partitions=1)
    kafka.produce(other, 5, partitions=1)

    async def main() -> None:
        c = SafeAIOConsumer(kafka.consumer_conf(group, protocol, enable_auto_commit=False))
        await c.subscribe([mine])

        async def owns() -> bool:
            await c.poll(0.1)
            return len(await c.assignment()) == 1

        await _until(owns, timeout=45, what="the assignment")
        before = delivery_stats(c.consumer).offsets_dropped
        await c.commit(offsets=[TopicPartition(mine, 0, 3), TopicPartition(other, 0, 4)], asynchronous=False)
        assert delivery_stats(c.consumer).offsets_dropped == before + 1
        await c.close()

    asyncio.run(main())
    assert kafka.committed(group, mine, 1) == {0: 3}
    assert kafka.committed(group, other, 1) == {0: -1001}, "I7: an offset of a partition not owned was committed"


def test_consuming_while_another_thread_toggles_pause_marks(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """await consume() while another thread toggles pause marks on the SafeConsumer underneath
    (each pause and resume restarts librdkafka's fetch of that partition, while a consume()
    runs on an executor thread): every record exactly once, in order, and all committed."""
    topic = kafka.create_topic(partitions=4)
    n = 20000
    kafka.produce(topic, n, partitions=4)
    got = Received()
    stop = threading.Event()
    toggles = 0

    async def main() -> None:
        c = SafeAIOConsumer(kafka.consumer_conf(kafka.name("g"), protocol, enable_auto_commit=False))
        await c.subscribe([topic])
        underneath = c.consumer  # thread-safe: the toggling thread calls it directly

        def toggle() -> None:
            nonlocal toggles
            rng = random.Random(11)
            while not stop.is_set():
                tp = TopicPartition(topic, rng.randrange(4))
                underneath.pause([tp])
                stop.wait(0.002)  # let the loop meet the pause: records are withheld, then released
                underneath.resume([tp])
                toggles += 1
                stop.wait(0.01)

        thread = threading.Thread(target=toggle, name="toggler")
        try:
            deadline = time.monotonic() + 120
            while len(got.records) < n:
                assert time.monotonic() < deadline, f"{len(got.records)} of {n} records after 120 s"
                for msg in await c.consume(25, 0.2):
                    got.add(msg)
                await asyncio.sleep(0.002)  # the application's work on the batch
                if got.records and not thread.is_alive() and not stop.is_set():
                    thread.start()
            await c.commit(asynchronous=False)
            committed = await c.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
            assert sum(tp.offset for tp in committed) == n
        finally:
            stop.set()
            if thread.ident is not None:
                thread.join()
            await c.close()

    asyncio.run(main())
    assert toggles > 50, "the toggling thread barely ran: the test proved nothing"
    assert len(got.records) == n, f"{len(got.records)} records delivered, {n} produced"
    for p in range(4):
        offsets = [r[2] for r in got.records if r[1] == p]
        assert offsets == list(range(len(offsets))), f"partition {p}: a record lost, repeated or out of order"
