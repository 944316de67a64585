"""``safeconsumer dead-letters``: what is in a dead-letter topic, and replaying chosen records.

    safeconsumer dead-letters --bootstrap-servers HOST:PORT --topic TOPIC [--json] [-X KEY=VALUE ...]
                              [--replay PARTITION:OFFSET[,...] | --replay all]

Lists every record of a dead-letter topic written by a :class:`~safeconsumer.DeadLetter` policy:
where it came from (topic, partition, offset, group), at which stage it failed and with which
exception, and its age. ``--replay`` produces the chosen records back to their original topic,
key, value, timestamp and original headers as they were (the ``safeconsumer.dlt.*`` headers left
off), and waits for the broker's acknowledgement. Payloads are never printed.

A share group's dead-letter topic (``SafeShareConsumer``) also holds records copied at their last
delivery (stage ``last-delivery``), before the application processed them, so that the broker's
archive never holds the only trace: such a copy with no later failure copy of the same record is
marked ``may_be_processed`` (the application may have processed it, or died on it); replay it only
if its processing is idempotent or known not to have happened.

Where the broker writes a share group's copies (Kafka 4.4, the group's dead-letter queue), the
topic holds the broker's copies (``__dlq.errors.*`` headers), read into the same view: stage
``rejected`` (the client rejected it: its processing failed) or ``delivery-limit`` (archived past
the group's delivery limit: it may have been processed), ``by_broker`` true, its delivery count, and
its age from when the broker wrote it (the broker's copy keeps no original timestamp). Both kinds
replay alike, their headers left off.

Exit status, as the doctor's: 0 the topic is empty (or everything asked for was replayed), 1 it
holds records, 2 the cluster or the topic cannot be reached (or a replay failed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from ..base._clients import HELPER_LOG
from ..poison._policy import BROKER_HEADER_PREFIX, HEADER_PREFIX
from ._cli import add_config_option

__all__ = ["DeadRecord", "add_command", "read_dead_letters", "replay", "run"]

EXIT_EMPTY, EXIT_RECORDS, EXIT_UNREACHABLE = 0, 1, 2


@dataclass(frozen=True)
class DeadRecord:
    """One record of a dead-letter topic, as the listing shows it (never its payload)."""

    partition: int
    offset: int
    original_topic: str | None
    original_partition: int | None
    original_offset: int | None
    group: str | None
    stage: str | None
    exception_class: str | None
    exception_message: str | None
    age_seconds: float | None
    #: A copy made at the record's last delivery to a share group, before processing, with no later
    #: copy saying its processing failed (or the broker's copy of a record archived past its delivery
    #: limit): it may also have been processed.
    may_be_processed: bool = False
    #: The delivery count at which the broker copied it (a broker's copy only).
    delivery_count: int | None = None
    #: Written by the broker (the share group's dead-letter queue, Kafka 4.4), not by safeconsumer.
    by_broker: bool = False


class CannotRead(Exception):
    """The cluster or the topic could not be reached."""


def read_dead_letters(connection: Mapping[str, Any], topic: str, timeout: float) -> list[tuple[DeadRecord, Message]]:
    """Every record of ``topic`` from its start to its end now, with the listing's view of each."""
    consumer = Consumer(
        {**connection, "group.id": f"safeconsumer-dead-letters-{uuid.uuid4().hex}", "logger": HELPER_LOG}
    )
    try:
        try:
            meta = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as exc:
            raise CannotRead(f"cannot reach the cluster: {exc.args[0].str()}") from exc
        if meta is None or meta.error is not None or not meta.partitions:
            raise CannotRead(f"topic {topic!r} does not exist")
        ends: dict[int, int] = {}
        starts: list[TopicPartition] = []
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            if high > low:
                ends[p] = high
                starts.append(TopicPartition(topic, p, low))
        out: list[tuple[DeadRecord, Message]] = []
        if not starts:
            return out
        consumer.assign(starts)
        deadline = time.monotonic() + timeout + 30
        done: set[int] = set()
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                raise CannotRead(f"timed out reading {topic!r}")
            for msg in consumer.consume(500, 0.5):
                if msg.error() is not None:
                    continue
                partition, offset = msg.partition() or 0, msg.offset() or 0
                if offset + 1 >= ends[partition]:
                    done.add(partition)
                out.append((_view(msg, partition, offset), msg))
        return _mark_processed(out)
    finally:
        consumer.close()


