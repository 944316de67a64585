"""Every line of SPEC's Budgets table, measured side by side with the raw client in one run.

    python -m benchmarks.budgets [--records 1000000] [--rounds 7] [--rss-rounds 9] [--parked-seconds 20]

One broker (the embedded one unless KAFKA_BOOTSTRAP_SERVERS is set), then, each contender
alternating with its peers (the order rotates by round), medians over rounds:

- what ``consume(500)`` adds per record on a prefilled local queue, in wall time and in the main
  thread's CPU (:mod:`benchmarks.per_record`: each measurement a child process of its own, every
  contender's passes in its fast mode compared; the median of the per-round differences to raw),
  and the wrapper alone with librdkafka taken out (reported);
- throughput from the broker, ``consume(500)`` (reported, not judged) and ``poll()``: raw
  ``Consumer``, ``SafeConsumer``, and ``SafeConsumer`` with an OpenTelemetry SDK attached (meter
  provider with a reader, tracer provider), ``--records`` records of 100 B (as
  :mod:`benchmarks.throughput`);
- time from ``subscribe()`` to the first record;
- peak RSS of a child process per contender (``VmHWM``; :mod:`benchmarks._rss_child`): small
  (1 kB) and large (500 kB) records, ``poll()`` and ``consume(500)``, a fast application and a
  slow one (it processes at most 50 MiB of values a second, so librdkafka's buffers stay full);
  100 MiB of values per child; the fast 1 kB rows also run a control, a raw ``Consumer`` in a
  process that imported safeconsumer, reported after the table (not a budget);
- ``SafeAIOConsumer`` against ``confluent_kafka.aio.AIOConsumer``, ``await consume(500)`` and
  ``await poll()``;
- ``SafeShareConsumer.poll()`` against raw ``ShareConsumer``: what it adds per record in main-thread
  CPU outside upstream's ``poll`` call, judged on the floor (raw explicit mode acknowledging every
  record ACCEPT) in both modes and reported above raw implicit mode for implicit mode, the four
  contenders reading side by side in one child per round, on a broker of its own; whole
  main-thread CPU and wall time (reported), and each contender's peak RSS alone in a child
  (:mod:`benchmarks.share`);
- CPU of a parked ``SafeConsumer`` (inside ``keepalive()``, 4 partitions assigned) over
  ``--parked-seconds``, in % of one core.

It ends with one table: each budget, the median measured with its spread over rounds (min-max),
and whether it holds (a line is judged by its median). The same lines, with the machine and the
versions, are written to ``benchmarks/results/<date>-<commit>.json`` (``--results DIR``), from
which :mod:`benchmarks.report` generates the figures of docs/performance.md. Exit status 0 when
every budget held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka.aio import AIOConsumer

from safeconsumer import SafeConsumer
from safeconsumer.aio import SafeAIOConsumer
from safeconsumer.testing import KafkaTestKit, start_broker

from .aio import _confluent
from .parked_cpu import parked_cpu
from .per_record import Figure, isolated, side_by_side
from .report import rows
from .rss_trace import trace
from .throughput import Factory, _conf, _first_record, _peak_rss_mb, _read_all, _side_by_side, _with_sdk, median_ratio

ROOT = Path(__file__).resolve().parents[1]
#: Where each run's results file goes.
RESULTS = ROOT / "benchmarks" / "results"
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
    bound: float | None
    at_least: bool
    unit: str = "x"
    #: The spread of the per-round values the median was taken from (min, max).
    low: float | None = None
    high: float | None = None
    #: Judged by its whole spread, not by its median alone (SPEC: the share lines).
    by_spread: bool = False

    @property
    def holds(self) -> bool:
        """Judged by its median, and a ``by_spread`` line by its spread too; a line without a bound
        (reported only) always holds."""
        if self.bound is None:
            return True
        values = [self.figure]
        if self.by_spread and self.low is not None and self.high is not None:
            values += [self.low, self.high]
        return all(v >= self.bound if self.at_least else v <= self.bound for v in values)

    @classmethod
    def ns(cls, what: str, fig: Figure, bound: float | None = None, *, by_spread: bool = False) -> Line:
        """A per-record line in ns, at most ``bound``: the figure's median with its spread."""
        return cls(what, fig.median, bound, False, " ns", fig.low, fig.high, by_spread)

    def as_dict(self) -> dict[str, object]:
        """As the results file and :func:`benchmarks.report.rows` take it."""
        return {**asdict(self), "holds": self.holds}


def ratio_line(
    what: str, values: dict[str, list[float]], name: str, base: str, *, bound: float | None, at_least: bool
) -> Line:
    """A ratio line: the median over rounds of ``name``/``base`` in the same round, with its spread."""
    ratios = [s / b for s, b in zip(values[name], values[base], strict=True)]
    return Line(what, median_ratio(values, name, base), bound, at_least, low=min(ratios), high=max(ratios))


