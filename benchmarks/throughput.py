"""Throughput of SafeConsumer vs raw confluent_kafka.Consumer, side by side in one run.

Produces N records of 100 bytes to a 4-partition topic on a real broker (the embedded one
unless KAFKA_BOOTSTRAP_SERVERS is set), then reads them all, alternating raw and safe
consumers (each in a fresh group, default config: auto-commit and auto offset store on,
which goes first alternates by round), for several rounds, with ``poll()`` and with
``consume(500)``.

Reports, per call style, the median records/s of each, the median ratio safe/raw, and the
consumer process's CPU time per record (user+system of this process, which includes
librdkafka's threads): wall-clock throughput on a small machine is dominated by fetch
stalls of the shared broker, CPU per record shows what the wrapper itself costs.

    python -m benchmarks.throughput [--records 1000000] [--rounds 5] [--otel]

``--otel`` adds a third contender: SafeConsumer with an OpenTelemetry SDK meter provider
(an in-memory metric reader attached, so per-partition consumed counts are kept) and an SDK
tracer provider.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from confluent_kafka import Consumer

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, start_broker, unique_name

Factory = Callable[[dict[str, object]], Consumer]


def _read_all(make: Factory, conf: dict[str, object], topic: str, n: int, mode: str) -> tuple[float, float]:
    """Records/s (wall clock) and CPU microseconds per record, from the first record to the last."""
    c = make(conf)
    c.subscribe([topic])
    got = 0
    started = cpu_started = 0.0
    try:
        while got < n:
            if mode == "poll()":
                msg = c.poll(1.0)
                batch = 0 if msg is None or msg.error() is not None else 1
            else:
                batch = sum(1 for m in c.consume(500, 1.0) if m.error() is None)
            if batch and not started:
                started, cpu_started = time.perf_counter(), time.process_time()
            got += batch
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        return got / wall, cpu / got * 1e6
    finally:
        c.close()


def _with_sdk(conf: dict[str, object]) -> Consumer:
    """A SafeConsumer reporting to an OpenTelemetry SDK (metric reader attached, spans recorded)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    return SafeConsumer(
        conf, meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]), tracer_provider=TracerProvider()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fetch-queue-backoff-ms", type=int, default=10)
    parser.add_argument(
        "--otel",
        action="store_true",
        help="also run SafeConsumer with an OpenTelemetry SDK meter provider (in-memory reader) and tracer provider",
    )
    args = parser.parse_args()
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="bench")
        topic = kit.create_topic(partitions=4)
        started = time.perf_counter()
        kit.produce(topic, args.records, partitions=4, value_size=100)
        print(f"produced {args.records} x 100 B in {time.perf_counter() - started:.1f}s to {topic}", flush=True)
        order: list[tuple[str, Factory]] = [("raw", Consumer), ("safe", SafeConsumer)]
        if args.otel:
            order.append(("otel", _with_sdk))
        for mode in ("consume(500)", "poll()"):
            rates: dict[str, list[float]] = {name: [] for name, _ in order}
            cpus: dict[str, list[float]] = {name: [] for name, _ in order}
            for r in range(args.rounds):
                # Alternate which goes first, so neither always meets a warmer broker.
                for name, make in order if r % 2 == 0 else order[::-1]:
                    conf: dict[str, object] = {
                        "bootstrap.servers": broker.bootstrap_servers,
                        "group.id": unique_name("bench"),
                        "auto.offset.reset": "earliest",
                        # librdkafka's default (1000 ms) pauses fetching for a second whenever its
                        # local queue is full; the run would then measure how many such pauses
                        # happen to fall in it, not the consumer. Both consumers get the same value.
                        "fetch.queue.backoff.ms": args.fetch_queue_backoff_ms,
                    }
                    rate, cpu = _read_all(make, conf, topic, args.records, mode)
                    rates[name].append(rate)
                    cpus[name].append(cpu)
                    print(f"  {mode:13} round {r + 1} {name:4}: {rate:>10,.0f} records/s  {cpu:5.2f} us CPU/record")
            for name, _ in order[1:]:
                ratios = [s / r for s, r in zip(rates[name], rates["raw"], strict=True)]
                print(
                    f"{mode:13} raw median {statistics.median(rates['raw']):>10,.0f}/s  "
                    f"{name} median {statistics.median(rates[name]):>10,.0f}/s  "
                    f"median ratio {name}/raw {statistics.median(ratios):.2f}  "
                    f"CPU/record raw {statistics.median(cpus['raw']):.2f} us, "
                    f"{name} {statistics.median(cpus[name]):.2f} us",
                    flush=True,
                )
        kit.close()


if __name__ == "__main__":
    main()
