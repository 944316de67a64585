"""SafeConsumer: the drop-in facade. It validates arguments, guards state and delegates.

Each public method checks its arguments (raising what confluent_kafka raises), checks the
consumer's state (open, closing, closed, failed), takes the client lock, and hands the
work to the part that owns it:

- :mod:`._pause` keeps pause intent (the ledger);
- :mod:`._partitions` owns every partition's state (the table);
- :mod:`._rebalance` applies every assignment change and makes librdkafka's pause flags follow intent;
- :mod:`._reader` reads records from librdkafka, :mod:`._delivery` decides what leaves and what is stored;
- :mod:`._client` is the one boundary to librdkafka, where its errors are translated;
- :mod:`._keepalive` keeps a busy member alive, through :class:`_KeepaliveLink`.

Every call into the underlying client is made under one re-entrant lock, so the
consumer may be shared between threads; rebalance callbacks run inside ``poll()`` /
``consume()`` / ``close()`` (or a keepalive poll) on the calling thread, and re-enter the lock.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import logging
import os
import sys
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NoReturn, TypeVar, cast, overload

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, TracerProvider

from ._client import RawClient
from ._config import redact_config
from ._delivery import DeliveryGate, DeliveryStats, next_offset
from ._errors import (
    EXIT_FATAL,
    EXIT_GROUP_MAX_SIZE,
    FatalConsumerError,
    GroupMaxSizeReachedError,
    InvalidPauseRequest,
    PauseStateError,
    SafeConsumerError,
    consumer_closed,
    error_type,
    with_note,
)
from ._health import FENCED_CODES, GroupDescriber, RebalanceExplainer
from ._keepalive import KeepaliveMode, Keeper
from ._memory import PROCESS, FetchLimits, estimate, mib, parse_budget
from ._partitions import PartitionTable
from ._pause import Key, PauseLedger, PauseState, parse_topic_entries, subscription_can_match
from ._reader import Reader
from ._rebalance import RebalanceCallback, Rebalancer
from ._retry import CommitRetry
from .otel import Telemetry

logger = logging.getLogger("safeconsumer")


FatalPolicy = Literal["raise", "exit"]

_monotonic = time.monotonic

#: Timeouts poll() takes as they are; anything else is first judged by upstream's poll().
_TIMEOUT_TYPES = frozenset({int, float})

_DEFAULT_COMMIT_RETRY = CommitRetry()


class _State(enum.Enum):
    OPEN = "open"
    """Usable: every public method works."""
    CLOSING = "closing"
    """Inside close(): the final revoke callbacks may still commit and read state."""
    CLOSED = "closed"
    """close() ran: every method but close() raises ConsumerClosedError."""


def _librdkafka_bool(name: str, value: object) -> bool:
    """A boolean setting as librdkafka reads it (true/t/1, false/f/0, any case), with its errors.

    SafeConsumer changes this setting before librdkafka sees it, so it judges the
    application's value itself, exactly as librdkafka would.
    """
    text = "" if value is None else str(value)
    if not text:
        raise KafkaException(
            KafkaError(KafkaError._INVALID_ARG, f'Bool configuration property "{name}" cannot be set to empty value')
        )
    lowered = text.lower()
    if lowered in ("true", "t", "1"):
        return True
    if lowered in ("false", "f", "0"):
        return False
    raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f'Expected bool value for "{name}": true or false'))


def _protocol_label(conf: Mapping[str, Any]) -> str:
    if str(conf.get("group.protocol", "classic")).lower() == "consumer":
        return "consumer"
    return "classic/" + str(conf.get("partition.assignment.strategy", "range,roundrobin")).replace(" ", "")


def _is_incremental(conf: Mapping[str, Any]) -> bool:
    if str(conf.get("group.protocol", "classic")).lower() == "consumer":
        return True
    return "cooperative" in str(conf.get("partition.assignment.strategy", "")).lower()


def _log_critical(text: str, *, exiting: bool) -> None:
    """Log a fatal error at CRITICAL; about to exit with no logging configured, say it on stderr."""
    configured = any(not isinstance(h, logging.NullHandler) for h in logging.getLogger().handlers + logger.handlers)
    if exiting and not configured:
        print(f"CRITICAL safeconsumer: {text}", file=sys.stderr, flush=True)  # noqa: T201
    else:
        logger.critical("%s", text)


def _exit_process(status: int) -> NoReturn:
    """End the process now, from any thread: a fatal error must not be retried into the broker."""
    for handler in logging.getLogger().handlers + logging.getLogger("safeconsumer").handlers:
        handler.flush()
    sys.stderr.flush()
    if threading.current_thread() is threading.main_thread():
        raise SystemExit(status)
    os._exit(status)  # a background thread: SystemExit would end only this thread


def _positive(name: str, value: float | None, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


_F = TypeVar("_F", bound=Callable[..., Any])


def _upstream_arguments(method: _F) -> _F:
    """Arguments that do not bind to the method are judged by upstream's own method.

    confluent_kafka's methods are C functions with their own argument parser: a call with too
    many, too few or unknown arguments gets its ``TypeError`` and message, and the few calls it
    accepts (``assignment(1)``) its answer. A TypeError raised by the call itself (no frame of
    ``method`` in its traceback) is such a binding error; one raised inside ``method`` is not.
    """
    upstream = getattr(Consumer, method.__name__)

    @functools.wraps(method)
    def wrapper(self: Consumer, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except TypeError as exc:
            if exc.__traceback__ is None or exc.__traceback__.tb_next is not None:
                raise
        return upstream(self, *args, **kwargs)

    return cast(_F, wrapper)


def _given(**kwargs: Any) -> dict[str, Any]:
    """The keyword arguments the caller gave (not None), to hand on to upstream as they were."""
    return {k: v for k, v in kwargs.items() if v is not None}


@dataclass(frozen=True)
class _Committable:
    offsets: list[TopicPartition] | None
    refused: bool


def _is_record(message: object) -> bool:
    """A record that can be committed or stored as it is: upstream judges anything else."""
    return (
        isinstance(message, Message)
        and message.error() is None
        and message.topic() is not None
        and message.partition() is not None
        and message.offset() is not None
    )


def _valid_consume(num_messages: object, timeout: object) -> bool:
    """Arguments upstream's consume() accepts (an int from 0 to 1M, a number)."""
    # upstream reads num_messages as a C unsigned int (masked, as PyArg's "I" does), then checks it
    return (
        isinstance(num_messages, int)
        and num_messages & 0xFFFFFFFF <= 1_000_000
        and (hasattr(type(timeout), "__float__") or hasattr(type(timeout), "__index__"))
    )


