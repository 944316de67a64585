"""Poison records: a record the application cannot deserialize or process, handled by a policy.

A policy is a typed keyword option of the consumer (``poison=``), the same under every protocol:

- ``None`` (the default): the error is raised, exactly as upstream raises it;
- :class:`Skip`: one WARNING naming topic, partition, offset and the exception class (never the
  payload), counted, and the next record;
- :class:`DeadLetter`: a processing failure is retried with backoff while the member stays in
  its group (the keepalive), then the original record (key, value, headers and timestamp as
  fetched) is written to a dead-letter topic with headers naming its origin and the exception;
  only once the broker acknowledged that write does the record count as processed, so its offset
  may be stored (I8). A write that fails gives the record back (it and what was handed out after
  it are delivered again) and raises :class:`DeadLetterError`: a record is never lost between the
  two topics. Past ``max_dead_letters`` within ``window`` seconds the consumer stops with
  :class:`PoisonLimitError` instead of draining a topic into its dead-letter topic.

Deserialization failures reach :meth:`PoisonHandler.deserialization_failed` (from
``SafeDeserializingConsumer.poll()``); processing failures come through
``SafeConsumer.handle(message, handler)``, which runs the application's handler for one record
under the policy (:meth:`PoisonHandler.handle`).

Headers of a dead-lettered record (the original record's headers come first, unchanged):

=====================================  =====================================================
header                                 value (UTF-8)
=====================================  =====================================================
``safeconsumer.dlt.original.topic``    the topic it was read from
``safeconsumer.dlt.original.partition`` its partition
``safeconsumer.dlt.original.offset``   its offset
``safeconsumer.dlt.original.timestamp`` its timestamp (ms), as fetched
``safeconsumer.dlt.group``             the consumer group
``safeconsumer.dlt.stage``             ``deserialize`` or ``process``
``safeconsumer.dlt.exception.class``   the exception's qualified class name
``safeconsumer.dlt.exception.message`` the exception's message (first 1,000 characters)
``safeconsumer.dlt.attempts``          how many times processing was tried
=====================================  =====================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from confluent_kafka import KafkaError, Message, Producer

from .._errors import FatalConsumerError, SafeConsumerError

logger = logging.getLogger("safeconsumer")

__all__ = [
    "HEADER_PREFIX",
    "DeadLetter",
    "DeadLetterError",
    "DeadLetterWriter",
    "PoisonHandler",
    "PoisonLimitError",
    "Skip",
]

_T = TypeVar("_T")

HEADER_PREFIX = "safeconsumer.dlt."
#: The longest exception message written into a header.
_MESSAGE_LIMIT = 1000


@dataclass(frozen=True)
class Skip:
    """Skip a poison record: a WARNING (topic, partition, offset, exception class), counted."""


@dataclass(frozen=True)
class DeadLetter:
    """Retry processing, then write the record to ``topic`` (see the module docstring).

    :param topic: the dead-letter topic (it must exist, or the cluster must create it).
    :param retries: processing attempts after the first failed one (``handle()`` only; a record
        that cannot be deserialized is dead-lettered at once: trying again gives the same bytes).
    :param backoff: seconds before the first retry, doubled each time up to ``max_backoff``, jittered.
    :param max_dead_letters: at most this many records dead-lettered within ``window`` seconds;
        one more stops the consumer (:class:`PoisonLimitError`). ``None``: no limit.
    :param producer_config: settings for the dead-letter producer on top of the consumer's
        connection settings (``bootstrap.servers``, security), e.g. another cluster's address.
    :param timeout: seconds to wait for the broker's acknowledgement of one write.
    """

    topic: str
    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_dead_letters: int | None = 100
    window: float = 60.0
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"DeadLetter.topic must be a topic name, got {self.topic!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"DeadLetter.retries must be an int >= 0, got {self.retries!r}")
        for name in ("backoff", "max_backoff", "window", "timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"DeadLetter.{name} must be a number >= 0, got {value!r}")
        if self.max_dead_letters is not None and (
            isinstance(self.max_dead_letters, bool)
            or not isinstance(self.max_dead_letters, int)
            or self.max_dead_letters < 1
        ):
            raise ValueError(f"DeadLetter.max_dead_letters must be an int >= 1 or None, got {self.max_dead_letters!r}")


PoisonPolicy = Skip | DeadLetter | None


class DeadLetterError(SafeConsumerError):
    """A poison record could not be written to its dead-letter topic. Nothing was stored for it:
    it (and what was handed out after it) is delivered again by the next call."""


class PoisonLimitError(FatalConsumerError):
    """More records were dead-lettered within the policy's window than it allows: the consumer stopped."""


def check_policy(policy: object) -> PoisonPolicy:
    if policy is not None and not isinstance(policy, Skip | DeadLetter):
        raise TypeError(f"poison must be None, Skip() or DeadLetter(...), got {type(policy).__name__}")
    return policy


