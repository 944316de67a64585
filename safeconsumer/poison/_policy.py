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
  two topics. When more than ``max_dead_letter_ratio`` of the last ``ratio_of`` records the policy
  judged were dead-lettered (a broken deployment: most recent records failing), the consumer stops
  with :class:`PoisonLimitError` instead of draining a topic into its dead-letter topic; a healthy
  consumer draining a backlog of any size at any speed, with a few poison records in it, never
  trips it. ``max_dead_letters`` within ``window`` seconds adds a count per time, off by default.

How long retries may go on is the consumer's to say (:class:`RetryBounds`): a consumer-group member
retries while it owns the record's partition (:class:`PartitionBounds`); a share consumer while the
next attempt fits in the record's acquisition lock (``safeconsumer.share``), and it settles what the
application finished before any wait the policy starts (:meth:`RetryBounds.before_wait`).

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
import functools
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaError, Message, Producer

from ..base._errors import FatalConsumerError, SafeConsumerError
from ._retries import Plan, RetryBounds, asked

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
#: The header prefix of the copies a broker writes to a share group's dead-letter queue (Kafka 4.4).
BROKER_HEADER_PREFIX = "__dlq.errors."
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
    :param max_dead_letter_ratio: the consumer stops (:class:`PoisonLimitError`) when more than this
        share of the last ``ratio_of`` records the policy judged were dead-lettered: a handler
        failing everything stops it at the first dead letter past ``ratio_of * max_dead_letter_ratio``; a healthy
        consumer with a few poison records in any backlog, at any speed, never trips it. ``None``: no
        ratio limit.
    :param ratio_of: how many of the most recent records the ratio is judged over.
    :param max_dead_letters: at most this many records dead-lettered within ``window`` seconds;
        one more stops the consumer. ``None`` (the default): no count limit. A count per time also
        stops a healthy consumer draining a backlog fast: prefer the ratio.
    :param producer_config: settings for the dead-letter producer on top of the consumer's
        connection settings (``bootstrap.servers``, security), e.g. another cluster's address.
    :param timeout: seconds to wait for the broker's acknowledgement of one write.
    """

    topic: str
    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_dead_letters: int | None = None
    window: float = 60.0
    max_dead_letter_ratio: float | None = 0.5
    ratio_of: int = 100
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
        ratio = self.max_dead_letter_ratio
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio < 1):
            raise ValueError(
                f"DeadLetter.max_dead_letter_ratio must be a number between 0 and 1 or None, got {ratio!r}"
            )
        if isinstance(self.ratio_of, bool) or not isinstance(self.ratio_of, int) or self.ratio_of < 1:
            raise ValueError(f"DeadLetter.ratio_of must be an int >= 1, got {self.ratio_of!r}")


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


class _Waiting:
    """A dead-letter write whose acknowledgement has not come (yet)."""


_WAITING = _Waiting()


def _delivered(outcomes: list[KafkaError | _Waiting | None], i: int, err: KafkaError | None, _msg: object) -> None:
    outcomes[i] = err


class DeadLetterWriter:
    """Writes records to dead-letter topics and waits for the broker's acknowledgement: one
    idempotent producer (``acks=all``) per consumer, on its connection settings, made at the first write."""

    def __init__(self, group_id: str, connection: Mapping[str, Any]) -> None:
        self._group_id = group_id
        self._connection = dict(connection)
        self._producer: Producer | None = None

    def write(self, policy: DeadLetter, message: Message, exc: Exception, stage: str, attempts: int) -> None:
        """Produce the original record to the dead-letter topic and wait for the broker's acknowledgement."""
        for _message, failure in self.write_all(policy, [(message, exc, attempts)], stage):
            raise failure

    def write_all(
        self, policy: DeadLetter, records: list[tuple[Message, Exception, int]], stage: str
    ) -> list[tuple[Message, Exception]]:
        """Produce each original record (with why, and after how many attempts) to the dead-letter
        topic, then wait once for the broker's acknowledgements: a batch's copies in one round trip.
        Returns the records whose write failed, with why (``TimeoutError``: no acknowledgement within
        ``policy.timeout``; ``RuntimeError``: the broker's error)."""
        producer = self._producer
        if producer is None:
            producer = self._producer = Producer(
                {**self._connection, "enable.idempotence": True, "acks": "all", **policy.producer_config}
            )
        outcomes: list[KafkaError | _Waiting | None] = [_WAITING] * len(records)
        for i, (message, exc, attempts) in enumerate(records):
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
            extra: dict[str, Any] = {"timestamp": ts} if ts > 0 else {}
            producer.produce(
                policy.topic,
                value=message.value(),
                key=message.key(),
                headers=headers,
                on_delivery=functools.partial(_delivered, outcomes, i),
                **extra,
            )
        deadline = time.monotonic() + policy.timeout
        while _WAITING in outcomes and time.monotonic() < deadline:
            producer.poll(min(0.1, max(0.0, deadline - time.monotonic())))
        timed_out = [isinstance(outcome, _Waiting) for outcome in outcomes]
        if any(timed_out):
            # Given up on (the caller retries or fails): not left queued, to be written later or
            # reported as still in flight when the producer goes. One already sent may still land.
            producer.purge()
            producer.poll(0)
        failed: list[tuple[Message, Exception]] = []
        for (message, _exc, _attempts), outcome, late in zip(records, outcomes, timed_out, strict=True):
            if late:
                failed.append((message, TimeoutError(f"no acknowledgement within {policy.timeout:.0f}s")))
            elif outcome is not None:
                failed.append((message, RuntimeError(str(outcome))))
        return failed

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None and producer.flush(5.0):
            producer.purge()
            producer.poll(0)


