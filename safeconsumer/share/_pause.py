"""A share consumer's pause marks (S6): the whole consumer, topic names, and topic patterns.

The one owner of which topics are paused; the consumer asks it which of the topics the application
subscribed to librdkafka may have (:meth:`PauseMarks.effective`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Message

from ..base._topics import parse_topic_entries
from ._batch import Batch

#: The longest a ``poll()`` waits while every subscribed topic is paused (seconds).
PAUSED_POLL = 1.0


def paused_wait(timeout: object) -> float:
    """How long a ``poll(timeout)`` waits while every subscribed topic is paused: its timeout, at most
    :data:`PAUSED_POLL` (an infinite or odd one: that)."""
    return PAUSED_POLL if not isinstance(timeout, int | float) or timeout < 0 else min(float(timeout), PAUSED_POLL)


class PauseMarks:
    def __init__(self) -> None:
        self.everything = False
        self._names: set[str] = set()
        self._patterns: list[re.Pattern[str]] = []

    def __bool__(self) -> bool:
        """Whether any mark is set."""
        return self.everything or bool(self._names) or bool(self._patterns)

    def add(self, topics: Any) -> None:
        """Mark names, ``^regex`` strings or ``re.Pattern`` objects (one or a list); bad entries raise."""
        names, patterns = parse_topic_entries(topics)
        self._names.update(names)
        known = {p.pattern for p in self._patterns}
        self._patterns.extend(p for p in patterns if p.pattern not in known)

    def remove(self, topics: Any) -> None:
        """Clear the marks of the same names or patterns."""
        names, patterns = parse_topic_entries(topics)
        self._names.difference_update(names)
        gone = {p.pattern for p in patterns}
        self._patterns = [p for p in self._patterns if p.pattern not in gone]

    def covers(self, topic: str) -> bool:
        return self.everything or topic in self._names or any(p.search(topic) for p in self._patterns)

    def effective(self, wanted: Iterable[str]) -> list[str]:
        """Of ``wanted``, the topics no mark covers."""
        return [t for t in wanted if not self.covers(t)]

    def take_unreached(self, batch: Batch) -> list[Message]:
        """Take out of ``batch`` the records of a paused topic the application has not reached (not
        handed out yet, settled neither, nor in ``handle()``), so no iterator hands them out; returns them."""
        position = batch.position()
        stopped = [
            m
            for m in batch.live[position:]
            if id(m) not in batch.handled and not batch.is_settled(m) and self.covers(str(m.topic()))
        ]
        if stopped:
            with batch.lock:
                batch.part()
                gone = {id(m) for m in stopped}
                batch.live[position:] = [m for m in batch.live[position:] if id(m) not in gone]
        return stopped
