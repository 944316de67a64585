"""The child process of the peak-RSS measurement in :mod:`benchmarks.throughput`.

    python -m benchmarks._rss_child {raw|safe|otel} BOOTSTRAP TOPIC GROUP RECORDS FETCH_QUEUE_BACKOFF_MS

Reads RECORDS records of TOPIC with ``consume(500)`` in a fresh group, closes the consumer, and
prints how many it read and its peak resident set size in KiB (``VmHWM`` of /proc/self/status).
It imports safeconsumer (and the OpenTelemetry SDK) only for the contender that uses them, so
the raw child's peak RSS is that of a plain confluent_kafka application.

Why not the parent's ``getrusage(RUSAGE_CHILDREN)`` or ``os.wait4``: Linux carries a process's
``ru_maxrss`` across fork and exec, so a child's figure is never below its parent's RSS at the
time it was started (here the benchmark process, itself a consumer: every child then reported
exactly the parent's 87 MiB). ``VmHWM`` belongs to the child's own address space, created at exec.
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer


def _make(kind: str, conf: dict[str, object]) -> Consumer:
    if kind == "raw":
        return Consumer(conf)
    from safeconsumer import SafeConsumer

    if kind == "safe":
        return SafeConsumer(conf)
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    return SafeConsumer(
        conf, meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]), tracer_provider=TracerProvider()
    )


def main() -> None:
    kind, bootstrap, topic, group, records, backoff = sys.argv[1:7]
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": int(backoff),
    }
    c = _make(kind, conf)
    c.subscribe([topic])
    got, want = 0, int(records)
    try:
        while got < want:
            got += sum(1 for m in c.consume(500, 1.0) if m.error() is None)
    finally:
        c.close()
    print(got, _peak_rss_kib(), flush=True)


def _peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


if __name__ == "__main__":
    main()
