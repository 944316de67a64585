"""Fetch memory: several consumers in one process, large records, the estimate against RSS.

    python -m examples.fetch_memory            # on the embedded broker
    KAFKA_BOOTSTRAP_SERVERS=host:9092 python -m examples.fetch_memory

One process runs three consumers of one group (as a service with a consumer per thread does)
on a topic of 300 kB records, lets librdkafka fetch ahead while the application is busy, and
measures its resident memory (RSS) growth. With ``SafeConsumer(conf, fetch_memory_budget=...)``
each assignment change estimates the worst case of all the process's consumers, and logs a
WARNING naming the settings to change when it is over the budget. The estimate must stay above
what was measured.

One sample says little: how far librdkafka has fetched when the measurement starts, and how
the allocator lays out 300 kB buffers, move RSS growth by tens of MiB from one run to the next.
So each kind runs ROUNDS times, each in a fresh process, the kinds alternating (raw first in
odd rounds, SafeConsumer first in even ones, so neither always runs on a warmer broker), on one
topic; the row shows the median and the range.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from safeconsumer import SafeConsumer
from safeconsumer.group._memory import FetchLimits, estimate, mib
from safeconsumer.testing import KafkaTestKit, start_broker

ROOT = Path(__file__).resolve().parents[1]
CONSUMERS = 3
PARTITIONS = 6
RECORD = 300_000
#: Settings of the consumers: a 16 MiB queue each, 512 KiB per partition and fetch.
SETTINGS = {"queued.max.messages.kbytes": 16384, "queued.min.messages": 1000, "max.partition.fetch.bytes": 524288}
BUDGET = 128 << 20
#: Measurements per kind (the median is reported).
ROUNDS = 3


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("fetch memory:"):
            self.lines.append(record.getMessage())


def child(bootstrap: str, topic: str, group: str, kind: str) -> dict[str, Any]:
    """Run in its own process: the consumers, the measurement; returns what it saw."""
    warnings = _Warnings()
    log = logging.getLogger("safeconsumer")
    log.addHandler(warnings)
    log.propagate = False
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **SETTINGS}
    base = _rss()
    consumers: list[Consumer] = [
        SafeConsumer(conf, fetch_memory_budget=BUDGET) if kind == "safe" else Consumer(conf) for _ in range(CONSUMERS)
    ]
    for c in consumers:
        c.subscribe([topic])
    deadline = time.monotonic() + 60
    while sum(len(c.assignment()) for c in consumers) < PARTITIONS or not all(c.assignment() for c in consumers):
        if time.monotonic() > deadline:
            raise SystemExit("the consumers were not all assigned within 60 s")
        for c in consumers:
            c.poll(0.05)  # the application takes a record now and then, then is busy
    peak, end = _rss(), time.monotonic() + 6
    while time.monotonic() < end:  # busy: librdkafka keeps fetching on its own threads
        time.sleep(0.05)
        peak = max(peak, _rss())
    limits = FetchLimits.from_config(conf)
    bound = sum(estimate(limits, len(c.assignment())).total for c in consumers)
    for c in consumers:
        c.close()
    return {"growth": peak - base, "estimate": bound, "warnings": warnings.lines}


def measure(kit: KafkaTestKit, topic: str, kind: str) -> dict[str, Any]:
    """``child()`` in a fresh process (RSS of this one holds the history of everything before)."""
    done = subprocess.run(
        [sys.executable, "-m", "examples.fetch_memory", "--child", kit.bootstrap_servers, topic, kit.name("g"), kind],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the measuring process failed: {done.stderr[-1000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure_rounds(kit: KafkaTestKit, topic: str) -> dict[str, list[dict[str, Any]]]:
    """ROUNDS measurements of each kind, alternating which goes first, each in a fresh process."""
    results: dict[str, list[dict[str, Any]]] = {"raw": [], "safe": []}
    for round_ in range(ROUNDS):
        for kind in ("raw", "safe") if round_ % 2 == 0 else ("safe", "raw"):
            results[kind].append(measure(kit, topic, kind))
    return results


def flood(kit: KafkaTestKit) -> str:
    """A topic holding more large records than the consumers' queues take."""
    topic = kit.create_topic(partitions=PARTITIONS)
    kit.produce(topic, 300, partitions=PARTITIONS, value_size=RECORD)  # 90 MB
    return topic


def describe(results: list[dict[str, Any]], kind: str) -> tuple[str, bool]:
    """The row of one kind: the median RSS growth of its rounds and their range; for SafeConsumer,
    whether its estimate held in every round and its budget warning named the setting to change."""
    growths = sorted(r["growth"] for r in results)
    median = growths[len(growths) // 2]
    spread = f"median of {len(growths)}, {mib(growths[0])}-{mib(growths[-1])}"
    if kind == "raw":
        return f"{CONSUMERS} consumers grew RSS by {mib(median)} ({spread}); no estimate, no warning", True
    held = all(r["growth"] <= r["estimate"] for r in results)
    warned = all(r["warnings"] and "queued.max.messages.kbytes" in r["warnings"][0] for r in results)
    estimated = f"estimate {mib(results[0]['estimate'])} ({'held' if held else 'EXCEEDED'})"
    warning = f"WARNING over the {mib(BUDGET)} budget names queued.max.messages.kbytes" if warned else "no warning"
    text = f"grew {mib(median)} ({spread}); {estimated}; {warning}"
    return text, held and warned


def main() -> int:
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="fetch-memory")
        try:
            results = measure_rounds(kit, flood(kit))
            for kind in ("raw", "safe"):
                text, ok = describe(results[kind], kind)
                print(f"{kind}: {text}", flush=True)
                for line in results[kind][0]["warnings"][:1]:
                    print(f"  {line}", flush=True)
        finally:
            kit.close()
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(child(*sys.argv[2:6])), flush=True)
    else:
        sys.exit(main())
