"""What ``SafeShareConsumer.poll()`` adds per record, judged on the floor (SPEC's Budgets table).

    python -m benchmarks.share [--records 200000] [--rounds 9]          (starts its own broker)
    python -m benchmarks.share --round BOOTSTRAP TOPIC RECORDS ORDER
    python -m benchmarks.share --rss KIND MODE BOOTSTRAP TOPIC RECORDS

The floor is raw ``ShareConsumer`` in explicit mode acknowledging every record ACCEPT: librdkafka has
no batch or range acknowledgement, so any share consumer that can release single records pays one
``acknowledge()`` per record. Ours in implicit mode is judged on that floor and reported above raw
implicit mode; ours in explicit mode is judged above raw explicit mode.

A share consumer cannot be handed a prefilled local queue (each ``poll()`` acquires records from the
broker), so each contender reads a topic of ``RECORDS`` records from its start with a fresh share
group and a fresh consumer, as an application does: ``poll(1.0)``, iterate the batch, and in explicit
mode acknowledge each record. The judged clock is the main thread's CPU spent *outside* upstream's
``ShareConsumer.poll`` C call (for ours, a probe class between ``SafeShareConsumer`` and
``ShareConsumer`` times that call): librdkafka's share fetch does its work inside that call on the
application's thread, and what the wrapper adds is everything outside it. The main thread's whole
CPU and the wall time are reported beside it.

That clock moves with time, not with the consumer: the same raw consumer, read in slices of 25,000
records, gave 315 to 789 ns per record from slice to slice (the broker and librdkafka's threads
share the machine's cores and caches with it, and the first work after each ``poll()``'s wait runs
on cold caches). Consumers measured one after the other, each in a child of its own, inherited that
drift: per-round differences of -1 to 203 ns for a figure of about 100. So one round is one child
process in which the four contenders (raw and ours, implicit and explicit) read the topic side by
side, **a few batches each in turn** (:data:`TURN_BATCHES`): every contender sees the same minutes of
the machine, and a contender's figure for the round is its CPU outside upstream's poll over the
records it read. Each contender's batch is freed on its own turn (the name holding it is reassigned
after its next ``poll()``, as an application's loop does). The order of the turns rotates by round.
What a contender adds is the median over rounds of its per-round difference to the base, shown with
the spread (min-max) of those differences; SPEC judges the share lines by that whole spread.

Each contender is :data:`INSTANCES` consumers in the round (its figure is over all their records):
one consumer's figure sits where that consumer happens to sit, by more than the wrapper adds. Four
raw explicit consumers side by side in one round, identical but for their groups, differed one
from another by a standard deviation of about 20 ns a record (-37 to +37 over eight rounds), though
the batches they were given were the same. It stayed about 20 with 390,000 records a consumer, and
with the order of the turns shuffled in every cycle; a topic of one partition gave -39 to +30 over
nine rounds; a fixed ``PYTHONHASHSEED`` left ours' differences to raw as wide (a deviation of 11
to 18). The noise is in the consumer, not in the records: most of a record's cost here is
librdkafka's ``acknowledge()``. The mean of two consumers against that of two others: a deviation
of 13 ns, as averaging predicts (20 over the root of 2). So each contender is eight consumers, and
the floor's two halves are reported one against the other (:meth:`ShareRuns.resolution`): the
width the method cannot tell from nothing at half a line's consumers, in the same run as the lines.

Why a few batches a turn, not one: with one, every ``poll()`` of ours came after the other
contenders' turns, never after its own, so the figure measured the harness as much as the consumer.
Raw's work after a poll is the harness's own loop, warm from every contender's turn; ours (its
bookkeeping, and implicit mode's acceptance of the batch the application came back from) ran on what
the other turns had left in the caches. On 200,000-record rounds, one batch a turn read +25 to +38 ns
(explicit) and +60 to +66 (implicit) with four contenders, explicit +38 to +48 with six; four
batches a turn read +12 and +22 with four contenders, +13 and +20 with six. An application polls
again right after its own work, as each contender now does within its turn.

A figure per record depends on the size of the batches: what ours adds is mostly per batch. A
topic's first records come in larger batches than the rest (this one's first 200,000 records: about
1,800 a batch on average; the next 200,000: about 700), so the summary also gives the records per
batch the round read.

Peak RSS cannot be told apart in one process: each round also runs each contender alone, in a child
of its own reading the topic once, and the line is ours' ``VmHWM`` over raw's of the same mode.
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
NAMES = tuple(f"{k} {m}" for m in MODES for k in KINDS)
#: The base each of ours is judged on, by mode: the floor for implicit mode (see the module).
FLOOR = {"implicit": "raw explicit", "explicit": "raw explicit"}

#: What a round reports per contender and record: main-thread CPU, wall time, main-thread CPU
#: outside upstream's ``ShareConsumer.poll`` (ns).
CLOCKS = ("cpu", "wall", "outside")
JUDGED = "outside"
#: Beside the clocks: records per batch.
BATCH = "batch"
#: Batches a contender reads in a row on its turn (see the module).
TURN_BATCHES = 4
#: Consumers per contender in a round, each reading the topic with a group of its own (see the module).
INSTANCES = 8
#: The floor's consumers in two halves, each half's figure alone: their difference is the method's
#: resolution (see the module).
FLOOR_HALVES = (f"{FLOOR['explicit']} #1", f"{FLOOR['explicit']} #2")


def _child(args: list[str]) -> Any:
    _compile_library()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.share", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"share child {args[:2]} exited {proc.returncode}: {proc.stdout.strip()!r}")
    return json.loads(proc.stdout)


def measure_round(bootstrap: str, topic: str, records: int, order: list[str]) -> dict[str, dict[str, float]]:
    """One round: the contenders side by side in one child, :data:`INSTANCES` consumers each, taking
    turns in ``order`` (see the module). The floor's two halves (:data:`FLOOR_HALVES`): their
    ``outside`` figures alone."""
    got: dict[str, list[float]] = _child(["--round", bootstrap, topic, str(records), ",".join(order)])
    return {
        name: dict(zip((JUDGED,) if name in FLOOR_HALVES else (*CLOCKS, BATCH), map(float, figures), strict=True))
        for name, figures in got.items()
    }


def measure_rss(name: str, bootstrap: str, topic: str, records: int) -> float:
    """One contender alone in a child reading the topic once: its peak RSS (MiB)."""
    kind, mode = name.split()
    return float(_child(["--rss", kind, mode, bootstrap, topic, str(records)]))


@dataclass
class ShareRuns:
    """Every round's figures by contender (``"<kind> <mode>"``), each alone child's peak RSS, and the
    lines taken from them (see the module)."""

    rounds: list[dict[str, dict[str, float]]]
    rss: dict[str, list[float]]

    def added(self, name: str, base: str, clock: str) -> Figure:
        """What ``name`` adds to ``base`` per record on ``clock``: the median of the per-round
        differences, with their spread."""
        return Figure.of([r[name][clock] - r[base][clock] for r in self.rounds])

    def resolution(self) -> Figure:
        """One half of the floor's consumers against the other in the same round, on the judged clock:
        what the method cannot tell apart from nothing with half the consumers a line has."""
        first, second = FLOOR_HALVES
        return Figure.of([r[second][JUDGED] - r[first][JUDGED] for r in self.rounds])

    def batch_size(self, name: str) -> float:
        """The records per batch ``name`` read, over all rounds (a round's figure weighs as one)."""
        return statistics.mean(r[name][BATCH] for r in self.rounds)

    def rss_ratio(self, mode: str) -> Figure:
        """Ours' peak RSS over raw's of the same mode, round by round."""
        safe, raw = self.rss[f"safe {mode}"], self.rss[f"raw {mode}"]
        return Figure.of([s / r for s, r in zip(safe, raw, strict=True)])


def side_by_side(bootstrap: str, topic: str, records: int, rounds: int) -> ShareRuns:
    """Every round, the contenders' order rotating by round."""
    names = list(NAMES)
    runs = ShareRuns([], {n: [] for n in names})
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        got = measure_round(bootstrap, topic, records, order)
        runs.rounds.append(got)
        for name in order:
            runs.rss[name].append(measure_rss(name, bootstrap, topic, records))
        base = got[FLOOR["implicit"]][JUDGED]
        shown = ", ".join(f"{n} {got[n][JUDGED]:.0f} ({got[n][JUDGED] - base:+.0f})" for n in order)
        rss = ", ".join(f"{n} {runs.rss[n][-1]:.1f}" for n in order)
        print(
            f"  share poll() per record, round {r + 1}: {shown} ns CPU outside upstream's poll; peak RSS {rss} MiB",
            flush=True,
        )
    return runs


def _peak_rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


class _Contender:
    """One contender of a round: its consumer, behind a probe timing upstream's ``poll`` call where it
    is made (raw: called directly; ours: ``super().poll()`` inside ``SafeShareConsumer.poll``)."""

    def __init__(self, name: str, bootstrap: str, topic: str) -> None:
        import logging

        from confluent_kafka import ShareConsumer
        from confluent_kafka.admin import AdminClient

        from safeconsumer import SafeShareConsumer
        from safeconsumer.group._share import set_start

        contender = self

        class Probe(ShareConsumer):
            def poll(self, *args: Any, **kwargs: Any) -> Any:
                began = time.thread_time_ns()
                try:
                    return super().poll(*args, **kwargs)
                finally:
                    contender.inside += time.thread_time_ns() - began

        class ProbedSafe(SafeShareConsumer, Probe):
            pass

        kind, mode = name.split()
        quiet = logging.getLogger("bench.librdkafka")
        quiet.propagate = False
        quiet.addHandler(logging.NullHandler())
        group = f"bench-share-{kind}-{mode}-{time.monotonic_ns()}"
        admin_conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": quiet}
        set_start(AdminClient(admin_conf), group, "earliest")
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": mode,
            "logger": quiet,
        }
        self.name = name
        self.explicit = mode == "explicit"
        self.consumer = (Probe if kind == "raw" else ProbedSafe)(conf)
        self.consumer.subscribe([topic])
        self.inside = 0
        self.cpu = self.wall = self.outside = 0
        #: Records read in all (the join's first batch too), and those read on timed turns, in batches.
        self.read = self.records = self.batches = 0
        self.batch: Any = None

    def join(self) -> None:
        """Until the first records (the group's join, not timed), acknowledged in explicit mode."""
        while not self.read:
            self.batch = self.consumer.poll(1.0)
            for m in self.batch:
                self.read += 1
                if self.explicit:
                    self.consumer.acknowledge(m)

    def turn(self) -> None:
        """One timed batch: ``poll(1.0)``, iterate it, and in explicit mode acknowledge each record.
        The last batch is freed here, by the assignment after the poll (as in an application's loop)."""
        consumer, clock = self.consumer, time.thread_time_ns
        inside, wall, cpu = self.inside, time.perf_counter_ns(), clock()
        self.batch = batch = consumer.poll(1.0)
        n = 0
        if self.explicit:
            acknowledge = consumer.acknowledge
            for m in batch:
                n += 1
                acknowledge(m)
        else:
            for _m in batch:
                n += 1
        del batch
        spent = clock() - cpu
        self.wall += time.perf_counter_ns() - wall
        self.cpu += spent
        self.outside += spent - (self.inside - inside)
        self.records += n
        self.read += n
        self.batches += n > 0


