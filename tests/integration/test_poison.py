"""Poison records against the real broker, every protocol: SafeDeserializingConsumer as upstream's
DeserializingConsumer, and the Skip and DeadLetter policies (SPEC: poison records)."""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, DeserializingConsumer, Message, TopicPartition
from confluent_kafka.error import ValueDeserializationError
from confluent_kafka.serialization import SerializationContext

from safeconsumer import (
    DeadLetter,
    DeadLetterError,
    PoisonLimitError,
    SafeConsumer,
    SafeDeserializingConsumer,
    Skip,
)
from safeconsumer.testing import KafkaTestKit, Protocol, unique_name, wait_until

POISON = b"poison"


def strict_utf8(data: bytes | None, _ctx: SerializationContext) -> str | None:
    """A value deserializer that refuses the poison records."""
    if data is not None and data.startswith(POISON):
        raise ValueError("not a record of ours")
    return None if data is None else data.decode()


def produce(kit: KafkaTestKit, topic: str, values: list[bytes]) -> None:
    for i, value in enumerate(values):
        kit.producer.produce(topic, value=value, key=f"k{i}".encode(), headers=[("origin", b"test")], partition=0)
    assert kit.producer.flush(30) == 0


def values_with_poison(n: int, poison_at: set[int]) -> list[bytes]:
    return [POISON + b"-" + str(i).encode() if i in poison_at else str(i).encode() for i in range(n)]


def read_all(kit: KafkaTestKit, topic: str, n: int) -> list[Message]:
    """Every record of ``topic`` (one partition), read by a raw consumer."""
    c = Consumer({**kit.client_config, "group.id": unique_name("read"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[Message] = []
    try:
        wait_until(
            lambda: len(got) >= n,
            timeout=30,
            what=f"{n} records of {topic}",
            step=lambda: got.extend(m for m in [c.poll(0.2)] if m is not None and m.error() is None),
        )
    finally:
        c.close()
    return got


def poll_values(c: Any, n: int, *, timeout: float = 45, handler: Any = None) -> list[Any]:
    """The values of the first ``n`` records ``c.poll()`` returns; with ``handler``, what
    ``c.handle(msg, handler)`` returned for each."""
    out: list[Any] = []

    def step() -> None:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            out.append(msg.value() if handler is None else c.handle(msg, handler))

    wait_until(lambda: len(out) >= n, timeout=timeout, what=f"{n} records", step=step)
    return out


def _origin(dead: Message) -> tuple[int, int]:
    headers: dict[str, Any] = dict(dead.headers() or [])
    return int(headers["safeconsumer.dlt.original.partition"]), int(headers["safeconsumer.dlt.original.offset"])


def _at_least(items: list[Any], n: int) -> bool:
    return len(items) >= n


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for c in made:
        c.close()


def test_without_a_policy_it_is_upstreams_deserializing_consumer(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any]
) -> None:
    """The same outcomes, call by call, as confluent_kafka.DeserializingConsumer: records
    deserialized, ValueDeserializationError with the record at the poison, consume() refused."""
    topic = kafka.create_topic()
    produce(kafka, topic, values_with_poison(8, {4}))
    outcomes: dict[str, list[Any]] = {}
    for cls in (DeserializingConsumer, SafeDeserializingConsumer):
        c = cls({**kafka.consumer_conf(kafka.name("g"), protocol), "value.deserializer": strict_utf8})
        closing.append(c)
        c.subscribe([topic])
        seen: list[Any] = []

        def step(c: Any = c, seen: list[Any] = seen) -> None:
            try:
                msg = c.poll(0.2)
            except ValueDeserializationError as exc:
                record = exc.kafka_message
                assert record is not None
                seen.append(("raised", record.offset(), record.value()))
                return
            if msg is not None:
                seen.append(msg.value())

        wait_until(functools.partial(_at_least, seen, 8), timeout=45, what="8 outcomes", step=step)
        with pytest.raises(NotImplementedError):
            c.consume(1, 0)
        outcomes[cls.__name__] = seen
    expected = ["0", "1", "2", "3", ("raised", 4, POISON + b"-4"), "5", "6", "7"]
    assert outcomes["DeserializingConsumer"] == expected, "upstream's behaviour changed"
    assert outcomes["SafeDeserializingConsumer"] == expected
    assert isinstance(closing[1], SafeConsumer)


def test_skip_logs_counts_and_goes_on(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, values_with_poison(20, {3, 11}))
    c = SafeDeserializingConsumer(
        {**kafka.consumer_conf(group, protocol), "value.deserializer": strict_utf8}, poison=Skip()
    )
    closing.append(c)
    c.subscribe([topic])
    assert poll_values(c, 18) == [str(i) for i in range(20) if i not in (3, 11)]
    c.close()
    skipped = [r.getMessage() for r in caplog.records if "skipped a record" in r.getMessage()]
    assert len(skipped) == 2
    assert f"{topic} [0] at offset 3 (confluent_kafka.error.ValueDeserializationError)" in skipped[0]
    assert not any("poison" in r.getMessage() for r in caplog.records), "a payload reached the log"
    assert kafka.committed(group, topic, 1) == {0: 20}


def test_dead_letter_after_deserialization_keeps_the_original_record(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any]
) -> None:
    topic, dlq, group = kafka.create_topic(), kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, values_with_poison(20, {7}))
    c = SafeDeserializingConsumer(
        {**kafka.consumer_conf(group, protocol), "value.deserializer": strict_utf8}, poison=DeadLetter(dlq)
    )
    closing.append(c)
    c.subscribe([topic])
    assert poll_values(c, 19) == [str(i) for i in range(20) if i != 7]
    c.close()
    [dead] = read_all(kafka, dlq, 1)
    assert dead.value() == POISON + b"-7" and dead.key() == b"k7"
    headers = dict(dead.headers() or [])
    assert headers["origin"] == b"test", "the original headers are kept"
    assert headers["safeconsumer.dlt.original.topic"] == topic.encode()
    assert headers["safeconsumer.dlt.original.offset"] == b"7"
    assert headers["safeconsumer.dlt.group"] == group.encode()
    assert headers["safeconsumer.dlt.stage"] == b"deserialize"
    assert headers["safeconsumer.dlt.exception.class"] == b"confluent_kafka.error.ValueDeserializationError"
    assert kafka.committed(group, topic, 1) == {0: 20}


