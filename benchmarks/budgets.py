"""Every line of SPEC's Budgets table, measured side by side with the raw client in one run.

    python -m benchmarks.budgets [--records 1000000] [--rounds 7] [--rss-rounds 9] [--parked-seconds 20]

One broker (the embedded one unless KAFKA_BOOTSTRAP_SERVERS is set), then, each contender
alternating with its peer (which goes first alternates by round), medians over rounds:

- throughput, ``consume(500)`` and ``poll()``: raw ``Consumer``, ``SafeConsumer``, and
  ``SafeConsumer`` with an OpenTelemetry SDK attached (meter provider with a reader, tracer
  provider), ``--records`` records of 100 B (as :mod:`benchmarks.throughput`);
- time from ``subscribe()`` to the first record;
- peak RSS of a child process per contender (``VmHWM``; :mod:`benchmarks._rss_child`): small
  (1 kB) and large (500 kB) records, ``poll()`` and ``consume(500)``, a fast application and a
  slow one (it processes at most 50 MiB of values a second, so librdkafka's buffers stay full);
  100 MiB of values per child; the fast 1 kB rows also run a control, a raw ``Consumer`` in a
  process that imported safeconsumer, reported after the table (not a budget);
- ``SafeAIOConsumer`` against ``confluent_kafka.aio.AIOConsumer``, ``await consume(500)`` and
  ``await poll()``;
- CPU of a parked ``SafeConsumer`` (inside ``keepalive()``, 4 partitions assigned) over
  ``--parked-seconds``, in % of one core.

It ends with one table: each budget, the figure measured, and whether it holds. Exit status 0
when every budget held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass

from confluent_kafka import Consumer
from confluent_kafka.aio import AIOConsumer

from safeconsumer import SafeConsumer
from safeconsumer.aio import SafeAIOConsumer
from safeconsumer.testing import KafkaTestKit, start_broker

from .aio import _confluent
from .parked_cpu import parked_cpu
from .throughput import Factory, _conf, _first_record, _peak_rss_mb, _read_all, _side_by_side, _with_sdk, median_ratio

#: Values each peak-RSS child reads: 100 MiB, as 1 kB or 500 kB records.
RSS_BYTES = 100 * 1024 * 1024
RECORD_SIZES = {"1 kB": 1000, "500 kB": 500_000}
#: The slow application processes at most this many MiB of values a second.
SLOW_MIB_PER_S = 50.0
BACKOFF_MS = 10
#: The RSS rows run with a third contender, the control: a raw Consumer in a process that only
#: imported safeconsumer. A fast application's peak moves in steps of one fetch response (4 MiB
#: here) with the race between librdkafka's fetches and the drain; the control's ratio shows how
#: far that moves a row whose consumer is raw's own (docs/performance.md).
CONTROLLED = ("1 kB", "fast")


@dataclass
class Line:
    """One budget: what, the figure, the bound, and whether it must be at least or at most that."""

    what: str
    figure: float
    bound: float
    at_least: bool
    unit: str = "x"

    @property
    def holds(self) -> bool:
        return self.figure >= self.bound if self.at_least else self.figure <= self.bound

    def row(self) -> str:
        sign = ">=" if self.at_least else "<"
        if self.unit == "x":
            sign = ">=" if self.at_least else "<="
        mark = "✓" if self.holds else "✗"
        return f"| {self.what} | {self.figure:.2f}{self.unit} | {sign} {self.bound:g}{self.unit} | {mark} |"


def _rate(value: float) -> str:
    return f"{value:>12,.0f}/s"


def _mib(value: float) -> str:
    return f"{value:>8,.1f} MiB"


def _throughput(bootstrap: str, topic: str, args: argparse.Namespace) -> list[Line]:
    makers: dict[str, Factory] = {"raw": Consumer, "safe": SafeConsumer, "otel": _with_sdk}
    lines = []
    for mode, bound in (("consume(500)", 1.0), ("poll()", 1.1)):
        rates = _side_by_side(
            mode,
            list(makers),
            args.rounds,
            lambda name, mode=mode: _read_all(makers[name], _conf(bootstrap, BACKOFF_MS), topic, args.records, mode)[0],  # type: ignore[misc]
            _rate,
        )
        lines.append(Line(f"`{mode}` throughput", median_ratio(rates, "safe", "raw"), bound, True))
        lines.append(
            Line(f"`{mode}` throughput, OpenTelemetry SDK attached", median_ratio(rates, "otel", "raw"), 0.95, True)
        )
    return lines


def _first_records(bootstrap: str, topic: str, args: argparse.Namespace) -> Line:
    makers: dict[str, Factory] = {"raw": Consumer, "safe": SafeConsumer}
    took = _side_by_side(
        "first record",
        list(makers),
        args.rounds,
        lambda name: _first_record(makers[name], _conf(bootstrap, BACKOFF_MS), topic),
        lambda seconds: f"{seconds * 1000:>8,.0f} ms",
    )
    return Line("subscribe to first record", median_ratio(took, "safe", "raw"), 1.1, False)


def _rss(kit: KafkaTestKit, bootstrap: str, args: argparse.Namespace) -> tuple[list[Line], list[str]]:
    """The peak-RSS lines, and the controls of the fast 1 kB rows (see ``CONTROLLED``)."""
    lines: list[Line] = []
    controls: list[str] = []
    for size_label, size in RECORD_SIZES.items():
        count = RSS_BYTES // size
        topic = kit.create_topic(partitions=4)
        kit.produce(topic, count, partitions=4, value_size=size)
        for mode in ("consume", "poll"):
            for speed, slow in (("fast", 0.0), ("slow", SLOW_MIB_PER_S)):

                def peak(
                    name: str, topic: str = topic, count: int = count, mode: str = mode, slow: float = slow
                ) -> float:
                    extra = [mode, str(slow)] if slow else [mode]
                    return _peak_rss_mb(name, bootstrap, topic, count, BACKOFF_MS, extra=extra)

                label = f"peak RSS, {size_label} records, {mode}(), {speed} app"
                controlled = (size_label, speed) == CONTROLLED
                names = ["raw", "safe", "imported"] if controlled else ["raw", "safe"]
                mib = _side_by_side(label, names, args.rss_rounds, peak, _mib)
                lines.append(Line(label, median_ratio(mib, "safe", "raw"), 1.10, False))
                if controlled:
                    controls.append(f"{label}: {median_ratio(mib, 'imported', 'raw'):.2f}x")
    return lines, controls


def _aio(bootstrap: str, topic: str, args: argparse.Namespace) -> list[Line]:
    readers = {"AIOConsumer": _confluent(AIOConsumer), "SafeAIOConsumer": _confluent(SafeAIOConsumer)}
    lines = []
    for mode in ("consume(500)", "poll()"):
        n = _aio_records(args, mode)

        def rate(name: str, mode: str = mode, n: int = n) -> float:
            return asyncio.run(readers[name](bootstrap, topic, n, mode))  # type: ignore[arg-type]

        rates = _side_by_side(f"await {mode}", list(readers), args.rounds, rate, _rate)
        ratio = median_ratio(rates, "SafeAIOConsumer", "AIOConsumer")
        lines.append(Line(f"SafeAIOConsumer `await {mode}` / AIOConsumer", ratio, 1.0, True))
    return lines


def _aio_records(args: argparse.Namespace, mode: str) -> int:
    """AIOConsumer's ``await poll()`` runs one record per executor hop (tens of thousands a second):
    100,000 records are enough to rate it."""
    records: int = args.records
    return records if mode == "consume(500)" else min(records, 100_000)


def _parked(kit: KafkaTestKit, args: argparse.Namespace) -> Line:
    cpu, wall = parked_cpu(kit, args.parked_seconds)
    print(f"  parked: {cpu:.2f}s CPU in {wall:.0f}s", flush=True)
    return Line("a parked consumer, % of one core", 100 * cpu / wall, 2.0, False, unit="%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per throughput read (default 1000000)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rss-rounds", type=int, default=9)
    parser.add_argument("--parked-seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    started = time.monotonic()
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="budgets")
        try:
            topic = kit.create_topic(partitions=4)
            kit.produce(topic, args.records, partitions=4, value_size=100)
            lines = _throughput(broker.bootstrap_servers, topic, args)
            lines.append(_first_records(broker.bootstrap_servers, topic, args))
            rss_lines, controls = _rss(kit, broker.bootstrap_servers, args)
            lines += rss_lines
            lines += _aio(broker.bootstrap_servers, topic, args)
            lines.append(_parked(kit, args))
        finally:
            kit.close()
    print(f"\nBudgets (SPEC), one run, {time.monotonic() - started:.0f}s; ratios are medians of safe/raw per round\n")
    print("| budget | measured | bound | holds |\n|---|---:|---:|:-:|")
    for line in lines:
        print(line.row())
    if controls:
        print("\nControls (not budgets): a raw Consumer in a process that imported safeconsumer, against raw")
        for control in controls:
            print(f"- {control}")
    failed = [line.what for line in lines if not line.holds]
    print(f"\n{'every budget held' if not failed else 'over budget: ' + '; '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
