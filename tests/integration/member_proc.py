"""A SafeConsumer group member run as a separate process, so a test can kill it hard.

    python -m tests.integration.member_proc BOOTSTRAP TOPIC GROUP PROTOCOL PAUSE_AFTER

Prints ``R <partition> <offset>`` for every record handed to it (flushed before the next
poll), pauses partition 0 after PAUSE_AFTER of its records and then prints
``P <withheld>``, and runs until killed.
"""

from __future__ import annotations

import sys

from confluent_kafka import TopicPartition

from safeconsumer import SafeConsumer, delivery_stats
from safeconsumer.testing import KafkaTestKit


def main() -> None:
    bootstrap, topic, group, protocol, pause_after = sys.argv[1:6]
    conf = KafkaTestKit(bootstrap).consumer_conf(group, protocol, auto_commit_interval_ms=100)  # type: ignore[arg-type]
    c = SafeConsumer(conf)
    c.subscribe([topic])
    seen_p0 = 0
    paused = False
    while True:
        msg = c.poll(0.2)
        if msg is None or msg.error() is not None:
            if paused:
                print(f"P {delivery_stats(c).withheld}", flush=True)
            continue
        print(f"R {msg.partition()} {msg.offset()}", flush=True)
        if msg.partition() == 0:
            seen_p0 += 1
            if seen_p0 == int(pause_after):
                c.pause([TopicPartition(topic, 0)])
                paused = True


if __name__ == "__main__":
    main()
