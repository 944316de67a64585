"""The child process of the peak-RSS measurement in :mod:`benchmarks.throughput`.

    python -m benchmarks._rss_child {raw|imported|safe|otel} BOOTSTRAP TOPIC GROUP RECORDS FETCH_QUEUE_BACKOFF_MS
                                    [{consume|poll} [SLOW_MIB_PER_S]]

Reads RECORDS records of TOPIC with ``consume(500)`` (or ``poll()``) in a fresh group, closes the
consumer, and prints how many it read and its peak resident set size in KiB (``VmHWM`` of
/proc/self/status). With SLOW_MIB_PER_S the application is slow: it "works" (sleeps) so that it
processes at most that many MiB of values a second, and librdkafka's buffers stay full meanwhile.
It imports safeconsumer (and the OpenTelemetry SDK) only for the contender that uses them, so
the raw child's peak RSS is that of a plain confluent_kafka application. ``imported`` is the
control: a raw ``Consumer`` in a process that imported safeconsumer and uses nothing of it (its
ratio to raw is the import's cost plus the row's noise).

Why not the parent's ``getrusage(RUSAGE_CHILDREN)`` or ``os.wait4``: Linux carries a process's
``ru_maxrss`` across fork and exec, so a child's figure is never below its parent's RSS at the
time it was started (here the benchmark process, itself a consumer: every child then reported
exactly the parent's 87 MiB). ``VmHWM`` belongs to the child's own address space, created at exec.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer


def make_contender(kind: str, conf: dict[str, object]) -> Consumer:
    """A contender by name: ``raw``, ``imported`` (the control), ``safe``, ``otel`` (an SDK attached)."""
    if kind == "raw":
        return Consumer(conf)
    from safeconsumer import SafeConsumer

    if kind == "imported":
        return Consumer(conf)  # the control: raw, in a process that imported safeconsumer

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
    mode = sys.argv[7] if len(sys.argv) > 7 else "consume"
    slow = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": int(backoff),
    }
    c = make_contender(kind, conf)
    c.subscribe([topic])
    got, want = 0, int(records)
    owed = 0.0  # seconds of simulated work not yet slept
    try:
        while got < want:
            batch = c.consume(500, 1.0) if mode == "consume" else [m for m in [c.poll(1.0)] if m is not None]
            for m in batch:
                if m.error() is None:
                    got += 1
                    if slow:
                        owed += len(m.value() or b"") / (slow * 1024 * 1024)
            if owed >= 0.005:
                time.sleep(owed)  # the slow application's work on what it got
                owed = 0.0
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