def test_handle_retries_then_dead_letters_and_keeps_the_order(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any]
) -> None:
    topic, dlq, group = kafka.create_topic(), kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, [b"0", b"flaky", b"2", b"bad", b"4"])
    tries: dict[bytes, int] = {}
    done: list[bytes] = []

    def handler(msg: Message) -> str:
        value = msg.value() or b""
        tries[value] = tries.get(value, 0) + 1
        if value == b"bad" or (value == b"flaky" and tries[value] < 2):
            raise RuntimeError(f"cannot handle offset {msg.offset()}")
        done.append(value)
        return "ok"

    c = SafeConsumer(kafka.consumer_conf(group, protocol), poison=DeadLetter(dlq, retries=2, backoff=0.05))
    closing.append(c)
    c.subscribe([topic])
    results = poll_values(c, 5, handler=handler)
    assert results == ["ok", "ok", "ok", None, "ok"]
    assert done == [b"0", b"flaky", b"2", b"4"], "order per partition kept through the retries"
    assert tries[b"flaky"] == 2 and tries[b"bad"] == 3
    c.close()
    [dead] = read_all(kafka, dlq, 1)
    headers = dict(dead.headers() or [])
    assert dead.value() == b"bad" and headers["safeconsumer.dlt.stage"] == b"process"
    assert headers["safeconsumer.dlt.attempts"] == b"3"
    assert headers["safeconsumer.dlt.exception.class"] == b"RuntimeError"
    assert headers["safeconsumer.dlt.exception.message"] == b"cannot handle offset 3"
    assert kafka.committed(group, topic, 1) == {0: 5}


