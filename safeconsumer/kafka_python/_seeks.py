"""Seeks accepted at once as kafka-python accepts them, and ``position()`` answered as it answers.

librdkafka refuses a seek until a just-assigned partition has looked up its starting offset; a seek
here is retried until it is accepted. ``position()`` takes the first of: the consumed position,
librdkafka's position, the committed offset (in a group, unless a logical seek is pending), and
the end of the partition the pending seek or the reset policy names.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException
from kafka import errors as kerrors
from kafka.structs import TopicPartition

from ._convert import to_confluent
from ._part import Part
from ._positions import Key

if TYPE_CHECKING:
    pass

__all__ = ["Seeks"]


class Seeks(Part):
    """Seeks of checked, assigned partitions, and their positions (see the module)."""

    def to_offset(self, partition: TopicPartition, offset: int) -> None:
        """``seek()``: read ``partition`` from ``offset`` next."""
        self._positions.sought((partition.topic, partition.partition))
        self._seek(to_confluent(partition, offset))

    def to_logical(self, partition: TopicPartition, where: int) -> None:
        """``seek_to_beginning``/``seek_to_end``: ``where`` is ``OFFSET_BEGINNING`` or ``OFFSET_END``."""
        self._positions.sought_logically((partition.topic, partition.partition), where)
        self._seek(to_confluent(partition, where))

    def _seek(self, target: confluent_kafka.TopicPartition) -> None:
        """librdkafka refuses a seek (``_STATE``) until a just-assigned partition has looked up its
        starting offset (tens of milliseconds); kafka-python's seek is accepted at once, so the
        refusal is retried for up to ``request_timeout_ms``."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                self._call(self._consumer.seek, target)
                return
            except kerrors.IllegalStateError as exc:
                cause = exc.__cause__
                refused = isinstance(cause, KafkaException) and cause.args[0].code() == KafkaError._STATE
                if not refused or time.monotonic() >= deadline:
                    raise
            time.sleep(0.01)

    def position(self, partition: TopicPartition, key: Key, timeout_ms: float | None) -> int | None:
        """``position()`` of an assigned ``partition`` (``key`` its topic and partition)."""
        consumed = self._positions.next_offset(key)
        if consumed is not None:
            return consumed
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        [pos] = self._call(self._consumer.position, [to_confluent(partition)])
        if pos.offset >= 0:
            return int(pos.offset)
        reset = self._positions.pending_seek(key)
        if reset is None and not self._groupless:
            [committed] = self._call(self._consumer.committed, [to_confluent(partition)], timeout=timeout)
            if committed.offset >= 0:
                return int(committed.offset)
        if reset is None:
            policy = self._config["auto_offset_reset"]
            reset = {"earliest": OFFSET_BEGINNING, "smallest": OFFSET_BEGINNING}.get(policy)
            if reset is None and policy not in ("latest", "largest"):
                raise kerrors.NoOffsetForPartitionError(partition)
            reset = OFFSET_END if reset is None else reset
        low, high = self._call(self._consumer.get_watermark_offsets, to_confluent(partition), timeout=timeout)
        return int(low if reset == OFFSET_BEGINNING else high)