def _round(bootstrap: str, topic: str, records: int, order: list[str], instances: int = 1) -> dict[str, list[float]]:
    """Each contender as ``instances`` consumers, every consumer taking its turns in ``order`` (the
    instances of one contender apart: ``a#1 b#1 ... a#2 b#2 ...``). A contender's figures are over all
    its instances' records; the floor's two halves also report their own (:data:`FLOOR_HALVES`)."""
    contenders = [_Contender(name, bootstrap, topic) for _ in range(instances) for name in order]
    for c in contenders:
        c.join()
    reading = list(contenders)
    while reading:
        for c in list(reading):
            for _ in range(TURN_BATCHES):
                c.turn()
                if c.read >= records:
                    reading.remove(c)
                    break
    for c in contenders:
        c.batch = None
        c.consumer.close()
    figures: dict[str, list[float]] = {}
    for name in order:
        own = [c for c in contenders if c.name == name]
        n, batches = sum(c.records for c in own), sum(c.batches for c in own)
        cpu, wall, outside = (sum(getattr(c, clock) for c in own) / n for clock in CLOCKS)
        figures[name] = [cpu, wall, outside, n / max(1, batches)]
    floor = [c for c in contenders if c.name == FLOOR["explicit"]]
    if len(floor) > 1:  # every other consumer: each half made early and late alike
        for name, own in zip(FLOOR_HALVES, (floor[0::2], floor[1::2]), strict=True):
            figures[name] = [sum(c.outside for c in own) / sum(c.records for c in own)]
    return figures