def _rate(value: float) -> str:
    return f"{value:>12,.0f}/s"


def _mib(value: float) -> str:
    return f"{value:>8,.1f} MiB"


def _per_record(kit: KafkaTestKit, bootstrap: str, args: argparse.Namespace) -> list[Line]:
    topic = kit.create_topic(partitions=4)
    kit.produce(topic, args.per_record_records, partitions=4, value_size=100)
    got = side_by_side(bootstrap, topic, args.per_record_records, args.per_record_rounds)
    lines = []
    for clock, label in (("wall", "wall time"), ("cpu", "main-thread CPU")):
        for kind, what, bound in (("safe", "", 25.0), ("otel", ", OpenTelemetry SDK attached", 40.0)):
            lines.append(Line.ns(f"`consume(500)` adds per record, {label}{what}", got.added(kind, clock), bound))
    alone = isolated()  # deterministic: the same code, without librdkafka's per-instance modes
    alone_line = "`consume(500)` adds per record, the wrapper alone (reported)"
    lines.append(Line(alone_line, alone["adds"], None, False, " ns"))
    lines.append(Line("... of which the error-event scan (reported)", alone["scan"], None, False, " ns"))
    for kind in ("raw", "safe", "otel"):
        slow, every = got.slow(kind)
        print(f"  consume(500) {kind}: {slow} of {every} passes in the slow mode (left out of the figures)")
    return lines


