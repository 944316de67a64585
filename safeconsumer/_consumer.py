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
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, NoReturn, cast, overload

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, TracerProvider

from ._client import RawClient
from ._config import redact_config
from ._delivery import DeliveryGate, DeliveryStats, next_offset
from ._errors import (
    EXIT_FATAL,
    EXIT_GROUP_MAX_SIZE,
    ConsumerClosedError,
    FatalConsumerError,
    GroupMaxSizeReachedError,
    InvalidPauseRequest,
    PauseStateError,
    SafeConsumerError,
    error_type,
)
from ._keepalive import KeepaliveMode, Keeper
from ._partitions import PartitionTable
from ._pause import Key, PauseLedger, PauseState, keys_of, parse_topic_entries, subscription_can_match
from ._reader import Reader
from ._rebalance import RebalanceCallback, Rebalancer
from ._retry import CommitRetry
from .otel import Telemetry

logger = logging.getLogger("safeconsumer")

_TRUE = {"true", "1", "yes", "on"}

FatalPolicy = Literal["raise", "exit"]

_monotonic = time.monotonic

_DEFAULT_COMMIT_RETRY = CommitRetry()


class _State(enum.Enum):
    OPEN = "open"
    """Usable: every public method works."""
    CLOSING = "closing"
    """Inside close(): the final revoke callbacks may still commit and read state."""
    CLOSED = "closed"
    """close() ran: every method but close() raises ConsumerClosedError."""


