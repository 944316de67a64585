"""Partitions whose committed offset librdkafka gave up fetching: when to assign them again.

An ``assign()``-ed partition without an explicit offset starts where its group committed:
librdkafka first fetches that offset from the group coordinator. When the fetch fails as a
whole (the coordinator moved or is still loading: a request-level ``NOT_COORDINATOR``), or
for one partition, librdkafka reports an error event ("Failed to fetch committed offset...")
and never asks again: the partition stays assigned and never fetches, silently
(librdkafka #5586). Only removing it from the assignment and adding it back starts a new
fetch of its committed offset.

:class:`Requery` is the pure part: which partitions to give back to librdkafka and when,
with a backoff while the coordinator keeps failing. The rebalancer does the assigning.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError

from ..base._keys import Key

#: The start of every error event librdkafka sends when it gives up fetching a committed offset.
FAILED_OFFSET_FETCH = "Failed to fetch committed offset"

#: First delay before the partitions are assigned again (the least; see :class:`Requery`), and its
#: ceiling while failures repeat (a lasting refusal, such as an authorization error, reports its
#: error event again at this pace).
FIRST_DELAY = 0.1
MAX_DELAY = 30.0
#: A failure this long after the previous one starts the backoff over.
FORGET_AFTER = 60.0


def is_failed_offset_fetch(error: KafkaError) -> bool:
    """Whether an error event says librdkafka gave up fetching committed offsets."""
    return error.str().startswith(FAILED_OFFSET_FETCH)


class Requery:
    """Which partitions wait to be assigned again, and from when (``due``; 0: none waits).

    ``keys`` None means every owned partition that starts from its committed offset and has
    not fetched yet: a failed request names no partition.

    ``first_delay`` lets partitions that did start show it first, by handing over a record
    (an empty fetch answers after ``fetch.wait.max.ms``).
    """

    def __init__(self, first_delay: float = FIRST_DELAY) -> None:
        self.due = 0.0
        self.first_delay = max(FIRST_DELAY, first_delay)
        #: The partitions waiting (None: all that wait for their offset). Per partition, yet kept
        #: here rather than in the partition table: it is the backoff's schedule, not a partition's
        #: state (taken whole when due, forgotten whole on assign()), and this class stays pure so
        #: that its unit tests need neither table nor client. Changed by failed(), take(), forget().
        self._keys: set[Key] | None = set()
        self._failures = 0
        self._last_failure = float("-inf")

    def failed(self, keys: Iterable[Key] | None, now: float) -> float:
        """Called by the rebalancer for an error event (not subscribed): librdkafka gave up on
        ``keys`` (None: a whole request). They wait; ``due`` moves earlier if the backoff says so.
        Returns the delay chosen."""
        if now - self._last_failure > FORGET_AFTER:
            self._failures = 0
        self._last_failure = now
        self._failures += 1
        if keys is None or self._keys is None:
            self._keys = None
        else:
            self._keys.update(keys)
        delay: float = min(MAX_DELAY, self.first_delay * 2.0 ** (self._failures - 1))
        self.due = now + delay if not self.due else min(self.due, now + delay)
        return delay

    def take(self) -> set[Key] | None:
        """Called by the rebalancer's requery_due() when ``due`` passed: the partitions to assign
        again now (None: all that wait for their offset); none wait after, ``due`` is 0."""
        keys, self._keys, self.due = self._keys, set(), 0.0
        return keys

    def forget(self, keys: Iterable[Key] | None) -> None:
        """Called by the rebalancer when partitions left or got an explicit position (None: all, on
        assign()/unassign()): they no longer wait; ``due`` is 0 once none does."""
        if keys is None:
            self._keys, self.due = set(), 0.0
            return
        gone = set(keys)
        if self._keys:
            self._keys -= gone
            if not self._keys:
                self.due = 0.0
