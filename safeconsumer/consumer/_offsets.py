"""Offset policy: what ``commit()`` and ``store_offsets()`` may write, once their arguments passed.

- I7: a group member (it called ``subscribe()``) never writes an offset of a partition it does
  not own at that moment: such offsets are dropped with a WARNING and counted (the gate's
  ``owned_offsets``). A consumer that never subscribed writes what it is told, as upstream.
- A synchronous ``commit()`` is retried while the group coordinator moves (:mod:`._retry`);
  ownership is checked again before every attempt, and what was dropped stays dropped.
- ``store_offsets()``: with the application's automatic store on, librdkafka runs with it off
  underneath and upstream refuses a manual store: so does this.
- Input upstream answers itself (both or neither argument, a wrong type, an error event, a
  record without a partition or offset) goes to upstream's own method, under the lock, before
  anything is committed or stored.

Every method here is called by the facade and takes the consumer's client lock itself, except
that ``store()`` reads ``auto_store`` and whether the consumer subscribed before taking it (a
race with another thread's ``subscribe()`` is the application's, as with upstream), and a
synchronous ``commit()`` lets it go between retry attempts.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ..base._errors import with_note
from ..base._keys import Key
from ._client import RawClient
from ._delivery import DeliveryGate, next_offset
from ._lifecycle import Lifecycle, State
from ._partitions import PartitionTable
from ._rebalance import Rebalancer
from ._retry import CommitRetry
from ._upstream import given, is_partition_list, is_record


@dataclass(frozen=True)
class _Committable:
    offsets: list[TopicPartition] | None
    refused: bool


class Offsets:
    """``commit()`` and ``store_offsets()`` of one consumer (see the module docstring)."""

    def __init__(
        self,
        *,
        life: Lifecycle,
        client: RawClient,
        table: PartitionTable,
        gate: DeliveryGate,
        rebalancer: Rebalancer,
        commit_retry: CommitRetry | None,
    ) -> None:
        self._life = life
        self._lock: AbstractContextManager[object] = life.lock
        self._client = client
        self._table = table
        self._gate = gate
        self._rebalancer = rebalancer
        self._commit_retry = commit_retry

    def commit(
        self, message: Message | None, offsets: list[TopicPartition] | None, asynchronous: bool
    ) -> list[TopicPartition] | None:
        """``commit()`` on an open consumer.

        Called by the facade's commit() (open consumer; takes the lock itself, per attempt). Changes what
        librdkafka commits; through the gate the table's outstanding records (came back) and
        ``offsets_dropped``.
        """
        if message is not None:
            if offsets is not None or not is_record(message):
                result = self.upstream_rejects(Consumer.commit, message, offsets, asynchronous=asynchronous)
                return cast("list[TopicPartition] | None", result)
            offsets = [next_offset(message)]
        elif offsets is not None and not is_partition_list(offsets):
            result = self.upstream_rejects(Consumer.commit, message, offsets, asynchronous=asynchronous)
            return cast("list[TopicPartition] | None", result)
        if asynchronous or self._commit_retry is None:
            with self._lock:
                return self._commit_once(self._committable(offsets), asynchronous=asynchronous)
        # Synchronous: retried on coordinator errors. Ownership is checked before every attempt,
        # and what was dropped stays dropped: a partition that moved is never retried.
        result = None
        with self._lock:
            owned_at_first = set(self._table.owned)
        for attempt in self._commit_retry.retrying():
            with attempt, self._lock:
                committable = self._committable(offsets, owned_at_first)
                result = self._commit_once(committable, asynchronous=False)
                offsets = committable.offsets
        return cast("list[TopicPartition] | None", result)

    def store(self, message: Message | None, offsets: list[TopicPartition] | None) -> None:
        """``store_offsets()`` on an open consumer.

        Called by the facade's store_offsets() (open consumer; takes the lock itself). Changes librdkafka's
        stored offsets; through the gate the table's ``offsets_dropped``.
        """
        # upstream's order: the arguments, their types, an error event; then the configuration.
        if (
            (message is None) == (offsets is None)
            or (message is not None and (not isinstance(message, Message) or message.error() is not None))
            or (offsets is not None and not is_partition_list(offsets))
        ):
            self.upstream_rejects(Consumer.store_offsets, message, offsets)
            return
        if self._gate.auto_store:
            # librdkafka runs with the store off underneath; with the application's setting on,
            # upstream refuses a manual store: so do we.
            raise KafkaException(
                KafkaError(KafkaError._INVALID_ARG, "StoreOffsets failed: Local: Invalid argument or configuration")
            )
        subscribed = self._rebalancer.subscribed
        if message is not None and not is_record(message):
            topic, partition = message.topic(), message.partition()
            if subscribed and topic is not None and partition is not None:
                with self._lock:  # I7 first: a member never stores for a partition it does not own
                    if not self._gate.owned_offsets("store_offsets", [TopicPartition(topic, partition)]):
                        return
            self.upstream_rejects(Consumer.store_offsets, message, offsets)
            return
        with self._lock:
            if not self._rebalancer.subscribed:
                self._client.call(Consumer.store_offsets, **given(message=message, offsets=offsets))
                return
            if message is not None:
                key = TopicPartition(cast(str, message.topic()), cast(int, message.partition()))
                if self._gate.owned_offsets("store_offsets", [key]):
                    self._client.call(Consumer.store_offsets, message=message)
                return
            kept = self._gate.owned_offsets("store_offsets", cast("list[TopicPartition]", offsets))
            if kept:
                self._client.store(kept)

    def upstream_rejects(self, method: Callable[..., Any], message: object, offsets: object, **kwargs: Any) -> Any:
        """Input upstream answers itself (both or neither argument, a wrong type, an error event, a
        record without a partition or offset): its own checks raise its own errors, as they would
        have, before anything is committed or stored. A message without a topic is answered here:
        upstream crashes on it (an asynchronous commit; a store while partitions are assigned), or
        (a store with nothing assigned) finds no partition to store it for."""
        with self._lock:
            if isinstance(message, Message) and message.error() is None and message.topic() is None:
                if method is Consumer.store_offsets and not self._client.call(Consumer.assignment):
                    raise KafkaException(
                        KafkaError(KafkaError._UNKNOWN_PARTITION, "StoreOffsets failed: Local: Unknown partition")
                    )
                if method is Consumer.store_offsets or kwargs.get("asynchronous", True):
                    failed = "StoreOffsets" if method is Consumer.store_offsets else "Commit"
                    text = f"{failed} failed: Local: Invalid argument or configuration"
                    error = KafkaError(KafkaError._INVALID_ARG, text)
                    raise with_note(KafkaException(error), "the message has no topic: it is not a record")
            return self._client.call(method, **given(message=message, offsets=offsets), **kwargs)

    def _committable(
        self, offsets: list[TopicPartition] | None, owned_at_first: set[Key] | None = None
    ) -> _Committable:
        """What a commit may write now (None: the stored offsets). Call with the lock held.

        I7: a group member never writes an offset of a partition it does not own; a consumer
        that never subscribed commits what it is told, as confluent_kafka does, except that a
        retried commit never writes a partition it owned when the commit began and lost since.
        """
        if self._life.state is State.CLOSED:
            raise self._life.closed_error("commit")
        if offsets is None:
            return _Committable(offsets, refused=False)
        if self._rebalancer.subscribed:
            kept = self._gate.owned_offsets("commit", offsets)
        elif owned_at_first:
            kept = self._gate.owned_offsets("commit", offsets, among=owned_at_first)
        else:
            return _Committable(offsets, refused=False)  # not a member: what it is told
        return _Committable(kept, refused=len(kept) < len(offsets))

    def _commit_once(self, committable: _Committable, *, asynchronous: bool) -> list[TopicPartition] | None:
        """One commit of what :meth:`_committable` let through, lock held."""
        if committable.refused and not committable.offsets:
            return None if asynchronous else []  # everything was refused: nothing to send
        came_back = not self._rebalancer.in_callback
        return self._gate.commit(committable.offsets, asynchronous=asynchronous, came_back=came_back)