#: The stage of a copy made at a share group's last delivery, before processing (SafeShareConsumer).
LAST_DELIVERY = "last-delivery"


def _mark_processed(records: list[tuple[DeadRecord, Message]]) -> list[tuple[DeadRecord, Message]]:
    """Mark the last-delivery copies no failure copy of the same record follows."""

    def origin(v: DeadRecord) -> tuple[Any, ...]:
        return (v.original_topic, v.original_partition, v.original_offset, v.group)

    failed = {origin(v) for v, _ in records if v.stage != LAST_DELIVERY}
    return [
        (
            dataclasses.replace(v, may_be_processed=True)
            if v.stage == LAST_DELIVERY and origin(v) not in failed
            else v,
            m,
        )
        for v, m in records
    ]


def _readers(raw_headers: Any, prefix: str) -> tuple[Callable[[str], str | None], Callable[[str], int | None]]:
    """The headers named ``prefix`` + name, read as text and as a number (None: absent or not one)."""
    headers = {k[len(prefix) :]: v for k, v in raw_headers if k.startswith(prefix)}

    def text(name: str) -> str | None:
        value = headers.get(name)
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    def number(name: str) -> int | None:
        value = text(name)
        return int(value) if value is not None and value.lstrip("-").isdigit() else None

    return text, number


def _view(msg: Message, partition: int, offset: int) -> DeadRecord:
    raw_headers: Any = msg.headers() or []
    if any(k.startswith(BROKER_HEADER_PREFIX) for k, _v in raw_headers):
        return _broker_view(msg, raw_headers, partition, offset)
    text, number = _readers(raw_headers, HEADER_PREFIX)
    original_ts = number("original.timestamp")
    age = time.time() - original_ts / 1000 if original_ts and original_ts > 0 else None
    return DeadRecord(
        partition,
        offset,
        text("original.topic"),
        number("original.partition"),
        number("original.offset"),
        text("group"),
        text("stage"),
        text("exception.class"),
        text("exception.message"),
        None if age is None else round(age, 1),
    )


#: The stages of the broker's copies (Kafka 4.4, a share group's dead-letter queue): a record the
#: client rejected, and one archived past the group's delivery limit (released or its lock ran out
#: on its last delivery: it may have been processed).
BROKER_REJECTED, BROKER_DELIVERY_LIMIT = "rejected", "delivery-limit"


def _broker_view(msg: Message, raw_headers: Any, partition: int, offset: int) -> DeadRecord:
    """A copy the broker wrote (``__dlq.errors.*`` headers); its timestamp is when it was written."""
    text, number = _readers(raw_headers, BROKER_HEADER_PREFIX)
    message = text("message")
    rejected = message is not None and "rejected" in message.lower()
    _ts_type, ts = msg.timestamp()
    return DeadRecord(
        partition,
        offset,
        text("topic"),
        number("partition"),
        number("offset"),
        text("group"),
        BROKER_REJECTED if rejected else BROKER_DELIVERY_LIMIT,
        None,
        message,
        round(time.time() - ts / 1000, 1) if ts > 0 else None,
        may_be_processed=not rejected,
        delivery_count=number("delivery.count"),
        by_broker=True,
    )


def replay(connection: Mapping[str, Any], records: list[tuple[DeadRecord, Message]], timeout: float) -> int:
    """Produce each record back to its original topic (safeconsumer's headers left off); how many
    the broker acknowledged. Raises ``RuntimeError`` naming the first that failed."""
    producer = Producer({**connection, "enable.idempotence": True, "acks": "all", "logger": HELPER_LOG})
    failed: list[str] = []
    acked = 0

    def delivered(err: Any, _msg: Any) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            failed.append(str(err))

    for view, msg in records:
        if view.original_topic is None:
            raise RuntimeError(f"record {view.partition}:{view.offset} names no original topic")
        raw_headers: Any = msg.headers() or []
        headers = [(k, v) for k, v in raw_headers if not k.startswith((HEADER_PREFIX, BROKER_HEADER_PREFIX))]
        _ts_type, ts = msg.timestamp()
        extra: dict[str, Any] = {"timestamp": ts} if ts > 0 else {}
        producer.produce(
            view.original_topic, key=msg.key(), value=msg.value(), headers=headers, on_delivery=delivered, **extra
        )
    producer.flush(timeout)
    # flush() answers what its queue still holds, events included (2 for 1 record, seen under load):
    # the records are counted instead.
    remaining = len(records) - acked - len(failed)
    if remaining:
        # Given up on: not left in the producer to be reported as still in flight when it goes.
        producer.purge()
        producer.poll(0)
    if remaining or failed:
        raise RuntimeError(f"{remaining} not acknowledged, {len(failed)} failed: {failed[:1]}")
    return acked


