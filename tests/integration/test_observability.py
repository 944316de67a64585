"""OpenTelemetry metrics and spans, commit retries and logs, against the real broker.

Telemetry goes to the OpenTelemetry SDK's in-memory metric reader and span exporter, given
to the consumer as its providers. No payload, key or secret may appear in any exported
attribute, span event or log line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import pytest
from confluent_kafka import KafkaException, Message, Producer, TopicPartition
from opentelemetry import propagate
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from safeconsumer import CommitRetry, GroupMaxSizeReachedError, SafeConsumer, delivery_stats
from safeconsumer.consumer._delivery import DeliveryGate
from safeconsumer.testing import Broker, KafkaTestKit, Protocol, launch_broker, wait_until

from ..support import FULL_GROUP_LIMITS, Received, fatal_error_of, full_group, pump

PAYLOAD = b"PAYLOAD-do-not-export-5c1e"
KEY = b"KEY-do-not-export-77aa"
SECRET = "SECRET-do-not-log-91b4"


class Otel:
    """An SDK meter and tracer provider with in-memory reader and exporter, for one test."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])
        self.exporter = InMemorySpanExporter()
        self.tracers = TracerProvider()
        self.tracers.add_span_processor(SimpleSpanProcessor(self.exporter))

    def options(self) -> dict[str, Any]:
        return {"meter_provider": self.meters, "tracer_provider": self.tracers}

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, point) of every data point of metric ``name`` collected now."""
        data = self.reader.get_metrics_data()
        out: list[tuple[dict[str, Any], Any]] = []
        for rm in data.resource_metrics if data is not None else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        out.extend((dict(p.attributes or {}), p) for p in metric.data.data_points)
        return out

    def value(self, name: str, **attrs: str) -> float:
        """Sum of the values of ``name`` over points whose attributes include ``attrs``."""
        return float(sum(p.value for a, p in self.points(name) if all(a.get(k) == v for k, v in attrs.items())))

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def exported_text(self) -> str:
        """Every attribute, event and name exported so far, as one string to search."""
        parts: list[str] = []
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data is not None else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    parts.append(metric.name)
                    parts.extend(repr(dict(p.attributes or {})) for p in metric.data.data_points)
        for span in self.exporter.get_finished_spans():
            parts += [span.name, repr(dict(span.attributes or {}))]
            parts += [f"{e.name} {dict(e.attributes or {})!r}" for e in span.events]
        return "\n".join(parts)

    def shutdown(self) -> None:
        self.meters.shutdown()
        self.tracers.shutdown()


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.shutdown()


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def _assert_nothing_leaked(otel: Otel, logs: pytest.LogCaptureFixture) -> None:
    exported = otel.exported_text()
    text = "\n".join(r.getMessage() for r in logs.records)
    for needle in (PAYLOAD.decode(), KEY.decode(), SECRET):
        assert needle not in exported, f"{needle!r} reached telemetry"
        assert needle not in text, f"{needle!r} reached a log line"


def _produce_marked(kafka: KafkaTestKit, topic: str, n: int, partitions: int, headers: Any = None) -> None:
    for i in range(n):
        kafka.producer.produce(topic, value=PAYLOAD, key=KEY, partition=i % partitions, headers=headers)
    kafka.producer.flush(30)


def test_metrics_and_spans_follow_the_scenario(
    kafka: KafkaTestKit, protocol: Protocol, otel: Otel, all_logs: pytest.LogCaptureFixture
) -> None:
    topic = kafka.create_topic(partitions=2)
    _produce_marked(kafka, topic, 200, 2)
    group = kafka.name("g")
    conf = kafka.consumer_conf(group, protocol, enable_auto_commit=False)
    conf["sasl.password"] = SECRET  # unused on a PLAINTEXT listener; must still never be shown
    c = SafeConsumer(conf, **otel.options())
    c.subscribe([topic])
    got = Received()
    pump([(c, got)], lambda: len(got.records) >= 200, timeout=60, what="200 records")
    base = {"messaging.system": "kafka", "messaging.consumer.group.name": group}

    # Consumed, per partition, with the semantic-convention attributes.
    consumed = otel.points("messaging.client.consumed.messages")
    assert sum(p.value for _, p in consumed) == 200
    assert {(a["messaging.destination.name"], a["messaging.destination.partition.id"]) for a, _ in consumed} == {
        (topic, "0"),
        (topic, "1"),
    }
    assert all(base.items() <= a.items() for a, _ in consumed)
    assert otel.value("safeconsumer.rebalances", **{"safeconsumer.rebalance.change": "assigned"}) >= 1
    assert [s for s in otel.spans("safeconsumer rebalance assigned") if s.attributes], "no rebalance span"

    # A pause moves the gauge; records read ahead of a pause are withheld.
    assert otel.value("safeconsumer.partitions.paused") == 0
    _produce_marked(kafka, topic, 300, 1)
    p0 = TopicPartition(topic, 0)

    def withhold() -> bool:
        # A record is withheld when the pause lands while records of p0 wait in the read-ahead.
        c.resume([p0])
        got.add(c.poll(1.0))  # the fetch restarts: this one may come alone
        got.add(c.poll(1.0))  # and this one with a batch read ahead behind it
        c.pause([p0])
        assert otel.value("safeconsumer.partitions.paused") == 1
        for _ in range(3):
            got.add(c.poll(0.05))
        return delivery_stats(c).withheld > 0

    wait_until(withhold, timeout=30, what="a withheld record")
    assert otel.value("safeconsumer.records.withheld") == delivery_stats(c).withheld > 0

    # An unsafe commit is dropped and counted.
    c.commit(offsets=[TopicPartition(topic + "-not-mine", 0, 1)], asynchronous=False)
    assert otel.value("safeconsumer.offsets.dropped") == 1

    # A keepalive span of time: one span, one histogram point.
    with c.keepalive():
        assert c.pause_state().parked
    spans = otel.spans("safeconsumer keepalive")
    assert len(spans) == 1 and spans[0].attributes is not None
    assert spans[0].attributes["safeconsumer.keepalive.mode"] == "manual"
    hist = otel.points("safeconsumer.keepalive.duration")
    assert len(hist) == 1 and hist[0][1].count == 1

    # Closing revokes: the withheld records are purged (never delivered, never committed).
    held = delivery_stats(c).held
    assert held > 0
    c.close()
    assert otel.value("safeconsumer.records.purged", **{"safeconsumer.purge.reason": "revoked"}) == held
    assert otel.value("safeconsumer.rebalances", **{"safeconsumer.rebalance.change": "revoked"}) >= 1
    assert any("assigned" in r.getMessage() and protocol in r.getMessage() for r in all_logs.records), (
        "no INFO line names the rebalance protocol"
    )
    assert any(r.levelno == logging.WARNING and "purged" in r.getMessage() for r in all_logs.records)
    _assert_nothing_leaked(otel, all_logs)


def test_consumed_counts_stay_exact_across_skipped_offsets_when_positions_count_them(
    kafka: KafkaTestKit, protocol: Protocol, otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an SDK, a batch's count per partition comes from librdkafka's positions when their moves
    add up to the batch (one position() call instead of reading every record). Transaction markers
    and aborted records move a position past offsets no record was returned for: such a batch is
    counted record by record. The counts stay exact either way, and the position path is taken."""
    topic = kafka.create_topic(partitions=2)
    tallies: list[object] = []
    tally = DeliveryGate._tally

    def spy(gate: DeliveryGate, count: int) -> object:
        result = tally(gate, count)
        tallies.append(result)
        return result

    monkeypatch.setattr(DeliveryGate, "_tally", spy)
    c = SafeConsumer(kafka.consumer_conf(kafka.name("g"), protocol), **otel.options())
    seen: dict[int, int] = {0: 0, 1: 0}

    def read(want: dict[int, int], size: int) -> None:
        deadline = time.monotonic() + 60
        while seen != want and time.monotonic() < deadline:
            for msg in c.consume(size, 0.5):
                if msg.error() is None:
                    seen[cast(int, msg.partition())] += 1
        assert seen == want

    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": kafka.name("tx")})
    try:
        # Both partitions have positions before the transactions: small batches then read across
        # their markers and aborted records with the positions of the read before them at hand.
        for partition in (0, 1):
            for _ in range(10):
                kafka.producer.produce(topic, value=b"p", partition=partition)
        kafka.producer.flush(30)
        c.subscribe([topic])
        read({0: 10, 1: 10}, 500)
        producer.init_transactions(30)
        for n in range(9):  # partition 0: 6 committed transactions of 40 records, 3 aborted ones
            producer.begin_transaction()
            for _ in range(40):
                producer.produce(topic, value=b"t", partition=0)
            producer.flush(10)
            if n % 3 == 2:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
        for _ in range(200):
            kafka.producer.produce(topic, value=b"p", partition=1)
        kafka.producer.flush(30)
        read({0: 250, 1: 210}, 7)
        consumed = otel.points("messaging.client.consumed.messages")
        assert {a["messaging.destination.partition.id"]: p.value for a, p in consumed} == {"0": 250, "1": 210}
        assert any(t is not None for t in tallies), "no batch was counted from positions"
    finally:
        c.close()


