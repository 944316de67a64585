"""The batch one ``poll()`` handed to the application, and the watch on its locks.

A share consumer acquires every record of a batch under the group's acquisition lock at once, and
the application works through them one after the other. :class:`SafeMessages` is upstream's
``Messages`` (a subclass: ``len()``, indexing, ``count()``, ``records()`` unchanged) whose iterator
is a plain list iterator over :attr:`Batch.live`: handing out a record costs nothing on top of
upstream's. Once the batch has held its locks for :data:`RELEASE_AT` of the group's lock, the
:class:`Watch` thread cuts :attr:`Batch.live` after the furthest record an iterator handed out (a
list iterator then stops), and the records cut wait in :attr:`Batch.pending` until the consumer
releases them, with the acknowledgements not sent yet, at a moment no other thread is in librdkafka:
from the watch itself when the application is not inside a call of the consumer (explicit mode:
only while it is inside ``handle()``), else at its next call or from a ``keepalive()`` timer. A
share consumer must not be called from two threads at once.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import cast

from confluent_kafka import KafkaError, Message, Messages

#: The share of the group's lock after which records the application has not reached are given back.
RELEASE_AT = 0.75

#: Error codes a record carries when its key or value could not be deserialized (upstream's
#: ``DeserializingShareConsumer`` leaves it in the batch, acquired and acknowledgeable).
DESERIALIZATION = frozenset({KafkaError._KEY_DESERIALIZATION, KafkaError._VALUE_DESERIALIZATION})


def is_record(message: Message) -> bool:
    """A record of the batch (acquired: to be acknowledged), not an error event librdkafka returned."""
    error = message.error()
    return error is None or error.code() in DESERIALIZATION


class Batch:
    """One poll's records and what became of them."""

    # A batch starts with the class's values and gets its own on the first change: most batches never
    # change them, and what every poll() builds costs each of its records (Budgets).
    #: Every record of the batch is acknowledged (implicit mode: all accepted at once, see
    #: :meth:`settle_all`); :attr:`settled` is then not kept up.
    all_settled = False
    #: Seconds ``handle()`` spent and how many records it finished: the pace at which the
    #: application works through the batch (see :meth:`fits`).
    busy = 0.0
    handles = 0
    #: Whether the batch holds no error event (None: not looked at yet; see :meth:`look_clean`).
    clean: bool | None = None
    #: The iterators ``SafeMessages`` gave out over :attr:`live` (replaced whole as one is added).
    iterators: tuple[Iterator[Message], ...] = ()
    #: id() of records ``handle()`` ran on (the application reached them without iterating).
    handled: AbstractSet[int] = frozenset()
    #: id() of records the consumer acknowledged itself (released, rejected, or accepted by handle()).
    settled: AbstractSet[int] = frozenset()
    #: Explicit mode: id() of records handed out before the last send (the application's own
    #: acknowledgements of them went with it).
    sent: AbstractSet[int] = frozenset()
    #: Records the consumer accepted or rejected whose acknowledgements were not sent yet (sent
    #: after their lock ran out, they are lock overruns; a release never is one).
    unsent: Sequence[Message] = ()

    def __init__(
        self,
        records: list[Message],
        lock_seconds: float,
        hold_seconds: float | None = None,
        lock: threading.Lock | None = None,
        at: float | None = None,
    ) -> None:
        """``hold_seconds``: how long the member may hold the batch (the lock, or less: see the
        consumer's ``max.poll.interval.ms``); records not reached are given back at :data:`RELEASE_AT` of
        it. ``lock``: the consumer's for its batches (made once), else one of the batch's own. ``at``:
        when its locks started, at the earliest (see :mod:`._fetch`; None: now)."""
        #: Guards :attr:`live`, :attr:`records` and :attr:`pending` against the watch's cut; never held
        #: while another lock is taken.
        self.lock = lock if lock is not None else threading.Lock()
        #: Every record of the poll, in order: what ``SafeMessages`` holds (``len()``, indexing).
        self.records = records
        #: The list the application's iterators walk; cut short to stop them. It is :attr:`records`
        #: itself until something is taken out of it (see :meth:`part`): most batches are never cut,
        #: and a copy of every batch would cost each record.
        self.live = records
        #: Records cut from :attr:`live`, to be released on the application's thread.
        self.pending: list[Message] = []
        #: When the records' locks started, at the earliest (monotonic).
        self.at = at = time.monotonic() if at is None else at
        self.lock_end = at + lock_seconds
        self.release_at = at + (lock_seconds if hold_seconds is None else hold_seconds) * RELEASE_AT

    # The sets and the list above become the batch's own at their first write, in one step
    # (dict.setdefault): two threads never make two.
    def _own_set(self, name: str) -> set[int]:
        ids = self.__dict__.get(name)
        return cast("set[int]", ids if ids is not None else self.__dict__.setdefault(name, set()))

    def mark_handled(self, message: Message) -> None:
        self._own_set("handled").add(id(message))

    def mark_settled(self, messages: Iterable[Message]) -> None:
        self._own_set("settled").update(map(id, messages))

    def mark_sent(self, messages: Iterable[Message]) -> None:
        self._own_set("sent").update(map(id, messages))

    def add_unsent(self, message: Message) -> None:
        cast("list[Message]", self.__dict__.setdefault("unsent", [])).append(message)

    def part(self) -> None:
        """Before :attr:`live` loses records (under :attr:`lock`): :attr:`records` becomes a list of its
        own, whole, and :attr:`live` stays the list the iterators walk."""
        if self.live is self.records:
            self.records = list(self.live)

    def position(self) -> int:
        """How many records of :attr:`live` the furthest iterator handed out."""
        n = len(self.live)
        return max((n - it.__length_hint__() for it in self.iterators), default=0)  # type: ignore[attr-defined]

    def cut(self) -> list[Message]:
        """Stop handing out records: those no iterator handed out (and ``handle()`` did not run on)
        leave :attr:`live` and join :attr:`pending`. Returns them."""
        with self.lock:
            if self.all_settled:  # every record acknowledged: none to give back
                return []
            position = self.position()
            rest = self.live[position:]
            if not rest:
                return []
            self.part()
            del self.live[position:]
            # A record handle() ran on is in the application's hands: not ours to give back.
            cut = [m for m in rest if id(m) not in self.handled]
            self.pending.extend(cut)
            return cut

    def take_pending(self) -> list[Message]:
        with self.lock:
            pending, self.pending = self.pending, []
        self.mark_settled(pending)
        return pending

    def is_settled(self, message: Message) -> bool:
        return self.all_settled or id(message) in self.settled

    def settle_all(self) -> None:
        """Every record is acknowledged now (without an id() per record in :attr:`settled`)."""
        self.all_settled = True

    def handed_out(self) -> list[Message]:
        """Records the application was handed (iterated to, or handled), not settled by the consumer."""
        if self.all_settled:
            return []
        position = self.position()
        reached = self.live[:position]
        reached += [m for m in self.live[position:] if id(m) in self.handled]
        return [m for m in reached if id(m) not in self.settled]

    def fits(self, wait: float, attempt: float) -> bool:
        """Whether a retry of the record in hand, after ``wait`` seconds and taking ``attempt``, and then
        the records of the batch not reached yet, at the pace ``handle()`` kept, end before
        :attr:`release_at`: a failing record never holds its neighbours past their locks."""
        rest = len(self.live) - max(self.position(), len(self.handled))
        pace = self.busy / self.handles if self.handles else attempt
        return time.monotonic() + wait + attempt + max(0, rest) * pace <= self.release_at

    def look_clean(self) -> bool:
        """Whether the batch holds no error event: one C call per record, cheapest right after the poll
        that made the records (implicit mode looks then: its acceptance at the next poll needs it)."""
        clean = self.clean
        if clean is None:
            clean = self.clean = not any(map(Message.error, self.records))
        return clean

    def unsettled(self) -> list[Message]:
        """Every record of the batch the consumer did not acknowledge itself (error records excluded:
        librdkafka acknowledged them)."""
        if self.all_settled:
            return []
        records, settled = self.records, self.settled
        if not settled and self.look_clean():  # the usual batch
            # The list itself, read in C by the caller before the watch could cut it (a cut in between
            # leaves out what the application never reached: it goes back with the cut).
            return records
        with self.lock:  # a cut meanwhile would shorten the list read here
            records = self.records
            return [m for m in records if id(m) not in settled and (m.error() is None or is_record(m))]


