"""What telemetry costs per record with an OpenTelemetry SDK attached, piece by piece (no broker).

``python -m benchmarks.throughput --otel`` measures the whole: SafeConsumer with an SDK against
the raw consumer and against SafeConsumer without one, reading from a real broker. This one
times the pieces that whole is made of, on records built in memory, so that "where the time
went" is a measurement rather than a guess:

- ``count``: the per-partition consumed count of one ``consume(500)`` batch (the only
  per-record work an SDK adds), on the one-topic path and on the exact general path;
- ``collect``: one collection by the metric reader (every instrument's callback), for a
  consumer owning ``--partitions`` partitions; it runs once per export interval, not per record.

    python -m benchmarks.otel_cost [--batch 500] [--partitions 4] [--repeat 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Callable

from confluent_kafka import Message, TopicPartition

from safeconsumer import SafeConsumer
from safeconsumer.consumer._partitions import PartitionTable


def _median_us(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of one ``fn()`` call, in microseconds, over ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def _count_cost(batch: int, partitions: int, repeat: int) -> tuple[float, float]:
    """Microseconds to count one batch: (one-topic path, exact general path)."""
    keys = [("t", p) for p in range(partitions)]
    msgs = [Message(topic="t", partition=i % partitions, offset=i) for i in range(batch)]
    one = PartitionTable()
    one.assigned(keys, replace=False)
    one.consumed = Counter()
    # A second topic owned sends every batch the exact way: the cost before the one-topic path.
    general = PartitionTable()
    general.assigned([*keys, ("other", 0)], replace=False)
    general.consumed = Counter()
    one_topic = _median_us(lambda: one.count_delivered(msgs), repeat)
    return one_topic, _median_us(lambda: general.count_delivered(msgs), repeat)


def _collect_cost(partitions: int, repeat: int) -> float:
    """Microseconds for one collection of a SafeConsumer's instruments by an SDK metric reader."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    consumer = SafeConsumer(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "otel-cost", "log_level": 0},
        meter_provider=MeterProvider(metric_readers=[reader]),
        keepalive="off",
        explain_rebalances=False,
    )
    try:
        consumer.assign([TopicPartition("t", p) for p in range(partitions)])
        reader.get_metrics_data()  # the first collection creates the counts
        return _median_us(reader.get_metrics_data, repeat)
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    one, general = _count_cost(args.batch, args.partitions, args.repeat)
    collect = _collect_cost(args.partitions, max(args.repeat // 10, 10))
    print(f"count, one-topic path: {one:7.1f} us a {args.batch}-record batch ({one / args.batch:.3f} us a record)")
    print(f"count, exact path:     {general:7.1f} us a batch ({general / args.batch:.3f} us a record)")
    print(f"collect ({args.partitions} partitions): {collect:7.1f} us a collection (once per export interval)")


if __name__ == "__main__":
    main()