def test_an_unwritable_dead_letter_topic_stores_nothing_and_the_record_comes_again(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any]
) -> None:
    topic, group = kafka.create_topic(), kafka.name("g")
    dlq = kafka.name("dlq")  # not created yet: the broker does not create topics on its own
    produce(kafka, topic, [b"0", b"bad", b"2"])

    def handler(msg: Message) -> str:
        if msg.value() == b"bad":
            raise RuntimeError("bad record")
        return "ok"

    policy = DeadLetter(dlq, retries=0, timeout=3, producer_config={"message.timeout.ms": 2500})
    c = SafeConsumer(kafka.consumer_conf(group, protocol, enable_auto_commit=False), poison=policy)
    closing.append(c)
    c.subscribe([topic])
    handled: list[Any] = []
    failures: list[int] = []

    def step() -> None:
        msg = c.poll(0.2)
        if msg is None or msg.error() is not None:
            return
        try:
            handled.append((msg.offset(), c.handle(msg, handler)))
        except DeadLetterError:
            failures.append(msg.offset() or 0)
            c.commit(asynchronous=False)  # commits what was processed: never the record that failed

    wait_until(lambda: failures, timeout=45, what="a failed dead-letter write", step=step)
    assert handled == [(0, "ok")]
    assert kafka.committed(group, topic, 1) == {0: 1}
    kafka.create_topic(dlq)  # the dead-letter topic recovers
    wait_until(lambda: len(handled) >= 3, timeout=45, what="the rest after recovery", step=step)
    assert handled == [(0, "ok"), (1, None), (2, "ok")], "the record that failed came again, first"
    c.commit(asynchronous=False)
    assert kafka.committed(group, topic, 1) == {0: 3}
    assert [m.value() for m in read_all(kafka, dlq, 1)] == [b"bad"]


def test_too_many_dead_letters_stop_the_consumer(kafka: KafkaTestKit, protocol: Protocol, closing: list[Any]) -> None:
    topic, dlq, group = kafka.create_topic(), kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, values_with_poison(10, {1, 2, 3, 4}))
    c = SafeDeserializingConsumer(
        {**kafka.consumer_conf(group, protocol), "value.deserializer": strict_utf8},
        poison=DeadLetter(dlq, max_dead_letters=2, window=600),
    )
    closing.append(c)
    c.subscribe([topic])
    got: list[Any] = []
    raised: list[PoisonLimitError] = []

    def step() -> None:
        try:
            msg = c.poll(0.2)
        except PoisonLimitError as exc:
            raised.append(exc)
            return
        if msg is not None:
            got.append(msg.value())

    wait_until(lambda: raised, timeout=45, what="PoisonLimitError", step=step)
    assert got == ["0"]
    assert "max_dead_letters=2" in str(raised[0])
    with pytest.raises(PoisonLimitError):
        c.poll(0)
    assert len(read_all(kafka, dlq, 3)) == 3, "the third write happened, then the consumer stopped"


_KILLED_AFTER_THE_WRITE = """
import sys, time
from safeconsumer import DeadLetter, SafeConsumer

bootstrap, topic, dlq, group, protocol = sys.argv[1:6]
conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "auto.commit.interval.ms": 100}
if protocol == "consumer":
    conf["group.protocol"] = "consumer"
else:
    conf.update({"partition.assignment.strategy": protocol, "session.timeout.ms": 6000,
                 "heartbeat.interval.ms": 500})
c = SafeConsumer(conf, poison=DeadLetter(dlq, retries=0), keepalive="off")
c.subscribe([topic])

def fail(msg):
    raise RuntimeError("cannot handle it")

while True:
    msg = c.poll(0.2)
    if msg is None or msg.error() is not None:
        continue
    if msg.value() == b"bad":
        c.handle(msg, fail)  # written to the dead-letter topic and acknowledged
        print("written", flush=True)
        time.sleep(3600)  # killed here: it never comes back, so nothing is stored for it
    print("ok", msg.offset(), flush=True)
"""


