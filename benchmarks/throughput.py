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

Then two more side-by-side measurements, in the same alternating order:

- time to first record: from ``subscribe()`` to the first record ``poll()`` returns, each
  round in a fresh group (the group join dominates it); the median over ``--rounds`` rounds
  and the median ratio safe/raw;
- peak RSS: a child process per contender reads ``--rss-records`` records with
  ``consume(500)`` in a fresh group and reports its peak resident set size (``VmHWM``, see
  :mod:`benchmarks._rss_child`; the raw child never imports safeconsumer). Median over
  ``--rss-rounds`` rounds and the median ratio safe/raw.

    python -m benchmarks.throughput [--records 1000000] [--rounds 5] [--otel]
                                    [--measure throughput|first-record|rss ...]
                                    [--rss-records N] [--rss-rounds 3]

``--otel`` adds a third contender: SafeConsumer with an OpenTelemetry SDK meter provider
(an in-memory metric reader attached, so per-partition consumed counts are kept) and an SDK
tracer provider. ``--measure`` (repeatable) runs only the measurements named; default all.
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, start_broker, unique_name

Factory = Callable[[dict[str, object]], Consumer]

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENTS = ("throughput", "first-record", "rss")
#: A child that has not read its records by then is killed and the run fails.
RSS_CHILD_TIMEOUT = 600.0


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


def _first_record(make: Factory, conf: dict[str, object], topic: str) -> float:
    """Seconds from ``subscribe()`` to the first record ``poll()`` returns (construction excluded)."""
    c = make(conf)
    try:
        started = time.perf_counter()
        c.subscribe([topic])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                return time.perf_counter() - started
        raise RuntimeError(f"no record of {topic} within 120 s of subscribe()")
    finally:
        c.close()


def _peak_rss_mb(
    kind: str, bootstrap: str, topic: str, records: int, backoff_ms: int, *, extra: list[str] | None = None
) -> float:
    """Run one :mod:`benchmarks._rss_child` reading ``records`` records; its peak RSS in MiB.
    ``extra``: the child's optional arguments (``poll``/``consume``, a slow application's MiB/s)."""
    _compile_library()
    cmd = [sys.executable, "-m", "benchmarks._rss_child", kind, bootstrap, topic, unique_name("rss")]
    proc = subprocess.run(
        [*cmd, str(records), str(backoff_ms), *(extra or [])],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        timeout=RSS_CHILD_TIMEOUT,
        check=False,
    )
    fields = proc.stdout.split()
    if proc.returncode != 0 or len(fields) != 2 or fields[0] != str(records):
        raise RuntimeError(f"{kind} RSS child exited {proc.returncode} printing {proc.stdout.strip()!r}")
    return int(fields[1]) / 1024


def _compile_library() -> None:
    """safeconsumer's bytecode, written once: a child importing it from source would compile every
    module, and the compiler's memory (1.3 MiB here) would count in its peak RSS. Installed from a
    wheel, pip writes the bytecode; confluent_kafka's is there, so both children read bytecode
    (also where PYTHONDONTWRITEBYTECODE is set, which stops only the writing)."""
    compileall.compile_dir(ROOT / "safeconsumer", quiet=1)


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
    parser.add_argument(
        "--measure", action="append", choices=MEASUREMENTS, help="run only these measurements (repeatable)"
    )
    parser.add_argument("--rss-records", type=int, help="records each peak-RSS child reads (default --records)")
    parser.add_argument("--rss-rounds", type=int, default=3, help="peak-RSS rounds (default 3)")
    args = parser.parse_args()
    measure = set(args.measure or MEASUREMENTS)
    if args.rss_records is not None and not 0 < args.rss_records <= args.records:
        parser.error("--rss-records must be between 1 and --records (the records produced)")
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="bench")
        topic = kit.create_topic(partitions=4)
        started = time.perf_counter()
        kit.produce(topic, args.records, partitions=4, value_size=100)
        print(f"produced {args.records} x 100 B in {time.perf_counter() - started:.1f}s to {topic}", flush=True)
        order: list[tuple[str, Factory]] = [("raw", Consumer), ("safe", SafeConsumer)]
        if args.otel:
            order.append(("otel", _with_sdk))
        for mode in ("consume(500)", "poll()") if "throughput" in measure else ():
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
        if "first-record" in measure:
            _first_records(broker.bootstrap_servers, topic, order, args)
        if "rss" in measure:
            _peak_rss(broker.bootstrap_servers, topic, order, args)
        kit.close()


def _conf(bootstrap: str, backoff_ms: int) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": unique_name("bench"),
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": backoff_ms,
    }


def _side_by_side(
    label: str,
    names: list[str],
    rounds: int,
    measure: Callable[[str], float],
    show: Callable[[float], str],
) -> dict[str, list[float]]:
    """Measure every contender once per round (the order rotates by round), print each value,
    then per contender the medians and the median ratio to the first (the baseline); returns
    every value by contender."""
    values: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # each contender in each place in turn
            value = measure(name)
            values[name].append(value)
            print(f"  {label:13} round {r + 1} {name:4}: {show(value)}", flush=True)
    base = names[0]
    for name in names[1:]:
        print(
            f"{label:13} {base} median {show(statistics.median(values[base]))}  "
            f"{name} median {show(statistics.median(values[name]))}  "
            f"median ratio {name}/{base} {median_ratio(values, name, base):.2f}",
            flush=True,
        )
    return values


def median_ratio(values: dict[str, list[float]], name: str, base: str) -> float:
    """The median over rounds of ``name``'s value over ``base``'s in the same round."""
    return statistics.median(s / b for s, b in zip(values[name], values[base], strict=True))


def _first_records(bootstrap: str, topic: str, order: list[tuple[str, Factory]], args: argparse.Namespace) -> None:
    makers = dict(order)
    _side_by_side(
        "first record",
        [name for name, _ in order],
        args.rounds,
        lambda name: _first_record(makers[name], _conf(bootstrap, args.fetch_queue_backoff_ms), topic),
        lambda took: f"{took * 1000:>8,.0f} ms",
    )


def _peak_rss(bootstrap: str, topic: str, order: list[tuple[str, Factory]], args: argparse.Namespace) -> None:
    records = args.rss_records or args.records
    print(f"  peak RSS: each contender reads {records:,} records in a child process")
    _side_by_side(
        "peak RSS",
        [name for name, _ in order],
        args.rss_rounds,
        lambda name: _peak_rss_mb(name, bootstrap, topic, records, args.fetch_queue_backoff_ms),
        lambda peak: f"{peak:>8,.1f} MiB",
    )


if __name__ == "__main__":
    main()
