"""The delivery gate: what may leave ``poll()``/``consume()``, and which offsets may be written.

At the moment a record would be returned it is checked against the partition table
(:mod:`._partitions`):

- a record of a partition this consumer does not own is dropped (``purged_unowned``);
  its offset is never stored, so the partition's owner reads it (I2);
- a record of an effectively paused partition is *withheld*: kept, in order, and
  delivered first once the partition is resumed, or purged if the partition leaves (I1, I3);
- any other record is handed out.

Offsets (I3, I8). The underlying client runs with ``enable.auto.offset.store=false``:
librdkafka would otherwise store the offset of every record it gives *us*, including
withheld ones, and at hand-out rather than once processed. When the application asked for
the automatic offset store, :meth:`DeliveryGate.flush` stores instead, for every owned
partition, librdkafka's position held back to the first record not yet *processed*:
withheld, read ahead, in the lane, or handed out by the last call the application has not
come back from. Stores happen when the application comes back (rate-limited to one per
``flush_interval``), and always before a commit, a revocation and close: so an offset is
never stored, nor auto-committed, before the application finished the record before it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException, Message, TopicPartition

from ..base._keys import Key
from ._client import RawClient
from ._partitions import PartitionTable

logger = logging.getLogger("safeconsumer")

_topic = Message.topic
_partition = Message.partition

#: Up to this many owned partitions, an SDK's per-partition counts of a batch come from one
#: ``position()`` call (see :meth:`DeliveryGate._tally`); with more, from the records.
TALLY_PARTITIONS = 16


@dataclass(slots=True)
class _Positions:
    """librdkafka's positions of the owned partitions, read right after a read (``reads``)."""

    reads: int
    moves: int
    epoch: int
    keys: list[Key]
    partitions: list[TopicPartition]
    offsets: list[int]


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
        self, table: PartitionTable, client: RawClient, *, auto_store: bool, flush_interval: float = 0.05
    ) -> None:
        self._table = table
        self._client = client
        #: The application asked for librdkafka's automatic offset store: the gate stores instead.
        self.auto_store = auto_store
        self.flush_interval = flush_interval
        self.last_flush = time.monotonic()
        #: Positions read after the last batch counted per partition (see _tally()).
        self._positions: _Positions | None = None

    def stop_storing(self) -> None:
        """Called by :meth:`._lifecycle.Lifecycle.fail`: records librdkafka returned will never be
        seen by the application, so no offset is stored any more (only those stored before get
        committed, also by the revoke callbacks close() runs)."""
        self.auto_store = False

    # -- the gate ------------------------------------------------------------------------
    def admit(self, msg: Message) -> Message | None:
        """Return ``msg`` if the application may have it now, else keep or drop it.

        Called by the reader's poll() for a record read while ownership or pause may have changed (lock held).
        Changes the table: deliver_one(), hold() or dropped_unowned().
        """
        if msg.error() is not None:
            return msg
        table = self._table
        key = (msg.topic(), msg.partition())
        if key in table.owned:
            if key not in table.paused and not (table.maybe_releasable and table.owned[key].held):
                return table.deliver_one(msg)
            # Paused, or resumed with older records still withheld: it goes behind them.
            table.hold(key, msg)
        else:
            table.dropped_unowned(1)
            logger.warning("dropped 1 record of unowned partition %s[%s]", key[0], key[1])
        return None

    def admit_trusted(self, msg: Message) -> Message | None:
        """:meth:`admit` for a record fetched while the assignment stood still, with nothing paused.

        librdkafka returns records only of partitions it has assigned, so ownership holds
        without looking at the record's partition; only an error event needs a look.

        Called by the reader's poll() (lock held). Changes the table through deliver_one().
        """
        if msg.error() is not None:
            return msg
        return self._table.deliver_one(msg)

    def fill_lane(self, msgs: list[Message], *, unchanged: bool, errors: bool = True) -> Message | None:
        """Admit a whole batch for poll()'s fast lane: its first record, or None if it cannot be.

        Only a batch of records all deliverable now (``errors``: it may hold error events,
        which are never laned), with nothing withheld waiting to go first, goes in; otherwise
        the caller reads it through :meth:`admit`. The records count as delivered from here;
        :meth:`PartitionTable.unlane` takes back those not yet handed out.

        Called by the reader's poll() for a fresh batch (lock held). Changes the table: count_delivered() and
        fill_lane().
        """
        table = self._table
        if errors or table.maybe_releasable or not self._deliverable(msgs, unchanged=unchanged):
            return None
        table.count_delivered(msgs)
        return table.fill_lane(msgs)

    def admit_batch(self, msgs: list[Message], *, unchanged: bool = False, errors: bool = True) -> list[Message]:
        """The records of ``msgs`` the application may have now, in order.

        ``unchanged``: the assignment did not change while librdkafka produced this batch.
        librdkafka returns records only of partitions it has assigned (revocation purges its
        queues), so with nothing paused either, every record may go out. ``errors``: the
        batch may hold error events (the client boundary already looked).

        Called by the reader's consume() and _consume_waiting() (lock held). Changes the table: deliver, hold or
        drop per record.
        """
        if not errors and self._deliverable(msgs, unchanged=unchanged):
            table = self._table
            table.count_delivered(msgs, self._tally(len(msgs)) if table.consumed is not None else None)
            return msgs
        return self._admit_each(msgs)

    def _tally(self, count: int) -> list[tuple[Key, int]] | None:
        """How many records of each partition the batch of ``count`` just read holds, from librdkafka's
        positions; None when they cannot tell (the table then counts record by record).

        Only an OpenTelemetry SDK needs the count per partition. A read moves each partition's position
        past the records it returned: by exactly their number, or more where offsets were skipped
        (compaction, transaction markers, aborted records), never less. So when the moves, measured
        from the positions read right after the previous read (nothing read or moved since), add up
        to the batch's length, each move *is* its partition's count. One ``position()`` call instead
        of a pass over every record; the positions it reads measure the next batch.

        Called by admit_batch() for an error-free batch wholly handed out (lock held). Reads positions.
        """
        table, client = self._table, self._client
        owned = table.owned
        last, self._positions = self._positions, None
        if not owned or len(owned) > TALLY_PARTITIONS:
            return None
        if last is not None and (
            last.reads != client.reads - 1 or last.moves != client.moves or last.epoch != table.epoch
        ):
            last = None  # read or moved since: those positions measure nothing now
        if last is not None:
            keys, partitions = last.keys, last.partitions
        else:
            keys = sorted(owned)
            partitions = [TopicPartition(topic, partition) for topic, partition in keys]
        try:
            now = [tp.offset for tp in client.positions(partitions)]
        except KafkaException:
            return None
        self._positions = _Positions(client.reads, client.moves, table.epoch, keys, partitions, now)
        if last is None:
            return None
        tally: list[tuple[Key, int]] = []
        total = 0
        for key, before, after in zip(keys, last.offsets, now, strict=True):
            if after != before:
                if before < 0 or after < before:
                    return None
                tally.append((key, after - before))
                total += after - before
        return tally if total == count else None

    def _deliverable(self, msgs: list[Message], *, unchanged: bool) -> bool:
        """Whether every record of an error-free batch may go out now (C-level passes only)."""
        table = self._table
        if table.maybe_releasable:
            return False  # withheld records of a resumed partition go before its new ones
        if unchanged and not table.paused:
            return True
        partitions = set(zip(map(_topic, msgs), map(_partition, msgs), strict=True))
        return table.owned.keys() >= partitions and table.paused.isdisjoint(partitions)

    def _admit_each(self, msgs: list[Message]) -> list[Message]:
        table = self._table
        owned, paused = table.owned, table.paused
        releasable = table.maybe_releasable
        out: list[Message] = []
        records: list[Message] = []
        unowned = 0
        for msg in msgs:
            if msg.error() is not None:
                out.append(msg)
                continue
            key = (msg.topic(), msg.partition())
            if key in owned:
                if key not in paused and not (releasable and owned[key].held):
                    out.append(msg)
                    records.append(msg)
                else:
                    table.hold(key, msg)
            else:
                unowned += 1
        if unowned:
            table.dropped_unowned(unowned)
            logger.warning("dropped %d record(s) of unowned partitions", unowned)
        if records:
            table.count_delivered(records)
        return out

    def release(self, limit: int) -> list[Message]:
        """Up to ``limit`` withheld records whose partition is owned and no longer paused, in order.

        Called by the reader's poll(), consume() and _consume_waiting() (lock held). Changes the table through
        release().
        """
        return self._table.release(limit) if self._table.maybe_releasable else []

    # -- offsets -------------------------------------------------------------------------
    def owned_offsets(
        self, method: str, offsets: list[TopicPartition], *, among: set[Key] | None = None
    ) -> list[TopicPartition]:
        """I7: the offsets of ``offsets`` a group member may write now (of partitions it owns).

        The others are dropped, counted and logged: writing them would move another
        member's position, or commit past records the next owner has not read. ``among``:
        only partitions in it are judged (the ones a retried commit owned when it began).

        Called by Offsets.commit()/store() through _committable() and store() (lock held). Changes the table's
        ``offsets_dropped`` (refused_offsets()).
        """
        owned = self._table.owned
        kept = [
            tp
            for tp in offsets
            if (tp.topic, tp.partition) in owned or (among is not None and (tp.topic, tp.partition) not in among)
        ]
        dropped = len(offsets) - len(kept)
        if dropped:
            self._table.refused_offsets(dropped)
            logger.warning("%s(): dropped %d offset(s) of partitions this consumer does not own", method, dropped)
        return kept

    def commit(
        self, offsets: list[TopicPartition] | None, *, asynchronous: bool, came_back: bool
    ) -> list[TopicPartition] | None:
        """One commit of ``offsets`` (already through :meth:`owned_offsets`), or of the stored offsets.

        ``came_back``: the commit is the application coming back after what it holds (I8), so
        that is processed and stored first; a commit from a rebalance callback is not (it may
        run on the keepalive thread while the application still works).

        Called by Offsets._commit_once() (lock held). Changes the table (came_back()) and librdkafka's stored
        offsets (flush()), then commits.
        """
        if offsets is None:
            if came_back:
                self._table.came_back()
            self.flush(force=True)
        return self._client.commit(offsets, asynchronous=asynchronous)

    def positions(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """``position()`` as the application sees it: after the last record *it* received."""
        positions = self._client.positions(partitions)
        for tp in positions:
            first = self._table.first_undelivered((tp.topic, tp.partition))
            if first is not None:
                tp.offset = first
        return positions

    def flush(self, *, force: bool = False) -> None:
        """Store the offsets of what was processed, when due (``force``: now).

        librdkafka's position of a partition is the offset after the last record it returned
        to us. Where a record it returned is not processed yet (withheld, read ahead, in the
        lane, or outstanding), the first of them is stored instead: everything before it was
        processed. One ``position()`` call per store, no per-record bookkeeping.

        Called by the reader when the app comes back, by commit(), and by the facade's unsubscribe(), the
        rebalancer (before every assignment change) and the lifecycle's close() with ``force`` (lock held).
        Stores offsets in librdkafka; changes the table's ``dirty`` and seek targets (stored(), seek_passed()).
        """
        table = self._table
        if not table.dirty or not self.auto_store:
            return
        now = time.monotonic()
        if not force and now - self.last_flush < self.flush_interval:
            return
        self.last_flush = now
        owned = table.owned
        # Records still pending (lane, outstanding) will be handed out or processed later:
        # the offsets stored now are behind them, so a later flush must store again.
        table.stored()
        if not owned:
            return
        floor = table.unprocessed_floor()
        offsets: list[TopicPartition] = []
        for tp in self._client.position(owned):
            key = (tp.topic, tp.partition)
            first = floor.get(key)
            if first is not None:
                offsets.append(TopicPartition(tp.topic, tp.partition, first))
                continue
            state = owned.get(key)
            target = state.seek_target if state is not None else None
            if target is not None:
                if tp.offset < 0 or tp.offset == target:
                    offsets.append(TopicPartition(tp.topic, tp.partition, target))
                    continue
                table.seek_passed(key)
            if tp.offset >= 0:
                offsets.append(tp)
        if offsets:
            self._client.store(offsets)

    def stats(self) -> DeliveryStats:
        table = self._table
        return DeliveryStats(
            delivered=table.delivered - len(table.lane),
            withheld=table.withheld,
            released=table.released,
            held=table.held_count,
            purged_revoked=table.purged["revoked"],
            purged_lost=table.purged["lost"],
            purged_unowned=table.purged["unowned"],
            purged_seek=table.purged["seek"],
            offsets_dropped=table.offsets_dropped,
        )
