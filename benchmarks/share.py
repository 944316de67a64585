"""What ``SafeShareConsumer.poll()`` adds per record to raw ``ShareConsumer`` (SPEC's Budgets table).

    python -m benchmarks.share [--records 100000] [--rounds 7]          (starts its own broker)
    python -m benchmarks.share --child KIND MODE BOOTSTRAP TOPIC RECORDS

A share consumer cannot be handed a prefilled local queue (each ``poll()`` acquires records from the
broker), so each measurement reads a topic of ``RECORDS`` records from its start with a fresh share
group, in a child process of its own, as an application does: ``poll(1.0)``, iterate the batch, and
in explicit mode acknowledge each record, and reports its peak RSS. Contenders: raw ``ShareConsumer``
and ``SafeShareConsumer``, in ``implicit`` and ``explicit`` mode; the parent alternates them by round.

Each child reports, per record, the main thread's CPU time (``thread_time_ns``: where the wrapper
works, without the time spent waiting for the broker), the wall time, and the main thread's CPU
spent *outside* upstream's ``ShareConsumer.poll`` C call (for ours, a probe class between
``SafeShareConsumer`` and ``ShareConsumer`` times that call). librdkafka's share fetch does its work
inside that call on the application's thread, and its CPU per record moves by hundreds of ns from
process to process for the same code; what the wrapper adds is everything outside it, so the judged
figure is the median over rounds of (ours outside) minus (raw's outside), in the same round. The
whole-CPU and wall differences are reported beside it with their spread. A batch's records are freed
outside that call for both, and alive during it for both (raw's child drops its last batch when it
assigns the new one, ours frees it in its ``poll()`` after upstream's call returned).
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
from .throughput import _compile_library

ROOT = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT = 300
MODES = ("implicit", "explicit")
KINDS = ("raw", "safe")


#: What one child reports: per record, main-thread CPU, wall time, main-thread CPU outside
#: upstream's ``ShareConsumer.poll`` (ns); and the process's peak RSS (MiB, ``VmHWM``).
CLOCKS = ("cpu", "wall", "outside", "rss")


def measure(kind: str, mode: str, bootstrap: str, topic: str, records: int) -> dict[str, float]:
    """One child's figures, by clock (:data:`CLOCKS`)."""
    _compile_library()
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
    return {clock: float(v) for clock, v in zip(CLOCKS, json.loads(proc.stdout), strict=True)}


def side_by_side(bootstrap: str, topic: str, records: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Every round's figures per record, by clock and ``"<kind> <mode>"``."""
    names = [f"{k} {m}" for m in MODES for k in KINDS]
    got: dict[str, dict[str, list[float]]] = {c: {n: [] for n in names} for c in CLOCKS}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            kind, mode = name.split()
            one = measure(kind, mode, bootstrap, topic, records)
            for clock in CLOCKS:
                got[clock][name].append(one[clock])
            print(
                f"  share poll() per record, round {r + 1} {name:13}: {one['cpu']:8.1f} ns CPU "
                f"({one['outside']:6.1f} outside upstream's poll) {one['wall']:8.1f} ns wall, "
                f"peak RSS {one['rss']:.1f} MiB",
                flush=True,
            )
    return got


def added(got: dict[str, dict[str, list[float]]], clock: str, mode: str) -> Figure:
    safe, raw = got[clock][f"safe {mode}"], got[clock][f"raw {mode}"]
    return Figure.of([s - r for s, r in zip(safe, raw, strict=True)])


def rss_ratio(got: dict[str, dict[str, list[float]]], mode: str) -> Figure:
    """Ours' peak RSS over raw's of the same mode, round by round."""
    safe, raw = got["rss"][f"safe {mode}"], got["rss"][f"raw {mode}"]
    return Figure.of([s / r for s, r in zip(safe, raw, strict=True)])


def _peak_rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _child(kind: str, mode: str, bootstrap: str, topic: str, records: int) -> None:
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
    print(json.dumps([cpu / timed, wall / timed, (cpu - inside[0]) / timed, _peak_rss_mib()]), flush=True)


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
        ratio = rss_ratio(got, mode)
        print(
            f"{mode}: raw {raw.median:.1f} ns CPU/record; safe adds {added(got, 'outside', mode).show()} "
            f"outside upstream's poll, {added(got, 'cpu', mode).show()} CPU, {added(got, 'wall', mode).show()} wall; "
            f"peak RSS {ratio.median:.2f}x (spread {ratio.low:.2f} to {ratio.high:.2f})"
        )


if __name__ == "__main__":
    main()