def _is_partition_list(offsets: object) -> bool:
    return isinstance(offsets, list) and all(isinstance(tp, TopicPartition) for tp in offsets)


_NO_CONF: Any = object()  # SafeConsumer() given no config dict
_NO_CALLBACK: Any = object()  # subscribe() given no callback (an explicit None is upstream's TypeError)


class _WholeConsumer:
    """The default of ``pause()``/``resume()``: no argument means the whole consumer."""

    def __repr__(self) -> str:
        return "<the whole consumer>"


_WHOLE_CONSUMER: Any = _WholeConsumer()


def _partition_keys(consumer: Consumer, partitions: object, method: str) -> list[Key]:
    """Keys of a TopicPartition list; anything else is judged by upstream's ``method`` (it raises
    its own TypeError before doing anything)."""
    if not _is_partition_list(partitions):
        getattr(Consumer, method)(consumer, partitions)
        raise TypeError(f"{method}() requires a list of TopicPartition")  # pragma: no cover - upstream raised
    return [(tp.topic, tp.partition) for tp in cast("list[TopicPartition]", partitions)]


class _KeepaliveLink:
    """The keeper's view of its consumer (:class:`._keepalive.KeepaliveHost`): nothing else."""

    def __init__(self, consumer: SafeConsumer) -> None:
        self._consumer = consumer
        self.lock = consumer._lock

    def idle_seconds(self) -> float:
        return self._consumer._reader.idle_seconds()

    def touch(self) -> None:
        self._consumer._reader.touch()

    def set_parked(self, parked: bool) -> None:
        with self._consumer._lock:
            if self._consumer._state is _State.OPEN:
                self._consumer._rebalancer.set_parked(parked)

    def keep_alive(self) -> bool:
        consumer = self._consumer
        with consumer._lock:
            if consumer._state is not _State.OPEN:
                return False
            try:
                consumer._reader.keep_alive()
            except FatalConsumerError:
                return False  # the consumer stopped itself; the application's next call raises
            except Exception as exc:  # noqa: BLE001 - the application's callback: its next call raises it
                consumer._deferred = exc
            return True

    def span_started(self, mode: str) -> Span:
        return self._consumer._telemetry.keepalive_started(mode)

    def span_ended(self, span: Span, mode: str, seconds: float) -> None:
        self._consumer._telemetry.keepalive_ended(span, mode, seconds)


