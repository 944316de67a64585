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
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, cast

from confluent_kafka import AcknowledgeType, IllegalStateException, KafkaException, Message, ShareConsumer

from ..base._errors import FatalConsumerError, consumer_closed
from ..group._share import GroupLook
from ..poison._policy import DeadLetterWriter, PoisonHandler, PoisonPolicy
from ..poison._retries import RetryBounds
from ._batch import Batch, SafeMessages, Watched, is_record
from ._overruns import Overruns
from ._port import Before
from ._telemetry import ShareTelemetry
from ._upstream import call, implicit_oracle

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
    #: The watch's view of this consumer (see :class:`Watched`).
    _watched: Watched
    _lock: threading.RLock
    _closed: bool
    _implicit: bool
    _group: str
    _look: GroupLook
    _telemetry: ShareTelemetry
    _overruns: Overruns
    #: How many ``handle()`` calls are under way (set by the consumer around the handler).
    _in_handle: int
    #: Records given back before their locks ran out because the application had not reached them.
    released_early: int
    _poison: PoisonHandler
    #: The fatal error that ended the consumer: every later call raises it.
    _fatal: FatalConsumerError | None

    # -- a record in handle() (and SafeAIOShareConsumer's): acknowledged when its handler is done --
    def _handling(self, message: Message) -> Before:
        """Before a handler runs on ``message`` (``handle()``, and SafeAIOShareConsumer's): it is in the
        application's hands; what the watch cut is given back, and the batch is cut if its time came.
        Returns the policy's counters and the time, for :meth:`_handled`."""
        if self._fatal is not None:
            raise self._fatal
        self._check_open("handle")
        batch = self._batch
        if batch is not None:
            batch.mark_handled(message)
            self._flush_pending(batch)
            if time.monotonic() >= batch.release_at:
                batch.cut()
                self._flush_pending(batch)
        self._in_handle += 1
        return (self._poison.skipped, self._poison.dead_lettered, time.monotonic(), batch)

    def _handled(self, message: Message, before: Before, *, failed: bool) -> None:
        """After the handler: a record the policy skipped or dead-lettered is rejected (whatever came
        after); what the handler finished is accepted now, in either mode (``handle()`` returning is
        the application coming back after that record), and sent at once past the batch's release
        point; one whose handler raised (or was cancelled) and that the policy did not settle is
        released. A record of an earlier batch is left as that batch left it."""
        with self._lock:  # a send of the watch's under way ends first (see _flush_from_watch)
            self._in_handle = max(0, self._in_handle - 1)
        batch = before[3]
        if batch is None or batch is not self._batch:  # a record of an earlier batch: settled with it
            return
        batch.busy += time.monotonic() - before[2]
        batch.handles += 1
        if (self._poison.skipped, self._poison.dead_lettered) != before[:2]:
            self._settle(message, AcknowledgeType.REJECT)  # settled already (the policy's hook), unless closed
        elif failed:
            self._settle(message, AcknowledgeType.RELEASE)
        else:
            self._settle(message, AcknowledgeType.ACCEPT)
        if time.monotonic() >= batch.release_at:
            self._send_now()

    def _check_open(self, method: str) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise consumer_closed((f"{method}() on a closed SafeShareConsumer",), "the consumer was closed")

    # -- sending -----------------------------------------------------------------------------

    def _settle(self, message: Message, ack_type: AcknowledgeType) -> None:
        """Acknowledge one record for the application (``ack_type``), once."""
        batch = self._batch
        if batch is None or batch.is_settled(message) or not is_record(message):
            return
        with self._lock:  # the watch's sends call librdkafka too: never both at once
            try:
                super().acknowledge(message, ack_type)
            except _NOT_IN_FLIGHT:  # sent already (the application acknowledged it, and it went)
                batch.mark_settled((message,))
                return
            batch.mark_settled((message,))
            if ack_type != AcknowledgeType.RELEASE:
                batch.add_unsent(message)
        self._telemetry.acknowledged(_ACK_NAMES[ack_type])

    def _release(self, batch: Batch, records: list[Message], *, sync: bool = False) -> None:
        """Release records now, and send them with every acknowledgement made so far (at once:
        ``commit_async()``, or ``commit_sync()`` with ``sync``). A record no longer in flight
        (acknowledged and sent) is left as it is."""
        if not records and not batch.unsent:
            return
        for message in records:
            with contextlib.suppress(*_NOT_IN_FLIGHT):
                super().acknowledge(message, AcknowledgeType.RELEASE)
        batch.mark_settled(records)
        if records:
            self._telemetry.acknowledged("release", len(records))
        self._sending(batch, in_hand=True)
        if sync:
            super().commit_sync(10.0)
        else:
            super().commit_async()

    def _sending(
        self, batch: Batch, accepted: list[Message] | None = None, *, stays: bool = True, in_hand: bool = False
    ) -> None:
        """The batch's acknowledgements go to the broker now (a poll, a commit, a release, close()),
        with ``accepted`` (implicit mode: the records accepted as the application came back). Those
        of records processed (accepted or rejected, by the consumer or by the application) whose lock
        ran out are lock overruns (:class:`._overruns.Overruns`); a release never is one. ``stays``:
        the batch is still the application's after this send (not a poll's). ``in_hand``: the
        consumer sends on its own while the application works on the last record it was handed
        (explicit mode: its acknowledgement is still to come, the earlier ones went with this send)."""
        now = time.monotonic()
        # Explicit mode: what the application acknowledged itself since the last send.
        own: list[Message] = []
        if not self._implicit and (stays or now > batch.lock_end):
            own = [m for m in batch.handed_out() if id(m) not in batch.sent]
            if in_hand:
                own = own[:-1]
        if now > batch.lock_end:
            late = [*batch.unsent, *(accepted or ()), *own]
            if late:
                self._overruns.add(late, now - batch.at)
        if batch.unsent:
            batch.unsent = []
        if stays and own:
            batch.mark_sent(own)

    def _send_now(self) -> None:
        """Send what the application finished and what was cut, now: before a wait the consumer
        starts itself (a retry's backoff, a dead-letter write), and once the batch is past its
        release point, so that no acknowledgement waits for a ``poll()`` that comes after its lock."""
        batch = self._batch
        if batch is None or self._closed:
            return
        with self._lock:
            self._send_pending(batch)

    def _send_pending(self, batch: Batch) -> None:
        """Release what was cut and send every acknowledgement made (explicit mode: the
        application's own too), under the consumer's lock."""
        if batch.pending:
            self._flush_pending(batch)  # sends everything with the releases
        elif batch.unsent or not self._implicit:
            self._sending(batch, in_hand=True)
            super().commit_async()

    def _flush_pending(self, batch: Batch) -> None:
        """Release the records the watch cut from the batch, and send (under the consumer's lock)."""
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
            self._look.lock_seconds,
        )

    def _drop_batch(self) -> None:
        """The consumer holds no batch now, and neither does the watch (see :class:`Watched`)."""
        self._batch = self._watched.batch = None

    def _give_back_stale(self, batch: Batch) -> SafeMessages:
        """A new batch already past its release point (its records were acquired by a fetch an earlier
        poll left in flight, or long before a slow poll returned; see :mod:`._fetch`): none of it is
        handed out, all of it released now, so that no record is processed after its lock. Returns
        what the poll returns: no records."""
        records = batch.unsettled()
        self._release(batch, records)
        self._drop_batch()
        self.released_early += len(records)
        self._telemetry.released_early(len(records), "acquired_earlier")
        logger.warning(
            "share group %r: gave back %d record(s) unprocessed: they were acquired %.1f s before poll() "
            "returned them (of the group's %.1f s acquisition lock), by a fetch an earlier poll() left in "
            "flight or a poll() that blocked; another member takes them",
            self._group,
            len(records),
            time.monotonic() - batch.at,
            self._look.lock_seconds,
        )
        return SafeMessages([], None)

    def _flush_from_watch(self, batch: Batch) -> None:
        """The watch reached the batch's release point (it cut the batch, or the consumer accepted
        records that are not sent yet): released and sent now, unless the application is inside a
        call of the consumer (then at that call's start). In explicit mode only while the
        application is inside ``handle()``: it calls nothing of its own then (``_handled`` waits for
        this send), while elsewhere it may be inside upstream's ``acknowledge()``."""
        # A moment's wait: the application's thread may be settling a record (it holds the lock briefly).
        if batch is not self._batch or self._closed or not self._lock.acquire(timeout=0.05):
            return
        try:
            if batch is self._batch and not self._closed and (self._implicit or self._in_handle):
                self._send_pending(batch)
        finally:
            self._lock.release()

    def _release_from_timer(self, batch: Batch) -> None:
        """The keepalive timer: the application is inside its block, not calling the consumer."""
        with self._lock:
            try:
                batch.cut()
                if batch is self._batch:
                    self._send_pending(batch)
            except Exception as exc:  # noqa: BLE001 - the records' locks then run out: they come back all the same
                logger.warning("giving back unreached records failed: %s", exc)

    # acknowledge() and acknowledge_offset() are upstream's own in explicit mode (not wrapped: an
    # application acknowledges every record, and a wrapper would cost each call); an implicit-mode
    # instance gets the two below as instance attributes (see SafeShareConsumer.__init__).
    def _implicit_acknowledge(self, message: Message, *args: Any, **kwargs: Any) -> None:
        if self._closed:
            ShareConsumer.acknowledge(self, message, *args, **kwargs)  # upstream's error for a closed consumer
        implicit_oracle().acknowledge(message, *args, **kwargs)  # raises upstream's implicit-mode error

    def _implicit_acknowledge_offset(self, topic: str, partition: int, offset: int, *args: Any, **kwargs: Any) -> None:
        if self._closed:
            ShareConsumer.acknowledge_offset(self, topic, partition, offset, *args, **kwargs)
        implicit_oracle().acknowledge_offset(topic, partition, offset, *args, **kwargs)

    def _came_back(self, *, accept: bool, committing: bool = False) -> None:
        """The application called ``poll()`` or ``commit_*()``: what was cut is released; in implicit
        mode every record it was handed is accepted (upstream accepts the whole batch then); the
        acknowledgements about to be sent that go after their lock are reported (:meth:`_sending`)."""
        batch = self._batch
        if batch is None:
            return
        if batch.pending:
            self._flush_pending(batch)
        accepted = None
        if accept:
            accepted = batch.unsettled()
            self._accept_all(accepted)
            batch.settle_all()
            if "opentelemetry" in sys.modules:  # (a call less for every batch without it)
                self._telemetry.acknowledged("accept", len(accepted))
            if not (committing or batch.unsent or self._overruns.unsaid) and time.monotonic() <= batch.lock_end:
                return  # implicit mode's usual poll(): nothing else sent, nothing late to report
        self._sending(batch, accepted, stays=committing)
        self._overruns.say(self._look.lock_seconds)

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
        """close(): what the application finished is sent (``handle()``'s acceptances, explicit
        mode's own acknowledgements first: none is overridden), the rest released, and the
        acknowledgements that went after their lock reported."""
        batch = self._batch
        if batch is None:
            return
        if not self._implicit:
            self._sending(batch)
            super().commit_sync(10.0)
        with batch.lock:
            del batch.pending[:]  # released with the rest, now
        self._release(batch, batch.unsettled(), sync=True)

    def _release_for_redelivery(self, message: Message, attempts: int) -> bool:
        """The next attempt at ``message`` would not fit in its lock (the poison policy's retries):
        it goes back to the group now, and its redelivery is the next attempt, unless this was its
        last delivery (False: the policy dead-letters it now)."""
        count = message.delivery_count() or 1
        if count >= self._look.settings.delivery_limit:
            return False
        if self._batch is None or self._closed:
            return True  # closed meanwhile: it went back with what the consumer held
        self._settle(message, AcknowledgeType.RELEASE)
        self._send_now()
        self._telemetry.released_early(1, "retry")
        logger.info(
            "share group %r: released %s [%s] at offset %s after %d attempt(s) for redelivery: its next attempt "
            "would not end within the %.1f s acquisition lock it holds (with the rest of its batch); it was "
            "delivery %d of the group's limit of %d",
            self._group,
            message.topic(),
            message.partition(),
            message.offset(),
            attempts,
            self._look.lock_seconds,
            count,
            self._look.settings.delivery_limit,
        )
        return True

    def _may_retry(self, message: Message, wait: float, attempt: float) -> bool:
        """Whether the poison policy may retry ``message`` after ``wait`` seconds (see :meth:`Batch.fits`)."""
        batch = self._batch
        return batch is not None and not self._closed and batch.fits(wait, attempt)

    def _poison_handler(self, policy: PoisonPolicy | None, writer: DeadLetterWriter) -> PoisonHandler:
        """The poison policy at work for this consumer: a failed record goes back (RELEASE) or is rejected
        through the consumer's own acknowledgements, its retries bounded by the batch's locks."""
        me = weakref.ref(self)
        return PoisonHandler(
            policy,
            group_id=self._group,
            writer=writer,
            # Weak: the consumer is destroyed when the application drops it (S8), not by the collector.
            give_back=lambda message: call(me, "_settle", message, AcknowledgeType.RELEASE),
            keepalive=lambda: call(me, "keepalive"),
            fail=lambda fatal, error: call(me, "_fail", fatal, error),
            counted=self._telemetry.poisoned,
            bounds=LockBounds(
                may_retry=weakref.WeakMethod(self._may_retry),
                release=weakref.WeakMethod(self._release_for_redelivery),
                send=weakref.WeakMethod(self._send_now),
                reject=weakref.WeakMethod(self._settle),
            ),
        )


