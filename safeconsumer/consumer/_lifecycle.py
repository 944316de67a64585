"""A consumer's life: open, closing, closed; its fatal error; the views others get of it.

:class:`Lifecycle` is the one owner of the consumer's state and of the fatal error that
stopped it. The facade reads ``state`` to guard every call; only :meth:`Lifecycle.close` and
:meth:`Lifecycle.fail` change it, each under the consumer's client lock:

- ``close()`` (the application, any thread): the final store, then librdkafka's close, which
  runs the final revoke callbacks; the table is cleared and the fetch-memory share left.
- ``fail()`` (the client boundary, :mod:`._client`, on any thread, for a fatal error): stop
  joining and storing, close quietly, remember the error, apply the exit policy, raise.

Other objects reach a consumer only through the views built here, never its attributes:
:class:`KeepaliveLink` (the keeper's :class:`._keepalive.KeepaliveHost`) and
:class:`AsyncLink` (what :mod:`safeconsumer.aio` needs for its lock-free lane and to give back
what a cancelled call got).
"""

from __future__ import annotations

import enum
import logging
import sys
import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from confluent_kafka import Consumer, KafkaError, KafkaException, Message

from ..base._errors import (
    EXIT_FATAL,
    EXIT_GROUP_MAX_SIZE,
    ConsumerClosedError,
    FatalConsumerError,
    FatalPolicy,
    GroupMaxSizeReachedError,
    consumer_closed,
    error_type,
    exit_process,
)
from ..group._explainer import FENCED_CODES

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ..base._telemetry import LazyTelemetry
    from ..group._explainer import RebalanceExplainer
    from ..group._memory import ConsumerBudget
    from ._client import RawClient
    from ._delivery import DeliveryGate
    from ._keepalive import Keeper
    from ._partitions import PartitionTable, Receipt
    from ._reader import Reader
    from ._rebalance import Rebalancer

logger = logging.getLogger("safeconsumer")


class State(enum.Enum):
    OPEN = "open"
    """Usable: every public method works."""
    CLOSING = "closing"
    """Inside close() or a fatal stop: the final revoke callbacks may still commit and read state."""
    CLOSED = "closed"
    """close() ran, or a fatal error stopped it: every method but close() raises."""


def log_critical(text: str, *, exiting: bool) -> None:
    """Log a fatal error at CRITICAL; about to exit with no logging configured, say it on stderr."""
    configured = any(not isinstance(h, logging.NullHandler) for h in logging.getLogger().handlers + logger.handlers)
    if exiting and not configured:
        print(f"CRITICAL safeconsumer: {text}", file=sys.stderr, flush=True)  # noqa: T201
    else:
        logger.critical("%s", text)


@dataclass
class _Parts:
    """What closing and failing act on (bound once the consumer has built them)."""

    client: RawClient
    table: PartitionTable
    gate: DeliveryGate
    rebalancer: Rebalancer
    keeper: Keeper
    explainer: RebalanceExplainer
    telemetry: LazyTelemetry
    budget: ConsumerBudget


