"""What ``SafeShareConsumer.poll()`` adds per record to raw ``ShareConsumer`` (SPEC's Budgets table).

    python -m benchmarks.share [--records 100000] [--rounds 7]          (starts its own broker)
    python -m benchmarks.share --child KIND MODE BOOTSTRAP TOPIC RECORDS

A share consumer cannot be handed a prefilled local queue (each ``poll()`` acquires records from the
broker), so each measurement reads a topic of ``RECORDS`` records from its start with a fresh share
group, in a child process of its own, as an application does: ``poll(1.0)``, iterate the batch, and
in explicit mode acknowledge each record. It reports the main thread's CPU time per record
(``thread_time_ns``: the application's thread, where the wrapper works, without the time spent
waiting for the broker) and the wall time per record. Contenders: raw ``ShareConsumer`` and
``SafeShareConsumer``, in ``implicit`` and ``explicit`` mode; the parent alternates them by round and
judges the median over rounds of the per-round difference to raw of the same mode.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .per_record import Figure

ROOT = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT = 300
MODES = ("implicit", "explicit")
KINDS = ("raw", "safe")


def measure(kind: str, mode: str, bootstrap: str, topic: str, records: int) -> tuple[float, float]:
    """One child's (CPU, wall) nanoseconds per record."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.share", "--child", kind, mode, bootstrap, topic, str(records)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} {mode} child exited {proc.returncode}: {proc.stdout.strip()!r}")
    cpu, wall = json.loads(proc.stdout)
    return float(cpu), float(wall)


def side_by_side(bootstrap: str, topic: str, records: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Every round's CPU and wall per record, by ``"<kind> <mode>"``."""
    names = [f"{k} {m}" for m in MODES for k in KINDS]
    got: dict[str, dict[str, list[float]]] = {c: {n: [] for n in names} for c in ("cpu", "wall")}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            kind, mode = name.split()
            cpu, wall = measure(kind, mode, bootstrap, topic, records)
            got["cpu"][name].append(cpu)
            got["wall"][name].append(wall)
            print(
                f"  share poll() per record, round {r + 1} {name:13}: {cpu:8.1f} ns CPU {wall:8.1f} ns wall", flush=True
            )
    return got


def added(got: dict[str, dict[str, list[float]]], clock: str, mode: str) -> Figure:
    safe, raw = got[clock][f"safe {mode}"], got[clock][f"raw {mode}"]
    return Figure.of([s - r for s, r in zip(safe, raw, strict=True)])


def _child(kind: str, mode: str, bootstrap: str, topic: str, records: int) -> None:
    import logging

    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import AdminClient

    from safeconsumer import SafeShareConsumer
    from safeconsumer.share._group import set_start

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
    c = ShareConsumer(conf) if kind == "raw" else SafeShareConsumer(conf)
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
    started_cpu, started_wall, timed = time.thread_time_ns(), time.perf_counter_ns(), 0
    acknowledge = c.acknowledge
    while got < records:
        batch = c.poll(1.0)
        for m in batch:
            timed += 1
            if explicit:
                acknowledge(m)
        got += len(batch)
    cpu, wall = time.thread_time_ns() - started_cpu, time.perf_counter_ns() - started_wall
    c.close()
    print(json.dumps([cpu / timed, wall / timed]), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=5, metavar=("KIND", "MODE", "BOOTSTRAP", "TOPIC", "RECORDS"))
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    if args.child:
        kind, mode, bootstrap, topic, records = args.child
        _child(kind, mode, bootstrap, topic, int(records))
        return
    from safeconsumer.testing import KafkaTestKit, start_broker

    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="bench-share")
        try:
            topic = kit.create_topic(partitions=4)
            kit.produce(topic, args.records, partitions=4, value_size=100)
            got = side_by_side(broker.bootstrap_servers, topic, args.records, args.rounds)
        finally:
            kit.close()
    for mode in MODES:
        raw = Figure.of(got["cpu"][f"raw {mode}"])
        print(
            f"{mode}: raw {raw.median:.1f} ns CPU/record; safe adds {added(got, 'cpu', mode).show()} CPU, "
            f"{added(got, 'wall', mode).show()} wall"
        )


if __name__ == "__main__":
    main()