def test_process_span_continues_the_upstream_trace(
    kafka: KafkaTestKit, otel: Otel, all_logs: pytest.LogCaptureFixture
) -> None:
    topic = kafka.create_topic(partitions=1)
    upstream = otel.tracers.get_tracer("upstream-producer")
    with upstream.start_as_current_span("send") as send:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
    assert "traceparent" in carrier
    _produce_marked(kafka, topic, 1, 1, headers=[(k, v.encode()) for k, v in carrier.items()])
    group = kafka.name("g")
    c = SafeConsumer(kafka.consumer_conf(group, "range"), **otel.options())
    c.subscribe([topic])
    msg: Message | None = None
    while msg is None:
        m = c.poll(5.0)
        msg = m if m is not None and m.error() is None else None
    with c.process(msg), otel.tracers.get_tracer("app").start_as_current_span("handle"):
        pass
    with pytest.raises(ValueError, match="boom"), c.process(msg):
        raise ValueError("boom")
    with pytest.raises(TypeError, match="process"):
        c.process("not a message")  # type: ignore[arg-type]
    c.close()

    process = otel.spans(f"process {topic}")
    assert len(process) == 2
    span = process[0]
    ctx = send.get_span_context()
    assert span.context is not None and span.parent is not None
    assert span.context.trace_id == ctx.trace_id, "the process span did not continue the producer's trace"
    assert span.parent.span_id == ctx.span_id
    assert span.kind is SpanKind.CONSUMER
    assert dict(span.attributes or {}) == {
        "messaging.system": "kafka",
        "messaging.consumer.group.name": group,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": topic,
        "messaging.destination.partition.id": "0",
        "messaging.kafka.offset": 0,
    }
    (handle,) = otel.spans("handle")
    assert handle.parent is not None and handle.parent.span_id == span.context.span_id
    failed = process[1]
    assert not failed.status.is_ok and any(e.name == "exception" for e in failed.events)
    _assert_nothing_leaked(otel, all_logs)