class PoisonHandler:
    """One consumer's poison policy at work.

    Called by the facade's ``handle()`` and by ``SafeDeserializingConsumer.poll()`` on the
    application's thread. It reaches the rest of the consumer only through what it was built with:
    ``writer`` (the dead-letter producer), ``give_back`` (the consumer takes back the record and what
    was handed out after it), ``keepalive`` (the keepalive block, around retries), ``fail`` (the
    fatal stop), ``counted`` (telemetry) and ``bounds`` (how long retries may go on: :class:`RetryBounds`).

    The ratio limit counts the records the policy judged: each ``handle()`` that ended (the handler
    returned, or the record was skipped or dead-lettered; a record the bounds sent elsewhere is
    judged where it goes next), each record that could not be deserialized, and, until the first
    ``handle()``, the records the deserializing consumers handed out (:meth:`passed`).
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
        bounds: RetryBounds,
    ) -> None:
        self.policy = policy
        self._group_id = group_id
        self._writer = writer
        self._give_back = give_back
        self._keepalive = keepalive
        self._fail = fail
        self._counted = counted
        self._bounds = bounds
        self._recent: deque[float] = deque()  # monotonic times of recent dead-letter writes
        #: Records judged so far (see the class), and the value it had at each recent dead letter.
        self._judged = 0
        self._dead_at: deque[int] = deque()
        self._handles = False
        #: Records skipped and dead-lettered so far, and those whose retries ended because they went
        #: elsewhere (the bounds' :meth:`RetryBounds.stopped`: released for redelivery, or revoked).
        self.skipped = 0
        self.dead_lettered = 0
        self.returned = 0

    # -- the two kinds of failure -----------------------------------------------------------------
    def passed(self, records: int) -> None:
        """``records`` were deserialized and handed out (a deserializing consumer's poll): they count
        toward the ratio limit until the application uses ``handle()``, which judges them itself."""
        if not self._handles:
            self._judged += records

    def deserialization_failed(self, exc: Exception, message: Message) -> None:
        """A record that could not be deserialized: skipped or dead-lettered at once (its bytes will
        not change), or, with no policy, ``exc`` raised."""
        policy = self.policy
        if policy is None:
            raise exc
        self._judged += 1
        if isinstance(policy, Skip):
            self._skip(message, exc, "deserialize")
            return
        self._dead_letter(policy, message, exc, "deserialize", attempts=1)

    def handle(self, message: Message, handler: Callable[[Message], _T]) -> _T | None:
        """``handler(message)`` under the policy: its result, or None once the record was skipped,
        dead-lettered or sent elsewhere by the bounds. The first attempt runs as it is (no cost on
        the happy path); retries wait, with tenacity's jittered exponential backoff, inside the
        consumer's keepalive block, while the bounds allow the next attempt."""
        policy = self.policy
        if policy is None:
            return handler(message)
        self._handles = True
        began = time.monotonic()
        try:
            result = handler(message)
        except Exception as first:  # noqa: BLE001 - the application's handler: the policy decides
            failure: Exception = first
        else:
            self._judged += 1
            return result
        if not isinstance(policy, DeadLetter):
            self._judged += 1
            self._skip(message, failure, "process")
            return None
        plan = Plan.of(policy, self._bounds, message, time.monotonic() - began)
        if plan.retries and plan.allows(policy.backoff):
            from tenacity import Retrying

            self._bounds.before_wait()
            try:
                with self._keepalive():
                    time.sleep(policy.backoff)  # tenacity waits between its own attempts, not before the first
                    for attempt in Retrying(**plan.tenacity()):
                        with attempt, plan.timed():
                            result = handler(message)
                            self._judged += 1
                            return result
            except Exception as exc:  # noqa: BLE001 - as above: the last attempt's error is dead-lettered
                failure = exc
        if (plan.cut_short or not self._bounds.keeps(message)) and self._bounds.stopped(message, plan.attempts):
            self.returned += 1
            return None
        self._judged += 1
        self._bounds.before_wait()
        self._dead_letter(policy, message, failure, "process", attempts=plan.attempts)
        return None

    async def handle_async(
        self,
        message: Message,
        handler: Callable[[Message], Any],
        *,
        keepalive: Callable[[], contextlib.AbstractAsyncContextManager[None]],
        run: Callable[[Callable[[], Any]], Awaitable[Any]],
    ) -> Any:
        """:meth:`handle` for asyncio (``SafeAIOConsumer.handle``): ``handler`` may be a coroutine
        function; retries wait with ``asyncio.sleep`` inside ``keepalive()`` (the consumer's ``async
        with`` block); what calls the consumer or blocks (the bounds' settling, the dead-letter write,
        which waits until acknowledged) goes through ``run`` (the consumer's executor), so the event
        loop never waits on the broker."""
        policy = self.policy
        if policy is None:
            return await _awaited(handler(message))
        self._handles = True
        began = time.monotonic()
        try:
            result = await _awaited(handler(message))
        except Exception as first:  # noqa: BLE001 - the application's handler: the policy decides
            failure: Exception = first
        else:
            self._judged += 1
            return result
        if not isinstance(policy, DeadLetter):
            self._judged += 1
            skipped = failure
            await run(lambda: self._skip(message, skipped, "process"))  # the bounds may call the consumer
            return None
        plan = Plan.of(policy, self._bounds, message, time.monotonic() - began)
        bounds = self._bounds
        if plan.retries and await asked(run, lambda: plan.allows(policy.backoff)):
            from tenacity import AsyncRetrying

            await run(bounds.before_wait)
            try:
                async with keepalive():
                    await asyncio.sleep(policy.backoff)
                    async for attempt in AsyncRetrying(**plan.tenacity()):
                        with attempt, plan.timed():
                            result = await _awaited(handler(message))
                            self._judged += 1
                            return result
            except Exception as exc:  # noqa: BLE001 - as above
                failure = exc
        if (plan.cut_short or not bounds.keeps(message)) and await asked(
            run, lambda: bounds.stopped(message, plan.attempts)
        ):
            self.returned += 1
            return None
        self._judged += 1
        final = failure

        def dead_letter() -> None:
            bounds.before_wait()
            self._dead_letter(policy, message, final, "process", attempts=plan.attempts)

        await run(dead_letter)
        return None

    # -- outcomes --------------------------------------------------------------------------------
    def _skip(self, message: Message, exc: Exception, stage: str) -> None:
        self.skipped += 1
        self._bounds.rejected(message)
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
        self._bounds.rejected(message)  # before the limit may stop the consumer (its close() gives back)
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
        """Stop the consumer when the dead letters say the deployment is broken (see :class:`DeadLetter`)."""
        ratio = policy.max_dead_letter_ratio
        if ratio is not None:
            dead_at = self._dead_at
            dead_at.append(self._judged)
            oldest = self._judged - policy.ratio_of
            while dead_at and dead_at[0] <= oldest:
                dead_at.popleft()
            if len(dead_at) / policy.ratio_of > ratio:
                self._stop(
                    f"{len(dead_at)} of the last {min(self._judged, policy.ratio_of)} records were dead-lettered to "
                    f"{policy.topic!r} (DeadLetter.max_dead_letter_ratio={ratio:g} of ratio_of={policy.ratio_of}); "
                    "the consumer stopped instead of draining its topics: most recent records fail"
                )
        limit = policy.max_dead_letters
        if limit is None:
            return
        now = time.monotonic()
        recent = self._recent
        recent.append(now)
        while recent and recent[0] < now - policy.window:
            recent.popleft()
        if len(recent) > limit:
            self._stop(
                f"{len(recent)} records dead-lettered to {policy.topic!r} within {policy.window:.0f}s "
                f"(DeadLetter.max_dead_letters={limit}); the consumer stopped instead of draining its topics"
            )

    def _stop(self, text: str) -> None:
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
