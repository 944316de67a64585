"""The pause ledger: the application's pause *intent*, kept apart from librdkafka's flags.

Intent has three independent levels, and a partition is effectively paused when any
of them covers it:

- the consumer mark (``pause()`` with no argument) covers every assigned partition;
- topic marks (``pause_topics``) cover every partition of a topic, by name or by
  regular expression, including partitions and topics assigned later;
- partition marks (``pause(partitions)``) cover one partition while it stays with
  this consumer.

The ledger is pure bookkeeping: it never talks to Kafka. The rebalance handler asks
it for the effective set of an assignment and makes librdkafka agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..base._keys import Key

TopicEntry = str | re.Pattern[str]


@dataclass(frozen=True)
class PauseState:
    """A frozen snapshot of pause intent and its effect on the current assignment."""

    consumer: bool
    """The consumer-level mark: ``pause()`` with no argument."""
    topics: frozenset[str]
    """Topic marks by exact name."""
    patterns: tuple[str, ...]
    """Topic marks by regular expression (their source text), sorted."""
    partitions: frozenset[Key]
    """Partition marks, as ``(topic, partition)``."""
    effective: tuple[Key, ...]
    """The assigned partitions that are paused by any mark, sorted."""
    parked: bool = False
    """Whether the keepalive has parked the consumer right now (manual or automatic): every
    assigned partition is then paused for the keepalive too, apart from these marks."""


def _pattern_id(pattern: re.Pattern[str]) -> tuple[str, int]:
    return (pattern.pattern, pattern.flags)


class PauseLedger:
    """Pause intent at consumer, topic and partition level."""

    def __init__(self) -> None:
        self.consumer = False
        self.topics: set[str] = set()
        self.patterns: dict[tuple[str, int], re.Pattern[str]] = {}
        self.partitions: set[Key] = set()
        # Topic -> covered by a topic mark. Topics are few and patterns change
        # rarely, so the per-topic answer is cached and dropped on any change.
        self._topic_cache: dict[str, bool] = {}

    # -- intent --------------------------------------------------------------------------
    def set_consumer(self, paused: bool) -> None:
        self.consumer = paused

    def mark_partitions(self, keys: Iterable[Key]) -> None:
        self.partitions.update(keys)

    def unmark_partitions(self, keys: Iterable[Key]) -> None:
        self.partitions.difference_update(keys)

    def mark_topics(self, names: Iterable[str], patterns: Iterable[re.Pattern[str]]) -> None:
        self.topics.update(names)
        for p in patterns:
            self.patterns[_pattern_id(p)] = p
        self._topic_cache.clear()

    def unmark_topics(self, names: Iterable[str], patterns: Iterable[re.Pattern[str]]) -> None:
        self.topics.difference_update(names)
        for p in patterns:
            self.patterns.pop(_pattern_id(p), None)
        self._topic_cache.clear()

    # -- effect --------------------------------------------------------------------------
    def topic_marked(self, topic: str) -> bool:
        hit = self._topic_cache.get(topic)
        if hit is None:
            hit = topic in self.topics or any(p.search(topic) for p in self.patterns.values())
            self._topic_cache[topic] = hit
        return hit

    def effective(self, assigned: Iterable[Key]) -> frozenset[Key]:
        """The subset of ``assigned`` that any mark covers."""
        if self.consumer:
            return frozenset(assigned)
        if not self.partitions and not self.topics and not self.patterns:
            return frozenset()
        return frozenset(k for k in assigned if k in self.partitions or self.topic_marked(k[0]))

    def snapshot(self, assigned: Iterable[Key], *, parked: bool = False) -> PauseState:
        return PauseState(
            consumer=self.consumer,
            topics=frozenset(self.topics),
            patterns=tuple(sorted(p.pattern for p in self.patterns.values())),
            partitions=frozenset(self.partitions),
            effective=tuple(sorted(self.effective(assigned))),
            parked=parked,
        )


def subscription_can_match(
    subscription: Sequence[str], names: Iterable[str], patterns: Iterable[re.Pattern[str]]
) -> list[str]:
    """Entries that a subscription can never deliver; empty when all may match.

    With a regex in the subscription, any name may appear later, so nothing is rejected.
    """
    if any(s.startswith("^") for s in subscription):
        return []
    subscribed = set(subscription)
    bad = [n for n in names if n not in subscribed]
    bad += [p.pattern for p in patterns if not any(p.search(s) for s in subscribed)]
    return bad
