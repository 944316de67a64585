"""The delivery gate: the one place records pass on their way out of ``poll()``/``consume()``.

At the moment a record would be returned it is checked against the current state:

- a record of a partition this consumer does not own is dropped (``purged_unowned``);
  its offset is never stored, so the partition's owner reads it;
- a record of an effectively paused partition is *withheld*: kept, in order, and
  delivered first once the partition is resumed, or purged if the partition leaves;
- a record that is handed out has its offset stored for it, when the application
  asked for librdkafka's automatic offset store.

The underlying client runs with ``enable.auto.offset.store=false``: librdkafka would
otherwise store the offset of every record it gives *us*, including withheld ones,
and the auto-committer could commit past a record the application never saw.
Offsets of delivered records are stored in batches: when ``flush_interval`` seconds
have passed (checked per batch, every 16 records of ``poll()`` and whenever ``poll()``
comes back empty), and always before a commit, a revocation and close.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import Message, TopicPartition

from ._pause import Key

logger = logging.getLogger("safeconsumer")

#: poll() checks the clock for a due offset store once per this many records, not per record.
_FLUSH_EVERY = 16

_topic = Message.topic
_partition = Message.partition
_error = Message.error

PurgeReason = Literal["revoked", "lost", "unowned", "seek"]


def next_offset(msg: Message) -> TopicPartition:
    """The offset to store or commit once ``msg`` is processed, with its leader epoch when known."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None and partition is not None and offset is not None, "not a record"
    epoch = msg.leader_epoch()
    if epoch is None:
        return TopicPartition(topic, partition, offset + 1)
    return TopicPartition(topic, partition, offset + 1, leader_epoch=epoch)


@dataclass(frozen=True)
class DeliveryStats:
    """Counters of what the delivery gate did, since the consumer was created."""

    delivered: int
    """Records handed to the application (held records included once released)."""
    withheld: int
    """Records kept back because their partition was paused when they arrived."""
    released: int
    """Withheld records later handed to the application."""
    held: int
    """Records withheld right now."""
    purged_revoked: int
    """Withheld records dropped because their partition was revoked (the next owner reads them)."""
    purged_lost: int
    """Withheld records dropped because their partition was lost."""
    purged_unowned: int
    """Records of partitions this consumer did not own at the moment of return, dropped."""
    purged_seek: int
    """Withheld records dropped because the application seeked their partition."""
    offsets_dropped: int
    """Offsets refused by ``commit()``/``store_offsets()`` for partitions not owned."""


