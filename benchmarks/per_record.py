"""What ``consume(500)`` adds per record, on a prefilled local queue (SPEC's Budgets table).

    python -m benchmarks.per_record [--records 200000] [--rounds 9]      (starts its own broker)
    python -m benchmarks.per_record --child {raw|safe|otel} BOOTSTRAP TOPIC RECORDS PASSES

Each measurement is a child process of its own (:func:`measure`), so that no contender inherits
another's heap, caches or librdkafka threads: it assigns every partition of the topic from its
start, with fetch queue limits above the topic's size, lets librdkafka fetch the whole topic, then
times each ``consume(500, 0)`` call: wall time (``perf_counter_ns``) and the main thread's CPU
(``thread_time_ns``), per record. The queue is known to have been full when every call returned a
full batch until the topic's end (a call served from a queue that ran dry returns fewer, its
timeout being 0); a child that saw a short batch waits longer and starts over.

A consumer's per-record cost on this kind of machine is bimodal, from one consumer instance to the
next, also within one process and for raw's own: a raw ``Consumer`` read a prefilled queue at about
205 ns per record in most instances and at 330-420 ns in the others (a 2-vCPU EPYC VM; not
explained by the core, address-space randomization, malloc arenas or how long the queue was left
to fill). A single pass per round therefore measures which mode the instance fell into, not the
wrapper. So a child reads the topic ``PASSES`` times, each with a fresh consumer, and reports the
fastest pass's median call (wall, CPU) and how many of its passes were in the slow mode (above
``SLOW_MODE`` times its fastest); the parent judges the median over rounds of the per-round
difference to raw, as SPEC's Budgets table says.

The parent rotates the contenders' order by round (each in each place in turn); per round it takes each contender's
difference to raw of the same round, and reports the median difference over rounds with its
spread (min-max). Values of 100 B.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ._rss_child import make_contender

ROOT = Path(__file__).resolve().parents[1]
BATCH = 500
#: How long a child lets librdkafka fetch before its first attempt, and the most it waits in all.
FIRST_WAIT, MOST_WAIT = 1.0, 30.0
CHILD_TIMEOUT = 600  # five passes, each waiting at most 1 + 2 + ... + 32 s for its queue
#: Passes per child (each a fresh consumer); the fastest is the round's figure (see the module).
PASSES = 5
#: A pass slower than this times the child's fastest is counted in the slow mode.
SLOW_MODE = 1.3


@dataclass(frozen=True)
class Figure:
    """A median over rounds, and the spread of the per-round values."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Figure:
        return cls(statistics.median(values), min(values), max(values))

    def show(self, unit: str = "ns") -> str:
        return f"{self.median:+.1f} {unit} (spread {self.low:+.1f} to {self.high:+.1f})"


def measure(kind: str, bootstrap: str, topic: str, records: int) -> tuple[float, float, int]:
    """One child's (wall, CPU) nanoseconds per record of its fastest pass's median ``consume(500, 0)``
    call, and how many of its passes were in the slow mode."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.per_record", "--child", kind, bootstrap, topic, str(records), str(PASSES)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} child exited {proc.returncode}: {proc.stdout.strip()!r}")
    wall, cpu, slow = json.loads(proc.stdout)
    return float(wall), float(cpu), int(slow)


def side_by_side(
    bootstrap: str, topic: str, records: int, rounds: int, kinds: tuple[str, ...] = ("raw", "safe", "otel")
) -> dict[str, dict[str, list[float]]]:
    """Every round's (wall, CPU) per record by contender: ``{"wall": {kind: [...]}, "cpu": {...}}``."""
    got: dict[str, dict[str, list[float]]] = {c: {k: [] for k in kinds} for c in ("wall", "cpu", "slow")}
    for r in range(rounds):
        for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:  # each contender in each place in turn
            wall, cpu, slow = measure(kind, bootstrap, topic, records)
            got["wall"][kind].append(wall)
            got["cpu"][kind].append(cpu)
            got["slow"][kind].append(slow)
            print(
                f"  consume(500) per record, round {r + 1} {kind:4}: {wall:7.1f} ns wall {cpu:7.1f} ns CPU"
                f" ({slow} of {PASSES} passes in the slow mode)",
                flush=True,
            )
    return got