class SafeMessages(Messages):
    """Upstream's ``Messages``, whose iterator walks :attr:`Batch.live` (see the module). Its sequence
    (``len()``, indexing, ``records()``) is :attr:`Batch.records`, whole after a cut. A slice (upstream's
    ``_from_list``) is a list of its own: its iterator walks it whole."""

    _batch: Batch | None = None
    _own: list[Message]

    def __init__(self, records: list[Message], batch: Batch | None) -> None:
        # ``records`` is adopted, not copied (as upstream's ``Messages._from_list`` does).
        self._own = records
        self._batch = batch

    @property
    def _records(self) -> list[Message]:
        """Upstream's methods read the sequence here: the batch's, whole (a cut parts it from :attr:`Batch.live`)."""
        batch = self._batch
        return self._own if batch is None else batch.records

    @_records.setter
    def _records(self, records: list[Message]) -> None:  # upstream's _from_list (a slice)
        self._own = records

    def __iter__(self) -> Iterator[Message]:
        batch = self._batch
        if batch is None:
            return iter(self.records())
        it = iter(batch.live)
        batch.iterators += (it,)
        return it


class Watched:
    """What the watch knows of one consumer: the batch it holds last, when the watch looks at it next,
    and what it calls at a batch's release point after a cut, or with acknowledgements unsent (the
    consumer releases and sends, if it may now). The consumer drops the batch from here when it holds
    none after a poll or closes: the watch holds nothing the consumer does not.

    A new batch is handed over in a few steps, on the consumer's thread: :attr:`batch` is written,
    then :attr:`due` read, and only when the watch looks later than the batch's release point (or
    not at all) is it asked to look then (:meth:`Watch.look_at`). The usual batch needs no call: the
    watch, waking for the one before, finds this one and sleeps until its time. The watch's thread
    writes :attr:`due` first and reads :attr:`batch` after, so that one of the two sees the other."""

    __slots__ = ("batch", "due", "on_cut")

    def __init__(self, on_cut: Callable[[Batch], object]) -> None:
        self.batch: Batch | None = None
        #: When the watch looks next (infinity: it does not; the consumer's next batch asks it to).
        self.due = math.inf
        self.on_cut = on_cut


