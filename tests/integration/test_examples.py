"""Every example runs against the real broker, so none can rot."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from examples import (
    asyncio_service,
    asyncio_share_service,
    backpressure,
    demo,
    kafka_python_app,
    long_job,
    migrate,
    otel_wiring,
)
from safeconsumer.testing import Broker, KafkaTestKit, Protocol


def test_migrate(kafka: KafkaTestKit) -> None:
    handled, committed = migrate.run(kafka.bootstrap_servers, records=500)
    assert handled == 500
    assert sum(committed.values()) == 500


def test_kafka_python_app(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """A kafka-python application with only its import changed, under every protocol."""
    extra = {"group_protocol": "consumer"} if protocol == "consumer" else {"partition_assignment_strategy": [protocol]}
    handled, committed = kafka_python_app.run(kafka.bootstrap_servers, records=300, **extra)
    assert handled == 300
    assert sum(committed.values()) == 300


def test_backpressure(kafka: KafkaTestKit) -> None:
    out = backpressure.run(kafka.bootstrap_servers, per_topic=200)
    assert out.pauses >= 1, "the buffer never filled: backpressure was not exercised"
    assert out.audit_while_paused == 0, "an audit record arrived while its topic was paused"
    assert out.orders == 200 == out.audit
    assert out.max_buffer <= 50 + 64, "the pause did not bound the buffer"


def test_long_job(kafka: KafkaTestKit) -> None:
    out = long_job.run(kafka.bootstrap_servers, records=200)
    assert out.report_seconds > long_job.MAX_POLL_MS / 1000 * 2
    assert out.same_member and out.revocations == 0, "the member was evicted during the report"
    assert out.records == 200


def test_asyncio_service(kafka: KafkaTestKit, protocol: Protocol) -> None:
    """HTTP requests stay fast while the background consumer's group rebalances (twice)."""
    out = asyncio_service.run(kafka.bootstrap_servers, records=2000, protocol=protocol)
    assert out.handled_by_service + out.handled_by_peer >= 2000
    assert out.handled_by_peer > 0, "the peer never got partitions: no rebalance happened"
    assert out.rebalances >= 3, f"only {out.rebalances} rebalance callbacks"
    assert out.requests > 20
    assert out.slowest_request < 0.5, f"a request took {out.slowest_request:.2f}s: the loop was blocked"


def test_otel_wiring(kafka: KafkaTestKit) -> None:
    out = otel_wiring.run(kafka.bootstrap_servers, records=100)
    assert out.consumed == 100 == out.process_spans
    assert out.rebalance_spans >= 1
    assert "safeconsumer.rebalances" in out.metrics


def test_demo_rows_hold_for_safeconsumer(
    kafka: KafkaTestKit, kafka_broker_factory: Callable[[Mapping[str, str]], Broker], secured_broker: Broker
) -> None:
    full = kafka_broker_factory({"group.max.size": "2", "group.consumer.max.size": "2"})
    rows = demo.run(kafka.bootstrap_servers, full.bootstrap_servers, secured_broker)
    assert [r.scenario for r in rows if not r.safe_ok] == [], demo._table(rows)
    assert len(rows) == len(demo.SCENARIOS) + 2  # the scenarios, GROUP_MAX_SIZE_REACHED, the wrong password


@pytest.mark.xdist_group("share-groups")
def test_share_demo_rows_hold_for_safeshareconsumer_and_show_the_raw_failures(kafka: KafkaTestKit) -> None:
    """Each share row, measured: SafeShareConsumer holds, and raw ShareConsumer shows the failure the
    row is about (the same criterion judges both columns)."""
    from confluent_kafka import ShareConsumer

    from examples import demo_share
    from safeconsumer import SafeShareConsumer

    for title, scenario in demo_share.SCENARIOS:
        raw, raw_held = scenario(kafka, ShareConsumer)
        safe, held = scenario(kafka, SafeShareConsumer)
        assert held and not raw_held, f"{title}: raw {raw!r}, SafeShareConsumer {safe!r}"


def test_asyncio_share_service(kafka: KafkaTestKit) -> None:
    """Two share-group members on one partition, in an asyncio service whose requests stay fast."""
    out = asyncio_share_service.run(kafka.bootstrap_servers, records=1000)
    assert out.processed == 999 and out.dead_lettered == 1, out
    assert out.by_service > 0 and out.by_peer > 0, f"one member processed everything: {out}"
    assert out.requests > 20
    assert out.slowest_request < 0.5, f"a request took {out.slowest_request:.2f}s: the loop was blocked"