def _conf_bool(value: object, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


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


def _partition_keys(partitions: object, method: str) -> list[Key]:
    """Keys of a TopicPartition list, raising TypeError as confluent_kafka does for bad input."""
    if not isinstance(partitions, list) or not all(isinstance(tp, TopicPartition) for tp in partitions):
        raise TypeError(f"{method}() requires a list of TopicPartition, got {type(partitions).__name__}")
    return [(tp.topic, tp.partition) for tp in partitions]


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

    def __init__(
        self,
        conf: Mapping[str, Any] | None = None,
        /,
        *,
        keepalive: KeepaliveMode = "auto",
        keepalive_after: float | None = None,
        keepalive_max: float | None = None,
        on_fatal: FatalPolicy = "raise",
        commit_retry: CommitRetry | None = _DEFAULT_COMMIT_RETRY,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
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
        """
        if not isinstance(conf, Mapping) and conf is not None:
            raise TypeError(f"SafeConsumer expects a config dict, got {type(conf).__name__}")
        if keepalive not in ("auto", "off"):
            raise ValueError(f"keepalive must be 'auto' or 'off', got {keepalive!r}")
        if on_fatal not in ("raise", "exit"):
            raise ValueError(f"on_fatal must be 'raise' or 'exit', got {on_fatal!r}")
        if commit_retry is not None and not isinstance(commit_retry, CommitRetry):
            raise TypeError(f"commit_retry must be a CommitRetry or None, got {type(commit_retry).__name__}")
        config: dict[str, Any] = {**(conf or {}), **kwargs}
        max_poll_s = float(config.get("max.poll.interval.ms", 300000)) / 1000
        after = _positive("keepalive_after", keepalive_after, max_poll_s / 2)
        ceiling = _positive("keepalive_max", keepalive_max, max_poll_s * 10)
        self._group_id = str(config.get("group.id", ""))
        auto_store = _conf_bool(config.get("enable.auto.offset.store"), True)
        # The gate stores offsets itself, once records are processed (see _delivery).
        config["enable.auto.offset.store"] = False
        logger.debug("creating SafeConsumer with config %s", redact_config(config))
        super().__init__(config)
        self._lock = threading.RLock()
        self._state = _State.OPEN
        self._subscription: list[str] | None = None
        self._on_fatal = on_fatal
        self._commit_retry = commit_retry
        self._fatal: FatalConsumerError | None = None
        self._ledger = PauseLedger()
        self._table = PartitionTable()
        self._client = RawClient(self, self._group_id, self._fail)
        self._gate = DeliveryGate(self._table, self._client, auto_store=auto_store)
        self._reader = Reader(self._client, self._table, self._gate, real_call_every=min(1.0, max_poll_s / 10))
        #: poll()'s fast lane (the table's; see Reader).
        self._lane = self._table.lane
        self._telemetry = Telemetry(self._group_id, meter_provider=meter_provider, tracer_provider=tracer_provider)
        self._telemetry.bind(self._table)
        self._rebalancer = Rebalancer(
            self,
            self._client,
            table=self._table,
            ledger=self._ledger,
            gate=self._gate,
            telemetry=self._telemetry,
            incremental=_is_incremental(config),
            protocol=_protocol_label(config),
        )
        self._keeper = Keeper(_KeepaliveLink(self), mode=keepalive, after=after, ceiling=ceiling)

    def __repr__(self) -> str:
        return f"<SafeConsumer group={self._group_id!r} {self._state.value}>"

    # -- state ---------------------------------------------------------------------------
    def _closed(self, method: str) -> SafeConsumerError:
        """The error a call on a stopped consumer raises: the fatal error that stopped it, if any."""
        if self._fatal is not None:
            return self._fatal
        return ConsumerClosedError(f"SafeConsumer for group {self._group_id!r} is closed: cannot call {method}()")

    def _fail(self, fatal: FatalConsumerError, err: KafkaError) -> NoReturn:
        """Stop at once: no more joins or heartbeats, close, remember, apply the exit policy, raise.

        The client boundary calls this for every fatal error, returned or raised, on any thread.
        """
        with self._lock:
            if self._fatal is None:
                self._fatal = fatal
                self._telemetry.fatal(error_type(err, fatal))
                _log_critical(str(fatal), exiting=self._on_fatal == "exit")
                self._keeper.stop(join=False)
                if self._state is _State.OPEN:
                    self._state = _State.CLOSING
                    self._rebalancer.closing = True
                    # librdkafka already returned records the application will never see (the
                    # rest of this batch, the read-ahead): store nothing more, also not in the
                    # revoke callbacks close() runs. Only offsets stored before now get committed.
                    self._gate.auto_store = False
                    try:
                        self._client.close_quietly()
                    finally:
                        self._state = _State.CLOSED
                        self._table.cleared()
                if self._on_fatal == "exit":
                    _exit_process(EXIT_GROUP_MAX_SIZE if isinstance(fatal, GroupMaxSizeReachedError) else EXIT_FATAL)
        raise self._fatal from KafkaException(err)

    # -- subscription --------------------------------------------------------------------
    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        if self._state is _State.CLOSED:
            raise self._closed("subscribe")
        for name, cb in (("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost)):
            if cb is not None and not callable(cb):
                raise TypeError(f"{name} expects a callable, got {type(cb).__name__}")
        with self._lock:
            rb = self._rebalancer
            self._client.call(
                Consumer.subscribe, topics, on_assign=rb.on_assign, on_revoke=rb.on_revoke, on_lost=rb.on_lost
            )
            rb.user_on_assign, rb.user_on_revoke, rb.user_on_lost = on_assign, on_revoke, on_lost
            rb.subscribed = True
            self._subscription = list(topics)

    def unsubscribe(self) -> None:
        if self._state is _State.CLOSED:
            raise self._closed("unsubscribe")
        with self._lock:
            self._gate.flush(force=True)  # stored before unsubscribe (I9)
            self._client.call(Consumer.unsubscribe)
            self._rebalancer.unsubscribed()
            self._subscription = None

    # -- consuming -----------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> Message | None:
        # The fast lane: records of a batch that was wholly deliverable when it arrived, not
        # yet handed out. Everything that could change that (a rebalance, pause, park, seek,
        # close) first takes the lane back under the lock; an atomic pop here either beat it
        # or finds the lane empty. The deadline keeps a real call reaching librdkafka.
        lane = self._lane
        if lane and _monotonic() < self._reader.lane_until:
            try:
                return lane.popleft()
            except IndexError:
                pass
        # acquire/release rather than ``with``: the context-manager protocol costs as much
        # again as the lock itself.
        lock = self._lock
        lock.acquire()
        try:
            if self._state is _State.CLOSED:
                raise self._closed("poll")
            keeper = self._keeper
            if keeper.auto_parked or not keeper.app_active:
                keeper.app_is_back()
            return self._reader.poll(-1.0 if timeout is None else timeout)
        finally:
            lock.release()

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        if self._state is _State.CLOSED:
            raise self._closed("consume")
        with self._lock:
            keeper = self._keeper
            if keeper.auto_parked or not keeper.app_active:
                keeper.app_is_back()
            return self._reader.consume(num_messages, timeout)

    def process(self, message: Message) -> contextlib.AbstractContextManager[Span]:
        """Trace your processing of one record: ``with consumer.process(msg): handle(msg)``.

        Starts a ``process <topic>`` span (kind CONSUMER, messaging semantic conventions:
        system, destination name and partition, offset, consumer group) that continues the
        trace the record carries in its ``traceparent`` header, and makes it current, so
        spans your code starts inside are its children. An exception leaving the block is
        recorded on the span and re-raised. Payloads and keys are never recorded.
        """
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
        """Whether the keepalive has parked this consumer right now (manual or automatic)."""
        return self._keeper.parked

    # -- assignment ------------------------------------------------------------------------
    def assign(self, partitions: list[TopicPartition]) -> None:
        if self._state is _State.CLOSED:
            raise self._closed("assign")
        _partition_keys(partitions, "assign")
        with self._lock:
            self._rebalancer.assign(partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        if self._state is _State.CLOSED:
            raise self._closed("incremental_assign")
        _partition_keys(partitions, "incremental_assign")
        with self._lock:
            self._rebalancer.incremental_assign(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        if self._state is _State.CLOSED:
            raise self._closed("incremental_unassign")
        _partition_keys(partitions, "incremental_unassign")
        with self._lock:
            self._rebalancer.unassign(partitions)

    def unassign(self) -> None:
        if self._state is _State.CLOSED:
            raise self._closed("unassign")
        with self._lock:
            self._rebalancer.unassign(None)

    def assignment(self) -> list[TopicPartition]:
        if self._state is _State.CLOSED:
            raise self._closed("assignment")
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
    def pause(self, partitions: list[TopicPartition] | None = None) -> None:
        """Pause ``partitions`` (partition marks), or with no argument the whole consumer.

        Marks are intent: they survive rebalances while the partition stays with this
        consumer. Nothing is returned for a paused partition until it is resumed.
        """
        self._change_pause("pause", partitions, mark=True)

    def resume(self, partitions: list[TopicPartition] | None = None) -> None:
        """Clear the partition marks of ``partitions``, or with no argument the consumer mark.

        A topic or consumer mark still covering a partition keeps it paused.
        """
        self._change_pause("resume", partitions, mark=False)

    def _change_pause(self, method: str, partitions: list[TopicPartition] | None, *, mark: bool) -> None:
        if self._state is _State.CLOSED:
            raise self._closed(method)
        keys = None if partitions is None else keys_of(partitions)
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
            return self._ledger.snapshot(self._table.owned)

    def delivery_stats(self) -> DeliveryStats:
        """Counters of the delivery gate: delivered, withheld, released, purged, dropped offsets."""
        with self._lock:
            return self._gate.stats()

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
    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        if self._state is _State.CLOSED:
            raise self._closed("commit")
        if message is not None and offsets is not None:
            raise TypeError("commit() takes message or offsets, not both")
        if message is not None:
            if not isinstance(message, Message):
                raise TypeError(f"commit() message must be a Message, got {type(message).__name__}")
            if message.error() is not None:
                raise TypeError("commit() cannot commit an error event")
            offsets = [next_offset(message)]
        if offsets is not None:
            _partition_keys(offsets, "commit")
        if asynchronous or self._commit_retry is None:
            with self._lock:
                return self._commit_once(self._committable(offsets), asynchronous=asynchronous)
        # Synchronous: retried on coordinator errors. Ownership is checked before every attempt,
        # and what was dropped stays dropped: a partition that moved is never retried.
        result: list[TopicPartition] | None = None
        for attempt in self._commit_retry.retrying():
            with attempt, self._lock:
                offsets = self._committable(offsets)
                result = self._commit_once(offsets, asynchronous=False)
        return result

    def _committable(self, offsets: list[TopicPartition] | None) -> list[TopicPartition] | None:
        """The offsets of partitions owned now (None: the stored offsets). Call with the lock held."""
        if self._state is _State.CLOSED:
            raise self._closed("commit")
        return None if offsets is None else self._gate.owned_offsets("commit", offsets)

    def _commit_once(self, offsets: list[TopicPartition] | None, *, asynchronous: bool) -> list[TopicPartition] | None:
        """One commit of ``offsets`` (already filtered by :meth:`_committable`), lock held."""
        return self._gate.commit(offsets, asynchronous=asynchronous, came_back=not self._rebalancer.in_callback)

    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        if self._state is _State.CLOSED:
            raise self._closed("store_offsets")
        with self._lock:
            if message is not None:
                if offsets is not None:
                    raise TypeError("store_offsets() takes message or offsets, not both")
                if not isinstance(message, Message):
                    raise TypeError(f"store_offsets() message must be a Message, got {type(message).__name__}")
                key = TopicPartition(cast(str, message.topic()), cast(int, message.partition()))
                if not self._gate.owned_offsets("store_offsets", [key]):
                    return
                self._client.call(Consumer.store_offsets, message=message)
                return
            if offsets is None:
                raise TypeError("store_offsets() requires message or offsets")
            _partition_keys(offsets, "store_offsets")
            kept = self._gate.owned_offsets("store_offsets", offsets)
            if kept:
                self._client.store(kept)

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        if self._state is _State.CLOSED:
            raise self._closed("committed")
        with self._lock:
            result: list[TopicPartition] = self._client.call(Consumer.committed, partitions, timeout)
            return result

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """As confluent_kafka's: the offset after the last record *the application* received."""
        if self._state is _State.CLOSED:
            raise self._closed("position")
        with self._lock:
            return self._gate.positions(partitions)

    def seek(self, partition: TopicPartition) -> None:
        if self._state is _State.CLOSED:
            raise self._closed("seek")
        with self._lock:
            self._client.call(Consumer.seek, partition)
            # Withheld records of a rewound partition would be delivered out of order.
            self._table.seeked((partition.topic, partition.partition), partition.offset)

    # -- metadata and pass-through -------------------------------------------------------
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        if self._state is _State.CLOSED:
            raise self._closed("get_watermark_offsets")
        with self._lock:
            watermarks = self._client.call(Consumer.get_watermark_offsets, partition, timeout, cached)
            return cast("tuple[int, int]", watermarks)

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        if self._state is _State.CLOSED:
            raise self._closed("offsets_for_times")
        with self._lock:
            return cast("list[TopicPartition]", self._client.call(Consumer.offsets_for_times, partitions, timeout))

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        if self._state is _State.CLOSED:
            raise self._closed("list_topics")
        with self._lock:
            return self._client.call(Consumer.list_topics, topic, timeout)

    def cluster_id(self, timeout: float = -1) -> str:
        if self._state is _State.CLOSED:
            raise self._closed("cluster_id")
        with self._lock:
            return cast(str, self._client.call(Consumer.cluster_id, timeout))

    def memberid(self) -> str:
        if self._state is _State.CLOSED:
            raise self._closed("memberid")
        with self._lock:
            return cast(str, self._client.call(Consumer.memberid))

    def consumer_group_metadata(self) -> Any:
        if self._state is _State.CLOSED:
            raise self._closed("consumer_group_metadata")
        with self._lock:
            return self._client.call(Consumer.consumer_group_metadata)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        if self._state is _State.CLOSED:
            raise self._closed("set_sasl_credentials")
        with self._lock:
            self._client.call(Consumer.set_sasl_credentials, username, password)

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        """Leave the group and release the client. Calling it again does nothing. Any thread may call it."""
        if self._state is not _State.OPEN:
            return
        # The keeper polls under the lock: stop (and join) it before taking the lock.
        self._keeper.stop()
        with self._lock:
            if self._state is not _State.OPEN:
                return
            self._state = _State.CLOSING
            self._rebalancer.closing = True
            try:
                self._table.came_back()  # close() is the application coming back (I8)
                self._gate.flush(force=True)
                # librdkafka runs the final revoke callbacks (and the final auto-commit) here.
                self._client.call(Consumer.close)
            finally:
                self._state = _State.CLOSED
                self._table.cleared()

    def __enter__(self) -> SafeConsumer:
        if self._state is _State.CLOSED:
            raise self._closed("__enter__")
        return self

    def __exit__(self, exc_type: object, exc_value: object, traceback: object) -> None:
        self.close()
