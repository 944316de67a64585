"""Where a fast application's peak RSS comes from: each child samples its own RSS as it reads.

    python -m benchmarks.rss_trace [--rounds 12] [--mode poll|consume] [--kinds raw,safe] [--stats]

Produces 100 MiB of 1 kB records to a 4-partition topic on a real broker (the embedded one unless
KAFKA_BOOTSTRAP_SERVERS is set), then, per round and per kind (which goes first alternates by
round), a child process reads them all in a fresh group, as the fast 1 kB rows of
:mod:`benchmarks.budgets` do, while a thread of the child samples its resident set every 2 ms.
Each child reports its peak, how long after the first record it came, how many records the
application had read by then, and its RSS at the first record; with ``--stats``, also the most
librdkafka held in its fetch queues (``fetchq_size`` summed over partitions, statistics every
10 ms). The run ends with each kind's median peak and the median of the per-round ratios to the
first kind.

Kinds: ``raw`` (``confluent_kafka.Consumer``), ``safe`` (``SafeConsumer``), and ``safe`` with any
of these suffixes joined by ``-``: ``noexp`` (``explain_rebalances=False``), ``nokeep``
(``keepalive="off"``). See docs/performance.md for what the 1 kB fast rows measured this way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

ROOT = Path(__file__).resolve().parents[1]
RECORD_BYTES = 1024
TOTAL_BYTES = 100 * 1024 * 1024
SAMPLE_EVERY = 0.002
CHILD_TIMEOUT = 600.0
#: Samples a child reports of its whole read (evenly spaced).
TRACE_POINTS = 300


def trace(
    kind: str, bootstrap: str, topic: str, records: int, mode: str = "consume", *, stats: bool = False
) -> dict[str, Any]:
    """One child's read of ``records`` records (see :func:`child`): its peak, and its RSS trace."""
    from safeconsumer.testing import unique_name

    cmd = [sys.executable, "-m", "benchmarks.rss_trace", "--mode", mode]
    cmd += ["--stats"] if stats else []
    cmd += ["--child", kind, bootstrap, topic, unique_name("rsstrace"), str(records)]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} child exited {proc.returncode}")
    seen: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return seen


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _make(kind: str, conf: dict[str, Any]) -> Consumer:
    if kind == "raw":
        return Consumer(conf)
    from safeconsumer import SafeConsumer

    parts = kind.split("-")
    if parts[0] != "safe" or not set(parts[1:]) <= {"noexp", "nokeep"}:
        raise SystemExit(f"unknown kind {kind!r}")
    options: dict[str, Any] = {}
    if "noexp" in parts:
        options["explain_rebalances"] = False
    if "nokeep" in parts:
        options["keepalive"] = "off"
    return SafeConsumer(conf, **options)


def child(kind: str, bootstrap: str, topic: str, group: str, records: int, *, mode: str, stats: bool) -> None:
    """Read ``records`` records of ``topic``, sampling RSS; print one line of JSON."""
    got = 0
    queued = {"most": 0, "at": 0}

    def on_stats(text: str) -> None:
        partitions = (p for t in json.loads(text).get("topics", {}).values() for p in t["partitions"].values())
        size = sum(p.get("fetchq_size", 0) for p in partitions if p.get("partition", -1) >= 0)
        if size > queued["most"]:
            queued.update(most=size, at=got)

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": 10,
    }
    if stats:
        conf.update({"statistics.interval.ms": 10, "stats_cb": on_stats})
    c = _make(kind, conf)
    samples: list[tuple[float, float, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.perf_counter(), _rss_mib(), got))
            done.wait(SAMPLE_EVERY)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    first = 0.0
    try:
        c.subscribe([topic])
        while got < records:
            batch = c.consume(500, 1.0) if mode == "consume" else [m for m in [c.poll(1.0)] if m is not None]
            for msg in batch:
                if msg.error() is None:
                    got += 1
                    if not first:
                        first = time.perf_counter()
        ended = time.perf_counter()
    finally:
        done.set()
        sampler.join()
        c.close()
    peak = max(samples, key=lambda s: s[1])
    at_first = next((s[1] for s in samples if s[0] >= first), peak[1])
    print(
        json.dumps(
            {
                "peak": peak[1],
                "after_first": peak[0] - first,
                "read_at_peak": peak[2],
                "at_first": at_first,
                "read_seconds": ended - first,
                "queued_most": queued["most"] / 2**20 if stats else None,
                "read_at_queued_most": queued["at"] if stats else None,
                # The whole read, at most TRACE_POINTS samples: (records read, MiB).
                "trace": [[s[2], round(s[1], 1)] for s in samples[:: max(1, len(samples) // TRACE_POINTS)]],
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--mode", choices=("poll", "consume"), default="poll")
    parser.add_argument("--kinds", default="raw,safe", help="comma-separated; the first is the baseline")
    parser.add_argument("--stats", action="store_true", help="also follow librdkafka's fetch queue (statistics)")
    parser.add_argument("--child", nargs=5, metavar=("KIND", "BOOTSTRAP", "TOPIC", "GROUP", "RECORDS"))
    args = parser.parse_args()
    if args.child:
        kind, bootstrap, topic, group, records = args.child
        child(kind, bootstrap, topic, group, int(records), mode=args.mode, stats=args.stats)
        return
    from safeconsumer.testing import KafkaTestKit, start_broker

    from .throughput import _compile_library

    kinds = args.kinds.split(",")
    _compile_library()
    records = TOTAL_BYTES // RECORD_BYTES
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="rsstrace")
        topic = kit.create_topic(partitions=4)
        kit.produce(topic, records, partitions=4, value_size=RECORD_BYTES)
        peaks: dict[str, list[float]] = {kind: [] for kind in kinds}
        for r in range(args.rounds):
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                seen = trace(kind, broker.bootstrap_servers, topic, records, args.mode, stats=args.stats)
                peaks[kind].append(seen["peak"])
                queued = "" if seen["queued_most"] is None else f"  fetch queue at most {seen['queued_most']:6.1f} MiB"
                print(
                    f"round {r + 1:2} {kind:18} peak {seen['peak']:6.1f} MiB {seen['after_first']:+.3f} s after the"
                    f" first record, {seen['read_at_peak']:>7,} read; at the first record {seen['at_first']:5.1f} MiB;"
                    f" read in {seen['read_seconds']:.3f} s{queued}",
                    flush=True,
                )
        kit.close()
    base = kinds[0]
    for kind in kinds:
        ratio = statistics.median(p / b for p, b in zip(peaks[kind], peaks[base], strict=True))
        print(f"{kind:18} median peak {statistics.median(peaks[kind]):6.1f} MiB  median ratio to {base} {ratio:.2f}")


if __name__ == "__main__":
    main()