class Watch:
    """One daemon thread for the process: cuts each consumer's batch at its :attr:`Batch.release_at`.
    It holds each consumer's :class:`Watched`, never a consumer: one entry a consumer, whatever its
    number of batches, so that handing a batch over costs a few steps (see :class:`Watched`)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Watched]] = []
        self._counter = itertools.count()
        #: A plain lock under the condition: ``with self._lock`` is entered in C (a Condition's own
        #: ``__enter__``/``__exit__`` are Python calls).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def look_at(self, watched: Watched, at: float) -> None:
        """The watch looks at ``watched``'s batch at ``at``, unless it looks sooner already."""
        with self._lock:
            if at >= watched.due:
                return
            watched.due = at
            heapq.heappush(self._heap, (at, next(self._counter), watched))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="safeconsumer-share-watch", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is watched:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            self._look(self._next())

    def _next(self) -> Watched:
        """The next consumer whose batch is due, once it is (nothing of another stays referenced meanwhile)."""
        with self._lock:
            while True:
                if self._heap and self._heap[0][0] <= time.monotonic():
                    due, _, watched = heapq.heappop(self._heap)
                    if due == watched.due:
                        watched.due = math.inf  # written before the batch is read (see Watched)
                        return watched
                    del watched  # an earlier look was asked for since (and is done)
                    continue
                self._cond.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic()))

    def _look(self, watched: Watched) -> None:
        batch = watched.batch
        if batch is None:
            return
        if batch.release_at > time.monotonic():  # a later batch: its own time
            self.look_at(watched, batch.release_at)
        elif batch.cut() or batch.unsent:
            # A failure leaves them pending: the consumer releases them at the application's next call.
            with contextlib.suppress(Exception):
                watched.on_cut(batch)


WATCH = Watch()
