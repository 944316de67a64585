"""SafeConsumer: the drop-in facade. It validates arguments, guards state and delegates.

Each public method checks its arguments (upstream's own checks, :mod:`._upstream`), checks the
consumer's state (:mod:`._lifecycle`; on a stopped consumer upstream's own method answers, see
:func:`._upstream.guarded`), and hands the work to the part that owns it, under the consumer's re-entrant
client lock where it touches librdkafka or shared state. :mod:`._assembly` judges the config and
options, then builds and wires the parts once, in ``__init__``; docs/architecture.md draws them.

Rebalance callbacks run inside ``poll()`` / ``consume()`` / ``close()`` (or a keepalive poll) on
the calling thread, and re-enter the lock. Paths that take no lock: ``poll()``'s fast lane (see
:mod:`._reader`), the state guards, and ``owns()`` (one dict lookup).
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from confluent_kafka import Consumer, Message, TopicPartition

from ..base._clients import redact_config
from ..base._errors import FatalPolicy
from ..base._keys import RebalanceCallback
from ..base._topics import parse_topic_entries
from ..poison._policy import PoisonPolicy
from ._assembly import assemble, judge
from ._delivery import DeliveryStats
from ._deprecated import DeprecatedNames
from ._join_gate import MIGRATION_TIMEOUT
from ._keepalive import KeepaliveMode
from ._lifecycle import Lifecycle, State
from ._pause import PauseState
from ._port import ConsumerPort, port_of, register
from ._retry import CommitRetry
from ._upstream import NO_CALLBACK as _NO_CALLBACK
from ._upstream import NO_CONF as _NO_CONF
from ._upstream import TIMEOUT_TYPES as _TIMEOUT_TYPES
from ._upstream import WHOLE_CONSUMER as _WHOLE_CONSUMER
from ._upstream import (
    consume_arguments,
    guarded,
    partition_key,
    partition_keys,
    passed_through,
    poll_timeout,
    rebalance_callbacks,
    show_upstream_signatures,
    stopped,
    typed_as,
    upstream_arguments,
)

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, TracerProvider

logger = logging.getLogger("safeconsumer")

_monotonic = time.monotonic

_CLOSED = State.CLOSED

_DEFAULT_COMMIT_RETRY = CommitRetry()

#: poll()'s and consume()'s default timeout (for ever), and consume()'s default num_messages (1): a
#: call that passed none is told by these very objects (``timeout`` is positional-only there, so
#: ``poll(timeout=1)`` arrives in ``kwargs``, as written).
_FOREVER = float(-1)
_ONE = float(1)

_R = TypeVar("_R")


class SafeConsumer(DeprecatedNames, Consumer):
    """A ``confluent_kafka.Consumer`` whose pause state survives rebalances and which never
    hands out a record of a paused or unowned partition, nor loses one it withheld.

    ``conf`` is exactly the dict ``confluent_kafka.Consumer`` takes (keyword arguments
    are merged into it, as there). safeconsumer's own options are typed keyword-only
    arguments, never config keys.
    """

    # What an instance whose subclass never called __init__ sees: a stopped consumer, whose
    # calls upstream answers ("Consumer closed"), as it does for such a Consumer.
    _life = Lifecycle.never_opened()
    _lane: ClassVar[deque[Message]] = deque()  # never filled: an instance reads its table's lane

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
        auth_failure_timeout: float | None = 10.0,
        poison: PoisonPolicy = None,
        migration_timeout: float | None = MIGRATION_TIMEOUT,
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
        :param on_fatal: what a fatal error does once the consumer has stopped and closed: ``"raise"``
            (default) raises it from the call that saw it and every later call; ``"exit"`` also logs
            one CRITICAL line and ends the process with :data:`EXIT_GROUP_MAX_SIZE` (group full) or
            :data:`EXIT_FATAL`, even when the error was seen on the keepalive thread.
        :param commit_retry: how a synchronous ``commit()`` is retried while the group coordinator
            moves (:class:`CommitRetry`; default 5 attempts within 30 s, jittered backoff from 0.2 s
            up to 5 s). Ownership is checked again before every attempt. ``None``: never retried.
        :param meter_provider: OpenTelemetry meter provider for this consumer's metrics;
            default the global one (a no-op unless the application installed an SDK).
        :param tracer_provider: OpenTelemetry tracer provider for its spans; default the global one.
        :param explain_rebalances: find the cause of a rebalance a peer caused (which member joined or
            left) by describing the group with the admin API from a background thread, after the
            rebalance. ``False``: such rebalances are logged and counted with the cause ``unknown``.
            The causes of this member's own rebalances are always known.
        :param fetch_memory_budget: bytes this process's SafeConsumers may buffer at worst (``None``:
            no budget). On every assignment change the worst case of all of them is estimated from
            their configs and assignments (see docs/group-health.md); above the budget a WARNING
            names the settings to change. ``ValueError`` if this consumer alone exceeds it unassigned.
        :param auth_failure_timeout: seconds the cluster may keep refusing this consumer's login (SASL
            credentials) or TLS handshake (an untrusted certificate) before that is fatal: the consumer
            stops, closes and raises :class:`AuthenticationFailedError` (default 10). A shorter run of
            refusals is retried, as librdkafka does. ``None``: retried for ever, as confluent_kafka does.
        :param poison: what happens to a record that cannot be processed (:meth:`handle`) or, on a
            :class:`SafeDeserializingConsumer`, deserialized: ``None`` (default) raises, as upstream;
            :class:`Skip` logs and counts it and goes on; :class:`DeadLetter` retries processing with
            backoff inside a keepalive, then writes the record to a dead-letter topic, and lets its
            offset be stored only once that write was acknowledged (docs/poison-records.md).
        :param migration_timeout: with ``group.protocol=consumer``: seconds a first ``subscribe()`` waits,
            without joining, while its group is a classic group with members, which the broker may
            refuse to convert (a ``cooperative-sticky`` one, KAFKA-18134): it joins as soon as the group
            is empty or a peer converted it, or when this runs out (default 30; then a refusal raises
            :class:`GroupMigrationError`). ``None``: waits for ever; ``0``: joins at once, as upstream
            (a ``range`` or ``roundrobin`` group converts). See docs/migrating-to-kip-848.md.
        """
        # The config is judged as confluent_kafka and librdkafka judge it, before anything else.
        settings = judge(
            conf,
            more,
            kwargs,
            keepalive=keepalive,
            keepalive_after=keepalive_after,
            keepalive_max=keepalive_max,
            on_fatal=on_fatal,
            commit_retry=commit_retry,
            meter_provider=meter_provider,
            tracer_provider=tracer_provider,
            explain_rebalances=explain_rebalances,
            fetch_memory_budget=fetch_memory_budget,
            auth_failure_timeout=auth_failure_timeout,
            poison=poison,
            migration_timeout=migration_timeout,
        )
        logger.debug("creating SafeConsumer with config %s", redact_config(settings.config))
        super().__init__(settings.config)  # librdkafka judges every other setting here
        parts = assemble(self, settings)
        self._lock, self._life, self._table, self._client = parts.lock, parts.life, parts.table, parts.client
        self._gate, self._telemetry, self._rebalancer = parts.gate, parts.telemetry, parts.rebalancer
        self._reader, self._offsets, self._keeper = parts.reader, parts.offsets, parts.keeper
        self._poison = parts.poison
        self._lane = parts.table.lane  # type: ignore[misc]  # poll()'s fast lane: the table's, not the class default
        register(
            self,
            ConsumerPort(
                life=parts.life,
                lock=parts.lock,
                lane=parts.table.lane,
                reader=parts.reader,
                table=parts.table,
                gate=parts.gate,
                poison=parts.poison,
                consume_available=weakref.WeakMethod(self._consume_available),
            ),
        )

    def __repr__(self) -> str:
        return f"<SafeConsumer group={self._life.group_id!r} {self._life.state.value}>"

    def _delivery_stats(self) -> DeliveryStats:
        """What :func:`delivery_stats` and the deprecated method of the same name answer."""
        with self._lock:
            return self._gate.stats()

    def _stopped(self, method: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        """A confluent_kafka method called on a stopped consumer: see :func:`._upstream.stopped`."""
        life = self._life
        return stopped(self, life.fatal, life.note(name), method, *args, **kwargs)

    # -- subscription --------------------------------------------------------------------
    @guarded
    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = _NO_CALLBACK,
        on_revoke: RebalanceCallback | None = _NO_CALLBACK,
        on_lost: RebalanceCallback | None = _NO_CALLBACK,
    ) -> None:
        callbacks = rebalance_callbacks(self, topics, on_assign, on_revoke, on_lost)
        with self._lock:
            self._rebalancer.subscribe(topics, callbacks)

    @guarded
    def unsubscribe(self) -> None:
        with self._lock:
            self._rebalancer.unsubscribe()

    # -- consuming -----------------------------------------------------------------------
    def poll(self, timeout: Any = _FOREVER, /, *args: Any, **kwargs: Any) -> Message | None:
        """``poll(timeout=-1)``: one record or error event, or None when ``timeout`` seconds pass."""
        # The fast lane: records of a batch wholly deliverable when it arrived. Whatever could change
        # that (rebalance, pause, park, seek, close) first takes the lane back under the lock; an
        # atomic pop here beat it or finds the lane empty. The deadline keeps calls reaching librdkafka.
        lane = self._lane
        if (
            lane
            and not args
            and not kwargs
            and timeout.__class__ in _TIMEOUT_TYPES
            and _monotonic() < self._reader.lane_until
        ):
            try:
                return lane.popleft()
            except IndexError:
                pass
        # The arguments are taken as given: a call upstream would refuse reaches it as written
        # (``timeout`` is positional-only here, so ``poll(timeout=1)`` arrives in ``kwargs``).
        if args or kwargs:
            return self._poll_unusual(args if timeout is _FOREVER else (timeout, *args), kwargs)
        life = self._life
        if life.state is _CLOSED or timeout.__class__ not in _TIMEOUT_TYPES:
            # Stopped, or a timeout upstream may refuse: upstream's own poll() answers first.
            return self._poll_unusual(() if timeout is _FOREVER else (timeout,), {})
        # acquire/release, not ``with``: the context-manager protocol costs as much as the lock.
        lock = self._lock
        lock.acquire()
        try:
            if life.state is _CLOSED:  # closed meanwhile, by another thread
                return self._poll_unusual(() if timeout is _FOREVER else (timeout,), {})
            self._app_back()
            return self._reader.poll(float(cast(float, timeout)))
        finally:
            lock.release()

    def _poll_unusual(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Message | None:
        if self._life.state is _CLOSED:
            return cast("Message | None", self._stopped(Consumer.poll, "poll", *args, **kwargs))
        # SafeConsumer.poll, never self.poll: a subclass's override is not re-entered (upstream's
        # poll() calls no Python method either).
        return SafeConsumer.poll(self, poll_timeout(self, args, kwargs))

    def consume(self, num_messages: Any = _ONE, timeout: Any = _FOREVER, /, *args: Any, **kwargs: Any) -> list[Message]:
        """``consume(num_messages=1, timeout=-1)``: up to ``num_messages`` records and error events."""
        if (
            num_messages.__class__ is int
            and timeout.__class__ in _TIMEOUT_TYPES
            and not args
            and not kwargs
            and 0 <= num_messages <= 1_000_000
            and self._life.state is not _CLOSED
        ):
            return self._consume(num_messages, cast(float, timeout))  # consume(n, t), the usual call
        # The arguments are taken as given (see poll()); upstream judges any it would refuse.
        if timeout is not _FOREVER:
            given: tuple[Any, ...] = (num_messages, timeout, *args)
        else:
            given = () if num_messages is _ONE else (num_messages,)
        if self._life.state is _CLOSED:
            return cast("list[Message]", self._stopped(Consumer.consume, "consume", *given, **kwargs))
        num_messages, timeout = consume_arguments(self, given, kwargs)
        return self._consume(num_messages, timeout)

    def _consume(self, num_messages: int, timeout: float, *, available: bool = False) -> list[Message]:
        with self._lock:
            self._app_back()
            return self._reader.consume(num_messages, timeout, available=available)

    def _consume_available(self, num_messages: int, timeout: float) -> list[Message]:
        """What :meth:`._port.ConsumerPort.consume_available` runs (kafka-python's ``poll()``)."""
        return self._consume(num_messages, timeout, available=True)

    def _app_back(self) -> None:
        """The application's poll()/consume() came (lock held): the keeper hears it is back, and an
        error deferred from the keeper's thread is raised now."""
        keeper = self._keeper
        if keeper.auto_parked or not keeper.app_active:
            keeper.app_is_back()
        self._life.raise_deferred()

    def handle(self, message: Message, handler: Callable[[Message], _R]) -> _R | None:
        """Run ``handler(message)`` under the consumer's poison policy (``poison=``).

        Its result, or None when the record failed and was skipped (:class:`Skip`) or, after the
        policy's retries, written to the dead-letter topic (:class:`DeadLetter`). With no policy the
        handler's exception propagates, as if it had been called directly. The retries run inside a
        keepalive block, so the member stays in its group; call ``handle()`` in your consume loop,
        one record after the other, and a record being retried holds back its partition's later
        records. :class:`DeadLetterError` when the dead-letter topic could not be written: the record
        (and what was handed out after it) is delivered again, nothing is stored past it.
        """
        self._life.check_open("handle")
        return self._poison.handle(message, handler)

    def process(self, message: Message) -> contextlib.AbstractContextManager[Span]:
        """Trace your processing of one record: ``with consumer.process(msg): handle(msg)``.

        Starts a ``process <topic>`` span (kind CONSUMER, messaging semantic conventions:
        system, destination name and partition, offset, consumer group) that continues the
        trace the record carries in its ``traceparent`` header, and makes it current, so
        spans your code starts inside are its children. An exception leaving the block is
        recorded on the span and re-raised. Payloads and keys are never recorded.
        """
        self._life.check_open("process")
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
        self._life.check_open("keepalive")
        with self._keeper.block():
            yield

    # -- assignment ------------------------------------------------------------------------
    @guarded
    def assign(self, partitions: list[TopicPartition], /) -> None:
        partition_keys(self, partitions, "assign")  # upstream judges them
        with self._lock:
            self._rebalancer.assign(partitions)

    @guarded
    def incremental_assign(self, partitions: list[TopicPartition], /) -> None:
        partition_keys(self, partitions, "incremental_assign")
        with self._lock:
            self._rebalancer.incremental_assign(partitions)

    @guarded
    def incremental_unassign(self, partitions: list[TopicPartition], /) -> None:
        partition_keys(self, partitions, "incremental_unassign")
        with self._lock:
            self._rebalancer.unassign(partitions)

    @guarded
    def unassign(self) -> None:
        with self._lock:
            self._rebalancer.unassign(None)

    def owns(self, tp_or_message: TopicPartition | Message | tuple[str, int]) -> bool:
        """Whether this consumer owns that partition right now (a TopicPartition, Message or key)."""
        self._life.check_open("owns")
        return partition_key(tp_or_message) in self._table.owned

    # -- pause ---------------------------------------------------------------------------
    @upstream_arguments
    def pause(self, partitions: list[TopicPartition] = _WHOLE_CONSUMER) -> None:
        """Pause ``partitions`` (partition marks), or with no argument the whole consumer.

        Marks are intent: they survive rebalances while the partition stays with this
        consumer. Nothing is returned for a paused partition until it is resumed.
        """
        self._change_pause("pause", partitions, mark=True)

    @upstream_arguments
    def resume(self, partitions: list[TopicPartition] = _WHOLE_CONSUMER) -> None:
        """Clear the partition marks of ``partitions``, or with no argument the consumer mark.

        A topic or consumer mark still covering a partition keeps it paused.
        """
        self._change_pause("resume", partitions, mark=False)

    def _change_pause(self, method: str, partitions: object, *, mark: bool) -> None:
        whole = partitions is _WHOLE_CONSUMER
        if self._life.state is _CLOSED:
            if whole:
                raise self._life.closed_error(method)  # the addition: pause()/resume() of the consumer
            self._stopped(getattr(Consumer, method), method, partitions)
            return
        keys = None if whole else partition_keys(self, partitions, method)
        with self._lock:
            self._rebalancer.change_marks(keys, mark=mark)

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
        self._life.check_open(method)
        names, patterns = parse_topic_entries(topics)
        with self._lock:
            self._rebalancer.change_topic_marks(method, names, patterns, mark=mark)

    def paused(self) -> list[TopicPartition]:
        """The effectively paused partitions of the current assignment, sorted."""
        self._life.check_open("paused")
        with self._lock:
            return self._rebalancer.paused()

    def pause_state(self) -> PauseState:
        """A frozen snapshot of pause intent (consumer, topics, patterns, partitions) and its effect."""
        self._life.check_open("pause_state")
        with self._lock:
            return self._rebalancer.pause_state(parked=self._keeper.parked)

    # -- offsets (policy: _offsets) ------------------------------------------------------
    @typed_as(Consumer.commit)  # upstream's overloads: the result's type follows ``asynchronous``
    @guarded
    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        return self._offsets.commit(message, offsets, asynchronous)

    @guarded
    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        self._offsets.store(message, offsets)

    @guarded
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """As confluent_kafka's: the offset after the last record *the application* received."""
        with self._lock:
            return self._gate.positions(partitions)

    @guarded
    def seek(self, partition: TopicPartition) -> None:
        with self._lock:
            self._rebalancer.seek(partition)

    # -- upstream's own, under the client lock ------------------------------------------------
    committed = passed_through(Consumer.committed, "partitions", timeout=-1)
    get_watermark_offsets = passed_through(Consumer.get_watermark_offsets, "partition", timeout=-1, cached=False)
    offsets_for_times = passed_through(Consumer.offsets_for_times, "partitions", timeout=-1)
    list_topics = passed_through(Consumer.list_topics, topic=None, timeout=-1)
    cluster_id = passed_through(Consumer.cluster_id, timeout=-1)
    memberid = passed_through(Consumer.memberid)
    consumer_group_metadata = passed_through(Consumer.consumer_group_metadata)
    set_sasl_credentials = passed_through(Consumer.set_sasl_credentials, "username", "password")
    assignment = passed_through(Consumer.assignment)

    # -- lifecycle -----------------------------------------------------------------------
    @upstream_arguments
    def close(self) -> None:
        """Leave the group and release the client. Calling it again does nothing. Any thread may call it."""
        self._life.close()
        if "_poison" in vars(self):
            self._poison.close()  # what the dead-letter producer holds is flushed

    @upstream_arguments
    def __enter__(self) -> SafeConsumer:
        if self._life.fatal is not None:
            raise self._life.fatal
        return self

    @upstream_arguments
    def __exit__(self, exc_type: object, exc_value: object, traceback: object, /) -> None:
        SafeConsumer.close(self)  # as upstream's: a subclass's close() override is not called


show_upstream_signatures(SafeConsumer)


# A function, not a method (the namespace stays upstream's plus SPEC's additions); the facade's own.
def delivery_stats(consumer: SafeConsumer) -> DeliveryStats:
    """Counters of ``consumer``'s delivery gate: delivered, withheld, released, purged, dropped offsets.

    A function rather than a method: the consumer's own namespace stays upstream's plus
    SPEC's additions. Readable after ``close()`` too (the final counts).
    """
    if not isinstance(consumer, SafeConsumer):
        raise TypeError(f"delivery_stats() takes a SafeConsumer, got {type(consumer).__name__}")
    return port_of(consumer, "delivery_stats").delivery_stats()