def test_a_fatal_error_is_counted_with_its_type(
    kafka_broker_factory: Callable[[Mapping[str, str]], Broker], protocol: Protocol, otel: Otel
) -> None:
    kafka = KafkaTestKit(kafka_broker_factory(FULL_GROUP_LIMITS).bootstrap_servers, prefix="otel-fatal")
    try:
        topic, group, members = full_group(kafka, protocol)
        third = SafeConsumer(kafka.consumer_conf(group, protocol), **otel.options())
        third.subscribe([topic])
        assert isinstance(fatal_error_of(third, members, timeout=15), GroupMaxSizeReachedError)
        points = otel.points("safeconsumer.fatal_errors")
        assert len(points) == 1 and points[0][1].value == 1
        assert points[0][0]["error.type"] in ("GROUP_MAX_SIZE_REACHED", "_FATAL")
        for m, _ in members:
            m.close()
    finally:
        kafka.close()


# -- commit retries -------------------------------------------------------------------------


@pytest.fixture
def own_broker() -> Iterator[Broker]:
    """A broker only this test uses: it is restarted under the consumer."""
    broker = launch_broker()
    try:
        yield broker
    finally:
        broker.stop()


def test_a_commit_while_the_coordinator_is_away_succeeds_through_the_retry(
    own_broker: Broker, protocol: Protocol, all_logs: pytest.LogCaptureFixture
) -> None:
    kafka = KafkaTestKit(own_broker.bootstrap_servers, prefix="retry")
    try:
        topic = kafka.create_topic(partitions=1)
        kafka.produce(topic, 20, partitions=1)
        group = kafka.name("g")
        retry = CommitRetry(attempts=20, initial=0.5, maximum=2.0, deadline=120)
        # Partitions assigned by the application: the commit needs the coordinator but no group
        # membership, which a restarted broker does not keep for classic groups (the member is
        # fenced, UNKNOWN_MEMBER_ID, and that is not retried: see docs/observability.md).
        c = SafeConsumer(kafka.consumer_conf(group, protocol, enable_auto_commit=False), commit_retry=retry)
        c.assign([TopicPartition(topic, 0, 0)])
        got = Received()
        pump([(c, got)], lambda: len(got.records) >= 20, timeout=45, what="20 records")

        result: list[object] = []

        def commit() -> None:
            try:
                result.append(c.commit(offsets=[TopicPartition(topic, 0, 15)], asynchronous=False))
            except KafkaException as exc:
                result.append(exc)

        committer = threading.Thread(target=commit, name="committer")
        with own_broker.down():
            committer.start()
            _wait_failed_attempt(all_logs)
            assert not result, f"the commit returned while its coordinator was down: {result}"
        committer.join(timeout=150)
        assert not committer.is_alive()
        assert len(result) == 1 and isinstance(result[0], list), f"the commit did not succeed: {result}"
        assert [(tp.topic, tp.partition, tp.offset) for tp in result[0]] == [(topic, 0, 15)]
        assert c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == 15
        c.close()
    finally:
        kafka.close()


