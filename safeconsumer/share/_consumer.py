"""``SafeShareConsumer``: confluent-kafka's ``ShareConsumer`` (KIP-932) made safe (SPEC "Share groups").

- **S2 processed before acknowledged.** librdkafka always runs in explicit acknowledgement mode
  underneath; implicit mode is the consumer's own: the records of a batch are accepted when the
  application comes back (its next ``poll()``, ``commit_sync()``, ``commit_async()``), as upstream's
  implicit mode does, and the ones it never came back after are released at once: at ``close()``, and
  a record whose ``handle()`` raised. ``handle()`` works record by record in both modes: returning
  is coming back after that record, which is accepted at once and sent in time (before any wait the
  consumer starts itself, from the watch at the batch's release point, past it at each
  ``handle()``); what it finished stays accepted whatever ends the batch.
- **S3 lock-aware long work.** The consumer reads the group's lock duration
  (``share.record.lock.duration.ms``) at subscribe and every ``REFRESH_EVERY`` seconds
  (:mod:`safeconsumer.group._share`). Records the application has not reached (the batch's iterator
  did not hand them out yet, ``handle()`` did not run on them) are released once the batch has held
  its locks for :data:`RELEASE_AT` of the lock: when the iterator asks for the next record, when
  ``handle()`` starts one, and from the ``keepalive()`` block's timer. A record acknowledged after
  its lock ran out is one WARNING per batch, counted in ``lock_overruns``, and ``commit_sync()``
  answers :class:`LockExpiredError` for its partition where upstream answers success. Past
  ``max.poll.interval.ms`` librdkafka takes the member out of its group (its next ``poll()`` raises
  upstream's ``_MAX_POLL_EXCEEDED``, the one after rejoins): records not reached go back at
  :data:`RELEASE_AT` of that interval when it is shorter than the lock, the acknowledgements already
  made are sent, and one WARNING says what happened.
- **S4 never archived without a trace.** ``poison=Skip()`` rejects a record whose ``handle()`` failed
  (a WARNING, counted); ``poison=DeadLetter(...)`` writes it to the dead-letter topic and only then
  rejects it. A record handed out on its last delivery (its delivery count reached the group's
  ``share.delivery.count.limit``) is written to the dead-letter topic before the application sees it
  (stage ``last-delivery``: it may also be processed), so that a process that dies on it, or overruns
  its lock, leaves a copy the broker's archive does not.
- **S5 a known start.** ``start="earliest"``/``"latest"`` sets a new group's ``share.auto.offset.reset``.
- **S6 pause.** ``pause_topics()``/``resume_topics()`` (names, ``^regex``, ``re.Pattern``) and
  ``pause()``/``resume()`` for the whole consumer. A paused topic leaves the subscription librdkafka
  has (the member acquires nothing of it, so pausing never counts a delivery), and the records of it
  already handed out and not reached are released at once; ``subscription()`` still answers what
  the application subscribed to. While every subscribed topic is paused, ``poll()`` waits its timeout
  (at most :data:`PAUSED_POLL` seconds when it is infinite) and returns an empty batch.

- **S7 fatal on group size.** A member the broker refuses because the share group reached
  ``group.share.max.size`` gets :class:`GroupMaxSizeReachedError` (raw librdkafka raises its fatal
  error from one ``poll()`` and answers every later one with an empty batch); any other fatal client
  error a :class:`FatalConsumerError`. The consumer closes (what it held is released), and every later
  call raises the same error; with ``on_fatal="exit"`` the process exits (78 for the group size, 70
  otherwise), as SafeConsumer does.

Everything else is upstream's: the same methods, arguments, return types and errors (an implicit
mode call upstream refuses is refused with upstream's own exception, asked of an implicit-mode
``ShareConsumer`` that never connects anywhere).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import weakref
from _thread import get_ident
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from confluent_kafka import ConcurrentModificationException, KafkaError, KafkaException, Message

from ..base._clients import admin_config
from ..base._errors import (
    EXIT_FATAL,
    EXIT_GROUP_MAX_SIZE,
    FatalConsumerError,
    FatalPolicy,
    GroupMaxSizeReachedError,
    error_of,
    exit_process,
)
from ..group._share import STARTS, GroupLook, GroupSettings, Start
from ..poison._policy import DeadLetter, PoisonHandler, check_policy
from ._acks import Acknowledgements
from ._batch import WATCH, Batch, SafeMessages, Watched
from ._fatal import fatal_of, say_left
from ._fetch import Fetches
from ._last_delivery import copy_last_deliveries
from ._overruns import Overruns
from ._pause import PauseMarks, paused_wait
from ._port import SharePort, register
from ._telemetry import ShareTelemetry
from ._upstream import MODE_KEY, call, implicit_oracle, say_preview, weak_method
from ._writer import BrokerAwareWriter

logger = logging.getLogger("safeconsumer")

_T = TypeVar("_T")

PartitionKey = tuple[str, int]


def _start(value: object) -> Start | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in STARTS:
        raise ValueError(f"start must be one of {', '.join(map(repr, STARTS))} or None, not {value!r}")
    return value


class SafeShareConsumer(Acknowledgements):
    """A drop-in for ``confluent_kafka.ShareConsumer``; see the module's docstring.

    ``start``: where a share group without state starts (``"earliest"`` or ``"latest"``; None: the
    group's own setting, ``latest`` unless its operators set one).
    ``poison``: ``None`` (upstream's behaviour), ``Skip()`` or ``DeadLetter(topic, ...)``, used by
    :meth:`handle` and for records on their last delivery. Where the group's dead-letter queue in the
    broker (Kafka 4.4, KIP-1191) is that topic and the broker can write it, the broker writes the
    copies: a record that fails is rejected, and one past the delivery limit is copied as the broker
    archives it, even when no member is alive.
    ``group_dlq``: with ``poison=DeadLetter(topic)``, make ``topic`` the broker's dead-letter queue
    of a share group that has no state yet (a live group's config is never changed; a WARNING says so).
    ``on_fatal``: what a fatal error does once the consumer has closed: ``"raise"`` it (and every
    later call raises it too) or ``"exit"`` the process (78 when the group is full, else 70).
    ``meter_provider`` / ``tracer_provider``: OpenTelemetry providers for its metrics and spans
    (default the global ones; nothing is loaded until OpenTelemetry is).
    """

    def __init__(
        self,
        *args: Any,
        start: str | None = None,
        poison: object = None,
        group_dlq: bool = False,
        on_fatal: FatalPolicy = "raise",
        meter_provider: Any = None,
        tracer_provider: Any = None,
        **kwargs: Any,
    ) -> None:
        self._start = _start(start)
        if on_fatal not in ("raise", "exit"):
            raise ValueError(f"on_fatal must be 'raise' or 'exit', got {on_fatal!r}")
        self._on_fatal = on_fatal
        #: The fatal error that ended the consumer: every later call raises it.
        self._fatal: FatalConsumerError | None = None
        policy = check_policy(poison)
        if not isinstance(group_dlq, bool):
            raise TypeError(f"group_dlq must be a bool, not {type(group_dlq).__name__}")
        if group_dlq and not isinstance(policy, DeadLetter):
            raise ValueError("group_dlq=True needs poison=DeadLetter(topic): the topic it makes the group's DLQ")
        conf: Mapping[str, Any] = args[0] if args and isinstance(args[0], Mapping) else {}
        mode = conf.get(MODE_KEY, "implicit")
        #: Implicit mode is ours (librdkafka runs explicit underneath); an unknown mode is upstream's to refuse.
        self._implicit = mode == "implicit"
        if self._implicit and args:
            args = ({**conf, MODE_KEY: "explicit"}, *args[1:])
        super().__init__(*args, **kwargs)
        self._group = str(conf.get("group.id", ""))
        #: Seconds between two polls after which librdkafka takes the member out of its group
        #: (``max.poll.interval.ms``; upstream has refused a value that is not a number).
        self._max_poll = float(conf.get("max.poll.interval.ms", 300_000)) / 1000
        self._last_poll = time.monotonic()
        self._look = GroupLook(
            self._group,
            admin_config(conf, "share"),
            self._start,
            dead_letter_topic=policy.topic if isinstance(policy, DeadLetter) else None,
            set_dlq=group_dlq,
        )
        self._batch: Batch | None = None
        self._batch_lock = threading.Lock()  # each batch's (see Batch.lock)
        self._fetches = Fetches()  # when the next poll's records were acquired, at the earliest
        #: Held by the application's poll() and commit_*(), and while a keepalive timer gives records
        #: back (the application is inside the block); :meth:`_enter` says which application thread is in.
        self._lock = threading.RLock()
        self._inside: int | None = None
        self._depth = 0
        self._closed = False
        self._started = False
        #: What the application subscribed to, and its pause marks (S6).
        self._wanted: list[str] | None = None
        self._paused = PauseMarks()
        self._pausing = False  # whether any mark is set (read by every poll())
        #: The subscription librdkafka has is to change at the next poll() (a pause mark changed).
        self._resubscribe = False
        #: Records given back before their locks ran out because the application had not reached them.
        self.released_early = 0
        self._telemetry = ShareTelemetry(self._group, meter_provider=meter_provider, tracer_provider=tracer_provider)
        self._overruns = Overruns(self._group, self._telemetry)
        look = self._look
        self._writer = BrokerAwareWriter(self._group, admin_config(conf, "dead-letters"), lambda: look.broker_copies)
        me = weakref.ref(self)
        self._poison = self._poison_handler(policy, self._writer)
        #: S4: records on their last delivery are copied before they are handed out (unless the broker does).
        self._copies_last = policy if isinstance(policy, DeadLetter) else None
        register(
            self,
            SharePort(
                give_back=weakref.WeakMethod(self._give_back),
                handling=weakref.WeakMethod(self._handling),
                handled=weakref.WeakMethod(self._handled),
                process=weakref.WeakMethod(self._process_span),
                lock=self._lock,
            ),
        )
        #: What the watch knows of this consumer; it calls back weakly, as above.
        self._watched = Watched(lambda cut: call(me, "_flush_from_watch", cut))
        #: How many handle() calls are under way (SafeAIOShareConsumer may run several).
        self._in_handle = 0
        if self._implicit:  # weakly bound: no reference cycle keeps a dropped consumer (S8)
            self.acknowledge = weak_method(me, "_implicit_acknowledge")  # type: ignore[method-assign]
            self.acknowledge_offset = weak_method(me, "_implicit_acknowledge_offset")  # type: ignore[method-assign]
        say_preview()

    # -- the group's settings (group._share.GroupLook) -----------------------------------
    @property
    def group_settings(self) -> GroupSettings:
        """The share group's settings as last read (Kafka's defaults before the first read)."""
        return self._look.settings

    @property
    def dead_letters_by_broker(self) -> bool:
        """Whether the broker writes this consumer's dead-letter copies: the group's dead-letter queue
        in the broker (Kafka 4.4) is the ``DeadLetter`` policy's topic and the broker can write it."""
        return self._look.broker_copies

    # -- upstream's methods -----------------------------------------------------------------
    def subscribe(self, topics: list[str], *args: Any, **kwargs: Any) -> None:
        self._enter("Failed to subscribe: Local: Conflicting use")
        try:
            self._subscribe(topics, *args, **kwargs)
        finally:
            self._leave()

    def _subscribe(self, topics: list[str], *args: Any, **kwargs: Any) -> None:
        valid = isinstance(topics, list) and all(isinstance(t, str) for t in topics) and not args and not kwargs
        if not self._started and valid and topics and not self._closed:
            self._started = True
            self._look.first_subscribe(topics)
        if not valid or not self._paused:
            super().subscribe(topics, *args, **kwargs)  # upstream's checks and errors, as they are
            self._wanted = list(topics) if valid else self._wanted
            return
        super().subscribe(topics)  # upstream judges the list first (empty names, duplicates)
        self._wanted = list(topics)
        self._apply_pauses(now=True)

    def unsubscribe(self, *args: Any, **kwargs: Any) -> None:
        self._enter("Failed to unsubscribe: Local: Conflicting use")
        try:
            super().unsubscribe(*args, **kwargs)
            self._wanted = None
        finally:
            self._leave()

    def subscription(self, *args: Any, **kwargs: Any) -> Any:
        answer = super().subscription(*args, **kwargs)
        if self._paused and self._wanted is not None and not self._closed:
            return list(self._wanted)
        return answer

    def poll(self, *args: Any, **kwargs: Any) -> Any:
        # _enter() and _leave() written out: each call in poll() costs every record a little (Budgets).
        if self._fatal is not None or not self._lock.acquire(False):
            self._enter()  # raises the fatal error, or refuses another thread, or waits for the timer
        else:
            self._depth += 1
            self._inside = get_ident()
        try:
            return self._poll(*args, **kwargs)
        finally:
            self._last_poll = time.monotonic()
            self._depth -= 1
            if not self._depth:
                self._inside = None
            self._lock.release()

    # A share consumer is single-threaded: upstream answers a call made while another thread is inside
    # one with ConcurrentModificationException. The calls that take the consumer's lock answer so too
    # (never wait for the other thread); only the consumer's own timer is waited for.
    def _enter(self, refused: str | None = None) -> None:
        """``refused``: upstream's message for this call when another thread is inside one (librdkafka's
        own for poll() and commit_*(), naming both threads)."""
        if self._fatal is not None:  # every call after a fatal error raises it (S7)
            raise self._fatal
        me = get_ident()
        if not self._lock.acquire(False):
            inside = self._inside
            if inside is not None and inside != me:
                raise ConcurrentModificationException(
                    refused
                    or f"Share consumer is not safe for multi-threaded access. currentThread(id: {me}) "
                    f"otherThread(id: {inside})"
                )
            self._lock.acquire()  # the keepalive timer releasing records: a moment
        self._depth += 1
        self._inside = me

    def _leave(self) -> None:
        self._depth -= 1
        if not self._depth:
            self._inside = None
        self._lock.release()

    def _poll(self, *args: Any, **kwargs: Any) -> Any:
        if not self._closed:
            # Implicit: what the application was handed is processed. Explicit mode's usual poll() has
            # nothing to release, accept, send late or report.
            if (batch := self._batch) is not None and (self._implicit or batch.pending or batch.unsent):
                self._came_back(accept=self._implicit)
            elif batch is not None and (self._overruns.unsaid or time.monotonic() > batch.lock_end):
                self._came_back(accept=False)
            if self._resubscribe:
                if self._batch is not None:
                    with contextlib.suppress(KafkaException):
                        super().commit_sync(10.0)  # what the application was handed, settled before the change
                    self._drop_batch()
                self._subscribe_effective()
            if self._pausing and self._wanted and not self._paused.effective(self._wanted):
                return self._paused_poll(*args, **kwargs)
        try:
            messages, acquired = self._fetches.poll(super().poll, *args, **kwargs)
        except KafkaException as exc:
            error = error_of(exc)
            self._maybe_fatal(error)
            self._maybe_left(error)
            raise
        # Upstream's poll() builds a Messages around a new list each call (Messages._from_list): taken
        # over without a copy, ``messages`` is not handed out. records() (a copy) if that list is not there.
        records = getattr(messages, "_records", None)
        if type(records) is not list:
            records = messages.records()
        if not records:
            self._drop_batch()
            return messages
        lock = self._look.lock_seconds  # the group's, or the shortest a broker allows while it is unread
        hold = lock if lock < self._max_poll else self._max_poll
        batch = self._batch = Batch(records, lock, hold, self._batch_lock, acquired)
        if self._implicit:  # its acceptance at the next poll() looks for error events: now, in the cache
            batch.look_clean()
        if self._withholds:
            try:
                self._withhold(batch)
            except BaseException:  # the application gets none of it: all back to the group at once (S2)
                self._release(batch, batch.unsettled())
                self._drop_batch()
                raise
            if not batch.records:
                self._watched.batch = None  # (the last batch's)
                return SafeMessages([], None)
        if "opentelemetry" in sys.modules:  # the delivery-count histogram costs a call per record
            self._telemetry.redeliveries(records)
        if self._copies_last is not None and not self._look.broker_copies:  # S4, before it is handed out
            copy_last_deliveries(records, self._copies_last, self._look, self._writer)
        if batch.release_at <= time.monotonic():  # acquired long before this poll returned them
            return self._give_back_stale(batch)
        # The watch may release and send while the application works without calling the consumer;
        # from here on a cut may shorten ``records`` (Batch.live), so what reads it whole comes first.
        watched = self._watched  # the hand-over (see Watched), written out: a call less a batch
        watched.batch = batch
        if batch.release_at < watched.due:
            WATCH.look_at(watched, batch.release_at)
        if batch.at >= (look := self._look).refresh_at:  # (a plain attribute: a call less a batch)
            look.maybe_refresh(batch.at)
        return SafeMessages(records, batch)

    #: Whether :meth:`_withhold` looks at each new batch (a subclass's; see SafeDeserializingShareConsumer).
    _withholds = False

    def _withhold(self, batch: Batch) -> None:
        """Take out of a new batch (lock held, before anything of it is handed out) the records the
        application must not get, each settled, editing ``batch.records`` and ``batch.live`` in place."""

    def commit_sync(self, *args: Any, **kwargs: Any) -> Any:
        self._enter()
        try:
            return self._commit_sync(*args, **kwargs)
        finally:
            self._leave()

    def _commit_sync(self, *args: Any, **kwargs: Any) -> Any:
        if not self._closed:
            self._came_back(accept=self._implicit, committing=True)
        try:
            result = super().commit_sync(*args, **kwargs)
        except KafkaException as exc:
            self._maybe_fatal(error_of(exc))
            raise
        return self._overruns.answer(result)

    def commit_async(self, *args: Any, **kwargs: Any) -> None:
        self._enter()
        try:
            return self._commit_async(*args, **kwargs)
        finally:
            self._leave()

    def _commit_async(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            implicit_oracle().commit_async(*args, **kwargs)  # upstream's TypeError: it takes no arguments
        if not self._closed:
            self._came_back(accept=self._implicit, committing=True)
        super().commit_async(*args, **kwargs)

    def close(self, *args: Any, **kwargs: Any) -> None:
        with self._lock:  # the watch and a keepalive timer never send while librdkafka closes
            if not self._closed:
                # S2: what the application finished is sent, what it never came back after goes back at once.
                with contextlib.suppress(Exception):
                    self._release_at_close()
                self._overruns.say(self._look.lock_seconds)
            try:
                super().close(*args, **kwargs)
            finally:
                self._closed = True
                self._drop_batch()
                self._in_handle = 0
        self._look.close()
        self._poison.close()

    # -- additions --------------------------------------------------------------------------
    def handle(self, message: Message, handler: Callable[[Message], _T]) -> _T | None:
        """Run ``handler(message)`` for a record of the last batch, under the ``poison`` policy.

        Returns the handler's result, or None when the record was skipped or dead-lettered (then
        rejected: the broker archives it, a copy is in the dead-letter topic) or released for
        redelivery because its next attempt would not fit in its lock. In either mode the record is
        acknowledged here: ACCEPT once the handler returned (``handle()`` returning is the
        application coming back after that record), REJECT after the policy; the acknowledgement is
        sent in time (see the module). An exception out of ``handle()`` (the handler's, with no
        policy, or a cancellation) releases the record (handed out again) and propagates. Records of
        the batch the application has not reached are given back first once the batch held its
        locks for :data:`RELEASE_AT` of the group's lock. In explicit mode the handler must not
        acknowledge the record itself (``handle()`` does).
        """
        before = self._handling(message)
        try:
            if "opentelemetry" in sys.modules and message.error() is None:
                with self._telemetry.process(message):
                    result = self._poison.handle(message, handler)
            else:
                result = self._poison.handle(message, handler)
        except BaseException:
            self._handled(message, before, failed=True)
            raise
        self._handled(message, before, failed=False)
        return result

    def _process_span(self, message: Message) -> contextlib.AbstractContextManager[Any]:
        return self._telemetry.process(message)

    def _give_back(self, messages: object) -> int:
        """Release at once every record of ``messages`` (a batch this consumer's ``poll()`` returned)
        that the application never received: an asyncio ``poll()`` cancelled after librdkafka
        returned (S2). Nothing of it is accepted later. Returns how many records went back."""
        batch = getattr(messages, "_batch", None)
        self._enter()
        try:
            if not isinstance(batch, Batch) or batch is not self._batch or self._closed:
                return 0
            with batch.lock:
                batch.part()
                del batch.live[:]  # no iterator hands anything of it out
            records = batch.unsettled()
            self._release(batch, records)
            self._drop_batch()  # the application never had it: nothing to accept or report
            self._telemetry.released_early(len(records), "cancelled")
            return len(records)
        finally:
            self._leave()

    @contextlib.contextmanager
    def keepalive(self) -> Iterator[None]:
        """A block of long work on one record: when the batch has held its locks for
        :data:`RELEASE_AT` of the group's lock, the records the application has not reached are given
        back from a timer thread (the application must not call the consumer inside the block). A
        share consumer cannot renew a lock (librdkafka has no RENEW yet): the record being worked on
        stays the application's until its lock runs out; acknowledged later, it is reported."""
        self._check_open("keepalive")
        batch = self._batch
        timer: threading.Timer | None = None
        if batch is not None and len(batch.live) > batch.position():
            timer = threading.Timer(
                max(0.0, batch.release_at - time.monotonic()),
                call,
                args=(weakref.ref(self), "_release_from_timer", batch),
            )
            timer.daemon = True
            timer.name = "safeconsumer-share-keepalive"
            timer.start()
        try:
            yield
        finally:
            if timer is not None:
                timer.cancel()
                with self._lock:  # a release under way ends before the application goes on
                    pass

    def pause(self) -> None:
        """Pause the whole consumer (S6): it acquires nothing until :meth:`resume`; records handed
        out and not reached yet are released at once."""
        self._check_open("pause")
        self._paused.everything = True
        self._apply_pauses()

    def resume(self) -> None:
        """Lift the consumer mark set by :meth:`pause` (topic marks stay)."""
        self._check_open("resume")
        self._paused.everything = False
        self._apply_pauses()

    def pause_topics(self, topics: Any) -> None:
        """Pause topics: names, ``^regex`` strings or compiled ``re.Pattern`` objects (one or a list).
        A mark covers topics subscribed later too."""
        self._check_open("pause_topics")
        self._paused.add(topics)
        self._apply_pauses()

    def resume_topics(self, topics: Any) -> None:
        """Clear topic marks set by :meth:`pause_topics` (the same names or patterns)."""
        self._check_open("resume_topics")
        self._paused.remove(topics)
        self._apply_pauses()

    def paused_topics(self) -> list[str]:
        """The subscribed topics that are paused now, sorted."""
        return sorted(t for t in self._wanted or [] if self._paused.covers(t))

    @property
    def lock_overruns(self) -> int:
        """Records whose acknowledgements went after their acquisition lock ran out."""
        return self._overruns.count

    @property
    def poison(self) -> PoisonHandler:
        """The poison policy at work (``skipped``, ``dead_lettered`` counts)."""
        return self._poison

    # -- pause (S6) -------------------------------------------------------------------------
    def _apply_pauses(self, *, now: bool = False) -> None:
        """Give back at once what was handed out of a paused topic and not reached, and hand
        librdkafka the subscription minus the paused topics: at once with ``now`` (a new
        subscription), else at the next ``poll()``, once what the application holds is acknowledged."""
        self._pausing = bool(self._paused)
        if self._wanted is None:
            return
        with self._lock:  # librdkafka is called: never while the watch or a keepalive timer sends
            batch = self._batch
            if batch is not None:
                self._flush_pending(batch)
                stopped = self._paused.take_unreached(batch)
                if stopped:
                    self._release(batch, stopped)
                    self._telemetry.released_early(len(stopped), "paused")
            self._resubscribe = True
            if now or batch is None or not batch.handed_out():
                self._subscribe_effective()

    def _subscribe_effective(self) -> None:
        if not self._resubscribe or self._wanted is None:
            return
        self._resubscribe = False
        effective = self._paused.effective(self._wanted)
        if effective:
            super().subscribe(effective)
        else:
            super().unsubscribe()

    def _paused_poll(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(paused_wait(args[0] if args else kwargs.get("timeout", -1)))
        self._drop_batch()
        return SafeMessages([], None)

    def _maybe_left(self, error: KafkaError | None) -> None:
        """librdkafka took the member out of its group because the application did not poll within
        ``max.poll.interval.ms``; this poll() raises upstream's ``_MAX_POLL_EXCEEDED`` and the next
        one rejoins. What the application was handed stays settled (the acknowledgements are sent
        now), what it had not reached went back at :data:`RELEASE_AT` of the interval; said once."""
        if error is None or error.code() != KafkaError._MAX_POLL_EXCEEDED:
            return
        with contextlib.suppress(KafkaException):
            super().commit_sync(10.0)
        say_left(self._group, time.monotonic() - self._last_poll, self._max_poll)

    def _maybe_fatal(self, error: KafkaError | None) -> None:
        """S7: a fatal client error from librdkafka ends the consumer (see :meth:`_fail`); other errors
        are left to the caller to raise."""
        if error is None:
            return
        fatal = fatal_of(error, self._group)
        if fatal is None:
            return
        self._fail(fatal, error)

    def _fail(self, fatal: FatalConsumerError, _error: KafkaError) -> None:
        """End the consumer for ``fatal``: closed (what it held released), every later call raises it;
        ``on_fatal="exit"`` ends the process."""
        if self._fatal is None:
            self._fatal = fatal
            logger.error("%s", fatal)
        with contextlib.suppress(Exception):
            self.close()
        if self._on_fatal == "exit":
            exit_process(EXIT_GROUP_MAX_SIZE if isinstance(fatal, GroupMaxSizeReachedError) else EXIT_FATAL)
        raise fatal from None
