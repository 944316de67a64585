"""The batch one ``poll()`` handed to the application, record by record.

A share consumer acquires every record of a batch under the group's acquisition lock at once, and
the application works through them one after the other. :class:`Batch` knows, for each record,
whether the application reached it yet (the iterator of :class:`SafeMessages` handed it out, or
``handle()`` ran on it) and whether it was acknowledged (by the application, or by the consumer:
accepted for implicit mode, released, rejected). :class:`SafeMessages` is upstream's ``Messages``
(a subclass: ``len()``, indexing, ``count()``, ``records()`` unchanged) whose iterator asks the
batch before each record, so a slow loop gives back what it has not reached before the locks run out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from confluent_kafka import Message, Messages

RecordKey = tuple[str, int, int]


def key_of(message: Message) -> RecordKey | None:
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        return None
    return (topic, partition, offset)


@dataclass
class Batch:
    """One poll's records and what became of them."""

    at: float
    records: list[Message]
    #: Records handed out whose acknowledgement is still to come (by key).
    open: dict[RecordKey, Message] = field(default_factory=dict)
    #: Records the application reached (iterated to, or handled).
    reached: set[RecordKey] = field(default_factory=set)

    @classmethod
    def of(cls, messages: list[Message], *, redelivered: Callable[[int], None] | None = None) -> Batch:
        """The batch of ``messages``, handed out now; ``redelivered`` is told the delivery count of
        each record handed out again."""
        batch = cls(time.monotonic(), messages)
        opened = batch.open
        for msg in messages:
            if msg.error() is None:
                opened[(msg.topic(), msg.partition(), msg.offset())] = msg  # type: ignore[index]
                if redelivered is not None and (count := msg.delivery_count() or 1) > 1:
                    redelivered(count)
        return batch

    def age(self, now: float) -> float:
        return now - self.at

    def close(self, key: RecordKey) -> bool:
        """The record was acknowledged: True if it was open."""
        return self.open.pop(key, None) is not None

    def unreached(self) -> list[Message]:
        """Open records the application has not reached, in batch order."""
        return [m for k, m in self.open.items() if k not in self.reached]


class SafeMessages(Messages):
    """Upstream's ``Messages``; iterating it asks ``before(index)`` before each record, which may
    end the iteration (the rest of the batch was given back) or skip a record given back already."""

    def __init__(self, records: list[Message], before: Callable[[int], bool | None]) -> None:
        super().__init__(records)
        self._records = records
        self._before = before

    def __iter__(self) -> Iterator[Message]:
        for index in range(len(self)):
            verdict = self._before(index)
            if verdict is None:
                return  # the rest was given back
            if verdict:
                yield self._records[index]
