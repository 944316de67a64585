"""One SafeConsumer that lets librdkafka fill its queue, run as its own process (fetch memory).

    python -m tests.integration.memory_proc BOOTSTRAP TOPIC GROUP CONF_JSON SECONDS

It subscribes with CONF_JSON merged into a consumer config, notes its resident memory (RSS) in
``on_assign`` (before any fetch), takes one record with ``poll()`` (which reads ahead up to
64 records), then stops calling for SECONDS while librdkafka keeps fetching on its own
threads, sampling RSS every 50 ms. It prints one JSON line: the RSS growth at its peak, the
number of partitions it owns, and the estimate safeconsumer makes for it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from safeconsumer import SafeConsumer
from safeconsumer.group._memory import FetchLimits, estimate


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    bootstrap, topic, group, extra, seconds = sys.argv[1:6]
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        **json.loads(extra),
    }
    base: list[int] = []
    consumer = SafeConsumer(conf, keepalive="off")
    consumer.subscribe([topic], on_assign=lambda _c, _p: base.append(rss()))
    deadline = time.monotonic() + 30
    first = None
    while first is None and time.monotonic() < deadline:
        first = consumer.poll(0.1)
    assert first is not None and first.error() is None, "no record within 30 s"
    peak = rss()
    end = time.monotonic() + float(seconds)
    while time.monotonic() < end:
        time.sleep(0.05)
        peak = max(peak, rss())
    partitions = len(consumer.assignment())
    est = estimate(FetchLimits.from_config(conf), partitions)
    print(json.dumps({"growth": peak - base[0], "partitions": partitions, "estimate": est.parts()}), flush=True)
    consumer.close()


if __name__ == "__main__":
    main()
