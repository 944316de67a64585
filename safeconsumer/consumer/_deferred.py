"""The application's ``on_lost`` callbacks that wait behind an error event read ahead.

librdkafka serves every callback queued among the events one call returns. Upstream's
``poll()`` returns an error event (``_MAX_POLL_EXCEEDED``) first and runs ``on_lost`` in the
next call; a read whose results wait in the partition table (the reader's read-ahead, the
keeper's polls) serves both at once. The partitions leave at once (the rebalancer sees to
that), but the application's ``on_lost`` waits here, behind the last error event of that read,
and runs when the application next calls after that event was handed out: upstream's order.

One object holds the whole fact: whether such a read is running, the callbacks waiting, the
event they wait behind and whether it went out. The rebalancer defers into it and runs it
before every other rebalance callback; the reader reads ahead through it and tells it what it
handed out; close() runs what still waits. Every method runs under the consumer's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from confluent_kafka import Message, TopicPartition

from ..base._keys import RebalanceCallback

_T = TypeVar("_T")


class DeferredOnLost:
    """on_lost callbacks served by a read-ahead, waiting for the application's next call."""

    def __init__(self, run: Callable[[RebalanceCallback, list[TopicPartition]], None]) -> None:
        #: Runs one application callback (the rebalancer's: as a user callback, with the consumer).
        self._run = run
        #: A read whose results wait in the table is running (see :meth:`read_ahead`).
        self.reading_ahead = False
        #: The callbacks waiting, in librdkafka's order, each with its partitions (already gone).
        #: Changed by :meth:`defer` (appended) and :meth:`run_all` (emptied) only.
        self.waiting: list[tuple[RebalanceCallback, list[TopicPartition]]] = []
        #: The error event they wait behind (None: none, or it went out). Read by the reader's
        #: poll() per record handed out (an identity check); changed here only.
        self.behind: Message | None = None
        #: ``behind`` was handed out: they run at the application's next call.
        self._due = False

    def read_ahead(
        self, read: Callable[[int, float], tuple[list[Message], _T]], num_messages: int
    ) -> tuple[list[Message], _T]:
        """``read(num_messages, 0)``, a read whose results wait in the table.

        Called by the reader's read-ahead (its poll(), consume() and the keepalive's polls). An
        on_lost served by it waits behind the last error event it returned; with no event to
        wait behind (and none already waited behind) it runs at once, as if served in place.
        Sets ``reading_ahead`` during the read; may set ``behind``.
        """
        self.reading_ahead = True
        try:
            batch, errors = read(num_messages, 0)
        finally:
            self.reading_ahead = False
        if self.waiting:
            last = next((m for m in reversed(batch) if m.error() is not None), None) if errors else None
            if last is not None:
                self.behind = last
            elif self.behind is None:
                self.run_all()
        return batch, errors

    def defer(self, callback: RebalanceCallback, partitions: list[TopicPartition]) -> None:
        """Called by the rebalancer's on_lost while ``reading_ahead``: ``callback`` waits. Appends to ``waiting``."""
        self.waiting.append((callback, partitions))

    def went_out(self, out: Iterable[Message]) -> bool:
        """Called by the reader with what it hands out: whether ``behind`` was among it (then
        the callbacks are due at the application's next call). May clear ``behind``."""
        behind = self.behind
        if behind is None or not any(m is behind for m in out):
            return False
        self.behind, self._due = None, True
        return True

    def run_due(self, ahead: Iterable[Message]) -> None:
        """Called by the reader when the application comes back: run the waiting callbacks,
        unless the event they wait behind is still in the read-ahead ``ahead``. Clears
        ``behind``, the due mark and ``waiting``."""
        behind = self.behind
        if behind is not None and not self._due and any(m is behind for m in ahead):
            return
        self.behind, self._due = None, False
        self.run_all()

    def run_all(self) -> None:
        """Run the waiting callbacks, in order. Called by every rebalance callback first (the
        rebalancer), by :meth:`run_due`, and by the lifecycle's close(); empties ``waiting``."""
        waiting = self.waiting
        while waiting:
            callback, partitions = waiting.pop(0)
            self._run(callback, partitions)
