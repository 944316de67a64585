"""What ``SafeShareConsumer.poll()`` adds per record, judged on the floor (SPEC's Budgets table).

    python -m benchmarks.share [--records 50000] [--rounds 7]           (starts its own broker)
    python -m benchmarks.share --child KIND MODE BOOTSTRAP TOPIC RECORDS PASSES

The floor is raw ``ShareConsumer`` in explicit mode acknowledging every record ACCEPT: librdkafka has
no batch or range acknowledgement, so any share consumer that can release single records pays one
``acknowledge()`` per record. Ours in implicit mode is judged on that floor and reported above raw
implicit mode; ours in explicit mode is judged above raw explicit mode.

A share consumer cannot be handed a prefilled local queue (each ``poll()`` acquires records from the
broker), so a pass reads a topic of ``RECORDS`` records from its start with a fresh share group and a
fresh consumer, as an application does: ``poll(1.0)``, iterate the batch, and in explicit mode
acknowledge each record. Each child (one contender: raw or ours, implicit or explicit) makes
``PASSES`` passes and reports, per pass and per record, the main thread's CPU time
(``thread_time_ns``: where the wrapper works, not the time spent waiting for the broker), the wall
time, and the main thread's CPU spent *outside* upstream's ``ShareConsumer.poll`` C call (for ours, a
probe class between ``SafeShareConsumer`` and ``ShareConsumer`` times that call), and its peak RSS.
librdkafka's share fetch does its work inside that call on the application's thread, and its CPU per
record moves by hundreds of ns from consumer to consumer for the same code; what the wrapper adds is
everything outside it, the judged clock.

Unlike ``consume(500)``'s (:mod:`benchmarks.per_record`), a share consumer's passes are not bimodal
here: every contender's passes spread about ±10% around their median, instance by instance (a
fast-mode filter, tried, was set by one low pass and dropped most of a contender's passes). So a
contender's figure for a round is the median of that round's ``PASSES`` passes, and what it adds is
the median of all its passes minus the base's, shown with the spread of the per-round differences.
The parent rotates the four contenders' order by round. A batch's
records are freed outside upstream's call for both (raw's pass drops its last batch when it assigns
the new one, ours frees it in its ``poll()`` after upstream's call returned).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .per_record import Figure
from .throughput import _compile_library

ROOT = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT = 600
MODES = ("implicit", "explicit")
KINDS = ("raw", "safe")
#: Passes per child, each a fresh share group and consumer (see the module).
PASSES = 8
#: The base each of ours is judged on, by mode: the floor for implicit mode (see the module).
FLOOR = {"implicit": "raw explicit", "explicit": "raw explicit"}


#: What one pass reports, per record: main-thread CPU, wall time, main-thread CPU outside upstream's
#: ``ShareConsumer.poll`` (ns); the child adds its process's peak RSS (MiB, ``VmHWM``).
CLOCKS = ("cpu", "wall", "outside")
JUDGED = "outside"


def measure(kind: str, mode: str, bootstrap: str, topic: str, records: int) -> tuple[list[dict[str, float]], float]:
    """One child's passes (figures by clock, :data:`CLOCKS`) and its peak RSS."""
    _compile_library()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.share", "--child", kind, mode, bootstrap, topic, str(records), str(PASSES)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} {mode} child exited {proc.returncode}: {proc.stdout.strip()!r}")
    passes, rss = json.loads(proc.stdout)
    return [dict(zip(CLOCKS, map(float, one), strict=True)) for one in passes], float(rss)


@dataclass
class ShareRuns:
    """Every pass of every round by contender (``"<kind> <mode>"``), each child's peak RSS, and the
    figures taken from them (see the module)."""

    passes: dict[str, list[list[dict[str, float]]]]
    rss: dict[str, list[float]]

    def _round(self, name: str, round_: int, clock: str) -> float:
        return statistics.median(p[clock] for p in self.passes[name][round_])

    def added(self, name: str, base: str, clock: str) -> Figure:
        """What ``name`` adds to ``base`` per record on ``clock``: the median of all its passes minus
        ``base``'s, with the spread of the per-round differences."""
        diffs = [self._round(name, r, clock) - self._round(base, r, clock) for r in range(len(self.passes[name]))]
        return Figure(self.pooled(name, clock) - self.pooled(base, clock), min(diffs), max(diffs))

    def pooled(self, name: str, clock: str) -> float:
        """The median of all the contender's passes on ``clock``."""
        return statistics.median(p[clock] for r in self.passes[name] for p in r)

    def rss_ratio(self, mode: str) -> Figure:
        """Ours' peak RSS over raw's of the same mode, round by round."""
        safe, raw = self.rss[f"safe {mode}"], self.rss[f"raw {mode}"]
        return Figure.of([s / r for s, r in zip(safe, raw, strict=True)])