def _throughput(bootstrap: str, topic: str, args: argparse.Namespace) -> list[Line]:
    makers: dict[str, Factory] = {"raw": Consumer, "safe": SafeConsumer, "otel": _with_sdk}
    lines = []
    for mode, bound, sdk_bound in (("consume(500)", None, None), ("poll()", 1.1, 0.95)):
        rates = _side_by_side(
            mode,
            list(makers),
            args.rounds,
            lambda name, mode=mode: _read_all(makers[name], _conf(bootstrap, BACKOFF_MS), topic, args.records, mode)[0],  # type: ignore[misc]
            _rate,
        )
        end_to_end = " end to end" if bound is None else ""
        lines.append(ratio_line(f"`{mode}` throughput{end_to_end}", rates, "safe", "raw", bound=bound, at_least=True))
        lines.append(
            ratio_line(
                f"`{mode}` throughput{end_to_end}, OpenTelemetry SDK attached",
                rates,
                "otel",
                "raw",
                bound=sdk_bound,
                at_least=True,
            )
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
    return ratio_line("subscribe to first record", took, "safe", "raw", bound=1.1, at_least=False)


def _rss(
    kit: KafkaTestKit, bootstrap: str, args: argparse.Namespace
) -> tuple[list[Line], list[str], dict[str, list[list[float]]]]:
    """The peak-RSS lines, the controls of the fast 1 kB rows (see ``CONTROLLED``), and one RSS
    trace of raw and of SafeConsumer over a fast 1 kB ``consume()`` read (for docs/performance.md)."""
    lines: list[Line] = []
    controls: list[str] = []
    traces: dict[str, list[list[float]]] = {}
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
                lines.append(ratio_line(label, mib, "safe", "raw", bound=1.10, at_least=False))
                if controlled:
                    controls.append(f"{label}: {median_ratio(mib, 'imported', 'raw'):.2f}x")
                if controlled and mode == "consume":
                    for kind in ("raw", "safe"):
                        traces[kind] = trace(kind, bootstrap, topic, count)["trace"]
    return lines, controls, traces


def _aio(bootstrap: str, topic: str, args: argparse.Namespace) -> list[Line]:
    readers = {"AIOConsumer": _confluent(AIOConsumer), "SafeAIOConsumer": _confluent(SafeAIOConsumer)}
    lines = []
    for mode in ("consume(500)", "poll()"):
        n = _aio_records(args, mode)

        def rate(name: str, mode: str = mode, n: int = n) -> float:
            return asyncio.run(readers[name](bootstrap, topic, n, mode))  # type: ignore[arg-type]

        rates = _side_by_side(f"await {mode}", list(readers), args.rounds, rate, _rate)
        lines.append(
            ratio_line(
                f"SafeAIOConsumer `await {mode}` / AIOConsumer",
                rates,
                "SafeAIOConsumer",
                "AIOConsumer",
                bound=1.0,
                at_least=True,
            )
        )
    return lines


def _aio_records(args: argparse.Namespace, mode: str) -> int:
    """AIOConsumer's ``await poll()`` runs one record per executor hop (tens of thousands a second):
    100,000 records are enough to rate it."""
    records: int = args.records
    return records if mode == "consume(500)" else min(records, 100_000)


def _share(args: argparse.Namespace) -> list[Line]:
    """What ``SafeShareConsumer.poll()`` adds per record, on the floor (:mod:`benchmarks.share`): raw
    ``ShareConsumer`` in explicit mode acknowledging every record ACCEPT. On a broker of its own: what
    the judged clock measures runs on caches the broker's JVM shares, and a broker carrying the
    sections before (millions of records, hundreds of groups) more than doubled both modes' figures."""
    from . import share

    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="budgets-share")
        try:
            topic = kit.create_topic(partitions=4)
            kit.produce(topic, args.share_records, partitions=4, value_size=100)
            runs = share.side_by_side(broker.bootstrap_servers, topic, args.share_records, args.share_rounds)
        finally:
            kit.close()
    resolution = "SafeShareConsumer lines' resolution: half the floor's consumers against the other half (reported)"
    lines = [Line.ns(resolution, runs.resolution())]
    for mode in share.MODES:
        ours, same = f"safe {mode}", f"raw {mode}"
        bases: list[tuple[str, str, float | None]] = [
            (share.FLOOR[mode], "the floor (raw explicit mode, every record acknowledged)", 50.0)
        ]
        if same != share.FLOOR[mode]:
            bases.append((same, f"raw {mode} mode", None))
        for base, over, bound in bases:
            what = f"SafeShareConsumer `poll()` adds per record, {mode} mode, over {over}, "
            what += "main-thread CPU outside upstream's poll"
            lines.append(Line.ns(what, runs.added(ours, base, share.JUDGED), bound, by_spread=bound is not None))
        for clock, label in (("cpu", "main-thread CPU"), ("wall", "wall time")):
            what = f"SafeShareConsumer `poll()` adds per record, {mode} mode, over raw {mode} mode, {label}"
            lines.append(Line.ns(what, runs.added(ours, same, clock)))
        ratio = runs.rss_ratio(mode)
        lines.append(
            Line(f"SafeShareConsumer peak RSS, {mode} mode", ratio.median, 1.10, False, "x", ratio.low, ratio.high)
        )
    return lines


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
    parser.add_argument("--per-record-records", type=int, default=200_000)
    parser.add_argument("--per-record-rounds", type=int, default=9)
    parser.add_argument("--share-records", type=int, default=200_000)
    parser.add_argument("--share-rounds", type=int, default=9)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the results file goes")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="budgets")
        try:
            topic = kit.create_topic(partitions=4)
            kit.produce(topic, args.records, partitions=4, value_size=100)
            lines = _per_record(kit, broker.bootstrap_servers, args)
            lines += _throughput(broker.bootstrap_servers, topic, args)
            lines.append(_first_records(broker.bootstrap_servers, topic, args))
            rss_lines, controls, traces = _rss(kit, broker.bootstrap_servers, args)
            lines += rss_lines
            lines += _aio(broker.bootstrap_servers, topic, args)
            lines.append(_parked(kit, args))
        finally:
            kit.close()
    lines[-1:-1] = _share(args)  # before the parked line, as the table has it
    took = time.monotonic() - started
    print(
        f"\nBudgets (SPEC), one run, {took:.0f}s; medians over rounds of safe against raw in the same round (spread)\n"
    )
    print("| what | median (spread over rounds) | budget | |\n|---|---:|---:|:-:|")
    for row in rows([line.as_dict() for line in lines]):
        print(row)
    if controls:
        print("\nControls (not budgets): a raw Consumer in a process that imported safeconsumer, against raw")
        for control in controls:
            print(f"- {control}")
    written = _write_results(args.results, lines, controls, traces, took)
    print(f"\nresults: {written.relative_to(ROOT) if written.is_relative_to(ROOT) else written}")
    failed = [line.what for line in lines if not line.holds]
    print(f"\n{'every budget held' if not failed else 'over budget: ' + '; '.join(failed)}", flush=True)
    return 1 if failed else 0


def _write_results(
    where: Path, lines: list[Line], controls: list[str], traces: dict[str, list[list[float]]], took: float
) -> Path:
    """One machine-readable file per run: the lines, the machine, the versions, the commit."""
    import confluent_kafka

    from safeconsumer.testing import KAFKA_VERSION

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {
        "schema": 1,
        "date": now.isoformat(timespec="seconds"),
        "commit": commit or "unknown",
        "command": "make bench",
        "seconds": round(took),
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "system": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
        },
        "versions": {
            "confluent-kafka": confluent_kafka.version()[0],
            "librdkafka": confluent_kafka.libversion()[0],
            "kafka": KAFKA_VERSION,
        },
        "lines": [line.as_dict() for line in lines],
        "controls": controls,
        "rss_traces": traces,
    }
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{now:%Y-%m-%dT%H%M%SZ}-{result['commit']}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


if __name__ == "__main__":
    sys.exit(main())
