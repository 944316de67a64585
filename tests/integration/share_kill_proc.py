"""A share-group member that takes records and never finishes them, run as its own process, for
the test to SIGKILL (S4: what a SIGKILL leaves behind).

    python -m tests.integration.share_kill_proc BOOTSTRAP TOPIC GROUP [--safe DEAD_LETTER_TOPIC]

It subscribes in explicit mode (``--safe``: ``SafeShareConsumer`` with ``poison=DeadLetter(TOPIC)``,
else raw ``confluent_kafka.ShareConsumer``) and polls until it is handed a batch, printing
``G <offset> <delivery count>`` for each of its records, flushed at once, then works on it without
acknowledging anything or polling again (explicit mode refuses a poll before the batch is
acknowledged): the records stay acquired until the process dies and their locks run out. It prints
``R`` once subscribed. It never ends on its own before :data:`GIVE_UP_AFTER` seconds (exit status
3): the test kills it.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any

from confluent_kafka import ShareConsumer

from safeconsumer import DeadLetter
from safeconsumer.share import SafeShareConsumer

GIVE_UP_AFTER = 120.0


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--safe", metavar="DEAD_LETTER_TOPIC")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "share.acknowledgement.mode": "explicit",
        "logger": logging.getLogger("member"),
    }
    c = SafeShareConsumer(conf, poison=DeadLetter(args.safe)) if args.safe else ShareConsumer(conf)
    c.subscribe([args.topic])
    say("R")
    started = time.monotonic()
    got = False
    while time.monotonic() - started < GIVE_UP_AFTER:
        if got:
            time.sleep(0.1)  # the work on the batch, which never ends
            continue
        for m in c.poll(0.5):
            if m.error() is None:
                got = True
                say(f"G {m.offset()} {m.delivery_count()}")
    return 3


if __name__ == "__main__":
    sys.exit(main())
