"""The one boundary to librdkafka: every call the library makes on the underlying client.

``SafeConsumer`` subclasses ``confluent_kafka.Consumer``, so the parent's methods, called
unbound on the SafeConsumer, *are* the raw client. Every call that acts on the client goes
through this module; the exceptions, which translate no error because none can be fatal, are
upstream's own argument checks and answers on a stopped consumer (:mod:`._upstream`), the
constructor's early ``Consumer.close`` of a consumer it refuses, ``memberid()`` read by the
rebalance explainer's thread, and :func:`group_generation`. Each call here passes through one
translation of errors (:func:`._errors.classify`):

- an error event librdkafka *returns* (from ``consume()``/``poll()``) is looked at once, here;
- a ``KafkaException`` librdkafka *raises* (from ``commit()``, ``committed()``, ``assign()``, ...)
  is looked at the same way.

A fatal one (the group is full, a fatal client error) goes to ``on_fatal``, which stops the
consumer, applies its exit policy and raises :class:`~safeconsumer.FatalConsumerError`; any
other error keeps its confluent_kafka type and reaches the caller unchanged.
"""

from __future__ import annotations

import logging
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ..base._errors import (
    FatalConsumerError,
    GroupMigrationError,
    auth_failed,
    classify,
    consumer_closed,
    is_auth_failure,
)
from ..base._keys import Key
from ._auth import AuthWatch
from ._requery import is_failed_offset_fetch

logger = logging.getLogger("safeconsumer")

_consume = Consumer.consume
_error = Message.error
#: Calls that leave librdkafka's application positions as they are: every other call counts as a
#: move (see :attr:`RawClient.moves`).
_KEEP_POSITIONS = frozenset(
    {
        Consumer.position,
        Consumer.store_offsets,
        Consumer.commit,
        Consumer.committed,
        Consumer.assignment,
        Consumer.offsets_for_times,
        Consumer.get_watermark_offsets,
        Consumer.list_topics,
    }
)

FatalHandler = Callable[[FatalConsumerError, KafkaError], NoReturn]


def tps(keys: Iterable[Key]) -> list[TopicPartition]:
    """TopicPartitions of keys, sorted (librdkafka's calls take lists)."""
    return [TopicPartition(t, p) for t, p in sorted(keys)]


def group_generation(consumer: Consumer | None) -> int | None:
    """The group generation (classic) or member epoch (KIP-848) the consumer holds, if known.

    Read from ``consumer_group_metadata()``, whose serialized form starts with ``CGMDv2:``
    and the generation as an int32 in the host's byte order (librdkafka copies it as it is
    in memory); None when that form is not recognised.
    """
    if consumer is None:
        return None
    try:
        data = bytes(Consumer.consumer_group_metadata(consumer))
    except (KafkaException, RuntimeError, TypeError):
        return None
    magic = b"CGMDv2:"
    if not data.startswith(magic) or len(data) < len(magic) + 4:
        return None
    return int.from_bytes(data[len(magic) : len(magic) + 4], sys.byteorder, signed=True)


