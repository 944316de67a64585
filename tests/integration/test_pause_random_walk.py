"""A seeded random walk of pause/resume/topic marks/joins/leaves, checking I1-I4 after every step.

The model below is the specification of pause intent (SPEC I4), written independently
of the ledger: it sees only what the application sees (its calls and its callbacks).
"""

from __future__ import annotations

import random
from typing import Any

from confluent_kafka import TopicPartition

from safeconsumer import SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol

from ..support import Received, checked_pump, keys

STEPS = 30
PARTITIONS = 4


class Model:
    """Expected pause intent of member A, updated from A's calls and rebalance callbacks."""

    def __init__(self, incremental: bool) -> None:
        self.incremental = incremental
        self.consumer = False
        self.topic = False
        self.marks: set[tuple[str, int]] = set()
        self.revoked: set[tuple[str, int]] = set()

    def on_assign(self, _c: Any, parts: list[TopicPartition]) -> None:
        if not self.incremental:
            # Eager: a revoked partition keeps its mark only if it comes back now.
            self.marks -= self.revoked - keys(parts)
            self.revoked.clear()

    def on_revoke(self, _c: Any, parts: list[TopicPartition]) -> None:
        if self.incremental:
            self.marks -= keys(parts)
        else:
            self.revoked |= keys(parts)

    def effective(self, assigned: set[tuple[str, int]]) -> set[tuple[str, int]]:
        if self.consumer or self.topic:
            return set(assigned)
        return self.marks & assigned


def test_random_walk_keeps_every_invariant(kafka: KafkaTestKit, protocol: Protocol) -> None:
    rng = random.Random(f"safeconsumer-{protocol}")
    topic = kafka.create_topic(partitions=PARTITIONS)
    group = kafka.name("g")
    produced = 0
    model = Model(incremental=protocol != "range")
    a, ra = SafeConsumer(kafka.consumer_conf(group, protocol)), Received()
    a.subscribe([topic], on_assign=model.on_assign, on_revoke=model.on_revoke, on_lost=model.on_revoke)
    peers: list[tuple[SafeConsumer, Received]] = []
    gone: list[Received] = []

    def members() -> list[tuple[Any, Received]]:
        return [(a, ra), *peers]

    def settled() -> bool:
        owned = [keys(c.assignment()) for c, _ in members()]
        union = set().union(*owned)
        return len(union) == PARTITIONS and sum(map(len, owned)) == PARTITIONS and all(owned)

    for step in range(STEPS):
        kafka.produce(topic, 40, partitions=PARTITIONS, start=produced)
        produced += 40
        owned = sorted(keys(a.assignment()))
        choice = rng.choice(
            ["pause", "resume", "pause_topic", "resume_topic", "pause_all", "resume_all", "join", "leave"]
        )
        if choice == "pause" and owned:
            chosen = rng.sample(owned, rng.randint(1, len(owned)))
            a.pause([TopicPartition(t, p) for t, p in chosen])
            model.marks |= set(chosen)
        elif choice == "resume" and owned:
            chosen = rng.sample(owned, rng.randint(1, len(owned)))
            a.resume([TopicPartition(t, p) for t, p in chosen])
            model.marks -= set(chosen)
        elif choice == "pause_topic":
            a.pause_topics([topic])
            model.topic = True
        elif choice == "resume_topic":
            a.resume_topics([topic])
            model.topic = False
        elif choice == "pause_all":
            a.pause()
            model.consumer = True
        elif choice == "resume_all":
            a.resume()
            model.consumer = False
        elif choice == "join" and len(peers) < 2:
            peer = SafeConsumer(kafka.consumer_conf(group, protocol))
            peer.subscribe([topic])
            peers.append((peer, Received()))
        elif choice == "leave" and peers:
            peer, received = peers.pop(rng.randrange(len(peers)))
            peer.close()
            gone.append(received)
        checked_pump(members(), settled, timeout=45, what=f"the group to settle after step {step} ({choice})")
        assigned = keys(a.assignment())
        assert keys(a.paused()) == model.effective(assigned), f"I4 after step {step} ({choice})"
        assert set(a.pause_state().partitions) == model.marks, f"partition marks after step {step} ({choice})"

    a.resume()
    a.resume_topics([topic])
    a.resume(a.assignment())
    everyone = [ra, *(r for _, r in peers), *gone]

    def all_delivered() -> bool:
        return set().union(*(set(r.ids()) for r in everyone)) >= set(range(produced))

    checked_pump(members(), all_delivered, timeout=60, what="every record produced")
    for c, _ in members():
        c.close()