class DeliveryGate:
    """Decides, record by record, what the application may see. Not thread-safe: the facade locks."""

    def __init__(
        self,
        store: Callable[[list[TopicPartition]], None],
        position: Callable[[list[Key]], list[TopicPartition]],
        *,
        auto_store: bool,
        on_error: Callable[[Message], None] = lambda _msg: None,
        flush_interval: float = 0.05,
    ) -> None:
        self._store = store
        self._position = position
        #: Sees every error event on its way out; may raise (a fatal error stops delivery).
        self.on_error = on_error
        self.auto_store = auto_store
        self.flush_interval = flush_interval
        #: Partitions owned now. Written only by the rebalance handler.
        self.owned: set[Key] = set()
        #: Effectively paused partitions of the assignment. Written only by the rebalance handler.
        self.paused: frozenset[Key] = frozenset()
        self._held: dict[Key, deque[Message]] = {}
        #: Records read ahead from librdkafka by poll(), not yet through the gate, in order.
        self.ahead: deque[Message] = deque()
        #: poll()'s fast lane: records already through the gate, handed out one by one without
        #: the lock. Filled only with a whole batch that was deliverable when it arrived, and
        #: emptied back into ``ahead`` (``unlane``) before anything changes what is deliverable.
        self.lane: deque[Message] = deque()
        self._maybe_releasable = False
        #: Something was delivered since the last offset store (or may be: the lane is not empty).
        self._dirty = False
        self._unflushed = 0
        #: Partitions rewound by seek(): their position is the seek target until a record is delivered.
        self._seeked: dict[Key, int] = {}
        self._last_flush = time.monotonic()
        self.delivered = 0
        self.withheld = 0
        self.released = 0
        self.purged: dict[PurgeReason, int] = {"revoked": 0, "lost": 0, "unowned": 0, "seek": 0}
        self.offsets_dropped = 0
        #: Records handed out per partition, kept only while telemetry records (see otel.py).
        self.consumed: Counter[tuple[str | None, int | None]] | None = None
        #: Size of the application's effective paused set (parking aside). Written by the rebalance handler.
        self.intent_paused = 0

    # -- state changes -------------------------------------------------------------------
    def set_paused(self, paused: frozenset[Key]) -> None:
        self.unlane()
        self.paused = paused
        self._maybe_releasable = bool(self._held)

    def purge(self, keys: Iterable[Key], reason: PurgeReason) -> int:
        """Drop withheld and read-ahead records (and unstored offsets) of partitions leaving or rewound."""
        self.unlane()
        dropped = 0
        gone = set(keys)
        for key in gone:
            queue = self._held.pop(key, None)
            if queue:
                dropped += len(queue)
            self._seeked.pop(key, None)
        if self.ahead:
            kept = [m for m in self.ahead if (m.topic(), m.partition()) not in gone]
            dropped += len(self.ahead) - len(kept)
            self.ahead.clear()  # in place: poll() holds a reference across callbacks
            self.ahead.extend(kept)
        if dropped:
            self.purged[reason] += dropped
            logger.warning("purged %d withheld record(s) of %s partitions", dropped, reason)
        return dropped

    # -- the gate ------------------------------------------------------------------------
    def admit(self, msg: Message) -> Message | None:
        """Return ``msg`` if the application may have it now, else keep or drop it."""
        if msg.error() is not None:
            self.on_error(msg)
            return msg
        key = (msg.topic(), msg.partition())
        if key in self.owned and key not in self.paused:
            return self._deliver_one(msg)
        if key not in self.owned:
            self.purged["unowned"] += 1
            logger.warning("dropped 1 record of unowned partition %s[%s]", key[0], key[1])
        else:
            self._hold(key, msg)
        return None

    def admit_trusted(self, msg: Message) -> Message | None:
        """:meth:`admit` for a record fetched while the assignment stood still, with nothing paused.

        librdkafka returns records only of partitions it has assigned, so ownership holds
        without looking at the record's partition; only an error event needs a look.
        """
        if msg.error() is not None:
            return self.admit(msg)
        return self._deliver_one(msg)

    def fill_lane(self, msgs: list[Message], *, unchanged: bool) -> Message | None:
        """Admit a whole batch for poll()'s fast lane: its first record, or None if it cannot be.

        Only a batch of records all deliverable now, with nothing withheld waiting to go
        first, goes in; otherwise the caller reads it through :meth:`admit`. The records
        count as delivered from here; :meth:`unlane` takes back those not yet handed out.
        """
        if self._maybe_releasable or not self._deliverable(msgs, unchanged=unchanged):
            return None
        self._count_delivered(msgs)
        records = iter(msgs)
        first = next(records)
        self.lane.extend(records)
        self.flush()
        return first

    def unlane(self) -> None:
        """Put the fast lane's records back at the front of ``ahead``: not delivered after all.

        Called under the facade's lock before any change of ownership, pause or position.
        poll() pops the lane without the lock, so records are taken one atomic pop at a
        time: each goes either to the application or back here, never both.
        """
        lane = self.lane
        if not lane:
            return
        taken: list[Message] = []
        while True:
            try:
                taken.append(lane.popleft())
            except IndexError:
                break
        self.ahead.extendleft(reversed(taken))
        self.delivered -= len(taken)
        if self.consumed is not None:
            self.consumed.subtract(zip(map(_topic, taken), map(_partition, taken), strict=True))

    def _deliver_one(self, msg: Message) -> Message:
        """Count a record handed out; every _FLUSH_EVERY of them, see whether a store is due."""
        self.delivered += 1
        if self.consumed is not None:
            self.consumed[(msg.topic(), msg.partition())] += 1
        self._dirty = True
        self._unflushed += 1
        if self._unflushed >= _FLUSH_EVERY:
            self.flush()
        return msg

    def admit_batch(self, msgs: list[Message], *, unchanged: bool = False) -> list[Message]:
        """The records of ``msgs`` the application may have now, in order.

        ``unchanged``: the assignment did not change while librdkafka produced this batch.
        librdkafka returns records only of partitions it has assigned (revocation purges its
        queues), so with nothing paused either, every record may go out; only error events
        need a look (one C-level pass).
        """
        if self._deliverable(msgs, unchanged=unchanged):
            self._count_delivered(msgs)
            self.flush()
            return msgs
        return self._admit_each(msgs)

    def _deliverable(self, msgs: list[Message], *, unchanged: bool) -> bool:
        """Whether every record of the batch may go out now, checked with C-level passes only.

        No error event may be among them. Then, if the assignment stood still and nothing is
        paused, that is all; otherwise the batch's distinct partitions (from C-level map/zip
        loops) must all be owned and none paused.
        """
        if any(map(_error, msgs)):
            return False
        if unchanged and not self.paused:
            return True
        partitions = set(zip(map(_topic, msgs), map(_partition, msgs), strict=True))
        return self.owned.issuperset(partitions) and self.paused.isdisjoint(partitions)

    def _count_delivered(self, msgs: list[Message]) -> None:
        """Count records handed out (or admitted to the lane), per partition when telemetry records."""
        self.delivered += len(msgs)
        if self.consumed is not None:
            self.consumed.update(zip(map(_topic, msgs), map(_partition, msgs), strict=True))
        self._dirty = True

    def _admit_each(self, msgs: list[Message]) -> list[Message]:
        owned, paused = self.owned, self.paused
        out: list[Message] = []
        append = out.append
        unowned = errors = 0
        for msg in msgs:
            if msg.error() is not None:
                self.on_error(msg)
                append(msg)
                errors += 1
                continue
            key = (msg.topic(), msg.partition())
            if key in owned and key not in paused:
                append(msg)
            elif key not in owned:
                unowned += 1
            else:
                self._hold(key, msg)
        if unowned:
            self.purged["unowned"] += unowned
            logger.warning("dropped %d record(s) of unowned partitions", unowned)
        if len(out) > errors:
            self._count_delivered([m for m in out if m.error() is None] if errors else out)
            self.flush()
        return out

    def _hold(self, key: Key, msg: Message) -> None:
        self._held.setdefault(key, deque()).append(msg)
        self.withheld += 1

    @property
    def has_releasable(self) -> bool:
        return self._maybe_releasable

    def release(self, limit: int) -> list[Message]:
        """Up to ``limit`` withheld records whose partition is owned and no longer paused, in order."""
        out: list[Message] = []
        for key in list(self._held):
            if len(out) >= limit:
                break
            if key in self.paused or key not in self.owned:
                continue
            queue = self._held[key]
            while queue and len(out) < limit:
                out.append(queue.popleft())
            if not queue:
                del self._held[key]
        if len(out) < limit:
            self._maybe_releasable = False
        if out:
            self.released += len(out)
            self._count_delivered(out)
        return out

    def first_undelivered(self, key: Key) -> int | None:
        """Offset of the first record of ``key`` received from librdkafka but not yet delivered."""
        waiting = [*self.lane, *self.ahead]  # one atomic copy each: poll() may pop the lane meanwhile
        offsets = [m.offset() for m in waiting if (m.topic(), m.partition()) == key and m.error() is None]
        held = self._held.get(key)
        if held:
            offsets.append(held[0].offset())
        found = [o for o in offsets if o is not None]
        return min(found) if found else None

    @property
    def held_count(self) -> int:
        return sum(len(q) for q in self._held.values())

    # -- offsets -------------------------------------------------------------------------
    def seeked(self, key: Key, offset: int) -> None:
        self._seeked[key] = offset

    def flush(self, *, force: bool = False) -> None:
        """Store the offsets of what was delivered, when due (``force``: now).

        librdkafka's position of a partition is the offset after the last record it returned
        to us. Where records it returned are still withheld or read ahead, the first of them
        is stored instead: everything before it was delivered. One ``position()`` call per
        store, no per-record bookkeeping.
        """
        if not self._dirty or not self.auto_store:
            return
        self._unflushed = 0
        now = time.monotonic()
        if not force and now - self._last_flush < self.flush_interval:
            return
        self._last_flush = now
        # Records still in the lane are handed out later without the gate: the offsets stored
        # now will be behind them, so the next flush must store again.
        self._dirty = bool(self.lane)
        owned = sorted(self.owned)
        if not owned:
            return
        offsets: list[TopicPartition] = []
        for tp in self._position(owned):
            key = (tp.topic, tp.partition)
            first = self.first_undelivered(key) if (self._held or self.ahead or self.lane) else None
            if first is not None:
                offsets.append(TopicPartition(tp.topic, tp.partition, first))
                continue
            if tp.offset < 0:
                continue  # nothing returned yet
            seek_target = self._seeked.get(key)
            if seek_target is not None:
                if tp.offset == seek_target:
                    continue  # nothing delivered since the seek
                del self._seeked[key]
            offsets.append(tp)
        if offsets:
            self._store(offsets)

    def stats(self) -> DeliveryStats:
        return DeliveryStats(
            delivered=self.delivered - len(self.lane),
            withheld=self.withheld,
            released=self.released,
            held=self.held_count,
            purged_revoked=self.purged["revoked"],
            purged_lost=self.purged["lost"],
            purged_unowned=self.purged["unowned"],
            purged_seek=self.purged["seek"],
            offsets_dropped=self.offsets_dropped,
        )
