"""OpenTelemetry wiring: give SafeConsumer SDK providers, trace processing, read the metrics.

    python -m examples.otel_wiring

An application normally installs the SDK once (``metrics.set_meter_provider(...)``,
``trace.set_tracer_provider(...)``) and SafeConsumer uses the global providers. Here the
providers are passed per consumer (``meter_provider=``, ``tracer_provider=``), with an
in-memory reader and exporter standing in for an OTLP exporter, so the example can print
what was recorded.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, start_broker, wait_until


@dataclass
class Outcome:
    consumed: int
    process_spans: int
    rebalance_spans: int
    metrics: list[str]


def run(bootstrap: str, records: int = 100) -> Outcome:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    exporter = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(exporter))
    kit = KafkaTestKit(bootstrap, prefix="otel")
    try:
        topic = kit.create_topic(partitions=2)
        kit.produce(topic, records, partitions=2)
        consumer = SafeConsumer(kit.consumer_conf(kit.name("g")), meter_provider=meters, tracer_provider=tracers)
        consumer.subscribe([topic])
        done = 0

        def step() -> None:
            nonlocal done
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                with consumer.process(msg):  # a "process <topic>" span around the work
                    done += 1

        wait_until(lambda: done >= records, timeout=60, what=f"{records} records", step=step)
        data = reader.get_metrics_data()
        names: list[str] = []
        consumed = 0
        for rm in data.resource_metrics if data is not None else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    names.append(metric.name)
                    if metric.name == "messaging.client.consumed.messages":
                        for point in metric.data.data_points:
                            consumed += int(getattr(point, "value", 0))
        consumer.close()
        spans = exporter.get_finished_spans()
        return Outcome(
            consumed=consumed,
            process_spans=sum(s.name == f"process {topic}" for s in spans),
            rebalance_spans=sum(s.name.startswith("safeconsumer rebalance") for s in spans),
            metrics=sorted(names),
        )
    finally:
        kit.close()
        meters.shutdown()
        tracers.shutdown()


def main() -> int:
    with start_broker() as broker:
        out = run(broker.bootstrap_servers)
    print(out, flush=True)
    return 0 if out.consumed == out.process_spans == 100 else 1


if __name__ == "__main__":
    sys.exit(main())