def test_a_process_killed_between_the_dead_letter_write_and_the_store_writes_it_at_most_once_more(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any]
) -> None:
    import subprocess
    import sys

    topic, dlq, group = kafka.create_topic(), kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, [b"0", b"1", b"bad", b"3", b"4"])
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_AFTER_THE_WRITE, kafka.bootstrap_servers, topic, dlq, group, protocol],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        stdout = proc.stdout
        wait_until(
            lambda: "written" in lines,
            timeout=60,
            what="the dead-letter write",
            step=lambda: lines.append(stdout.readline().strip()),
        )
    finally:
        proc.kill()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert lines[:2] == ["ok 0", "ok 1"]
    # The next owner gets the record again (its offset was never stored) and writes it once more.
    handled: list[Any] = []

    def fail_bad(msg: Message) -> str:
        if msg.value() == b"bad":
            raise RuntimeError("cannot handle it")
        return str(msg.offset())

    c = SafeConsumer(kafka.consumer_conf(group, protocol), poison=DeadLetter(dlq, retries=0))
    closing.append(c)
    c.subscribe([topic])

    def step() -> None:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            handled.append((msg.offset(), c.handle(msg, fail_bad)))

    wait_until(lambda: any(o == 4 for o, _ in handled), timeout=60, what="the next owner's records", step=step)
    # Records before it may come again too (stored, maybe not committed before the kill): at least once.
    assert [h for h in handled if h[0] >= 2] == [(2, None), (3, "3"), (4, "4")], "the record came again, then the rest"
    c.close()
    dead = read_all(kafka, dlq, 2)
    assert [m.value() for m in dead] == [b"bad", b"bad"], "at most once more, never zero times"
    assert kafka.committed(group, topic, 1) == {0: 5}


def test_the_dead_letters_tool_lists_and_replays(kafka: KafkaTestKit, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from safeconsumer.health.doctor import main

    topic, dlq, group = kafka.create_topic(), kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, [b"0", b"bad", b"2"])
    c = SafeConsumer(kafka.consumer_conf(group, "range"), poison=DeadLetter(dlq, retries=0))
    handled: list[Any] = []

    def fail_bad(msg: Message) -> str:
        if msg.value() == b"bad":
            raise RuntimeError("bad record")
        return "ok"

    def step() -> None:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            handled.append(c.handle(msg, fail_bad))

    c.subscribe([topic])
    try:
        wait_until(lambda: len(handled) >= 3, timeout=45, what="3 records", step=step)
    finally:
        c.close()
    base = ["dead-letters", "--bootstrap-servers", kafka.bootstrap_servers, "--topic", dlq]
    assert main([*base, "--json"]) == 1
    [listed] = json.loads(capsys.readouterr().out)["records"]
    assert listed["original_topic"] == topic and listed["original_offset"] == 1 and listed["group"] == group
    assert listed["stage"] == "process" and listed["exception_class"] == "RuntimeError"
    assert listed["exception_message"] == "bad record" and listed["age_seconds"] >= 0
    assert main(base) == 1
    text = capsys.readouterr().out
    assert "bad record" in text and f"from {topic} [0] @ 1" in text and "b'bad'" not in text
    assert main([*base, "--replay", "0:0"]) == 0
    replayed = read_all(kafka, topic, 4)[3]
    assert replayed.value() == b"bad" and replayed.key() == b"k1"
    assert dict(replayed.headers() or []) == {"origin": b"test"}, "the original headers, not ours"
    assert main([*base, "--replay", "0:7"]) == 2
    assert main(["dead-letters", "--bootstrap-servers", kafka.bootstrap_servers, "--topic", kafka.name("none")]) == 2


def test_safe_aio_consumer_handles_with_a_coroutine_handler(kafka: KafkaTestKit, protocol: Protocol) -> None:
    import asyncio

    from safeconsumer.aio import SafeAIOConsumer

    topic, dlq, group = kafka.create_topic(), kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, [b"0", b"flaky", b"bad", b"3"])
    tries: dict[bytes, int] = {}

    async def handler(msg: Message) -> str:
        await asyncio.sleep(0)
        value = msg.value() or b""
        tries[value] = tries.get(value, 0) + 1
        if value == b"bad" or (value == b"flaky" and tries[value] < 2):
            raise RuntimeError("cannot handle it")
        return value.decode()

    async def main() -> list[Any]:
        c = SafeAIOConsumer(kafka.consumer_conf(group, protocol), poison=DeadLetter(dlq, retries=2, backoff=0.05))
        await c.subscribe([topic])
        results: list[Any] = []
        try:
            async with asyncio.timeout(45):
                while len(results) < 4:
                    msg = await c.poll(0.2)
                    if msg is not None and msg.error() is None:
                        results.append(await c.handle(msg, handler))
        finally:
            await c.close()
        return results

    assert asyncio.run(main()) == ["0", "flaky", None, "3"]
    assert tries == {b"0": 1, b"flaky": 2, b"bad": 3, b"3": 1}
    [dead] = read_all(kafka, dlq, 1)
    assert dead.value() == b"bad" and dict(dead.headers() or [])["safeconsumer.dlt.attempts"] == b"3"
    assert kafka.committed(group, topic, 1) == {0: 4}


