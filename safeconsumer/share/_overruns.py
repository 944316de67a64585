"""Acknowledgements that went after their acquisition lock ran out (S3).

A share consumer's acknowledgements are sent at its next ``poll()`` or ``commit_*()``, or by
``SafeShareConsumer`` itself (before it waits, at a batch's release point, at ``close()``); sent after
the records' locks ran out, they may not be what the broker kept: the records may have been handed to a
peer, and upstream's ``commit_sync()`` then answers success. :class:`Overruns` counts such records,
says them once (one WARNING per batch: topic, partition, offsets, never payloads) and turns
``commit_sync()``'s answer for their partitions into :class:`LockExpiredError`.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from ..base._errors import SafeConsumerError, error_of
from ._telemetry import ShareTelemetry

logger = logging.getLogger("safeconsumer")

PartitionKey = tuple[str, int]


class LockExpiredError(SafeConsumerError, KafkaException):
    """``commit_sync()``'s answer for a partition some of whose records were acknowledged after
    their acquisition lock ran out: the broker may have handed them to another member meanwhile, so
    the acknowledgement may not be what the broker kept (upstream answers ``None``, success, when a
    peer took them)."""


class Overruns:
    """One share consumer's late acknowledgements (see the module docstring)."""

    def __init__(self, group: str, telemetry: ShareTelemetry) -> None:
        self._group = group
        self._telemetry = telemetry
        #: Records acknowledged late so far.
        self.count = 0
        #: Partitions with a record acknowledged late, since the last ``commit_sync()``.
        self._late: dict[PartitionKey, set[int]] = {}
        #: Of those, the ones no WARNING named yet (empty: nothing to say), and the longest time one was held.
        self.unsaid: dict[PartitionKey, set[int]] = {}
        self._unsaid_held = 0.0

    def add(self, records: list[Message], held: float) -> None:
        """Records whose acknowledgements go after their lock ran out: counted now, said once (:meth:`say`)."""
        keys = [(m.topic(), m.partition(), m.offset()) for m in records]
        self._telemetry.lock_overrun(len(keys))
        counted = self.count
        for topic, partition, offset in keys:
            if topic is None or partition is None or offset is None:
                continue
            self.count += 1
            self._late.setdefault((topic, partition), set()).add(offset)
            self.unsaid.setdefault((topic, partition), set()).add(offset)
        if self.count > counted:  # held goes with what is said: none without an unsaid record
            self._unsaid_held = max(self._unsaid_held, held)

    def say(self, lock_seconds: float) -> None:
        """One WARNING for the late acknowledgements not said yet."""
        if not self.unsaid:  # the usual call (every poll()): nothing to say, nothing held
            return
        unsaid, self.unsaid = self.unsaid, {}
        held, self._unsaid_held = self._unsaid_held, 0.0
        named = ", ".join(
            f"{topic} [{partition}] @ {min(offsets)}" + (f"..{max(offsets)}" if len(offsets) > 1 else "")
            for (topic, partition), offsets in sorted(unsaid.items())
        )
        logger.warning(
            "share group %r: %d record(s) acknowledged %.1f s after they were handed out, past the group's "
            "%.1f s acquisition lock (share.record.lock.duration.ms): another member may have processed them too: %s",
            self._group,
            sum(len(offsets) for offsets in unsaid.values()),
            held,
            lock_seconds,
            named,
        )

    def answer(self, result: Any) -> Any:
        """``commit_sync()``'s result with :class:`LockExpiredError` for each partition that had a
        record acknowledged late: in place of upstream's ``None`` (the records were handed to a peer,
        which took them: the broker answers success) or of its INVALID_RECORD_STATE (nobody took them)."""
        late, self._late = self._late, {}
        if not late or not isinstance(result, dict):
            return result
        for key, offsets in late.items():
            tp = next((tp for tp in result if (tp.topic, tp.partition) == key), None) or TopicPartition(*key)
            answer = result.get(tp)
            text = (
                f"{len(offsets)} record(s) of {key[0]} [{key[1]}] from offset {min(offsets)} were acknowledged after "
                "their acquisition lock ran out; another member may have processed them"
            )
            if answer is None:
                result[tp] = LockExpiredError(KafkaError(KafkaError.INVALID_RECORD_STATE, text))
                continue
            error = error_of(answer) if isinstance(answer, KafkaException) else None
            if error is not None and error.code() == KafkaError.INVALID_RECORD_STATE:
                result[tp] = LockExpiredError(error)  # upstream's KafkaError, kept
        return result