class Lifecycle:
    """The consumer's state machine (:class:`State`), its fatal error, and an error deferred
    from the keepalive thread. One per SafeConsumer; a class default stands for a subclass
    whose ``__init__`` never ran (closed, as upstream treats such a Consumer)."""

    def __init__(
        self, lock: AbstractContextManager[object], group_id: str, on_fatal: FatalPolicy, state: State
    ) -> None:
        self.lock = lock
        self.group_id = group_id
        self.on_fatal = on_fatal
        #: Changed by close() and fail() only; read by the facade's guards.
        self.state = state
        #: The fatal error that stopped the consumer: every later call raises it.
        self.fatal: FatalConsumerError | None = None
        #: An exception the application's callback raised on the keepalive thread (see defer()).
        self._deferred: BaseException | None = None
        #: The first exception of the application's callbacks during close(), raised once closed.
        self._close_error: Exception | None = None
        self._parts: _Parts | None = None

    @classmethod
    def never_opened(cls) -> Lifecycle:
        return cls(threading.RLock(), "", "raise", State.CLOSED)

    def bind(self, **parts: object) -> None:
        """The consumer's parts, once built (the client needs :meth:`fail` first).

        Called once by _assembly.assemble(). Sets the parts close() and fail() act on.
        """
        self._parts = _Parts(**parts)  # type: ignore[arg-type]

    # -- reading ---------------------------------------------------------------------------
    def stopping(self) -> bool:
        """Inside close() or a fatal stop, or after it: revocations are final."""
        return self.state is not State.OPEN

    def note(self, method: str) -> str:
        """The PEP 678 note of an error raised for ``method`` on a stopped consumer."""
        return f"SafeConsumer for group {self.group_id!r} is closed: cannot call {method}()"

    def check_open(self, method: str) -> None:
        """The state guard of an addition (``pause_topics``, ``paused``, ...): on a stopped consumer
        it raises :meth:`closed_error`."""
        if self.state is State.CLOSED:
            raise self.closed_error(method)

    def closed_error(self, method: str) -> FatalConsumerError | ConsumerClosedError:
        """The error an addition (``pause_topics``, ``paused``, ...) raises on a stopped consumer:
        the fatal error that stopped it, else upstream's ``RuntimeError("Consumer closed")`` (a
        :class:`ConsumerClosedError`), with a note naming the consumer and the method."""
        if self.fatal is not None:
            return self.fatal
        return consumer_closed(("Consumer closed",), self.note(method))

    # -- errors of the application's callbacks on the keepalive thread -----------------------
    def defer(self, error: BaseException) -> None:
        """Called by the keeper's link (lock held): the application's next call raises ``error``.

        Changes ``_deferred``.
        """
        self._deferred = error

    def raise_deferred(self) -> None:
        """Called by the facade's poll()/consume() (lock held): raise a deferred error, once.

        Clears ``_deferred``.
        """
        error, self._deferred = self._deferred, None
        if error is not None:
            try:
                raise error
            finally:
                del error  # no cycle through this frame (see _close_client)

    def callback_failed_in_close(self, error: Exception) -> None:
        """Called by the rebalancer when an application callback raises while close() revokes:
        close() raises ``error`` once librdkafka closed (the first one). Through librdkafka it would
        stop the close half-way, and confluent_kafka would keep the consumer alive (I10).
        Sets ``_close_error``."""
        if self._close_error is None:
            self._close_error = error

    # -- transitions -------------------------------------------------------------------------
    def close(self) -> None:
        """OPEN -> CLOSING -> CLOSED: the application's close(). Calling it again does nothing.

        Called by the facade's close() and __exit__(), on any thread. Changes ``state`` (CLOSING,
        then CLOSED); through the parts: stops the keeper and the explainer, counts what the app
        holds as processed and stores it, runs pending on_lost callbacks, leaves the fetch-memory
        budget, closes librdkafka and clears the table.
        """
        parts = self._parts
        if self.state is not State.OPEN or parts is None:
            return
        # Both threads are marked stopped before the lock is taken (the keeper polls under it and
        # checks the mark there: it never touches the client again), but are neither woken nor
        # joined until librdkafka closed: the time from the application's last call to
        # librdkafka's close stays close to upstream's, so a callback event (stats_cb, say) due
        # just then is served where upstream serves it. close()'s own revocations are explained
        # in place.
        parts.keeper.stop(join=False, wake=False)
        parts.explainer.stop(wake=False)
        parts.rebalancer.stop_joining()
        try:
            self._close_client(parts)
        finally:
            parts.keeper.stop()
            parts.explainer.close()

    def _close_client(self, parts: _Parts) -> None:
        with self.lock:
            if self.state is not State.OPEN:
                return
            self.state = State.CLOSING
            failed: BaseException | None = None
            try:
                parts.table.came_back()  # close() is the application coming back (I8)
                parts.gate.flush(force=True)
                try:
                    # A loss announced behind an error event read ahead: upstream's close serves it.
                    parts.rebalancer.deferred.run_all()
                except Exception as exc:  # noqa: BLE001 - the app's callback: raised once closed
                    failed = exc
                # Out of the process's fetch memory first: the revocations below are no growth.
                parts.budget.leave()
                # librdkafka runs the final revoke callbacks (and the final auto-commit) here.
                parts.client.call(Consumer.close)
            finally:
                self.state = State.CLOSED
                parts.table.cleared()
                parts.budget.leave()
            failed = failed or self._close_error
            self._close_error = None
            if failed is not None:
                try:
                    raise failed
                finally:
                    # This frame is in the exception's traceback: holding it here too would be a
                    # cycle, and the consumer the traceback reaches would wait for a collection (I10).
                    del failed

    def dropped(self) -> None:
        """OPEN -> CLOSED: the application dropped the consumer without close() (I10).

        Called by the finalizer ``assemble`` registers, on the thread that dropped the last
        reference, before librdkafka's destroy (which leaves the group, as upstream's does). No
        thread of ours holds the consumer then (the keeper holds it only inside a locked call), so
        neither waits for the lock here: the keeper and the explainer are told to stop and end by
        themselves. Changes ``state``.
        """
        parts = self._parts
        if parts is None or self.state is State.CLOSED:
            return
        self.state = State.CLOSED
        parts.keeper.stop(join=False)
        parts.explainer.stop()
        parts.explainer.end_process()
        parts.rebalancer.stop_joining()

    def fail(self, fatal: FatalConsumerError, err: KafkaError) -> NoReturn:
        """Stop at once: no more joins or heartbeats, close, remember, apply the exit policy, raise.

        The client boundary calls this for every fatal error, returned or raised, on any thread.

        Changes ``state`` and ``fatal``; stops storing, clears the table, stops the keeper and explainer, closes
        the client.
        """
        parts = self._parts
        if parts is None:  # a client exists only once the parts are bound
            raise RuntimeError("fail() before the consumer's parts were bound")
        with self.lock:
            if self.fatal is None:
                self.fatal = fatal
                parts.telemetry.fatal(error_type(err, fatal))
                if isinstance(fatal, GroupMaxSizeReachedError):
                    parts.explainer.fatal("group_full")
                elif err.code() in FENCED_CODES or "fenced" in err.str().lower():
                    parts.explainer.fatal("fenced")
                log_critical(str(fatal), exiting=self.on_fatal == "exit")
                parts.keeper.stop(join=False)
                parts.explainer.close(wait=False)
                parts.rebalancer.stop_joining()
                if self.state is State.OPEN:
                    self.state = State.CLOSING
                    # librdkafka already returned records the application will never see (the
                    # rest of this batch, the read-ahead): store nothing more, also not in the
                    # revoke callbacks close() runs. Only offsets stored before now get committed.
                    parts.gate.stop_storing()
                    parts.budget.leave()  # before the close's revocations: they are no assignment change
                    try:
                        parts.client.close_quietly()
                    finally:
                        self.state = State.CLOSED
                        self._close_error = None  # the fatal error is what is raised
                        parts.table.cleared()
                if self.on_fatal == "exit":
                    exit_process(EXIT_GROUP_MAX_SIZE if isinstance(fatal, GroupMaxSizeReachedError) else EXIT_FATAL)
        raise self.fatal from KafkaException(err)


