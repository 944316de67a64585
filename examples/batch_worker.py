"""A worker that dies while working on a ``consume()`` batch: the child process of one ``make demo`` row.

    python -m examples.batch_worker {raw|safe} BOOTSTRAP TOPIC GROUP PROTOCOL

It joins GROUP with auto-commit and the automatic offset store at their defaults (the commit
interval shortened to 100 ms), takes one ``consume(100)`` batch, finishes the first 10 records,
works on the 11th for about a second, and dies (``os._exit``: no close, no final commit), as a
process does when it is OOM-killed or its node goes away. It prints the offsets of the batch
records it never finished, one line ``U <offset> ...``, before starting on them.
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit

BATCH = 100
FINISHED = 10


def main() -> None:
    kind, bootstrap, topic, group, protocol = sys.argv[1:6]
    # The demo's consumer config (short session timeout: the next owner need not wait 45 s for
    # the dead worker's session to expire), auto-commit every 100 ms.
    conf = KafkaTestKit(bootstrap).consumer_conf(group, protocol, auto_commit_interval_ms=100)  # type: ignore[arg-type]
    c = SafeConsumer(conf) if kind == "safe" else Consumer(conf)
    c.subscribe([topic])
    batch: list[int] = []
    deadline = time.monotonic() + 60
    while not batch and time.monotonic() < deadline:
        batch = [m.offset() or 0 for m in c.consume(BATCH, 5.0) if m.error() is None]
    print("U", *batch[FINISHED:], flush=True)
    # The first 10 records take no time to finish; the 11th takes long, and the process dies on it.
    time.sleep(1.0)  # the work on record 11: ten auto-commit intervals pass meanwhile
    os._exit(1)


if __name__ == "__main__":
    main()
