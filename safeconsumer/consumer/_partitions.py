"""The partition table: the one owner of everything the library knows per partition.

Glossary (the words the rest of the core uses):

- **owned**: assigned to this consumer right now; only owned partitions' records reach the app.
- **applied**: librdkafka was told this partition is paused (its flag follows intent, see
  :mod:`._rebalance` and :mod:`._pause_flags`).
- **withheld** (``held``): records that arrived while their partition was paused; kept in order
  and released first once it is resumed.
- **read-ahead** (``ahead``): records read from librdkafka in a batch but not yet through the
  gate, across partitions, in arrival order.
- **lane**: records of a batch that was wholly deliverable when it arrived; ``poll()`` hands
  them out one by one without the lock. Anything that changes what may be delivered takes
  them back first (:meth:`PartitionTable.unlane`).
- **outstanding**: what the last ``poll()``/``consume()`` handed out. The application is still
  working on it until it *comes back* (its next ``poll()``/``consume()``, a ``commit()``, or
  ``close()``); until then no offset at or past it is stored (I8).
- **in transit**: what a ``poll()``/``consume()`` of :mod:`.aio` returned to a caller that has
  not resumed yet (a :class:`Receipt`). Neither processed nor delivered until the caller gets it;
  if the caller was cancelled meanwhile, it goes back to be handed out again (I8).
- **limbo**: under the eager protocol every partition is revoked at each rebalance; a revoked
  partition's state (withheld and read-ahead records, its seek target) waits here for the next
  assignment, and is restored if the partition comes back in that same rebalance, else purged.
  Its error events (EOF) do not wait: librdkafka reports them again after the re-assignment.
- **seek target**: an offset the application set explicitly (``seek()``, ``assign()`` at an
  offset); it is the partition's stored offset until a record past it is delivered.

Every change goes through a named transition (``assigned``, ``left``, ``to_limbo``,
``seeked``, ``seek_passed``, ``set_paused``, ``flags_applied``, ``hold``, ``release``,
``deliver_one``, ``count_delivered``, ``fill_lane``, ``unlane``, ``given_back``, ``handed_out``,
``in_transit``, ``give_back_returned``, ``came_back``, ``stored``, ``dropped_unowned``,
``refused_offsets``, ``restores_applied``,
``count_consumed``, ``cleared``); none of them talks to Kafka. Callers hold the consumer's lock;
the exceptions are ``poll()`` popping the lane from its left (see :meth:`PartitionTable.unlane`),
a :class:`Receipt` settled by its asyncio caller (one attribute store, see there)
and ``count_consumed`` (telemetry: on the metric reader's thread, or when it binds; one attribute store).

Not yet a transition: the read-ahead deque itself. The reader appends to it and pops from it in
place on the record path (``extend``/``popleft``, under the lock), where a method call per record
would cost the throughput budget of ``poll()``; every other holder of records goes through the
transitions above.

The table is one object written in three modules: this one (the glossary, ownership and limbo,
pause, offsets), :mod:`._handout` (its base class :class:`._handout.HandOut`: the hand-out
transitions and :class:`Receipt`) and :mod:`._partition_state` (:class:`PartitionState` and
``PurgeReason``, which both name).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import Message

from ..base._keys import Key, key_of
from ._handout import HandOut, Receipt
from ._partition_state import PartitionState, PurgeReason

#: What the rest of the package takes from here (``Receipt``, ``PartitionState`` and ``PurgeReason``
#: are written in the modules of the table's other parts).
__all__ = ["LeaveReason", "PartitionState", "PartitionTable", "PurgeReason", "Receipt"]

logger = logging.getLogger("safeconsumer")

#: How a partition stops being owned.
LeaveReason = Literal["revoked", "lost", "unassigned", "unsubscribed", "closed"]

_PURGE_OF_LEAVE: dict[LeaveReason, PurgeReason] = {
    "revoked": "revoked",
    "lost": "lost",
    "unassigned": "revoked",
    "unsubscribed": "revoked",
    "closed": "revoked",
}


@dataclass(slots=True)
class _Limbo:
    state: PartitionState
    ahead: list[Message]
    #: librdkafka's position when it was revoked (after the last record it returned: handed out,
    #: or waiting here), or None when it had none.
    position: int | None = None


def _records(msgs: Iterable[Message]) -> int:
    """How many of ``msgs`` are records (not error events)."""
    return sum(1 for m in msgs if m.error() is None)


class PartitionTable(HandOut):
    """Owned partitions, the records the library holds for them, and what was handed out (the
    hand-out transitions are written in the base class, :class:`._handout.HandOut`)."""

    def __init__(self) -> None:
        #: Owned partitions and their state. Membership is ownership.
        self.owned: dict[Key, PartitionState] = {}
        #: The effective paused set of the assignment (the app's intent, or everything while parked).
        self.paused: frozenset[Key] = frozenset()
        #: Size of the application's effective paused set, parking aside (a telemetry gauge).
        self.intent_paused = 0
        #: Bumped on every change of ownership: a batch read across no bump needs no ownership check.
        self.epoch = 0
        self.ahead: deque[Message] = deque()
        self.lane: deque[Message] = deque()
        #: The whole batch the lane was filled from (its first record was returned directly), or None.
        self.lane_batch: list[Message] | None = None
        #: The last locked hand-out: one record (poll) or a list (consume); None once the app came back.
        self.outstanding: Message | list[Message] | None = None
        #: Hand-outs to asyncio callers that had not resumed when last looked at (see Receipt).
        self.transit: list[Receipt] = []
        self.limbo: dict[Key, _Limbo] = {}
        #: Offsets an eager re-assignment must start from, for partitions restored from limbo.
        self.resume_at: dict[Key, int] = {}
        #: Some held record may be releasable (a pause was lifted); cleared by release().
        self.maybe_releasable = False
        #: Something was handed out since the last offset store (or still may be: lane, outstanding).
        self.dirty = False
        # Counters (read by delivery_stats() and telemetry).
        self.delivered = 0
        self.withheld = 0
        self.released = 0
        self.purged: dict[PurgeReason, int] = {"revoked": 0, "lost": 0, "unowned": 0, "seek": 0}
        self.offsets_dropped = 0
        #: Records handed out per partition, kept only while telemetry records (see otel.py).
        self.consumed: Counter[tuple[str | None, int | None]] | None = None
        #: The one topic of the owned partitions and their numbers (< 256), for a cheap count; the
        #: epoch it was computed at.
        self._one_topic: tuple[str, list[int]] | None = None
        self._topic_epoch = -1

    # -- ownership -------------------------------------------------------------------------
    def assigned(self, keys: Iterable[Key], *, replace: bool) -> set[Key]:
        """Partitions become owned (``replace``: ``keys`` is the whole new assignment).

        Limbo is resolved: partitions that came back get their state and read-ahead back (and
        a ``resume_at`` offset after the last record held for them, else their position at the
        revocation); the others are purged.
        Returns the partitions that left for good here (limbo not returned, or owned and not
        in a replacing assignment): their partition marks must go.

        Called by the rebalancer's assign() (replace), incremental_assign() and on_assign (not replacing), and
        unsubscribe() (no keys: limbo resolved). Changes ``owned``, ``limbo``, ``resume_at``, ``ahead``,
        ``epoch``, ``maybe_releasable`` and the purge counts.
        """
        new = dict.fromkeys(keys)
        self.epoch += 1
        gone: set[Key] = set()
        if replace:
            leaving = [k for k in self.owned if k not in new]
            if leaving:
                self.left(leaving, "unassigned")
                gone.update(leaving)
        if self.limbo:
            restored: list[Message] = []
            for key, parked in self.limbo.items():
                if key in new:
                    self.owned[key] = parked.state
                    restored += parked.ahead
                    last = next((m for m in reversed(parked.ahead) if m.error() is None), None)
                    if last is None and parked.state.held:
                        last = parked.state.held[-1]
                    if last is not None:
                        self.resume_at[key] = last.offset() + 1  # type: ignore[operator]
                    elif parked.position is not None:
                        self.resume_at[key] = parked.position
                        # librdkafka reports no position for it before its first record: until
                        # then, this is what is stored for it (and where a next limbo resumes).
                        parked.state.seek_target = parked.position
                        self.dirty = True
                    if parked.state.held:
                        self.maybe_releasable = True
                else:
                    self._count_purge(len(parked.state.held) + _records(parked.ahead), "revoked")
                    gone.add(key)
            self.ahead.extendleft(reversed(restored))
            self.limbo.clear()
        for key in new:
            if key not in self.owned:
                self.owned[key] = PartitionState()
        return gone

    def left(self, keys: Iterable[Key], reason: LeaveReason) -> set[Key]:
        """Partitions stop being owned: their records are purged. Returns those that were owned.

        Their records in transit are never given back: their offsets were not stored past them,
        so whoever owns the partition next (this consumer too) reads them again.

        Called by the rebalancer's _left() (revoked, lost, unassigned, unsubscribed) and by assigned()
        (replace). Changes ``owned``, ``ahead``, the lane (taken back), ``transit``, ``epoch`` and the
        purge counts.
        """
        gone = {k for k in keys if k in self.owned}
        if not gone:
            return gone
        self.epoch += 1
        self.unlane()
        for receipt in self.transit:
            receipt.msgs = [m for m in receipt.msgs if m.error() is not None or key_of(m) not in gone]
        count = _records(self._take_ahead(gone))
        for key in gone:
            count += len(self.owned.pop(key).held)
        self._count_purge(count, _PURGE_OF_LEAVE[reason])
        return gone

    def to_limbo(self, keys: Iterable[Key], positions: Mapping[Key, int] | None = None) -> set[Key]:
        """Eagerly revoked partitions: not owned any more, their state kept until the next assignment.

        ``positions``: librdkafka's position of each at the revocation (where a partition that
        comes back with nothing held reads on: after what the application was handed, which it
        may still be working on; its committed offset would hand it out again). Without one (none
        read since it was assigned at an offset), its seek target stands in.

        Called by the rebalancer's _left() for an eager revocation that a re-assignment may follow. Moves state
        and read-ahead records from ``owned``/``ahead`` to ``limbo``; bumps ``epoch``.
        """
        gone = {k for k in keys if k in self.owned}
        if not gone:
            return gone
        self.epoch += 1
        self.unlane()
        # Only records wait: an event of the partition (its EOF) is dropped, as librdkafka drops
        # what it queued for a revoked partition; given back, the partition's next fetch
        # reports its end again (a kept EOF would arrive twice).
        taken = [m for m in self._take_ahead(gone) if m.error() is None]
        for key in gone:
            state = self.owned.pop(key)
            state.applied = False
            position = (positions or {}).get(key, state.seek_target)
            self.limbo[key] = _Limbo(state, [m for m in taken if key_of(m) == key], position)
        return gone

    def restores_applied(self) -> None:
        """Called by the rebalancer once on_assign applied the assignment: the ``resume_at``
        offsets of partitions restored from eager limbo have been used."""
        self.resume_at.clear()

    def count_consumed(self) -> None:
        """Called by telemetry (on the metric reader's thread or while binding, without the consumer's lock): keep
        per-partition counts of records handed out from now on. One attribute store: the record
        path sees either no counter or the new one; records handed out meanwhile go uncounted,
        as before an SDK was installed."""
        if self.consumed is None:
            self.consumed = Counter()

    def cleared(self) -> None:
        """The consumer closed or failed: everything held is dropped (counted as revoked).

        Called by the lifecycle's close() and fail(). Empties ``owned``, ``limbo``, ``resume_at``, ``ahead``,
        the lane and ``outstanding``; bumps ``epoch``.
        """
        self.unlane()
        count = _records(self._take_ahead(None)) + sum(len(s.held) for s in self.owned.values())
        count += sum(len(p.state.held) + _records(p.ahead) for p in self.limbo.values())
        self.owned.clear()
        self.limbo.clear()
        self.resume_at.clear()
        self.outstanding = None
        self.transit.clear()
        self.epoch += 1
        self._count_purge(count, "revoked")

    def seeked(self, key: Key, offset: int | None) -> None:
        """The application moved an owned partition (seek, assign at an offset): its records are stale.

        Called by the rebalancer's seek() (the facade's seek()) and assign() for a partition assigned again. Drops the
        partition's withheld and read-ahead records (and its records in transit: never given back), sets its
        ``seek_target``, marks ``dirty``.
        """
        self.unlane()
        for receipt in self.transit:
            receipt.msgs = [m for m in receipt.msgs if m.error() is not None or key_of(m) != key]
        state = self.owned.get(key)
        dropped = _records(self._take_ahead({key}))
        if state is not None:
            dropped += len(state.held)
            state.held.clear()
            state.seek_target = offset if offset is not None and offset >= 0 else None
            if state.seek_target is not None:
                self.dirty = True
        self._count_purge(dropped, "seek")

    def _take_ahead(self, keys: set[Key] | None) -> list[Message]:
        """Remove (and return) the read-ahead of ``keys`` (None: all), keeping the rest in order.

        A partition's error events (its EOF event) go with its records: librdkafka discards the
        queued events of a partition that leaves or is seeked, and an EOF event must not come
        before the records it follows.
        """
        if not self.ahead:
            return []
        if keys is None:
            everything = list(self.ahead)
            self.ahead.clear()
            return everything
        taken: list[Message] = []
        kept: list[Message] = []
        for m in self.ahead:
            (taken if key_of(m) in keys else kept).append(m)
        if taken:
            self.ahead.clear()  # in place: the reader holds a reference
            self.ahead.extend(kept)
        return taken

    def _count_purge(self, count: int, reason: PurgeReason) -> None:
        if count:
            self.purged[reason] += count
            logger.warning("purged %d withheld or read-ahead record(s) of %s partitions", count, reason)

    # -- pause ------------------------------------------------------------------------------
    def set_paused(self, paused: frozenset[Key], intent: int) -> None:
        """The effective paused set changed (pause intent, parking, assignment).

        Called by the rebalancer's sync() (lock held). Changes ``paused``, ``intent_paused`` and
        ``maybe_releasable``; takes the lane back.
        """
        self.unlane()
        self.paused = paused
        self.intent_paused = intent
        self.maybe_releasable = any(s.held for s in self.owned.values())

    def flags_applied(self, keys: Iterable[Key], *, paused: bool) -> None:
        """librdkafka was told to pause (or resume) these owned partitions.

        Called by the rebalancer's sync() once librdkafka's flags were set. Changes each partition's
        ``applied``.
        """
        owned = self.owned
        for key in keys:
            owned[key].applied = paused

    def hold(self, key: Key, msg: Message) -> None:
        """Called by the gate's admit() and admit_batch(): a record of an owned, paused partition waits. Appends to
        its ``held``; counts ``withheld``.
        """
        self.owned[key].held.append(msg)
        self.withheld += 1

    def release(self, limit: int) -> list[Message]:
        """Up to ``limit`` withheld records of owned, unpaused partitions, each partition in order.

        Called by the gate's release() (the reader's poll() and consume()). Pops from ``held``, clears
        ``maybe_releasable`` when all is out, counts ``released`` and ``delivered``.
        """
        out: list[Message] = []
        for key, state in self.owned.items():
            if len(out) >= limit:
                break
            if not state.held or key in self.paused:
                continue
            held = state.held
            while held and len(out) < limit:
                out.append(held.popleft())
        if len(out) < limit:
            self.maybe_releasable = False
        if out:
            self.released += len(out)
            self.count_delivered(out)
        return out

    # -- offsets ------------------------------------------------------------------------------
    def first_undelivered(self, key: Key) -> int | None:
        """Offset of the first record of ``key`` received from librdkafka but not handed out."""
        return self._floor(with_outstanding=False).get(key)

    def unprocessed_floor(self) -> dict[Key, int]:
        """Per partition, the first offset not yet processed: withheld, read ahead, in the lane,
        or handed out and not come back from. Nothing at or past it may be stored (I3, I8)."""
        return self._floor(with_outstanding=True)

    def _floor(self, *, with_outstanding: bool) -> dict[Key, int]:
        lane = [*self.lane]  # one atomic copy: poll() may pop the lane meanwhile
        records: list[Message] = [*lane, *self.ahead]
        for receipt in self.transit:
            if with_outstanding or receipt.state != "arrived":
                records += receipt.msgs
        if with_outstanding:
            out = self.outstanding
            if isinstance(out, list):
                records += out
            elif out is not None:
                records.append(out)
            batch = self.lane_batch
            if batch is not None:
                records.append(batch[len(batch) - len(lane) - 1])
        floor: dict[Key, int] = {}
        for msg in records:
            if msg.error() is None:
                key, offset = key_of(msg), msg.offset()
                if offset is not None and (key not in floor or offset < floor[key]):
                    floor[key] = offset
        for key, state in self.owned.items():
            if state.held:
                offset = state.held[0].offset()
                if offset is not None and (key not in floor or offset < floor[key]):
                    floor[key] = offset
        return floor

    def stored(self) -> None:
        """Offsets were just stored: another store is due only for what is still pending.

        Called by the gate's flush() after storing. Sets ``dirty``.
        """
        self.dirty = self.pending

    def seek_passed(self, key: Key) -> None:
        """A record past the partition's seek target was delivered: its position rules again.

        Called by the gate's flush(). Clears the partition's ``seek_target``.
        """
        state = self.owned.get(key)
        if state is not None:
            state.seek_target = None

    def refused_offsets(self, count: int) -> None:
        """Offsets of partitions not owned, refused by commit()/store_offsets() (I7).

        Called by the gate's owned_offsets() (I7). Counts ``offsets_dropped``.
        """
        self.offsets_dropped += count

    @property
    def pending(self) -> bool:
        """Records handed out may still need storing later (lane not empty, or not come back from)."""
        return bool(self.lane) or self.outstanding is not None or self.lane_batch is not None or bool(self.transit)

    def app_holds(self) -> bool:
        """Records were handed out that the application has not come back from (the keeper asks,
        from its thread without the lock: each attribute is read whole)."""
        return self.outstanding is not None or self.lane_batch is not None or bool(self.transit)

    @property
    def held_count(self) -> int:
        return sum(len(s.held) for s in self.owned.values()) + sum(len(p.state.held) for p in self.limbo.values())