class SafeConsumer(Consumer):
    """A ``confluent_kafka.Consumer`` whose pause state survives rebalances and which never
    hands out a record of a paused or unowned partition, nor loses one it withheld.

    ``conf`` is exactly the dict ``confluent_kafka.Consumer`` takes (keyword arguments
    are merged into it, as there). safeconsumer's own options are typed keyword-only
    arguments, never config keys.
    """

    # What an instance whose subclass never called __init__ sees: a stopped consumer, whose
    # calls upstream answers ("Consumer closed"), as it does for such a Consumer.
    _state = _State.CLOSED
    _fatal: FatalConsumerError | None = None
    _group_id = ""
    _lane: ClassVar[deque[Message]] = deque()  # never filled: an instance reads its table's lane
    _deferred: BaseException | None = None

    def __init__(
        self,
        conf: Mapping[str, Any] = _NO_CONF,
        /,
        *more: Any,
        keepalive: KeepaliveMode = "auto",
        keepalive_after: float | None = None,
        keepalive_max: float | None = None,
        on_fatal: FatalPolicy = "raise",
        commit_retry: CommitRetry | None = _DEFAULT_COMMIT_RETRY,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        explain_rebalances: bool = True,
        fetch_memory_budget: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Create the consumer.

        :param conf: the config dict ``confluent_kafka.Consumer`` takes; ``kwargs`` are merged in.
        :param keepalive: ``"auto"`` (default): if the application stops calling ``poll()`` /
            ``consume()`` for ``keepalive_after`` seconds, a background thread keeps the member
            in its group without consuming, until the next call. ``"off"``: never.
        :param keepalive_after: idle seconds before the automatic keepalive parks the consumer;
            default half of ``max.poll.interval.ms``.
        :param keepalive_max: ceiling of one automatic parked span, in seconds; past it the member
            is left to be evicted. Default ten times ``max.poll.interval.ms``.
        :param on_fatal: what a fatal error does once the consumer has stopped and closed:
            ``"raise"`` (default) raises it from the call that saw it and from every later
            call; ``"exit"`` also logs one CRITICAL line and ends the process with
            :data:`EXIT_GROUP_MAX_SIZE` (group full) or :data:`EXIT_FATAL`, even when the error
            was seen on the keepalive thread.
        :param commit_retry: how a synchronous ``commit()`` is retried while the group
            coordinator moves (:class:`CommitRetry`; default 5 attempts within 30 s, jittered
            backoff from 0.2 s up to 5 s). Ownership is checked again before every attempt.
            ``None``: never retried.
        :param meter_provider: OpenTelemetry meter provider for this consumer's metrics;
            default the global one (a no-op unless the application installed an SDK).
        :param tracer_provider: OpenTelemetry tracer provider for its spans; default the global one.
        :param explain_rebalances: find the cause of a rebalance a peer caused (which member
            joined or left) by describing the group with the admin API from a background
            thread, after the rebalance. ``False``: such rebalances are logged and counted
            with the cause ``unknown``. The causes of this member's own rebalances are always
            known.
        :param fetch_memory_budget: bytes this process's SafeConsumers may buffer at worst
            (``None``: no budget). On every assignment change the worst case of all of them is
            estimated from their configs and assignments (see docs/group-health.md); above the
            budget a WARNING names the settings to change. Raises ``ValueError`` if this
            consumer alone exceeds it before owning any partition.
        """
        # The config is judged as confluent_kafka and librdkafka judge it, before anything else.
        if more:
            raise TypeError("expected tuple containing single dict")
        if conf is _NO_CONF:
            if not kwargs:
                raise TypeError("expected configuration dict")
            conf = {}
        elif not isinstance(conf, dict):
            raise TypeError("expected configuration dict")
        if keepalive not in ("auto", "off"):
            raise ValueError(f"keepalive must be 'auto' or 'off', got {keepalive!r}")
        if on_fatal not in ("raise", "exit"):
            raise ValueError(f"on_fatal must be 'raise' or 'exit', got {on_fatal!r}")
        if not isinstance(explain_rebalances, bool):
            raise TypeError(f"explain_rebalances must be a bool, got {type(explain_rebalances).__name__}")
        budget = parse_budget(fetch_memory_budget)
        if commit_retry is not None and not isinstance(commit_retry, CommitRetry):
            raise TypeError(f"commit_retry must be a CommitRetry or None, got {type(commit_retry).__name__}")
        _positive("keepalive_after", keepalive_after, 1.0)
        _positive("keepalive_max", keepalive_max, 1.0)
        config: dict[str, Any] = {**conf, **kwargs}
        try:
            auto_store = _librdkafka_bool("enable.auto.offset.store", config.get("enable.auto.offset.store", True))
        except KafkaException:
            # librdkafka judges the settings in the dict's order: whatever it finds wrong first
            # (another key, another value) is the error upstream raises, so let it speak first.
            Consumer(config).close()
            raise
        # The gate stores offsets itself, once records are processed (see _delivery).
        config["enable.auto.offset.store"] = False
        logger.debug("creating SafeConsumer with config %s", redact_config(config))
        super().__init__(config)  # librdkafka judges every other setting here
        try:
            limits = FetchLimits.from_config(config)
        except ValueError:
            Consumer.close(self)
            raise
        alone = estimate(limits, 0)
        if budget is not None and alone.total > budget:
            Consumer.close(self)
            raise ValueError(
                f"fetch_memory_budget {mib(budget)} is less than this one consumer may buffer before it owns "
                f"any partition: {alone.describe()}; lower those settings or raise the budget"
            )
        max_poll_s = float(config.get("max.poll.interval.ms", 300000)) / 1000
        after = _positive("keepalive_after", keepalive_after, max_poll_s / 2)
        ceiling = _positive("keepalive_max", keepalive_max, max_poll_s * 10)
        self._group_id = str(config.get("group.id", ""))
        self._lock = threading.RLock()
        self._state = _State.OPEN
        self._subscription: list[str] | None = None
        self._on_fatal = on_fatal
        self._commit_retry = commit_retry
        self._fatal: FatalConsumerError | None = None
        self._ledger = PauseLedger()
        self._table = PartitionTable()
        self._client = RawClient(self, self._group_id, self._fail)
        self._client.instance_id = str(config["group.instance.id"]) if config.get("group.instance.id") else None
        self._gate = DeliveryGate(self._table, self._client, auto_store=auto_store)
        #: poll()'s fast lane (the table's; see Reader).
        self._lane = self._table.lane  # type: ignore[misc]  # the instance's own, not the class default
        self._telemetry = Telemetry(self._group_id, meter_provider=meter_provider, tracer_provider=tracer_provider)
        self._telemetry.bind(self._table)
        protocol = _protocol_label(config)
        self._explainer = RebalanceExplainer(
            group_id=self._group_id,
            protocol=protocol,
            telemetry=self._telemetry,
            describer=GroupDescriber(config, self._group_id) if explain_rebalances and self._group_id else None,
            member_id=self._member_id,
            owned=lambda: len(self._table.owned),
        )
        self._client.on_error = self._explainer.error_seen
        self._rebalancer = Rebalancer(
            self,
            self._client,
            table=self._table,
            ledger=self._ledger,
            gate=self._gate,
            telemetry=self._telemetry,
            incremental=_is_incremental(config),
            protocol=protocol,
            explainer=self._explainer,
            # Long enough for a partition that did start to hand over what it fetched (an empty
            # fetch answers after fetch.wait.max.ms).
            requery_delay=float(config.get("fetch.wait.max.ms", 500)) / 1000 + 0.5,
        )
        self._client.on_failed_offset_fetch = self._rebalancer.failed_offset_fetch
        self._reader = Reader(
            self._client, self._table, self._gate, self._rebalancer, real_call_every=min(1.0, max_poll_s / 10)
        )
        self._keeper = Keeper(_KeepaliveLink(self), mode=keepalive, after=after, ceiling=ceiling)
        key = id(self)
        PROCESS.join(key, limits, budget)
        weakref.finalize(self, PROCESS.leave, key)
        self._rebalancer.owned_changed = lambda n: PROCESS.check(key, n, self._group_id)

    def __repr__(self) -> str:
        return f"<SafeConsumer group={self._group_id!r} {self._state.value}>"

    def _member_id(self) -> str | None:
        """This member's id in its group, if it has one (for the rebalance explainer's thread)."""
        if self._state is not _State.OPEN:
            return None
        try:
            return Consumer.memberid(self) or None
        except (RuntimeError, KafkaException):
            return None

    # -- state ---------------------------------------------------------------------------
    def _closed(self, method: str) -> SafeConsumerError:
        """The error an addition (``pause_topics``, ``paused``, ...) raises on a stopped consumer:
        the fatal error that stopped it, else upstream's ``RuntimeError("Consumer closed")`` (a
        :class:`ConsumerClosedError`), with a note naming the consumer and the method."""
        if self._fatal is not None:
            return self._fatal
        return consumer_closed(("Consumer closed",), self._closed_note(method))

    def _closed_note(self, method: str) -> str:
        return f"SafeConsumer for group {self._group_id!r} is closed: cannot call {method}()"

    def _raise_deferred(self) -> None:
        """An exception a callback of the application raised on the keepalive thread: it reaches
        the application from its next call, as it would have from the poll that served it."""
        error, self._deferred = self._deferred, None
        if error is not None:
            raise error

    def _closed_meanwhile(self) -> bool:
        """Re-checked under the lock: another thread may have closed the consumer."""
        return self._state is _State.CLOSED

    def _stopped(self, method: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> Any:
        """A confluent_kafka method called on a stopped (closed, or never initialised) consumer.

        A fatal error that stopped it is raised again. Otherwise upstream's own method answers,
        so its argument checks, errors and messages are upstream's; its RuntimeError
        ("Consumer closed") becomes a ConsumerClosedError (a RuntimeError) with exactly its
        ``args``, and a note naming the consumer and the method.
        """
        if self._fatal is not None:
            raise self._fatal
        try:
            return method(self, *args, **kwargs)
        except RuntimeError as exc:
            raise consumer_closed(exc.args, self._closed_note(name)) from None

    def _fail(self, fatal: FatalConsumerError, err: KafkaError) -> NoReturn:
        """Stop at once: no more joins or heartbeats, close, remember, apply the exit policy, raise.

        The client boundary calls this for every fatal error, returned or raised, on any thread.
        """
        with self._lock:
            if self._fatal is None:
                self._fatal = fatal
                self._telemetry.fatal(error_type(err, fatal))
                if isinstance(fatal, GroupMaxSizeReachedError):
                    self._explainer.fatal("group_full")
                elif err.code() in FENCED_CODES or "fenced" in err.str().lower():
                    self._explainer.fatal("fenced")
                _log_critical(str(fatal), exiting=self._on_fatal == "exit")
                self._keeper.stop(join=False)
                self._explainer.close(wait=False)
                if self._state is _State.OPEN:
                    self._state = _State.CLOSING
                    self._rebalancer.closing = True
                    # librdkafka already returned records the application will never see (the
                    # rest of this batch, the read-ahead): store nothing more, also not in the
                    # revoke callbacks close() runs. Only offsets stored before now get committed.
                    self._gate.auto_store = False
                    PROCESS.leave(id(self))  # before the close's revocations: they are no assignment change
                    try:
                        self._client.close_quietly()
                    finally:
                        self._state = _State.CLOSED
                        self._table.cleared()
                if self._on_fatal == "exit":
                    _exit_process(EXIT_GROUP_MAX_SIZE if isinstance(fatal, GroupMaxSizeReachedError) else EXIT_FATAL)
        raise self._fatal from KafkaException(err)

    # -- subscription --------------------------------------------------------------------
    @_upstream_arguments
    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = _NO_CALLBACK,
        on_revoke: RebalanceCallback | None = _NO_CALLBACK,
        on_lost: RebalanceCallback | None = _NO_CALLBACK,
    ) -> None:
        given = {
            name: cb
            for name, cb in (("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost))
            if cb is not _NO_CALLBACK
        }
        if self._state is _State.CLOSED:
            self._stopped(Consumer.subscribe, "subscribe", topics, **given)
            return
        if not all(callable(cb) for cb in given.values()):
            Consumer.subscribe(
                self, topics, **cast("dict[str, Any]", given)
            )  # upstream raises its TypeError ("... expects a callable")
            raise TypeError("rebalance callbacks must be callable")  # pragma: no cover - upstream raised
        with self._lock:
            rb = self._rebalancer
            self._client.call(
                Consumer.subscribe, topics, on_assign=rb.on_assign, on_revoke=rb.on_revoke, on_lost=rb.on_lost
            )
            rb.user_on_assign = given.get("on_assign")
            rb.user_on_revoke = given.get("on_revoke")
            rb.user_on_lost = given.get("on_lost")
            rb.subscribed = True
            rb.requery.forget(None)
            self._subscription = list(topics)

    @_upstream_arguments
    def unsubscribe(self) -> None:
        if self._state is _State.CLOSED:
            self._stopped(Consumer.unsubscribe, "unsubscribe")
            return
        with self._lock:
            self._gate.flush(force=True)  # stored before unsubscribe (I9)
            self._client.call(Consumer.unsubscribe)
            self._rebalancer.unsubscribed()
            self._subscription = None

    # -- consuming -----------------------------------------------------------------------
    def poll(self, *args: Any, **kwargs: Any) -> Message | None:
        """``poll(timeout=-1)``: one record or error event, or None when ``timeout`` seconds pass."""
        # The arguments are taken as given, so that a call upstream's parser would refuse reaches
        # it exactly as written (its TypeError and message).
        if kwargs or len(args) > 1:
            return self._poll_unusual(args, kwargs)
        timeout = args[0] if args else -1
        # The fast lane: records of a batch that was wholly deliverable when it arrived, not
        # yet handed out. Everything that could change that (a rebalance, pause, park, seek,
        # close) first takes the lane back under the lock; an atomic pop here either beat it
        # or finds the lane empty. The deadline keeps a real call reaching librdkafka.
        lane = self._lane
        if lane and timeout.__class__ in _TIMEOUT_TYPES and _monotonic() < self._reader.lane_until:
            try:
                return lane.popleft()
            except IndexError:
                pass
        if self._state is _State.CLOSED or timeout.__class__ not in _TIMEOUT_TYPES:
            # Stopped, or a timeout upstream may refuse: upstream's own poll() answers first.
            return self._poll_unusual(args, kwargs)
        # acquire/release rather than ``with``: the context-manager protocol costs as much
        # again as the lock itself.
        lock = self._lock
        lock.acquire()
        try:
            if self._closed_meanwhile():
                return cast("Message | None", self._stopped(Consumer.poll, "poll", timeout))
            keeper = self._keeper
            if keeper.auto_parked or not keeper.app_active:
                keeper.app_is_back()
            self._raise_deferred()
            return self._reader.poll(float(cast(float, timeout)))
        finally:
            lock.release()

    def _poll_unusual(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Message | None:
        if self._state is _State.CLOSED:
            return cast("Message | None", self._stopped(Consumer.poll, "poll", *args, **kwargs))
        # SafeConsumer.poll, never self.poll: a subclass's override is not re-entered (upstream's
        # poll() calls no Python method either).
        if not args and kwargs.keys() == {"timeout"}:
            return SafeConsumer.poll(self, kwargs["timeout"])
        timeout = args[0] if len(args) == 1 and not kwargs else None
        if timeout is None or not (hasattr(type(timeout), "__float__") or hasattr(type(timeout), "__index__")):
            Consumer.poll(self, *args, **kwargs)  # raises upstream's TypeError
            raise TypeError("poll() takes one number, timeout")  # pragma: no cover - upstream raised
        return SafeConsumer.poll(self, float(timeout))

    def consume(self, *args: Any, **kwargs: Any) -> list[Message]:
        """``consume(num_messages=1, timeout=-1)``: up to ``num_messages`` records and error events."""
        # The arguments are taken as given (see poll()); upstream judges any it would refuse.
        named: dict[str, Any] = {}
        if len(args) <= 2 and kwargs.keys() <= {"num_messages", "timeout"}:
            named = dict(zip(("num_messages", "timeout"), args, strict=False))
            named = {**named, **kwargs} if not named.keys() & kwargs.keys() else {"conflict": True}
        num_messages, timeout = named.get("num_messages", 1), named.get("timeout", -1)
        if self._state is _State.CLOSED:
            return cast("list[Message]", self._stopped(Consumer.consume, "consume", *args, **kwargs))
        if "conflict" in named or (not named and (args or kwargs)) or not _valid_consume(num_messages, timeout):
            Consumer.consume(self, *args, **kwargs)  # raises upstream's TypeError or ValueError
            raise TypeError("consume() takes num_messages and timeout")  # pragma: no cover - upstream raised
        with self._lock:
            keeper = self._keeper
            if keeper.auto_parked or not keeper.app_active:
                keeper.app_is_back()
            self._raise_deferred()
            return self._reader.consume(num_messages & 0xFFFFFFFF, timeout)

    def _give_back(self, result: Message | list[Message] | None) -> None:
        """What a poll()/consume() returned that never reached the application (its asyncio caller
        was cancelled, see :mod:`safeconsumer.aio`): not processed, handed out again first."""
        msgs = result if isinstance(result, list) else [] if result is None else [result]
        if not msgs:
            return
        with self._lock:
            if self._state is _State.CLOSED:
                return  # closed meanwhile: unprocessed, so never stored; the next owner reads them
            self._table.given_back(msgs)
            self._reader.untrust()

    def process(self, message: Message) -> contextlib.AbstractContextManager[Span]:
        """Trace your processing of one record: ``with consumer.process(msg): handle(msg)``.

        Starts a ``process <topic>`` span (kind CONSUMER, messaging semantic conventions:
        system, destination name and partition, offset, consumer group) that continues the
        trace the record carries in its ``traceparent`` header, and makes it current, so
        spans your code starts inside are its children. An exception leaving the block is
        recorded on the span and re-raised. Payloads and keys are never recorded.
        """
        if self._state is _State.CLOSED:
            raise self._closed("process")
        return self._telemetry.process(message)

    # -- keepalive -----------------------------------------------------------------------
    @contextlib.contextmanager
    def keepalive(self) -> Iterator[None]:
        """Keep the member in its group while the block does long work, without consuming.

        Every assigned partition (and any assigned during the block) is parked: paused for
        the keepalive only, apart from your own pause intent, which ``pause``/``resume``
        calls inside the block still change. A background thread polls often enough for
        ``max.poll.interval.ms`` and serves rebalances - rebalance callbacks then run on that
        thread. Records fetched meanwhile are withheld, never lost. On exit your pause
        intent applies again and consumption resumes in order. Blocks nest, also across
        threads: the consumer stays parked until the last one exits. Entering the block is
        not coming back: the offsets of what you hold are not stored until your next call.
        """
        if self._state is _State.CLOSED:
            raise self._closed("keepalive")
        self._keeper.enter()
        try:
            yield
        finally:
            if self._state is _State.OPEN:
                self._keeper.exit()

    @property
    def parked(self) -> bool:
        """Deprecated: ``pause_state().parked``. Whether the keepalive has parked this consumer now.

        Not among SPEC's additions to upstream's API; removed in 1.0.
        """
        warnings.warn(
            "SafeConsumer.parked is deprecated: use consumer.pause_state().parked",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._keeper.parked

    # -- assignment ------------------------------------------------------------------------
    @_upstream_arguments
    def assign(self, partitions: list[TopicPartition], /) -> None:
        if self._state is _State.CLOSED:
            self._stopped(Consumer.assign, "assign", partitions)
            return
        _partition_keys(self, partitions, "assign")
        with self._lock:
            self._rebalancer.assign(partitions)

    @_upstream_arguments
    def incremental_assign(self, partitions: list[TopicPartition], /) -> None:
        if self._state is _State.CLOSED:
            self._stopped(Consumer.incremental_assign, "incremental_assign", partitions)
            return
        _partition_keys(self, partitions, "incremental_assign")
        with self._lock:
            self._rebalancer.incremental_assign(partitions)

    @_upstream_arguments
    def incremental_unassign(self, partitions: list[TopicPartition], /) -> None:
        if self._state is _State.CLOSED:
            self._stopped(Consumer.incremental_unassign, "incremental_unassign", partitions)
            return
        _partition_keys(self, partitions, "incremental_unassign")
        with self._lock:
            self._rebalancer.unassign(partitions)

    @_upstream_arguments
    def unassign(self) -> None:
        if self._state is _State.CLOSED:
            self._stopped(Consumer.unassign, "unassign")
            return
        with self._lock:
            self._rebalancer.unassign(None)

    @_upstream_arguments
    def assignment(self) -> list[TopicPartition]:
        if self._state is _State.CLOSED:
            return cast("list[TopicPartition]", self._stopped(Consumer.assignment, "assignment"))
        with self._lock:
            result: list[TopicPartition] = self._client.call(Consumer.assignment)
            return result

    def owns(self, tp_or_message: TopicPartition | Message | tuple[str, int]) -> bool:
        """Whether this consumer owns that partition right now (a TopicPartition, Message or key)."""
        if self._state is _State.CLOSED:
            raise self._closed("owns")
        if isinstance(tp_or_message, TopicPartition):
            key = (tp_or_message.topic, tp_or_message.partition)
        elif isinstance(tp_or_message, Message):
            key = (cast(str, tp_or_message.topic()), cast(int, tp_or_message.partition()))
        elif isinstance(tp_or_message, tuple) and len(tp_or_message) == 2:
            key = (str(tp_or_message[0]), int(tp_or_message[1]))
        else:
            raise TypeError(f"owns() takes a TopicPartition, a Message or (topic, partition), got {tp_or_message!r}")
        return key in self._table.owned

    # -- pause ---------------------------------------------------------------------------
    @_upstream_arguments
    def pause(self, partitions: list[TopicPartition] = _WHOLE_CONSUMER) -> None:
        """Pause ``partitions`` (partition marks), or with no argument the whole consumer.

        Marks are intent: they survive rebalances while the partition stays with this
        consumer. Nothing is returned for a paused partition until it is resumed.
        """
        self._change_pause("pause", partitions, mark=True)

    @_upstream_arguments
    def resume(self, partitions: list[TopicPartition] = _WHOLE_CONSUMER) -> None:
        """Clear the partition marks of ``partitions``, or with no argument the consumer mark.

        A topic or consumer mark still covering a partition keeps it paused.
        """
        self._change_pause("resume", partitions, mark=False)

    def _change_pause(self, method: str, partitions: object, *, mark: bool) -> None:
        whole = partitions is _WHOLE_CONSUMER
        if self._state is _State.CLOSED:
            if whole:
                raise self._closed(method)  # the addition: pause()/resume() of the consumer
            self._stopped(getattr(Consumer, method), method, partitions)
            return
        keys = None if whole else _partition_keys(self, partitions, method)
        with self._lock:
            if keys is None:
                self._ledger.set_consumer(mark)
            elif mark:
                self._ledger.mark_partitions(keys)
            else:
                self._ledger.unmark_partitions(keys)
            self._rebalancer.sync()

    def pause_topics(self, topics: Iterable[str | Any] | str | Any) -> None:
        """Pause whole topics: names, ``^regex`` strings, or compiled ``re.Pattern`` objects.

        A topic mark covers every partition of matching topics this consumer is ever
        assigned, including partitions and topics that appear later.
        """
        self._change_topics("pause_topics", topics, mark=True)

    def resume_topics(self, topics: Iterable[str | Any] | str | Any) -> None:
        """Clear topic marks set by :meth:`pause_topics` (the same names or patterns)."""
        self._change_topics("resume_topics", topics, mark=False)

    def _change_topics(self, method: str, topics: object, *, mark: bool) -> None:
        if self._state is _State.CLOSED:
            raise self._closed(method)
        names, patterns = parse_topic_entries(topics)
        with self._lock:
            if self._subscription is None and not self._table.owned:
                raise PauseStateError(
                    f"{method}() needs a subscription or an assignment to apply to: call subscribe() or assign() first"
                )
            if mark and self._subscription is not None:
                never = subscription_can_match(self._subscription, names, patterns)
                if never:
                    raise InvalidPauseRequest(
                        f"{method}(): the subscription {self._subscription} can never deliver {never}"
                    )
            if mark:
                self._ledger.mark_topics(names, patterns)
            else:
                self._ledger.unmark_topics(names, patterns)
            self._rebalancer.sync()

    def paused(self) -> list[TopicPartition]:
        """The effectively paused partitions of the current assignment, sorted."""
        if self._state is _State.CLOSED:
            raise self._closed("paused")
        with self._lock:
            effective = self._ledger.effective(self._table.owned)
            return [TopicPartition(t, p) for t, p in sorted(effective)]

    def pause_state(self) -> PauseState:
        """A frozen snapshot of pause intent (consumer, topics, patterns, partitions) and its effect."""
        if self._state is _State.CLOSED:
            raise self._closed("pause_state")
        with self._lock:
            return self._ledger.snapshot(self._table.owned, parked=self._keeper.parked)

    def delivery_stats(self) -> DeliveryStats:
        """Deprecated: ``safeconsumer.delivery_stats(consumer)``. Counters of the delivery gate.

        Not among SPEC's additions to upstream's API; removed in 1.0.
        """
        warnings.warn(
            "SafeConsumer.delivery_stats() is deprecated: use safeconsumer.delivery_stats(consumer)",
            DeprecationWarning,
            stacklevel=2,
        )
        return delivery_stats(self)

    # -- offsets -------------------------------------------------------------------------
    @overload
    def commit(self, *, asynchronous: Literal[True] = ...) -> None: ...
    @overload
    def commit(self, *, asynchronous: Literal[False]) -> list[TopicPartition]: ...
    @overload
    def commit(self, *, message: Message, asynchronous: Literal[True] = ...) -> None: ...
    @overload
    def commit(self, *, message: Message, asynchronous: Literal[False]) -> list[TopicPartition]: ...
    @overload
    def commit(self, *, offsets: list[TopicPartition], asynchronous: Literal[True] = ...) -> None: ...
    @overload
    def commit(self, *, offsets: list[TopicPartition], asynchronous: Literal[False]) -> list[TopicPartition]: ...
    @_upstream_arguments
    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        if self._state is _State.CLOSED:
            return cast(
                "list[TopicPartition] | None",
                self._stopped(
                    Consumer.commit, "commit", **_given(message=message, offsets=offsets), asynchronous=asynchronous
                ),
            )
        if message is not None:
            if offsets is not None or not _is_record(message):
                return cast(
                    "list[TopicPartition] | None",
                    self._upstream_rejects(Consumer.commit, message, offsets, asynchronous=asynchronous),
                )
            offsets = [next_offset(message)]
        elif offsets is not None and not _is_partition_list(offsets):
            return cast(
                "list[TopicPartition] | None",
                self._upstream_rejects(Consumer.commit, message, offsets, asynchronous=asynchronous),
            )
        if asynchronous or self._commit_retry is None:
            with self._lock:
                return self._commit_once(self._committable(offsets), asynchronous=asynchronous)
        # Synchronous: retried on coordinator errors. Ownership is checked before every attempt,
        # and what was dropped stays dropped: a partition that moved is never retried.
        result: list[TopicPartition] | None = None
        with self._lock:
            owned_at_first = set(self._table.owned)
        for attempt in self._commit_retry.retrying():
            with attempt, self._lock:
                committable = self._committable(offsets, owned_at_first)
                result = self._commit_once(committable, asynchronous=False)
                offsets = committable.offsets
        return result

    def _upstream_rejects(self, method: Callable[..., Any], message: object, offsets: object, **kwargs: Any) -> Any:
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
            return self._client.call(method, **_given(message=message, offsets=offsets), **kwargs)

    def _committable(
        self, offsets: list[TopicPartition] | None, owned_at_first: set[Key] | None = None
    ) -> _Committable:
        """What a commit may write now (None: the stored offsets). Call with the lock held.

        I7: a group member never writes an offset of a partition it does not own; a consumer
        that never subscribed commits what it is told, as confluent_kafka does, except that a
        retried commit never writes a partition it owned when the commit began and lost since.
        """
        if self._state is _State.CLOSED:
            raise self._closed("commit")
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

    @_upstream_arguments
    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        if self._state is _State.CLOSED:
            self._stopped(Consumer.store_offsets, "store_offsets", **_given(message=message, offsets=offsets))
            return
        # upstream's order: the arguments, their types, an error event; then the configuration.
        if (
            (message is None) == (offsets is None)
            or (message is not None and (not isinstance(message, Message) or message.error() is not None))
            or (offsets is not None and not _is_partition_list(offsets))
        ):
            self._upstream_rejects(Consumer.store_offsets, message, offsets)
            return
        if self._gate.auto_store:
            # librdkafka runs with the store off underneath; with the application's setting on,
            # upstream refuses a manual store: so do we.
            raise KafkaException(
                KafkaError(KafkaError._INVALID_ARG, "StoreOffsets failed: Local: Invalid argument or configuration")
            )
        if message is not None and not _is_record(message):
            topic, partition = message.topic(), message.partition()
            if self._rebalancer.subscribed and topic is not None and partition is not None:
                with self._lock:  # I7 first: a member never stores for a partition it does not own
                    if not self._gate.owned_offsets("store_offsets", [TopicPartition(topic, partition)]):
                        return
            self._upstream_rejects(Consumer.store_offsets, message, offsets)
            return
        with self._lock:
            if not self._rebalancer.subscribed:
                self._client.call(Consumer.store_offsets, **_given(message=message, offsets=offsets))
                return
            if message is not None:
                key = TopicPartition(cast(str, message.topic()), cast(int, message.partition()))
                if self._gate.owned_offsets("store_offsets", [key]):
                    self._client.call(Consumer.store_offsets, message=message)
                return
            kept = self._gate.owned_offsets("store_offsets", cast("list[TopicPartition]", offsets))
            if kept:
                self._client.store(kept)

    @_upstream_arguments
    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        if self._state is _State.CLOSED:
            return cast("list[TopicPartition]", self._stopped(Consumer.committed, "committed", partitions, timeout))
        with self._lock:
            result: list[TopicPartition] = self._client.call(Consumer.committed, partitions, timeout)
            return result

    @_upstream_arguments
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """As confluent_kafka's: the offset after the last record *the application* received."""
        if self._state is _State.CLOSED:
            return cast("list[TopicPartition]", self._stopped(Consumer.position, "position", partitions))
        with self._lock:
            return self._gate.positions(partitions)

    @_upstream_arguments
    def seek(self, partition: TopicPartition) -> None:
        if self._state is _State.CLOSED:
            self._stopped(Consumer.seek, "seek", partition)
            return
        with self._lock:
            self._client.call(Consumer.seek, partition)
            # Withheld records of a rewound partition would be delivered out of order.
            self._table.seeked((partition.topic, partition.partition), partition.offset)
            self._rebalancer.seeked((partition.topic, partition.partition))

    # -- metadata and pass-through -------------------------------------------------------
    @_upstream_arguments
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        if self._state is _State.CLOSED:
            return cast(
                "tuple[int, int]",
                self._stopped(Consumer.get_watermark_offsets, "get_watermark_offsets", partition, timeout, cached),
            )
        with self._lock:
            watermarks = self._client.call(Consumer.get_watermark_offsets, partition, timeout, cached)
            return cast("tuple[int, int]", watermarks)

    @_upstream_arguments
    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        if self._state is _State.CLOSED:
            return cast(
                "list[TopicPartition]",
                self._stopped(Consumer.offsets_for_times, "offsets_for_times", partitions, timeout),
            )
        with self._lock:
            return cast("list[TopicPartition]", self._client.call(Consumer.offsets_for_times, partitions, timeout))

    @_upstream_arguments
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        if self._state is _State.CLOSED:
            return self._stopped(Consumer.list_topics, "list_topics", topic, timeout)
        with self._lock:
            return self._client.call(Consumer.list_topics, topic, timeout)

    @_upstream_arguments
    def cluster_id(self, timeout: float = -1) -> str:
        if self._state is _State.CLOSED:
            return cast(str, self._stopped(Consumer.cluster_id, "cluster_id", timeout))
        with self._lock:
            return cast(str, self._client.call(Consumer.cluster_id, timeout))

    @_upstream_arguments
    def memberid(self) -> str:
        if self._state is _State.CLOSED:
            return cast(str, self._stopped(Consumer.memberid, "memberid"))
        with self._lock:
            return cast(str, self._client.call(Consumer.memberid))

    @_upstream_arguments
    def consumer_group_metadata(self) -> Any:
        if self._state is _State.CLOSED:
            return self._stopped(Consumer.consumer_group_metadata, "consumer_group_metadata")
        with self._lock:
            return self._client.call(Consumer.consumer_group_metadata)

    @_upstream_arguments
    def set_sasl_credentials(self, username: str, password: str) -> None:
        if self._state is _State.CLOSED:
            self._stopped(Consumer.set_sasl_credentials, "set_sasl_credentials", username, password)
            return
        with self._lock:
            self._client.call(Consumer.set_sasl_credentials, username, password)

    # -- lifecycle -----------------------------------------------------------------------
    @_upstream_arguments
    def close(self) -> None:
        """Leave the group and release the client. Calling it again does nothing. Any thread may call it."""
        if self._state is not _State.OPEN:
            return
        # Both threads are marked stopped before the lock is taken (the keeper polls under it and
        # checks the mark there: it never touches the client again), but are neither woken nor
        # joined until librdkafka closed: the time from the application's last call to
        # librdkafka's close stays close to upstream's, so a callback event (stats_cb, say) due
        # just then is served where upstream serves it. close()'s own revocations are explained
        # in place.
        self._keeper.stop(join=False, wake=False)
        self._explainer.stop(wake=False)
        try:
            self._close_client()
        finally:
            self._keeper.stop()
            self._explainer.close()

    def _close_client(self) -> None:
        with self._lock:
            if self._state is not _State.OPEN:
                return
            self._state = _State.CLOSING
            self._rebalancer.closing = True
            failed: BaseException | None = None
            try:
                self._table.came_back()  # close() is the application coming back (I8)
                self._gate.flush(force=True)
                try:
                    # A loss announced behind an error event read ahead: upstream's close serves it.
                    self._rebalancer.run_pending()
                except Exception as exc:  # noqa: BLE001 - the app's callback: raised once closed
                    failed = exc
                # Out of the process's fetch memory first: the revocations below are no growth.
                PROCESS.leave(id(self))
                # librdkafka runs the final revoke callbacks (and the final auto-commit) here.
                self._client.call(Consumer.close)
            finally:
                self._state = _State.CLOSED
                self._table.cleared()
                PROCESS.leave(id(self))
            if failed is not None:
                raise failed

    @_upstream_arguments
    def __enter__(self) -> SafeConsumer:
        if self._fatal is not None:
            raise self._fatal
        return self

    @_upstream_arguments
    def __exit__(self, exc_type: object, exc_value: object, traceback: object, /) -> None:
        SafeConsumer.close(self)  # as upstream's: a subclass's close() override is not called


def _poll_signature(self: SafeConsumer, timeout: float = -1) -> Message | None:
    """The signature ``poll()`` shows: upstream's."""
    return None


def _consume_signature(self: SafeConsumer, num_messages: int = 1, timeout: float = -1) -> list[Message]:
    """The signature ``consume()`` shows: upstream's."""
    return []


SafeConsumer.poll.__signature__ = inspect.signature(_poll_signature)  # type: ignore[attr-defined]
SafeConsumer.consume.__signature__ = inspect.signature(_consume_signature)  # type: ignore[attr-defined]


def delivery_stats(consumer: SafeConsumer) -> DeliveryStats:
    """Counters of ``consumer``'s delivery gate: delivered, withheld, released, purged, dropped offsets.

    A function rather than a method: the consumer's own namespace stays upstream's plus
    SPEC's additions. Readable after ``close()`` too (the final counts).
    """
    if not isinstance(consumer, SafeConsumer):
        raise TypeError(f"delivery_stats() takes a SafeConsumer, got {type(consumer).__name__}")
    if "_gate" not in vars(consumer):  # a subclass that never called __init__: nothing was counted
        raise consumer._closed("delivery_stats")
    with consumer._lock:
        return consumer._gate.stats()