def _rss(kind: str, mode: str, bootstrap: str, topic: str, records: int) -> float:
    """One contender alone: a round of one, then its process's peak RSS."""
    _round(bootstrap, topic, records, [f"{kind} {mode}"])
    return _peak_rss_mib()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--round", nargs=4, metavar=("BOOTSTRAP", "TOPIC", "RECORDS", "ORDER"))
    parser.add_argument("--rss", nargs=5, metavar=("KIND", "MODE", "BOOTSTRAP", "TOPIC", "RECORDS"))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    if args.round:
        bootstrap, topic, records, order = args.round
        print(json.dumps(_round(bootstrap, topic, int(records), order.split(","), INSTANCES)), flush=True)
        return
    if args.rss:
        kind, mode, bootstrap, topic, records = args.rss
        print(json.dumps(_rss(kind, mode, bootstrap, topic, int(records))), flush=True)
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
    print(f"resolution: half the floor's consumers against the other half: {runs.resolution().show()}")
    for mode in MODES:
        ours = f"safe {mode}"
        ratio = runs.rss_ratio(mode)
        print(
            f"{mode}: ours adds {runs.added(ours, FLOOR[mode], JUDGED).show()} outside upstream's poll over the floor "
            f"({FLOOR[mode]}), {runs.added(ours, f'raw {mode}', JUDGED).show()} over raw {mode}; "
            f"{runs.added(ours, f'raw {mode}', 'cpu').show()} CPU, "
            f"{runs.added(ours, f'raw {mode}', 'wall').show()} wall over raw {mode}; "
            f"peak RSS {ratio.median:.2f}x "
            f"(spread {ratio.low:.2f} to {ratio.high:.2f}); {runs.batch_size(ours):.0f} records a batch"
        )


if __name__ == "__main__":
    main()