def side_by_side(bootstrap: str, topic: str, records: int, rounds: int) -> ShareRuns:
    """Every pass of every round, the four contenders' order rotating by round."""
    names = [f"{k} {m}" for m in MODES for k in KINDS]
    runs = ShareRuns({n: [] for n in names}, {n: [] for n in names})
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            kind, mode = name.split()
            passes, rss = measure(kind, mode, bootstrap, topic, records)
            runs.passes[name].append(passes)
            runs.rss[name].append(rss)
            shown = " ".join(f"{p[JUDGED]:.0f}" for p in passes)
            print(
                f"  share poll() per record, round {r + 1} {name:13}: passes {shown} ns CPU outside upstream's poll, "
                f"peak RSS {rss:.1f} MiB",
                flush=True,
            )
    return runs


def _peak_rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _pass(kind: str, mode: str, bootstrap: str, topic: str, records: int) -> list[float]:
    """One pass: a fresh share group and consumer read the topic; per record, (CPU, wall, CPU outside)."""
    import logging

    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AdminClient

    from safeconsumer import SafeShareConsumer
    from safeconsumer.group._share import set_start

    inside = [0]  # main-thread CPU inside upstream's poll()

    class Probe(ShareConsumer):
        """Times upstream's ``poll`` call where ``SafeShareConsumer`` makes it (``super().poll()``)."""

        def poll(self, *args: Any, **kwargs: Any) -> Any:
            began = time.thread_time_ns()
            try:
                return super().poll(*args, **kwargs)
            finally:
                inside[0] += time.thread_time_ns() - began

    class ProbedSafe(SafeShareConsumer, Probe):
        pass

    group = f"bench-share-{kind}-{mode}-{time.monotonic_ns()}"
    quiet = logging.getLogger("bench.librdkafka")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    admin_conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": quiet}
    set_start(AdminClient(admin_conf), group, "earliest")
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "share.acknowledgement.mode": mode,
        "logger": quiet,
    }
    c = ShareConsumer(conf) if kind == "raw" else ProbedSafe(conf)
    c.subscribe([topic])
    explicit = mode == "explicit"
    got = 0
    # The first batch (the group's join) is not timed.
    while not got:
        batch = c.poll(1.0)
        for m in batch:
            got += 1
            if explicit:
                c.acknowledge(m)
    inside[0] = 0
    clock = time.thread_time_ns
    started_cpu, started_wall, timed = clock(), time.perf_counter_ns(), 0
    acknowledge = c.acknowledge
    while got < records:
        if kind == "raw":
            # The last batch is freed after the timed call (by the assignment): its records'
            # deallocation is outside upstream's poll, as it is for ours (freed in our poll() after it).
            began = clock()
            polled = c.poll(1.0)
            inside[0] += clock() - began
            batch = polled
        else:
            batch = c.poll(1.0)
        for m in batch:
            timed += 1
            if explicit:
                acknowledge(m)
        got += len(batch)
    cpu, wall = clock() - started_cpu, time.perf_counter_ns() - started_wall
    c.close()
    return [cpu / timed, wall / timed, (cpu - inside[0]) / timed]


def _child(kind: str, mode: str, bootstrap: str, topic: str, records: int, *, passes: int) -> None:
    got = [_pass(kind, mode, bootstrap, topic, records) for _ in range(passes)]
    print(json.dumps([got, _peak_rss_mib()]), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=6, metavar=("KIND", "MODE", "BOOTSTRAP", "TOPIC", "RECORDS", "PASSES"))
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    if args.child:
        kind, mode, bootstrap, topic, records, passes = args.child
        _child(kind, mode, bootstrap, topic, int(records), passes=int(passes))
        return
    from safeconsumer.testing import KafkaTestKit, start_broker

    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="bench-share")
        try:
            topic = kit.create_topic(partitions=4)
            kit.produce(topic, args.records, partitions=4, value_size=100)
            runs = side_by_side(broker.bootstrap_servers, topic, args.records, args.rounds)
        finally:
            kit.close()
    for mode in MODES:
        ours = f"safe {mode}"
        ratio = runs.rss_ratio(mode)
        print(
            f"{mode}: ours adds {runs.added(ours, FLOOR[mode], JUDGED).show()} outside upstream's poll over the floor "
            f"({FLOOR[mode]}), {runs.added(ours, f'raw {mode}', JUDGED).show()} over raw {mode}; "
            f"{runs.added(ours, f'raw {mode}', 'cpu').show()} CPU, "
            f"{runs.added(ours, f'raw {mode}', 'wall').show()} wall over raw {mode}; "
            f"peak RSS {ratio.median:.2f}x "
            f"(spread {ratio.low:.2f} to {ratio.high:.2f})"
        )


if __name__ == "__main__":
    main()