def _wait_failed_attempt(logs: pytest.LogCaptureFixture) -> None:
    wait_until(
        lambda: any("commit failed" in r.getMessage() for r in logs.records),
        timeout=60,
        what="a failed commit attempt while the broker is down",
    )


def test_a_commit_for_a_partition_that_moved_during_the_retry_is_dropped(
    own_broker: Broker, all_logs: pytest.LogCaptureFixture
) -> None:
    kafka = KafkaTestKit(own_broker.bootstrap_servers, prefix="moved")
    try:
        topic = kafka.create_topic(partitions=1)
        kafka.produce(topic, 20, partitions=1)
        retry = CommitRetry(attempts=20, initial=0.5, maximum=2.0, deadline=120)
        group = kafka.name("g")
        c = SafeConsumer(kafka.consumer_conf(group, enable_auto_commit=False), commit_retry=retry)
        c.assign([TopicPartition(topic, 0, 0)])
        got = Received()
        pump([(c, got)], lambda: len(got.records) >= 20, timeout=45, what="20 records")
        result: list[object] = []
        committer = threading.Thread(
            target=lambda: result.append(c.commit(offsets=[TopicPartition(topic, 0, 15)], asynchronous=False))
        )
        with own_broker.down():
            committer.start()
            _wait_failed_attempt(all_logs)
            c.unassign()  # the partition leaves while the commit waits to be retried
            committer.join(timeout=60)
            assert not committer.is_alive()
        assert result == [[]], f"the commit of a partition no longer owned was not dropped: {result}"
        assert any("dropped 1 offset" in r.getMessage() for r in all_logs.records)
        assert delivery_stats(c).offsets_dropped == 1
        # Read through the admin API, retried while the restarted broker still loads the group's
        # coordinator (the consumer's committed() fails at once with NOT_COORDINATOR then).
        assert kafka.committed(group, topic, 1, timeout=30)[0] < 0, "the moved partition's offset was committed"
        c.close()
    finally:
        kafka.close()
