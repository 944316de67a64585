"""The partition table's hand-out transitions: what the application was handed, gave back, or came back from."""

from __future__ import annotations

from collections import Counter, deque
from typing import Literal, TypeVar

from confluent_kafka import Message

from ..base._keys import Key, key_of
from ._partition_state import PartitionState, PurgeReason

T = TypeVar("T")


def _drain(lane: deque[T]) -> list[T]:
    """Everything left in ``lane``, taken from the right (the application pops from the left)."""
    taken: list[T] = []
    while True:
        try:
            taken.append(lane.pop())
        except IndexError:
            break
    taken.reverse()
    return taken


_partition = Message.partition


class Receipt:
    """Records returned to an asyncio caller (:mod:`.aio`) that has not resumed yet.

    Created under the consumer's lock by :meth:`PartitionTable.in_transit`; settled on the event
    loop without the lock, by one attribute store: :meth:`arrived` (the caller got the records)
    or :meth:`returned` (it was cancelled: they never reached the application). Taking the lock
    on the loop could block it for as long as another call waits in librdkafka. Until settled
    the records count as neither delivered nor processed: no offset at or past them is stored
    and ``position()`` stays before them. The table settles receipts under the lock when the
    application next comes back (:meth:`PartitionTable.came_back`).
    """

    __slots__ = ("msgs", "state")

    def __init__(self, msgs: list[Message]) -> None:
        self.msgs = msgs
        self.state: Literal["transit", "arrived", "returned"] = "transit"

    def arrived(self) -> None:
        """Called by :mod:`.aio` on the loop: the caller got the records (handed out, as by ``poll()``)."""
        self.state = "arrived"

    def returned(self) -> None:
        """Called by :mod:`.aio` on the loop: the caller was cancelled; the records go back."""
        self.state = "returned"