def test_a_rebalance_mid_retry_ends_the_retries_and_the_new_owner_gets_the_record(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A retries a record of one of its two partitions while B joins; the group splits them. If the
    record's partition moved, A stops retrying and B dead-letters it; otherwise A dead-letters it and
    B the other one. Either way each failing record is in the dead-letter topic exactly once and every
    other record is processed."""
    import threading

    caplog.set_level(logging.INFO, logger="safeconsumer")
    topic, dlq, group = kafka.create_topic(partitions=2), kafka.create_topic(), kafka.name("g")
    for p in (0, 1):
        for value in (b"bad", b"1", b"2"):
            kafka.producer.produce(topic, value=value, partition=p)
    assert kafka.producer.flush(30) == 0
    conf = kafka.consumer_conf(group, protocol, max_poll_interval_ms=6000)  # the keeper polls every 4.5 s
    processed: list[tuple[str, int, int]] = []
    retried: list[Message] = []

    def fail_bad(msg: Message) -> str:
        if msg.value() == b"bad":
            retried.append(msg)
            raise RuntimeError("bad record")
        processed.append((threading.current_thread().name, msg.partition() or 0, msg.offset() or 0))
        return "ok"

    a = SafeConsumer(conf, poison=DeadLetter(dlq, retries=40, backoff=0.1, max_backoff=0.25))
    b = SafeConsumer(conf, poison=DeadLetter(dlq, retries=0))
    closing.extend([a, b])
    # When A's partitions left it, and which partitions B owned while A retried its first record:
    # what the group did during the retries, not where the partitions sit at the end.
    left_a: list[tuple[float, set[int]]] = []

    def a_left(_c: Any, partitions: list[TopicPartition]) -> None:
        left_a.append((time.monotonic(), {tp.partition for tp in partitions}))

    a.subscribe([topic], on_revoke=a_left, on_lost=a_left)
    wait_until(lambda: len(a.assignment()) == 2, timeout=45, what="A owns both", step=lambda: a.poll(0) and None)
    stop = threading.Event()
    a_retrying = threading.Event()
    b_owned_while_a_retried: set[int] = set()

    def run_b() -> None:
        b.subscribe([topic])
        while not stop.is_set():
            msg = b.poll(0.2)
            if a_retrying.is_set():
                b_owned_while_a_retried.update(tp.partition for tp in b.assignment())
            if msg is not None and msg.error() is None:
                b.handle(msg, fail_bad)

    first: list[Message] = []
    retry_window: list[float] = []

    def step() -> None:
        msg = a.poll(0.2)
        if msg is None or msg.error() is not None:
            return
        if msg.value() == b"bad" and not first:
            first.append(msg)
            retry_window.append(time.monotonic())
            a_retrying.set()
            threading.Thread(target=run_b, name="B", daemon=True).start()
            try:
                a.handle(msg, fail_bad)
            finally:
                a_retrying.clear()
                retry_window.append(time.monotonic())
            return
        a.handle(msg, fail_bad)

    try:
        wait_until(lambda: len(processed) >= 4, timeout=90, what="the 4 good records", step=step)
    finally:
        stop.set()
    # A member whose session the broker ended (heartbeats unanswered on a loaded machine: the log
    # says "lost N partition(s)") hands its uncommitted records to the next owner, at least once.
    # Only then may a record be dead-lettered or processed twice; each one is still there.
    lost = [r for r in caplog.records if re.match(r"lost \d+ partition", r.getMessage())]
    dead = kafka.end_offsets(dlq)[0]
    origins = sorted(_origin(m) for m in read_all(kafka, dlq, dead))
    seen = sorted((p, o) for _, p, o in processed)
    if lost:
        assert sorted(set(origins)) == [(0, 0), (1, 0)], f"dead-lettered {origins}; processed {processed}"
        assert sorted(set(seen)) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    else:
        assert dead == 2, f"dead-lettered: {origins}; processed {processed}"
        assert origins == [(0, 0), (1, 0)], "each failing record dead-lettered exactly once"
        assert seen == [(0, 1), (0, 2), (1, 1), (1, 2)]
    partition = first[0].partition()
    stopped = [r for r in caplog.records if "stopped retrying" in r.getMessage()]
    if partition in b_owned_while_a_retried:
        assert stopped, "A kept retrying a record of a partition B owned"
    if stopped:
        began, ended = retry_window
        left = [at for at, parts in left_a if partition in parts and began <= at <= ended]
        assert left, f"A stopped retrying a partition it never lost while retrying: {left_a} in {retry_window}"


def test_skip_a_processing_failure(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="safeconsumer")
    topic, group = kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, [b"0", b"bad", b"2"])

    def handler(msg: Message) -> str:
        if msg.value() == b"bad":
            raise KeyError("missing field")
        return "ok"

    c = SafeConsumer(kafka.consumer_conf(group, protocol), poison=Skip())
    closing.append(c)
    c.subscribe([topic])
    results = poll_values(c, 3, handler=handler)
    assert results == ["ok", None, "ok"]
    c.close()
    assert f"failed to process: {topic} [0] at offset 1 (KeyError)" in caplog.text
    assert kafka.committed(group, topic, 1) == {0: 3}


#: A backlog whose poison records (1 in 50) would have passed the old default count limit, 100 per
#: 60 s, within seconds.
DRAIN = 6_000


def test_a_healthy_drain_never_trips_the_dead_letter_limit(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any]
) -> None:
    """A backlog of 6,000 records with 1 poison record in 50 (120 dead letters), drained as fast as
    the consumer goes under the default policy: every record handled or dead-lettered, never stopped."""
    topic, dlq, group = kafka.create_topic(), kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, values_with_poison(DRAIN, {i for i in range(DRAIN) if i % 50 == 49}))
    c = SafeConsumer({**kafka.consumer_conf(group, protocol)}, poison=DeadLetter(dlq, retries=0))
    closing.append(c)
    c.subscribe([topic])
    handled: list[int] = []
    dead: list[int] = []

    def process(m: Message) -> int:
        if (m.value() or b"").startswith(POISON):
            raise ValueError("not a record of ours")
        handled.append(m.offset() or 0)
        return 1

    def step() -> None:
        for m in c.consume(500, 0.2):
            if m.error() is None and c.handle(m, process) is None:
                dead.append(m.offset() or 0)

    wait_until(lambda: len(handled) + len(dead) >= DRAIN, timeout=120, what="the drain", step=step)
    assert len(dead) == DRAIN // 50 and len(handled) == DRAIN - DRAIN // 50
    assert kafka.end_offsets(dlq) == {0: DRAIN // 50}


def test_a_handler_failing_everything_stops_within_a_few_hundred_records(
    kafka: KafkaTestKit, protocol: Protocol, closing: list[Any]
) -> None:
    topic, dlq, group = kafka.create_topic(), kafka.create_topic(), kafka.name("g")
    produce(kafka, topic, values_with_poison(1_000, set()))
    c = SafeConsumer({**kafka.consumer_conf(group, protocol)}, poison=DeadLetter(dlq, retries=0))
    closing.append(c)
    c.subscribe([topic])
    raised: list[PoisonLimitError] = []

    def broken(_m: Message) -> None:
        raise RuntimeError("a bad deploy")

    def step() -> None:
        try:
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    c.handle(m, broken)
        except PoisonLimitError as exc:
            raised.append(exc)

    wait_until(lambda: raised, timeout=60, what="PoisonLimitError", step=step)
    assert "max_dead_letter_ratio" in str(raised[0])
    assert kafka.end_offsets(dlq) == {0: 51}
