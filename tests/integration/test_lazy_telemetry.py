"""OpenTelemetry is loaded only by applications that use it, and an SDK installed after the
consumer was created still gets its metrics (safeconsumer.base._telemetry)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from safeconsumer.testing import KafkaTestKit, Protocol

_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from safeconsumer import SafeConsumer
    from safeconsumer.testing import wait_until

    bootstrap, topic, group, conf_protocol = sys.argv[1:5]
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    if conf_protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["partition.assignment.strategy"] = conf_protocol
    c = SafeConsumer(conf)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    assert not loaded, f"a consumer of an application without OpenTelemetry loaded it: {loaded}"

    # The application sets OpenTelemetry up only now, after the consumer exists.
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    c.subscribe([topic])
    got = []
    wait_until(lambda: len(got) >= 10, timeout=60, what="10 records",
               step=lambda: got.extend(m for m in [c.poll(0.2)] if m is not None and m.error() is None))

    def points():
        data = reader.get_metrics_data()
        return {m.name: sum(p.value for p in m.data.data_points)
                for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}

    seen = points()
    assert seen.get("safeconsumer.rebalances", 0) >= 1, seen
    # Records handed out before the first metric read are counted from the first read on.
    got.clear()
    wait_until(lambda: len(got) >= 10, timeout=30, what="10 more records",
               step=lambda: got.extend(m for m in [c.poll(0.2)] if m is not None and m.error() is None))
    c.poll(0)  # come back after them
    seen = points()
    assert seen.get("messaging.client.consumed.messages", 0) >= 10, seen
    c.close()
    print("ok")
    """
)


def test_otel_is_loaded_late_and_an_sdk_set_after_the_consumer_gets_its_metrics(
    kafka: KafkaTestKit, protocol: Protocol
) -> None:
    topic = kafka.create_topic(partitions=1)
    kafka.produce(topic, 100, partitions=1)
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, kafka.bootstrap_servers, topic, kafka.name("g"), protocol],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
