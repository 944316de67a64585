"""The consumed positions and the logical seeks not yet resolved, per partition, in one owner.

A consumed position is the offset after the last record the application was given from a
partition, with that record's leader epoch: ``commit()`` and ``commit_async()`` commit it when given
no offsets, and ``position()`` answers it. A logical seek (``seek_to_beginning``/``seek_to_end``)
is kept as ``OFFSET_BEGINNING``/``OFFSET_END`` until a record of the partition is handed out, so
``position()`` can resolve it. Both change only through the transitions below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import confluent_kafka
from kafka.structs import TopicPartition

from ._convert import to_confluent

__all__ = ["Key", "Positions"]

Key = tuple[str, int]


class Positions:
    """Per partition: where the application's next record starts, and a logical seek pending."""

    def __init__(self) -> None:
        self._consumed: dict[Key, tuple[int, int]] = {}  # next offset, leader epoch
        self._resets: dict[Key, int] = {}  # partition -> OFFSET_BEGINNING / OFFSET_END, not yet resolved

    def handed_out(self, key: Key, offset: int, epoch: int) -> None:
        """The handout gave the application the partition's records up to ``offset`` (exclusive)."""
        self._consumed[key] = (offset, epoch)
        self._resets.pop(key, None)

    def not_handed_out(self, keys: Iterable[Key]) -> None:
        """``poll(update_offsets=False)``: the read went back, its partitions keep no consumed position."""
        for key in keys:
            self._consumed.pop(key, None)

    def sought(self, key: Key) -> None:
        """``seek()`` to an offset: librdkafka's position answers from here."""
        self._resets.pop(key, None)
        self._consumed.pop(key, None)

    def sought_logically(self, key: Key, where: int) -> None:
        """``seek_to_beginning``/``seek_to_end``: ``where`` is kept until a record is handed out."""
        self._consumed.pop(key, None)
        self._resets[key] = where

    def forget(self, gone: Callable[[Key], bool]) -> None:
        """Partitions no longer this consumer's (revoked, lost, or left out of an assign)."""
        for table in (self._consumed, self._resets):
            for key in [k for k in table if gone(k)]:
                del table[key]

    def clear(self) -> None:
        """``unsubscribe()``: nothing assigned, nothing kept."""
        self._consumed.clear()
        self._resets.clear()

    def any_consumed(self) -> bool:
        """Whether the application was given a record whose position is kept."""
        return bool(self._consumed)

    def next_offset(self, key: Key) -> int | None:
        """The consumed position of ``key``, None when the application was given none of its records."""
        consumed = self._consumed.get(key)
        return None if consumed is None else consumed[0]

    def pending_seek(self, key: Key) -> int | None:
        """The logical seek of ``key`` not yet resolved, if any."""
        return self._resets.get(key)

    def to_commit(self, owned: set[Key]) -> list[confluent_kafka.TopicPartition]:
        """The consumed positions of the partitions in ``owned``, as a commit's offsets."""
        return [
            to_confluent(TopicPartition(t, p), offset, None, epoch)
            for (t, p), (offset, epoch) in self._consumed.items()
            if (t, p) in owned
        ]
