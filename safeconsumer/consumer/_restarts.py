"""The rebalancer's restarts: seek(), and partitions librdkafka does not fetch assigned again (#5586, stalls)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from ..base._errors import FatalConsumerError
from ..base._keys import Key
from ._client import RawClient, tps
from ._partitions import PartitionTable
from ._requery import Requery
from ._stall import CAUSES as STALL_CAUSES

logger = logging.getLogger("safeconsumer")


class Restarts:
    """:class:`._rebalance.Rebalancer`'s base class: where its partitions start reading again, apart
    only for the length of one module. One object, the rebalancer: ``Rebalancer.__init__`` sets
    every attribute declared below (and says who changes ``_from_committed``)."""

    # The rebalancer's state these methods read and change (set and described in Rebalancer.__init__).
    _client: RawClient
    _table: PartitionTable
    requery: Requery
    _from_committed: set[Key]
    _closing: Callable[[], bool]
    _stall_cause: Callable[[list[Key] | None, str], None]

    if TYPE_CHECKING:

        @property
        def subscribed(self) -> bool:
            """The rebalancer's: subscribe() is in force."""

    def failed_offset_fetch(self, event: Message) -> None:
        """Called by the client boundary for an error event saying librdkafka could not fetch
        committed offsets and will not try again: a re-query is scheduled (:attr:`requery`)."""
        topic, partition = event.topic(), event.partition()
        keys = None if topic is None or partition is None else [(topic, partition)]
        if self.subscribed:
            # The group's own assignment: librdkafka would start those partitions only at the next
            # rebalance. The stall guard starts them (it knows the cause now: no second look).
            logger.warning(
                "librdkafka could not fetch the committed offset of assigned partition(s) (%s) and will not "
                "retry (librdkafka #5586); the stall guard will start them again",
                event.error(),
            )
            self._stall_cause(keys, "offset_fetch_failed")
            return
        delay = self.requery.failed(keys, time.monotonic())
        logger.info("committed offset fetch failed (%s); looking at the partition(s) in %.1fs", event.error(), delay)

    def seek(self, partition: TopicPartition) -> None:
        """Called by the facade's ``seek()`` (lock held): librdkafka moves the partition; the table
        drops its withheld and read-ahead records (they would be delivered out of order) and keeps
        the seek target; it no longer starts from its committed offset."""
        self._client.call(Consumer.seek, partition)
        key = (partition.topic, partition.partition)
        self._table.seeked(key, partition.offset)
        self.seeked(key)

    def seeked(self, key: Key) -> None:
        """Called by :meth:`seek` and by incremental_assign() at an offset: the partition no longer
        starts from its committed offset; no re-query for it."""
        self._from_committed.discard(key)
        self.requery.forget([key])

    def requery_due(self) -> None:
        """Give librdkafka the partitions whose committed-offset fetch it gave up, to fetch it again.

        A partition is given again only if the application assigned it to start from its
        committed offset (no explicit offset, no seek since) and librdkafka has handed over no
        record of it (no position), at least ``first_delay`` after the failure: by then one that
        did start and has records would have handed them over (unless paused). It starts from
        its committed offset again, so nothing it read repeats. Ownership, pause marks and the
        gate's records do not change; librdkafka's pause flag is set again.

        librdkafka's cached high watermark would tell a started partition from a stuck one, but
        it survives unassign(): a partition assigned before shows its old value.
        """
        requery = self.requery
        keys = requery.take()
        if self.subscribed or self._closing():
            return
        table = self._table
        wanted = self._from_committed if keys is None else self._from_committed.intersection(keys)
        candidates = [k for k in wanted if k in table.owned]
        if not candidates:
            return
        # No position: librdkafka handed over no record of it. All such go together: librdkafka
        # fetches no committed offset while any partition it gave up on is still assigned.
        stuck = [(tp.topic, tp.partition) for tp in self._client.position(candidates) if tp.offset < 0]
        if stuck:
            self._assign_again(sorted(stuck))

    def _assign_again(self, stuck: list[Key]) -> None:
        names = ", ".join(f"{t}[{p}]" for t, p in stuck)
        parts = tps(stuck)
        try:
            self._client.incremental_unassign(parts)
        except FatalConsumerError:
            raise
        except KafkaException as exc:
            # For instance a classic subscription with an eager assignor, then unsubscribe():
            # librdkafka keeps refusing incremental calls. assign() would restart every partition.
            logger.warning(
                "partition(s) %s fetch nothing: librdkafka gave up fetching their committed offset (librdkafka "
                "#5586) and refused to take them back (%s); assign() them again to start them",
                names,
                exc,
            )
            return
        logger.warning(
            "assigned %d partition(s) again: librdkafka gave up fetching their committed offset and would never "
            "have started them (librdkafka #5586): %s",
            len(stuck),
            names,
        )
        self._client.incremental_assign(parts)
        paused = [k for k in stuck if self._table.owned[k].applied]
        if paused:
            self._client.pause(paused)

    def restart_stalled(self, starts: dict[Key, int], causes: dict[Key, str]) -> list[Key]:
        """Called by the stall guard (lock held, outside any callback): these owned partitions
        should be fetching and are not. Each is resumed inside librdkafka (intent says resumed: a
        pause left there goes) and assigned again from ``starts`` (its position; without one, its
        committed offset or OFFSET_INVALID: librdkafka fetches it anew). Ownership, pause marks and
        the table's records do not change. Returns those started again."""
        table = self._table
        keys = sorted(k for k in starts if k in table.owned and not table.owned[k].applied and k not in table.paused)
        if not keys or self._closing():
            return []
        self._client.resume(keys)
        try:
            self._client.incremental_unassign(tps(keys))
        except FatalConsumerError:
            raise
        except KafkaException:
            # An eager classic subscription: librdkafka takes only whole assignments. Every other
            # partition is given again from its own position, so none reads anything twice.
            owned = list(table.owned)
            offsets = {(tp.topic, tp.partition): tp.offset for tp in self._client.position(owned)}
            offsets.update((k, starts[k]) for k in keys)
            self._client.assign([TopicPartition(t, p, offsets[(t, p)]) for t, p in owned])
            applied = [k for k in owned if table.owned[k].applied]
            if applied:
                self._client.pause(applied)
        else:
            self._client.incremental_assign([TopicPartition(t, p, starts[(t, p)]) for t, p in keys])
        for topic, partition in keys:
            start = starts[(topic, partition)]
            logger.warning(
                "partition %s[%d] stalled: %s; assigned it again from %s",
                topic,
                partition,
                STALL_CAUSES.get(causes.get((topic, partition), ""), "cause unknown"),
                f"offset {start}" if start >= 0 else "its committed offset",
            )
        return keys