class RawClient:
    """The underlying ``confluent_kafka.Consumer`` calls, with their errors classified."""

    def __init__(self, consumer: Consumer, group_id: str, on_fatal: FatalHandler) -> None:
        #: Weak: the application's reference alone keeps the consumer alive, as upstream's (I10).
        #: (A plain ``Consumer`` cannot be weakly referenced; nothing of ours refers back to one.)
        self._ref: Callable[[], Consumer | None]
        try:
            self._ref = weakref.ref(consumer)
        except TypeError:
            self._ref = lambda: consumer
        self._group_id = group_id
        #: This member's group.instance.id, if it is static (for the fatal error's advice).
        self.instance_id: str | None = None
        #: Why this member's first join waited for its group to become convertible (see
        #: _migration), if it did: told to the error a refused conversion becomes.
        self.migration_reason: Callable[[], str | None] = lambda: None
        #: Whether this member is joining and no partition came yet (see ``_errors.classify``).
        self.first_join: Callable[[], bool] = lambda: False
        self._on_fatal = on_fatal
        #: The config librdkafka was created with (:meth:`renew` creates it again with it).
        self.config: Mapping[str, Any] = {}
        #: Asked when the broker refused to convert the group at this member's first heartbeat:
        #: True when the member waits to join again (the client made anew) instead of failing.
        self.on_refused_join: Callable[[KafkaError], bool] | None = None
        #: Told the code of every error librdkafka reports (the rebalance explainer's evidence).
        self.on_error: Callable[[int], None] | None = None
        #: Told of every error event saying librdkafka gave up fetching committed offsets.
        self.on_failed_offset_fetch: Callable[[Message], None] | None = None
        #: Judges runs of refused logins (None: retried for ever, as upstream does).
        self.auth: AuthWatch | None = None
        #: A fatal error reported through ``error_cb`` inside a call, raised once the call returns.
        self._pending: FatalConsumerError | None = None
        #: Reads (``consume()``/``poll()``) and calls that may move an application position (seek,
        #: assign, pause, ...) so far: a position read between two reads, with no move since, tells
        #: exactly how far the second read advanced each partition (see ``DeliveryGate``).
        self.reads = 0
        self.moves = 0

    @property
    def group_id(self) -> str:
        return self._group_id

    # -- error translation -----------------------------------------------------------------
    def check_event(self, error: KafkaError, *, absorb: bool = False) -> bool:
        """An error event on its way to the application: a fatal one stops the consumer. With
        ``absorb`` (an event librdkafka returned, not raised), a refused first join that waits
        again (``on_refused_join``) is absorbed: True, and the event does not reach the application."""
        if self.on_error is not None:
            self.on_error(error.code())
        fatal = classify(error, self._group_id, self.instance_id, self.migration_reason(), first_join=self.first_join())
        if fatal is not None:
            refused = absorb and isinstance(fatal, GroupMigrationError) and self.on_refused_join is not None
            if refused and self.on_refused_join is not None and self.on_refused_join(error):
                return True
            self._on_fatal(fatal, error)
        return False

    def renew(self) -> None:
        """Make the client anew after a fatal error that only refused its first join (no partition
        came): librdkafka's instance is closed and a new one created with the same config, in the
        same ``Consumer`` object (confluent_kafka takes a new ``__init__`` once ``close()`` released
        its instance; pinned in ``tests/integration/test_protocol_migration.py``). No subscription:
        the caller subscribes again."""
        consumer = self._live()
        try:
            Consumer.close(consumer)
        except Exception as exc:  # noqa: BLE001 - the instance had failed already; it is released all the same
            logger.debug("close before renewing the client reported %s", exc)
        Consumer.__init__(consumer, dict(self.config))
        self._pending = None
        self.moves += 1

    def reported(self, error: KafkaError) -> None:
        """An error librdkafka reported to ``error_cb`` (the :class:`._auth.ErrorTap`), on the thread
        serving callbacks inside a ``poll()``/``consume()``. Nothing is closed in a callback: a fatal
        one waits in ``_pending`` until that call returns (:meth:`_after_call`)."""
        if self.on_error is not None:
            self.on_error(error.code())
        if self.auth is not None and is_auth_failure(error) and self._pending is None:
            if self.auth.failed(time.monotonic()):
                self._pending = auth_failed(error, self._group_id, self.auth.failing_for)
            elif self.auth.failing_for == 0.0:
                logger.warning(
                    "a connection failed to authenticate (%s); retrying, fatal after %.0fs of such failures",
                    error.str(),
                    self.auth.timeout,
                )

    def _after_call(self) -> None:
        """Raise the fatal error ``error_cb`` reported during the call that just returned."""
        fatal, self._pending = self._pending, None
        if fatal is not None and fatal.kafka_error is not None:
            self._on_fatal(fatal, fatal.kafka_error)

    def _raised(self, exc: KafkaException) -> NoReturn:
        """A KafkaException raised by librdkafka: fatal ones stop the consumer, others propagate."""
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError):
            self.check_event(error)
        raise exc

    def _live(self) -> Consumer:
        """The consumer; upstream's "Consumer closed" once the application dropped it (only a
        thread of ours can still get here then, and it stops)."""
        consumer = self._ref()
        if consumer is None:
            raise consumer_closed(("Consumer closed",), "the SafeConsumer was dropped without close()")
        return consumer

    def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``method`` (a ``Consumer`` method) on the raw client, with its errors translated."""
        if method not in _KEEP_POSITIONS:
            self.moves += 1
        try:
            return method(self._live(), *args, **kwargs)
        except KafkaException as exc:
            self._raised(exc)

    # -- reading -----------------------------------------------------------------------------
    def consume(self, num_messages: int, timeout: float) -> tuple[list[Message], bool]:
        """A batch from librdkafka, and whether it holds error events (each one classified)."""
        self.reads += 1
        try:
            batch = _consume(self._live(), num_messages, timeout)
        except KafkaException as exc:
            self._raised(exc)
        if self._pending is not None:
            self._after_call()
        errors = bool(batch) and any(map(_error, batch))
        if errors:
            absorbed = [msg for msg in batch if (err := msg.error()) is not None and self._error_event(msg, err)]
            if absorbed:
                batch = [msg for msg in batch if msg not in absorbed]
                errors = any(map(_error, batch))
        return batch, errors

    def poll(self, timeout: float) -> Message | None:
        self.reads += 1
        try:
            msg = Consumer.poll(self._live(), timeout)
        except KafkaException as exc:
            self._raised(exc)
        if self._pending is not None:
            self._after_call()
        if msg is not None:
            err = msg.error()
            if err is not None and self._error_event(msg, err):
                return None
        return msg

    def _error_event(self, msg: Message, err: KafkaError) -> bool:
        """An error event librdkafka returned; True when it was absorbed (see :meth:`check_event`)."""
        if self.check_event(err, absorb=True):
            return True
        if self.on_failed_offset_fetch is not None and is_failed_offset_fetch(err):
            self.on_failed_offset_fetch(msg)
        return False

    # -- flags and positions -----------------------------------------------------------------
    def pause(self, keys: Iterable[Key]) -> None:
        self.call(Consumer.pause, tps(keys))

    def resume(self, keys: Iterable[Key], *, leaving: bool = False) -> None:
        """Resume partitions; ``leaving``: they may already be gone from librdkafka (no flag left)."""
        try:
            self.call(Consumer.resume, tps(keys))
        except FatalConsumerError:
            raise
        except KafkaException as exc:
            if not leaving:
                raise
            logger.debug("resume of leaving partition(s) reported %s", exc)

    def position(self, keys: Iterable[Key]) -> list[TopicPartition]:
        return self.positions(tps(keys))

    def positions(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        result: list[TopicPartition] = self.call(Consumer.position, partitions)
        return result

    def commit(self, offsets: list[TopicPartition] | None, *, asynchronous: bool) -> list[TopicPartition] | None:
        """Commit ``offsets``, or (None) the stored offsets."""
        if offsets is None:
            result = self.call(Consumer.commit, asynchronous=asynchronous)
        else:
            result = self.call(Consumer.commit, offsets=offsets, asynchronous=asynchronous)
        return cast("list[TopicPartition] | None", result)

    def store(self, offsets: list[TopicPartition]) -> None:
        self.call(Consumer.store_offsets, offsets=offsets)

    # -- assignment ------------------------------------------------------------------------------
    def assign(self, partitions: list[TopicPartition]) -> None:
        self.call(Consumer.assign, partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.call(Consumer.incremental_assign, partitions)

    def unassign(self) -> None:
        self.call(Consumer.unassign)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self.call(Consumer.incremental_unassign, partitions)

    def close_quietly(self) -> None:
        """Close after a fatal error: best effort, nothing raised (the fatal error is what counts)."""
        try:
            Consumer.close(self._live())
        except Exception as exc:  # noqa: BLE001 - already failing; closing is best effort
            logger.debug("close after a fatal error reported %s", exc)
