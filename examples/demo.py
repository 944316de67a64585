"""``make demo``: SafeConsumer on an embedded broker, in a few seconds.

Starts a real Kafka broker (see ``safeconsumer.testing``), produces records to a
4-partition topic, and consumes them through SafeConsumer while a second member
joins and leaves, pausing a topic across those rebalances. Prints what happened
and exits non-zero if anything was lost, duplicated or delivered while paused.
"""

from __future__ import annotations

import logging
import sys
import time

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, start_broker


def _say(text: str) -> None:
    print(text, flush=True)


def run(bootstrap: str) -> int:
    kit = KafkaTestKit(bootstrap, prefix="demo")
    topic = kit.create_topic(partitions=4)
    group = kit.name("group")
    kit.produce(topic, 1000, partitions=4)
    _say(f"produced 1000 records to {topic} (4 partitions)")

    seen: list[int] = []
    leaked = 0
    a = SafeConsumer(kit.consumer_conf(group, "cooperative-sticky"))
    b = SafeConsumer(kit.consumer_conf(group, "cooperative-sticky"))
    a.subscribe([topic])
    a.pause_topics([topic])
    _say("member A subscribed and paused the whole topic (topic-level pause)")
    deadline = time.monotonic() + 60
    while not a.assignment() and time.monotonic() < deadline:
        leaked += a.poll(0.1) is not None
    b.subscribe([topic])
    _say("member B joined: the group rebalances while A is paused")
    while time.monotonic() < deadline:
        for c in (a, b):
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                if c is a:
                    leaked += 1
                seen.append(int(m.value() or b"-1"))
        if a.assignment() and b.assignment() and len(seen) >= 1 and len(b.assignment()) + len(a.assignment()) == 4:
            break
    _say(f"after the rebalance A owns {len(a.assignment())}, B owns {len(b.assignment())} partitions")
    b.close()
    _say(f"member B consumed {len(seen)} records and left; A gets its partitions back, still paused")
    while len(a.assignment()) < 4 and time.monotonic() < deadline:
        leaked += a.poll(0.1) is not None
    _say(f"A paused: {len(a.paused())} partitions; records A received while paused: {leaked}")
    a.resume_topics([topic])
    _say("A resumed the topic")
    while len(set(seen)) < 1000 and time.monotonic() < deadline:
        m = a.poll(0.2)
        if m is not None and m.error() is None:
            seen.append(int(m.value() or b"-1"))
    a.close()
    kit.close()
    lost = 1000 - len(set(seen))
    duplicates = len(seen) - len(set(seen))
    _say(f"result: {len(set(seen))}/1000 delivered, lost {lost}, duplicates {duplicates}, leaked while paused {leaked}")
    return 0 if lost == 0 and leaked == 0 else 1


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _say("starting an embedded Kafka broker (the first run resolves its jars from Maven Central)...")
    started = time.monotonic()
    with start_broker() as broker:
        _say(f"broker ({broker.kind}) ready at {broker.bootstrap_servers} in {time.monotonic() - started:.1f}s")
        return run(broker.bootstrap_servers)


if __name__ == "__main__":
    sys.exit(main())
