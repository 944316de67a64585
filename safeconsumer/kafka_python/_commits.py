"""Commits as kafka-python makes them: waited for, or resolved later by librdkafka's commit callback.

``commit()`` and ``commit_async()`` commit the consumed positions or the offsets given;
``committed()`` reads the group's offset back. A ``commit_async()`` waits in :class:`Commits` with
its ``kafka.future.Future`` until librdkafka's commit callback, served by a later ``poll()`` or
iteration, reports exactly its offsets.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException
from kafka import errors as kerrors
from kafka.future import Future
from kafka.structs import OffsetAndMetadata, TopicPartition

from ._convert import kafka_error, to_confluent
from ._part import Part
from ._positions import Key

if TYPE_CHECKING:
    pass

__all__ = ["Commits"]


class Commits(Part):
    """A consumer's commits, and the ``commit_async()`` calls waiting for their callback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As :class:`Part`'s."""
        super().__init__(*args, **kwargs)
        self._waiting: deque[tuple[dict[Key, int], Future, Callable[..., Any]]] = deque()

    def _offsets(self, offsets: Any) -> list[confluent_kafka.TopicPartition]:
        if self._groupless:
            raise kerrors.IllegalStateError("Requires group_id")
        if offsets is None:
            owned = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
            return self._positions.to_commit(owned)
        if not isinstance(offsets, dict) or not all(
            isinstance(k, TopicPartition) and isinstance(v, OffsetAndMetadata) for k, v in offsets.items()
        ):
            raise TypeError("offsets must be dict[TopicPartition, OffsetAndMetadata]")
        return [to_confluent(tp, om.offset, om.metadata, om.leader_epoch) for tp, om in offsets.items()]

    def commit(self, offsets: Any) -> None:
        """``KafkaConsumer.commit()``: ``offsets`` (by default the consumed positions), waited for."""
        partitions = self._offsets(offsets)
        if not partitions:
            return
        try:
            self._call(self._consumer.commit, offsets=partitions, asynchronous=False)
        except (kerrors.IllegalGenerationError, kerrors.UnknownMemberIdError, kerrors.RebalanceInProgressError) as e:
            raise kerrors.CommitFailedError() from e
        except kerrors.KafkaError as exc:
            if isinstance(exc.__cause__, KafkaException) and exc.__cause__.args[0].code() == KafkaError._NO_OFFSET:
                return  # nothing to commit: every offset was dropped (I7) or already committed
            raise

    def commit_async(self, offsets: Any, callback: Callable[..., Any] | None) -> Future:
        """``KafkaConsumer.commit_async()``: a future resolved by :meth:`done` (or at once when
        there is nothing to commit or librdkafka refuses the commit)."""
        partitions = self._offsets(offsets)
        future = Future()
        done = callback or self._config["default_offset_commit_callback"]
        requested = {
            TopicPartition(p.topic, p.partition): OffsetAndMetadata(p.offset, p.metadata or "", -1) for p in partitions
        }
        if not partitions:
            future.success(None)
            done(requested, None)
            return future
        self._waiting.append(({(p.topic, p.partition): p.offset for p in partitions}, future, done))
        try:
            self._call(self._consumer.commit, offsets=partitions, asynchronous=True)
        except Exception as exc:  # noqa: BLE001 - handed to the future and the callback, as kafka-python does
            self._waiting.pop()
            future.failure(exc)
            done(requested, exc)
        return future

    def done(self, err: KafkaError | None, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """librdkafka's commit callback (served by the SafeConsumer's reads): the first waiting
        ``commit_async()`` that asked for exactly these offsets is resolved; an auto-commit of other
        offsets resolves none."""
        committed = {(p.topic, p.partition): p.offset for p in partitions}
        for i, (wanted, future, done) in enumerate(self._waiting):
            if wanted == committed:
                del self._waiting[i]
                offsets = {TopicPartition(*k): OffsetAndMetadata(v, "", -1) for k, v in wanted.items()}
                failure = (
                    kafka_error(err)
                    if err is not None
                    else next((kafka_error(p.error) for p in partitions if p.error is not None), None)
                )
                if failure is None:
                    future.success(None)
                    done(offsets, None)
                else:
                    future.failure(failure)
                    done(offsets, failure)
                return

    def committed(self, partition: TopicPartition, metadata: bool, timeout_ms: float | None) -> Any:
        """``KafkaConsumer.committed()``: the group's committed offset of ``partition``, or None."""
        if self._groupless:
            raise kerrors.IllegalStateError("Requires group_id")
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        [tp] = self._call(self._consumer.committed, [to_confluent(partition)], timeout=timeout)
        if tp.error is not None:
            raise kafka_error(tp.error)
        if tp.offset < 0:
            return None
        if metadata:
            epoch = tp.leader_epoch
            return OffsetAndMetadata(tp.offset, tp.metadata or "", -1 if epoch is None else epoch)
        return tp.offset
