"""A SafeConsumer group member in its own process, so the random walk can kill it with SIGKILL.

    python -m tests.integration.walk_member_proc BOOTSTRAP TOPIC GROUP PROTOCOL

Prints, each line flushed before its next poll (I8 stores a record's offset only then):

- ``A <p>,<p>,...`` whenever its assignment changed (empty after ``A``: nothing assigned);
- ``R <partition> <offset> <value>`` for every record handed to it;
- ``X <partition> <offset> <value>`` instead, for a record of a partition it did not own (I2).

Runs until killed. It never leaves cleanly, so the group learns of its death only when its
session expires: a classic member asks for a 3 s session; a KIP-848 member's session is the
broker's ``group.consumer.session.timeout.ms``.
"""

from __future__ import annotations

import sys
from typing import cast

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol


def main() -> None:
    bootstrap, topic, group, protocol = sys.argv[1:5]
    conf = KafkaTestKit(bootstrap).consumer_conf(group, cast(Protocol, protocol), auto_commit_interval_ms=100)
    if protocol != "consumer":
        conf["session.timeout.ms"] = 3000
        conf["heartbeat.interval.ms"] = 300
    c = SafeConsumer(conf)
    c.subscribe([topic])
    shown: list[int] | None = None
    while True:
        msg = c.poll(0.1)
        if msg is not None and msg.error() is None:
            kind = "R" if c.owns(msg) else "X"
            value = (msg.value() or b"").decode()
            print(f"{kind} {msg.partition()} {msg.offset()} {value}", flush=True)
        now = sorted(tp.partition for tp in c.assignment())
        if now != shown:
            print("A " + ",".join(map(str, now)), flush=True)
            shown = now


if __name__ == "__main__":
    main()
