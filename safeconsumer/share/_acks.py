"""The acknowledgements ``SafeShareConsumer`` makes itself (S2, S3): what the application was handed
is accepted when it comes back (implicit mode), what it never reached or never came back after is
released at once, and a batch acknowledged after its locks ran out is reported.

:class:`Acknowledgements` sits between ``SafeShareConsumer`` and upstream's ``ShareConsumer``: its
``super()`` calls are upstream's own (librdkafka runs in explicit mode underneath), and the
attributes it reads are the consumer's (set in ``SafeShareConsumer.__init__``). librdkafka takes one
``acknowledge()`` per record (it has no batch acknowledgement).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import threading
import time
from typing import cast

from confluent_kafka import AcknowledgeType, IllegalStateException, KafkaException, Message, ShareConsumer

from ._batch import Batch, is_record
from ._group import GroupLook
from ._overruns import Overruns
from ._telemetry import ShareTelemetry

logger = logging.getLogger("safeconsumer")

#: What upstream's acknowledge() raises for a record no longer in flight: IllegalStateException (a
#: RuntimeError, "Local: Erroneous state") once its acknowledgement was sent, as measured;
#: KafkaException as its docstring allows.
_NOT_IN_FLIGHT = (IllegalStateException, KafkaException)

#: ACCEPT as the int upstream's acknowledge() takes (no enum conversion per record).
_ACCEPT = int(AcknowledgeType.ACCEPT)

_ACK_NAMES = {AcknowledgeType.ACCEPT: "accept", AcknowledgeType.RELEASE: "release", AcknowledgeType.REJECT: "reject"}


class Acknowledgements(ShareConsumer):
    """Upstream's ``ShareConsumer`` with the consumer's own acknowledgements (see the module)."""

    # The consumer's, set in SafeShareConsumer.__init__.
    _batch: Batch | None
    _lock: threading.RLock
    _closed: bool
    _implicit: bool
    _group: str
    _look: GroupLook
    _telemetry: ShareTelemetry
    _overruns: Overruns
    #: Records given back before their locks ran out because the application had not reached them.
    released_early: int

    def _settle(self, message: Message, ack_type: AcknowledgeType) -> None:
        """Acknowledge one record for the application (``ack_type``), once."""
        batch = self._batch
        if batch is None or batch.is_settled(message) or not is_record(message):
            return
        with self._lock:  # the watch's releases (implicit mode) call librdkafka too: never both at once
            super().acknowledge(message, ack_type)
        batch.settled.add(id(message))
        if ack_type == AcknowledgeType.ACCEPT:
            batch.accepted.add(id(message))
        self._telemetry.acknowledged(_ACK_NAMES[ack_type])

    def _release(self, batch: Batch, records: list[Message], *, sync: bool = False) -> None:
        """Release records now (sent at once: ``commit_async()``, or ``commit_sync()`` with ``sync``).
        A record no longer in flight (acknowledged and sent) is left as it is."""
        if not records:
            return
        for message in records:
            with contextlib.suppress(*_NOT_IN_FLIGHT):
                super().acknowledge(message, AcknowledgeType.RELEASE)
        batch.settled.update(map(id, records))
        self._telemetry.acknowledged("release", len(records))
        if sync:
            super().commit_sync(10.0)
        else:
            super().commit_async()

    def _flush_pending(self, batch: Batch) -> None:
        """Release the records the watch cut from the batch (on the application's thread)."""
        if not batch.pending:
            return
        with self._lock:  # see _settle
            cut = batch.take_pending()
            self._release(batch, cut)
        self.released_early += len(cut)
        self._telemetry.released_early(len(cut), "not_reached")
        logger.info(
            "share group %r: gave back %d record(s) not reached after %.1f s of the group's %.1f s acquisition lock, "
            "so that another member takes them now",
            self._group,
            len(cut),
            time.monotonic() - batch.at,
            self._look.settings.lock_seconds,
        )

    def _flush_from_watch(self, batch: Batch) -> None:
        """Implicit mode: the watch cut the batch; released now unless the application is inside a
        call of the consumer (then at that call's next start)."""
        if batch is not self._batch or self._closed or not self._lock.acquire(blocking=False):
            return
        try:
            self._flush_pending(batch)
        finally:
            self._lock.release()

    def _release_from_timer(self, batch: Batch) -> None:
        """The keepalive timer: the application is inside its block, not calling the consumer."""
        with self._lock:
            try:
                batch.cut()
                if batch is self._batch:
                    self._flush_pending(batch)
            except Exception as exc:  # noqa: BLE001 - the records' locks then run out: they come back all the same
                logger.warning("giving back unreached records failed: %s", exc)

    def _came_back(self, *, accept: bool, committing: bool = False) -> None:
        """The application called ``poll()`` or ``commit_*()``: what was cut is released; in implicit
        mode every record it was handed is accepted (upstream accepts the whole batch then); a batch
        whose locks ran out before its acknowledgements go is reported (:class:`._overruns.Overruns`)."""
        batch = self._batch
        if batch is None:
            return
        if batch.pending:
            self._flush_pending(batch)
        if accept:
            records = batch.unsettled()
            self._accept_all(records)
            batch.settle_all()
            self._telemetry.acknowledged("accept", len(records))
        now = time.monotonic()
        if now > batch.lock_end and not batch.committed_in_time:
            if accept:
                late = [m for m in batch.records if is_record(m)]
            else:  # what the application acknowledged, and what handle() accepted for it
                late = batch.handed_out() + [m for m in batch.records if id(m) in batch.accepted]
            self._overruns.add(late, now - batch.at)
            batch.committed_in_time = True  # said once per batch
        elif committing:
            batch.committed_in_time = True
        self._overruns.say(self._look.settings.lock_seconds)

    def _accept_all(self, records: list[Message]) -> None:
        """ACCEPT each record (implicit mode, the application came back). librdkafka takes one call
        per record; the calls run in C (``map``), not in a Python loop, with upstream's default
        ``ack_type`` (ACCEPT: no type argument to convert per record)."""
        acknowledge = ShareConsumer.acknowledge
        try:
            collections.deque(map(acknowledge, itertools.repeat(self, len(records)), records), 0)
        except _NOT_IN_FLIGHT:  # a record no longer in flight (librdkafka acknowledged it): one by one
            accepted = cast(AcknowledgeType, _ACCEPT)
            for message in records:
                with contextlib.suppress(*_NOT_IN_FLIGHT):
                    acknowledge(self, message, accepted)

    def _release_at_close(self) -> None:
        batch = self._batch
        if batch is None:
            return
        if not self._implicit:
            super().commit_sync(10.0)  # the application's own acknowledgements go first: none is overridden
        self._release(batch, batch.unsettled(), sync=True)

    def _still_locked(self, message: Message) -> bool:
        batch = self._batch
        return batch is not None and time.monotonic() < batch.lock_end