class DeadLetterWriter:
    """Writes records to dead-letter topics and waits for the broker's acknowledgement: one
    idempotent producer (``acks=all``) per consumer, on its connection settings, made at the first write."""

    def __init__(self, group_id: str, connection: Mapping[str, Any]) -> None:
        self._group_id = group_id
        self._connection = dict(connection)
        self._producer: Producer | None = None

    def write(self, policy: DeadLetter, message: Message, exc: Exception, stage: str, attempts: int) -> None:
        """Produce the original record to the dead-letter topic and wait for the broker's acknowledgement."""
        producer = self._producer
        if producer is None:
            producer = self._producer = Producer(
                {**self._connection, "enable.idempotence": True, "acks": "all", **policy.producer_config}
            )
        _ts_type, ts = message.timestamp()
        raw_headers: Any = message.headers() or []
        headers: list[tuple[str, bytes | str | None]] = list(raw_headers)
        headers += [
            (HEADER_PREFIX + name, value.encode("utf-8"))
            for name, value in (
                ("original.topic", str(message.topic())),
                ("original.partition", str(message.partition())),
                ("original.offset", str(message.offset())),
                ("original.timestamp", str(ts)),
                ("group", self._group_id),
                ("stage", stage),
                ("exception.class", _class_name(exc)),
                ("exception.message", str(exc)[:_MESSAGE_LIMIT]),
                ("attempts", str(attempts)),
            )
        ]
        outcome: list[KafkaError | None] = []
        extra: dict[str, Any] = {"timestamp": ts} if ts > 0 else {}
        producer.produce(
            policy.topic,
            value=message.value(),
            key=message.key(),
            headers=headers,
            on_delivery=lambda err, _msg: outcome.append(err),
            **extra,
        )
        deadline = time.monotonic() + policy.timeout
        while not outcome and time.monotonic() < deadline:
            producer.poll(min(0.1, max(0.0, deadline - time.monotonic())))
        if not outcome:
            # Given up on (the caller retries or fails): not left queued, to be written later or
            # reported as still in flight when the producer goes. One already sent may still land.
            producer.purge()
            producer.poll(0)
            raise TimeoutError(f"no acknowledgement within {policy.timeout:.0f}s")
        if outcome[0] is not None:
            raise RuntimeError(str(outcome[0]))

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None and producer.flush(5.0):
            producer.purge()
            producer.poll(0)