def add_command(commands: Any) -> None:
    """The ``dead-letters`` subcommand of the ``safeconsumer`` console script."""
    parser = commands.add_parser(
        "dead-letters",
        help="list what is in a dead-letter topic, replay chosen records to their origin",
        description="List a dead-letter topic written by a DeadLetter policy, and replay chosen records to "
        "their original topic. Exit status: 0 empty (or replayed), 1 records listed, 2 cannot connect.",
    )
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT")
    parser.add_argument("--topic", required=True, help="the dead-letter topic")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_config_option(parser, "a librdkafka setting")
    parser.add_argument(
        "--replay",
        metavar="PARTITION:OFFSET[,...]|all",
        help="produce these records (or all) back to their original topic",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")


def _chosen(spec: str, records: list[tuple[DeadRecord, Message]]) -> list[tuple[DeadRecord, Message]]:
    if spec == "all":
        return records
    wanted: set[tuple[int, int]] = set()
    for item in spec.split(","):
        partition, sep, offset = item.strip().partition(":")
        if not sep or not partition.isdigit() or not offset.isdigit():
            raise ValueError(f"--replay: expected PARTITION:OFFSET, got {item!r}")
        wanted.add((int(partition), int(offset)))
    chosen = [r for r in records if (r[0].partition, r[0].offset) in wanted]
    missing = wanted - {(r[0].partition, r[0].offset) for r in chosen}
    if missing:
        raise ValueError(f"--replay: no such record in the topic: {sorted(missing)}")
    return chosen


def run(args: argparse.Namespace) -> int:
    connection = {"bootstrap.servers": args.bootstrap_servers, **dict(args.config)}
    try:
        records = read_dead_letters(connection, args.topic, args.timeout)
    except CannotRead as exc:
        sys.stderr.write(f"safeconsumer dead-letters: {exc}\n")
        return EXIT_UNREACHABLE
    replayed = 0
    if args.replay:
        try:
            chosen = _chosen(args.replay, records)
            replayed = replay(connection, chosen, args.timeout)
        except (ValueError, RuntimeError) as exc:
            sys.stderr.write(f"safeconsumer dead-letters: {exc}\n")
            return EXIT_UNREACHABLE
    views = [view for view, _ in records]
    if args.json:
        sys.stdout.write(
            json.dumps({"topic": args.topic, "records": [asdict(v) for v in views], "replayed": replayed}, indent=2)
            + "\n"
        )
    else:
        sys.stdout.write(_render(args.topic, views, replayed) + "\n")
    if args.replay:
        return EXIT_EMPTY
    return EXIT_RECORDS if views else EXIT_EMPTY


def _render(topic: str, views: list[DeadRecord], replayed: int) -> str:
    lines = [f"dead-letter topic {topic}: {len(views)} record(s)"]
    maybe = sum(v.may_be_processed for v in views)
    if maybe:
        lines[0] += f", {maybe} of them copied at their last delivery and may also have been processed"
    for v in views:
        age = "?" if v.age_seconds is None else f"{v.age_seconds:.0f}s"
        why = (
            f"{v.stage} (by the broker, delivery {v.delivery_count}): {v.exception_message}"
            if v.by_broker
            else f"{v.stage}: {v.exception_class}: {v.exception_message}"
        )
        lines.append(
            f"  {v.partition}:{v.offset}  from {v.original_topic} [{v.original_partition}] @ {v.original_offset}"
            f"  group {v.group}  {why}  age {age}" + ("  (may also have been processed)" if v.may_be_processed else "")
        )
    if replayed:
        lines.append(f"replayed {replayed} record(s) to their original topics")
    return "\n".join(lines)