def added(values: dict[str, list[float]], kind: str, base: str = "raw") -> Figure:
    """What ``kind`` adds to ``base`` per record: the median of the per-round differences."""
    return Figure.of([k - b for k, b in zip(values[kind], values[base], strict=True)])


# -- the child ------------------------------------------------------------------------------------
def _child(kind: str, bootstrap: str, topic: str, records: int, passes: int) -> None:
    results = [_pass(kind, bootstrap, topic, records) for _ in range(passes)]
    fastest = min(results)
    slow = sum(1 for wall, _ in results if wall > SLOW_MODE * fastest[0])
    print(json.dumps([*fastest, slow]), flush=True)


def _pass(kind: str, bootstrap: str, topic: str, records: int) -> tuple[float, float]:
    """One fresh consumer's median call (wall, CPU) per record over the prefilled topic."""
    from confluent_kafka import TopicPartition

    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"per-record-{kind}-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        # The whole topic fits in librdkafka's queue (100 B values: about 60 MB with overheads).
        "queued.max.messages.kbytes": 2_000_000,
        "queued.min.messages": 10_000_000,
        "fetch.queue.backoff.ms": 10,
    }
    waited = FIRST_WAIT
    while True:
        c = make_contender(kind, conf)  # the same contenders as the peak-RSS children
        meta = c.list_topics(topic, timeout=10).topics[topic]
        c.assign([TopicPartition(topic, p, 0) for p in sorted(meta.partitions)])
        time.sleep(waited)  # librdkafka fetches meanwhile; whether it was enough is checked below
        gc.collect()
        walls: list[float] = []
        cpus: list[float] = []
        got, short = 0, False
        consume = c.consume
        clock, thread_clock = time.perf_counter_ns, time.thread_time_ns
        while got < records:
            w0, c0 = clock(), thread_clock()
            batch = consume(BATCH, 0)
            w1, c1 = clock(), thread_clock()
            n = len(batch)
            got += n
            if n == BATCH:
                walls.append((w1 - w0) / n)
                cpus.append((c1 - c0) / n)
            elif got < records:
                short = True
                break
        c.close()
        if not short:
            return statistics.median(walls), statistics.median(cpus)
        if waited >= MOST_WAIT:
            raise SystemExit(f"the queue never held the whole topic within {MOST_WAIT:.0f} s")
        waited *= 2


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=5, metavar=("KIND", "BOOTSTRAP", "TOPIC", "RECORDS", "PASSES"))
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    if args.child:
        kind, bootstrap, topic, records, passes = args.child
        _child(kind, bootstrap, topic, int(records), int(passes))
        return
    from safeconsumer.testing import KafkaTestKit, start_broker

    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="per-record")
        try:
            topic = kit.create_topic(partitions=4)
            kit.produce(topic, args.records, partitions=4, value_size=100)
            got = side_by_side(broker.bootstrap_servers, topic, args.records, args.rounds)
        finally:
            kit.close()
    for kind in ("raw", "safe", "otel"):
        print(f"{kind}: {sum(got['slow'][kind]):.0f} of {PASSES * args.rounds} passes in the slow mode")
    for clock in ("wall", "cpu"):
        raw = Figure.of(got[clock]["raw"])
        print(f"{clock}: raw {raw.median:.1f} ns/record (spread {raw.low:.1f}-{raw.high:.1f})")
        for kind in ("safe", "otel"):
            print(f"{clock}: {kind} adds {added(got[clock], kind).show()}")


if __name__ == "__main__":
    main()