class KeepaliveLink:
    """The keeper's view of its consumer (:class:`._keepalive.KeepaliveHost`): nothing else."""

    def __init__(
        self,
        consumer: Callable[[], object],
        life: Lifecycle,
        reader: Reader,
        set_parked: Callable[[bool], None],
        telemetry: LazyTelemetry,
        *,
        holds_records: Callable[[], bool] = lambda: False,
    ) -> None:
        #: A weak reference to the consumer: held strongly only inside a locked call, so that the
        #: application's reference alone keeps it alive (I10).
        self._consumer = consumer
        self._life = life
        self._reader = reader
        self._set_parked = set_parked
        self._telemetry = telemetry
        self.holds_records = holds_records
        self.lock = life.lock

    def idle_seconds(self) -> float:
        return self._reader.idle_seconds()

    def touch(self) -> None:
        self._reader.touch()

    def set_parked(self, parked: bool) -> None:
        with self.lock:
            pinned = self._consumer()  # alive until this call ends
            if pinned is not None and self._life.state is State.OPEN:
                self._set_parked(parked)

    def keep_alive(self) -> bool:
        with self.lock:
            pinned = self._consumer()  # alive until this call ends (freed on this thread if dropped meanwhile)
            if pinned is None or self._life.state is not State.OPEN:
                return False
            try:
                self._reader.keep_alive()
            except FatalConsumerError:
                return False  # the consumer stopped itself; the application's next call raises
            except Exception as exc:  # noqa: BLE001 - the application's callback: its next call raises it
                self._life.defer(exc)
            return True

    def span_started(self, mode: str) -> Span:
        return self._telemetry.keepalive_started(mode)

    def span_ended(self, span: Span, mode: str, seconds: float) -> None:
        self._telemetry.keepalive_ended(span, mode, seconds)


class AsyncLink:
    """What :mod:`safeconsumer.aio` uses of its SafeConsumer beyond the public methods.

    ``lane`` and ``reader.lane_until``: the lock-free fast lane of ``poll()`` (see
    :mod:`._reader`); ``lock``: the consumer's client lock, held around a receive so that what it
    returned goes in transit (or, its caller cancelled already, back) before anything else
    happens (see :class:`._partitions.Receipt`).
    """

    def __init__(self, life: Lifecycle, lane: deque[Message], reader: Reader, table: PartitionTable) -> None:
        self._life = life
        self.lock = life.lock
        self.lane = lane
        #: Read for ``reader.lane_until`` only.
        self.reader = reader
        self._table = table

    @property
    def fatal(self) -> FatalConsumerError | None:
        return self._life.fatal

    def returned_waiting(self) -> bool:
        """Whether a receipt given back by a cancelled caller waits to be settled (aio's lane
        pop must not hand out newer records first). Lock-free: reads one list."""
        transit = self._table.transit
        return bool(transit) and any(r.state == "returned" for r in transit)

    def in_transit(self, result: Message | list[Message] | None) -> Receipt | None:
        """Called with the lock held, right after a poll()/consume() for an asyncio caller that
        may never get ``result``: the table keeps it in transit (see :class:`._partitions.Receipt`)."""
        return self._table.in_transit(result)

    def give_back_returned(self) -> None:
        """Called with the lock held before a receive: what cancelled callers never got goes back
        first, so that nothing newer (the lane included) is handed out before it."""
        self._table.give_back_returned()

    def give_back(self, result: Message | list[Message] | None) -> None:
        """What a poll()/consume() returned that never reached the application (its asyncio caller
        was cancelled while the call ran; lock held): not processed, handed out again first."""
        msgs = result if isinstance(result, list) else [] if result is None else [result]
        if not msgs:
            return
        with self.lock:
            if self._life.state is State.CLOSED:
                return  # closed meanwhile: unprocessed, so never stored; the next owner reads them
            self.reader.give_back(msgs)