class LockBounds(RetryBounds):
    """A share consumer's bounds on the poison policy's retries (:class:`RetryBounds`): a record is
    retried while the next attempt, and the records of its batch still waiting, end before the
    batch's release point (:attr:`Batch.release_at`: :data:`._batch.RELEASE_AT` of the lock, or of
    ``max.poll.interval.ms`` when shorter); then it is released for redelivery (the delivery count is
    the counter), or dead-lettered on its last delivery. What the application finished is sent
    before any wait, and a record dead-lettered or skipped is rejected at once (before the limit may
    stop the consumer, whose close() would release it). Holds the consumer weakly (S8)."""

    def __init__(
        self,
        *,
        may_retry: weakref.WeakMethod[Callable[[Message, float, float], bool]],
        release: weakref.WeakMethod[Callable[[Message, int], bool]],
        send: weakref.WeakMethod[Callable[[], None]],
        reject: weakref.WeakMethod[Callable[[Message, AcknowledgeType], None]],
    ) -> None:
        self._may = may_retry
        self._release = release
        self._send = send
        self._reject = reject

    def may_retry(self, message: Message, wait: float, attempt: float) -> bool:
        may = self._may()
        return may is not None and may(message, wait, attempt)

    def stopped(self, message: Message, attempts: int) -> bool:
        release = self._release()
        return release is None or release(message, attempts)

    def before_wait(self) -> None:
        send = self._send()
        if send is not None:
            send()

    def rejected(self, message: Message) -> None:
        reject = self._reject()
        if reject is not None:
            reject(message, AcknowledgeType.REJECT)

    def attempts_before(self, message: Message) -> int:
        return max(0, (message.delivery_count() or 1) - 1)