class PoisonHandler:
    """One consumer's poison policy at work.

    Called by the facade's ``handle()`` and by ``SafeDeserializingConsumer.poll()`` on the
    application's thread. It reaches the rest of the consumer only through what it was built with:
    ``writer`` (the dead-letter producer), ``give_back`` (the table takes back the record and what
    was handed out after it), ``keepalive`` (the keepalive block, around retries), ``fail`` (the
    fatal stop), ``counted`` (telemetry) and ``owns`` (whether the record's partition is still ours,
    or may come back: an eager rebalance revokes everything first).
    """

    def __init__(
        self,
        policy: PoisonPolicy,
        *,
        group_id: str,
        writer: DeadLetterWriter,
        give_back: Callable[[Message], None],
        keepalive: Callable[[], contextlib.AbstractContextManager[None]],
        fail: Callable[[FatalConsumerError, KafkaError], None],
        counted: Callable[[str, str], None],
        owns: Callable[[Message], bool],
    ) -> None:
        self.policy = policy
        self._group_id = group_id
        self._writer = writer
        self._give_back = give_back
        self._keepalive = keepalive
        self._fail = fail
        self._counted = counted
        self._owns = owns
        self._recent: deque[float] = deque()  # monotonic times of recent dead-letter writes
        #: Records skipped and dead-lettered so far.
        self.skipped = 0
        self.dead_lettered = 0

    # -- the two kinds of failure -----------------------------------------------------------------
    def deserialization_failed(self, exc: Exception, message: Message) -> None:
        """A record that could not be deserialized: skipped or dead-lettered at once (its bytes will
        not change), or, with no policy, ``exc`` raised."""
        policy = self.policy
        if policy is None:
            raise exc
        if isinstance(policy, Skip):
            self._skip(message, exc, "deserialize")
            return
        self._dead_letter(policy, message, exc, "deserialize", attempts=1)

    def handle(self, message: Message, handler: Callable[[Message], _T]) -> _T | None:
        """``handler(message)`` under the policy: its result, or None once the record was skipped or
        dead-lettered. The first attempt runs as it is (no cost on the happy path); retries wait,
        with tenacity's jittered exponential backoff, inside the consumer's keepalive block. A
        rebalance that takes the record's partition away ends the retries: the record is neither
        dead-lettered nor stored here, its next owner reads it (None is returned)."""
        policy = self.policy
        if policy is None:
            return handler(message)
        try:
            return handler(message)
        except Exception as first:  # noqa: BLE001 - the application's handler: the policy decides
            failure: Exception = first
        if not isinstance(policy, DeadLetter):
            self._skip(message, failure, "process")
            return None
        attempts = 1
        if policy.retries:
            from tenacity import Retrying

            try:
                with self._keepalive():
                    time.sleep(policy.backoff)  # tenacity waits between its own attempts, not before the first
                    for attempt in Retrying(**self._retry_plan(policy, message)):
                        with attempt:
                            attempts += 1
                            return handler(message)
            except Exception as exc:  # noqa: BLE001 - as above: the last attempt's error is dead-lettered
                failure = exc
            if self._revoked(message, attempts):
                return None
        self._dead_letter(policy, message, failure, "process", attempts=attempts)
        return None

    async def handle_async(
        self,
        message: Message,
        handler: Callable[[Message], Any],
        *,
        keepalive: Callable[[], contextlib.AbstractAsyncContextManager[None]],
        run: Callable[[Callable[[], None]], Awaitable[None]],
    ) -> Any:
        """:meth:`handle` for asyncio (``SafeAIOConsumer.handle``): ``handler`` may be a coroutine
        function; retries wait with ``asyncio.sleep`` inside ``keepalive()`` (the consumer's ``async
        with`` block); the dead-letter write, which blocks until acknowledged, goes through ``run``
        (the consumer's executor), so the event loop never waits on the broker."""
        policy = self.policy
        if policy is None:
            return await _awaited(handler(message))
        try:
            return await _awaited(handler(message))
        except Exception as first:  # noqa: BLE001 - the application's handler: the policy decides
            failure: Exception = first
        if not isinstance(policy, DeadLetter):
            self._skip(message, failure, "process")
            return None
        attempts = 1
        if policy.retries:
            from tenacity import AsyncRetrying

            try:
                async with keepalive():
                    await asyncio.sleep(policy.backoff)
                    async for attempt in AsyncRetrying(**self._retry_plan(policy, message)):
                        with attempt:
                            attempts += 1
                            return await _awaited(handler(message))
            except Exception as exc:  # noqa: BLE001 - as above
                failure = exc
            if self._revoked(message, attempts):
                return None
        final = failure
        await run(lambda: self._dead_letter(policy, message, final, "process", attempts=attempts))
        return None

    def _retry_plan(self, policy: DeadLetter, message: Message) -> dict[str, Any]:
        """tenacity's arguments for the retries after the first failure: at most ``policy.retries``
        attempts, none once the record's partition left, jittered exponential waits."""
        from tenacity import stop_after_attempt, stop_any, wait_exponential, wait_random

        return {
            "stop": stop_any(stop_after_attempt(policy.retries), cast(Any, lambda _state: not self._owns(message))),
            "wait": wait_exponential(multiplier=policy.backoff, min=2 * policy.backoff, max=policy.max_backoff)
            + wait_random(0, policy.backoff),
            "reraise": True,
        }

    def _revoked(self, message: Message, attempts: int) -> bool:
        """Whether the retries ended because the record's partition left this consumer (logged)."""
        if self._owns(message):
            return False
        logger.info(
            "stopped retrying %s [%s] at offset %s after %d attempt(s): the partition was revoked; "
            "its next owner reads the record",
            message.topic(),
            message.partition(),
            message.offset(),
            attempts,
        )
        return True

    # -- outcomes --------------------------------------------------------------------------------
    def _skip(self, message: Message, exc: Exception, stage: str) -> None:
        self.skipped += 1
        self._counted("skipped", stage)
        logger.warning(
            "skipped a record that failed to %s: %s [%s] at offset %s (%s)",
            stage,
            message.topic(),
            message.partition(),
            message.offset(),
            _class_name(exc),
        )

    def _dead_letter(self, policy: DeadLetter, message: Message, exc: Exception, stage: str, *, attempts: int) -> None:
        try:
            self._writer.write(policy, message, exc, stage, attempts)
        except Exception as failed:
            self._give_back(message)
            raise DeadLetterError(
                f"could not write the record {message.topic()} [{message.partition()}] at offset {message.offset()} "
                f"to dead-letter topic {policy.topic!r} ({failed}); nothing was stored for it: it is delivered again"
            ) from failed
        self.dead_lettered += 1
        self._counted("dead_lettered", stage)
        logger.warning(
            "dead-lettered a record that failed to %s: %s [%s] at offset %s (%s) -> %s",
            stage,
            message.topic(),
            message.partition(),
            message.offset(),
            _class_name(exc),
            policy.topic,
        )
        self._check_limit(policy)

    def _check_limit(self, policy: DeadLetter) -> None:
        limit = policy.max_dead_letters
        if limit is None:
            return
        now = time.monotonic()
        recent = self._recent
        recent.append(now)
        while recent and recent[0] < now - policy.window:
            recent.popleft()
        if len(recent) > limit:
            text = (
                f"{len(recent)} records dead-lettered to {policy.topic!r} within {policy.window:.0f}s "
                f"(DeadLetter.max_dead_letters={limit}); the consumer stopped instead of draining its topics"
            )
            err = KafkaError(KafkaError._FAIL, text)
            self._fail(PoisonLimitError(text, kafka_error=err, group_id=self._group_id), err)

    def close(self) -> None:
        """Called by the facade's close(): what the dead-letter producer still holds is flushed."""
        self._writer.close()


async def _awaited(result: Any) -> Any:
    """A handler's result: awaited when it is awaitable (a coroutine function's), else as it is."""
    return await result if inspect.isawaitable(result) else result


def _class_name(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
