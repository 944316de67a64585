"""Topic-level backpressure: pause a topic while its downstream is full, across rebalances.

    python -m examples.backpressure

Two topics feed one group. Records of ``audit`` go to a slow sink with a bounded buffer: when
the buffer reaches its high mark the consumer calls ``pause_topics([audit])`` and keeps reading
``orders``; below the low mark, ``resume_topics([audit])``. A second member joins half-way
through, so the group rebalances while the topic is paused: with raw confluent-kafka the pause
would be lost (or left stale) there; SafeConsumer keeps it, and no audit record arrives while
its topic is paused.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass

from confluent_kafka import Message

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, start_broker, wait_until

HIGH, LOW = 50, 10


@dataclass
class Outcome:
    orders: int
    """Distinct records of ``orders`` processed (by either member)."""
    audit: int
    """Distinct records of ``audit`` processed."""
    pauses: int
    audit_while_paused: int
    max_buffer: int


def run(bootstrap: str, per_topic: int = 400) -> Outcome:
    kit = KafkaTestKit(bootstrap, prefix="backpressure")
    try:
        orders, audit = kit.create_topic(partitions=2), kit.create_topic(partitions=2)
        kit.produce(orders, per_topic, partitions=2)
        kit.produce(audit, per_topic, partitions=2)
        group = kit.name("g")
        conf = kit.consumer_conf(group, "cooperative-sticky")
        main, peer = SafeConsumer(conf), SafeConsumer(conf)
        main.subscribe([orders, audit])
        buffer: deque[bytes] = deque()
        out = Outcome(0, 0, 0, 0, 0)
        seen: dict[str, set[tuple[int, int]]] = {orders: set(), audit: set()}

        def processed(msg: Message) -> None:
            # A rebalance may hand a partition over before its last records were committed:
            # the new owner reads them again (at least once), so distinct records are counted.
            done = seen[msg.topic() or ""]
            done.add((msg.partition() or 0, msg.offset() or 0))
            out.orders, out.audit = len(seen[orders]), len(seen[audit])

        peer_joined = False
        paused = False
        steps = 0

        def step() -> None:
            nonlocal peer_joined, paused, steps
            steps += 1
            msg = main.poll(0.02)
            if msg is not None and msg.error() is None:
                processed(msg)
                if msg.topic() == audit:
                    out.audit_while_paused += paused
                    buffer.append(msg.value() or b"")
            if not paused and len(buffer) >= HIGH:
                main.pause_topics([audit])
                paused, out.pauses = True, out.pauses + 1
            out.max_buffer = max(out.max_buffer, len(buffer))
            if paused and out.orders >= per_topic // 4 and not peer_joined:
                peer.subscribe([orders, audit])  # the group rebalances while audit is paused
                peer_joined = True
            if peer_joined:
                got = peer.poll(0.02)
                if got is not None and got.error() is None:
                    processed(got)
            # The slow sink: one record every third step.
            if buffer and steps % 3 == 0:
                buffer.popleft()
            if paused and len(buffer) <= LOW:
                main.resume_topics([audit])
                paused = False

        wait_until(lambda: out.orders == out.audit == per_topic, timeout=120, what="every record", step=step)
        main.close()
        peer.close()
        return out
    finally:
        kit.close()


def main() -> int:
    with start_broker() as broker:
        out = run(broker.bootstrap_servers)
    print(out, flush=True)
    return 0 if out.audit_while_paused == 0 and out.pauses > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