class HandOut:
    """:class:`._partitions.PartitionTable`'s base class: its hand-out transitions, in a module of
    their own only for the length of one (their words are defined in :mod:`._partitions`' glossary).

    One object, the table: ``PartitionTable.__init__`` sets every attribute declared below, and the
    rest of the table calls these transitions as its own (``unlane`` above all). A method of a base
    class is found by the same one lookup as one of the class itself (CPython caches it per type),
    so the record path gains no call and no lookup by living here.
    """

    # The table's state these transitions read and change (set and described in PartitionTable.__init__).
    owned: dict[Key, PartitionState]
    epoch: int
    ahead: deque[Message]
    lane: deque[Message]
    lane_batch: list[Message] | None
    outstanding: Message | list[Message] | None
    transit: list[Receipt]
    maybe_releasable: bool
    dirty: bool
    delivered: int
    withheld: int
    purged: dict[PurgeReason, int]
    consumed: Counter[tuple[str | None, int | None]] | None
    _one_topic: tuple[str, list[int]] | None
    _topic_epoch: int

    # -- hand-out -----------------------------------------------------------------------------
    def deliver_one(self, msg: Message) -> Message:
        """One record handed out (the checked per-record path of poll()).

        Called by the gate's admit() and admit_trusted(). Counts ``delivered`` (and ``consumed``), marks
        ``dirty``.
        """
        self.delivered += 1
        if self.consumed is not None:
            self.consumed[(msg.topic(), msg.partition())] += 1
        self.dirty = True
        return msg

    def dropped_unowned(self, count: int) -> None:
        """Records of partitions not owned at the moment of return, dropped unseen (I2).

        Called by the gate's admit() and admit_batch(). Counts ``purged['unowned']``.
        """
        self.purged["unowned"] += count

    def count_delivered(self, msgs: list[Message], tally: list[tuple[Key, int]] | None = None) -> None:
        """Called by the gate (fill_lane, admit_batch) and by release(). Records handed out: counts ``delivered``
        (and ``consumed``: from ``tally``, the batch's count per partition when the gate already knows it, else
        record by record), marks ``dirty``.
        """
        self.delivered += len(msgs)
        consumed = self.consumed
        if consumed is not None:
            if tally is None:
                self._count_consumed(consumed, msgs)
            else:
                for key, count in tally:
                    consumed[key] += count
        self.dirty = True

    def _count_consumed(self, consumed: Counter[tuple[str | None, int | None]], msgs: list[Message]) -> None:
        """Add ``msgs`` to the per-partition counts telemetry reports (only while an SDK records).

        The exact count per (topic, partition) costs about 0.19 µs a record in Python. When every
        owned partition is of one topic, numbered below 256 (the common consumer), one C pass
        writes the batch's partition numbers into a ``bytes`` and each owned partition's count
        is a ``bytes.count``: about 0.03 µs a record. A record numbered otherwise (the counts do
        not add up) sends the batch the exact way. Topics are not looked at per record: only
        records of owned partitions are handed out (I2), so every record here is of that topic.
        """
        if self._topic_epoch != self.epoch:
            self._topic_epoch = self.epoch
            topics = {key[0] for key in self.owned}
            numbers = [key[1] for key in self.owned]
            single = len(topics) == 1 and len(numbers) <= 64 and all(0 <= n < 256 for n in numbers)
            self._one_topic = (topics.pop(), sorted(numbers)) if single else None
        one = self._one_topic
        if one is not None and len(msgs) > 4:
            try:
                ids = bytes(map(_partition, msgs))  # type: ignore[arg-type]  # ints, never None here
            except ValueError:  # a partition numbered 256 or more: not an owned one
                ids = b""
            counts = [ids.count(n) for n in one[1]]
            if sum(counts) == len(msgs):  # every record is of an owned partition
                topic = one[0]
                for number, count in zip(one[1], counts, strict=True):
                    if count:
                        consumed[(topic, number)] += count
                return
        consumed.update(map(key_of, msgs))

    def fill_lane(self, msgs: list[Message]) -> Message:
        """Hand out ``msgs[0]`` now and the rest through the lane (all already counted delivered).

        Called by the gate's fill_lane() (the reader's poll()). Fills ``lane`` and ``lane_batch``; clears
        ``outstanding``.
        """
        self.lane.extend(msgs)
        first = self.lane.popleft()
        self.lane_batch = msgs
        self.outstanding = None
        return first

    def unlane(self) -> None:
        """Put the lane's records back at the front of ``ahead``: not delivered after all.

        poll() pops the lane from its left without the lock; this takes from its right, one
        atomic pop at a time, so what the application got is always a prefix, in order, and
        each record goes either to it or back here, never both. The last record the
        application did pop stays outstanding, also when it emptied the lane.

        Called by every transition that changes what may be delivered, and by came_back(). Moves the lane back
        to ``ahead``, sets ``outstanding``, uncounts ``delivered``.
        """
        if not self.lane and self.lane_batch is None:
            return
        taken = _drain(self.lane)
        batch, self.lane_batch = self.lane_batch, None
        if batch is not None:
            self.outstanding = batch[len(batch) - len(taken) - 1]
        if not taken:
            return
        self.ahead.extendleft(reversed(taken))
        self.delivered -= len(taken)
        if self.consumed is not None:
            self.consumed.subtract(map(key_of, taken))

    def given_back(self, msgs: list[Message]) -> None:
        """What a poll()/consume() returned never reached the application (its asyncio caller was
        cancelled): not delivered, not outstanding; each record of an owned partition goes back in
        front of what waits for it (its withheld records, else the read-ahead), to be handed out
        again. A record of a partition no longer owned is dropped here (I2): its offset was not
        stored when the partition left (the floor counts records in transit), so its next owner
        reads it. What enters the read-ahead is owned now, as a read-ahead the reader trusts must be.

        Called by the reader's give_back() (the asyncio link) and by give_back_returned(). Changes ``held`` or
        ``ahead``, ``outstanding``, ``withheld``, ``delivered`` and the purge counts.
        """
        self.unlane()
        self.outstanding = None
        unowned = 0
        for msg in reversed(msgs):
            if msg.error() is not None:
                self.ahead.appendleft(msg)
                continue
            state = self.owned.get(key_of(msg))
            if state is None:
                unowned += 1
            elif state.held:
                state.held.appendleft(msg)
                self.withheld += 1
                self.maybe_releasable = True
            else:
                self.ahead.appendleft(msg)
        records = [m for m in msgs if m.error() is None]
        self.delivered -= len(records)
        if self.consumed is not None:
            self.consumed.subtract(map(key_of, records))
        if unowned:
            self.dropped_unowned(unowned)

    def give_back_from(self, msg: Message) -> None:
        """The application could not finish ``msg`` and it could not be set aside (a dead-letter
        write failed): it and what the same call handed out after it go back (see :meth:`given_back`),
        so that nothing from it on counts as processed.

        Called by the reader's give_back_from() (the poison handler, lock held). Changes what given_back() changes.
        """
        out = self.outstanding
        if isinstance(out, list):
            for i, handed in enumerate(out):
                if handed is msg:
                    self.given_back(out[i:])
                    return
        self.given_back([msg])

    def handed_out(self, out: Message | list[Message]) -> None:
        """What a locked poll()/consume() returned: outstanding until the application comes back.

        Called by the reader's poll() and consume() (lock held). Sets ``outstanding``.
        """
        self.outstanding = out

    def in_transit(self, result: Message | list[Message] | None) -> Receipt | None:
        """What the locked poll()/consume() just returned goes to an asyncio caller that may never
        get it: not outstanding, not delivered until its :class:`Receipt` says it arrived.

        Called by the asyncio link (lock held), right after the call. Appends to ``transit``; clears
        ``outstanding`` if it is the result (a record popped from the lane stays the lane's: the
        lane's own accounting keeps it unprocessed, and giving it back takes the lane back first).
        """
        msgs = result if isinstance(result, list) else [] if result is None else [result]
        if not msgs:
            return None
        if self.outstanding is result:
            self.outstanding = None
        receipt = Receipt(msgs)
        self.transit.append(receipt)
        return receipt

    def came_back(self) -> None:
        """The application came back after what it was handed: all of it counts as processed.

        Called by the reader (the app's next poll()/consume()), the gate's commit() and the lifecycle's close().
        Clears the lane batch and ``outstanding`` (the lane, if any, goes back first); settles
        ``transit``: records that arrived count as processed, those returned are given back (see
        :meth:`given_back`), those still in transit stay.
        """
        if self.lane:
            self.unlane()
        self.lane_batch = None
        self.outstanding = None
        if self.transit:
            self.give_back_returned()
            self.transit = [r for r in self.transit if r.state == "transit"]

    def give_back_returned(self) -> None:
        """Receipts whose asyncio caller was cancelled: their records go back (see :meth:`given_back`),
        the earliest in front.

        Called by came_back() and by the asyncio link before a receive (lock held). Removes them from
        ``transit``; changes what given_back() changes.
        """
        returned = [r for r in self.transit if r.state == "returned"]
        if not returned:
            return
        self.transit = [r for r in self.transit if r.state != "returned"]
        for receipt in reversed(returned):
            self.given_back(receipt.msgs)
