"""How long a poison record's retries may go on (:class:`RetryBounds`, the consumer's to say) and the
retries of one failed record (:class:`Plan`), used by :class:`._policy.PoisonHandler`."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol, cast

from confluent_kafka import Message

logger = logging.getLogger("safeconsumer")

__all__ = ["PartitionBounds", "Plan", "RetryBounds", "asked"]


class RetryBounds:
    """How long a record's retries may go on, and what comes first: the consumer's to say.

    :meth:`may_retry` is asked before each wait (``wait`` seconds, then an attempt about as long as
    the last one, ``attempt`` seconds), and :meth:`keeps` once the attempts ran out; once either
    says no, :meth:`stopped` says where the record goes: somewhere else (True: the handler's caller
    gets None, nothing is dead-lettered) or to the dead-letter topic now (False).
    :meth:`before_wait` runs before the policy's first wait and before a dead-letter write;
    :meth:`rejected` once a record was dead-lettered or skipped, before the limit may stop the
    consumer. :meth:`attempts_before` counts attempts made before this delivery.
    """

    def may_retry(self, message: Message, wait: float, attempt: float) -> bool:
        return True

    def keeps(self, message: Message) -> bool:
        return True

    def rejected(self, message: Message) -> None:
        return None

    def stopped(self, message: Message, attempts: int) -> bool:
        return False

    def before_wait(self) -> None:
        return None

    def attempts_before(self, message: Message) -> int:
        return 0


class PartitionBounds(RetryBounds):
    """A consumer-group member retries while the record's partition is its own (``owns``); once it
    left, its next owner reads the record."""

    def __init__(self, owns: Callable[[Message], bool]) -> None:
        self._owns = owns

    def may_retry(self, message: Message, wait: float, attempt: float) -> bool:
        return self._owns(message)

    def keeps(self, message: Message) -> bool:
        return self._owns(message)

    def stopped(self, message: Message, attempts: int) -> bool:
        logger.info(
            "stopped retrying %s [%s] at offset %s after %d attempt(s): the partition was revoked; "
            "its next owner reads the record",
            message.topic(),
            message.partition(),
            message.offset(),
            attempts,
        )
        return True


class RetryPolicy(Protocol):
    """What a plan takes of a policy (``DeadLetter``): its retries and their backoff."""

    @property
    def retries(self) -> int: ...
    @property
    def backoff(self) -> float: ...
    @property
    def max_backoff(self) -> float: ...


class Plan:
    """The retries of one failed record: how many are left, whether the bounds allow the next one,
    and how long the last attempt took (the next one is judged to take as long)."""

    def __init__(
        self, bounds: RetryBounds, message: Message, first: float, *, retries: int, backoff: float, max_backoff: float
    ) -> None:
        """``first``: how long the first attempt took; the rest is the policy's (``DeadLetter``)."""
        self._bounds = bounds
        self._message = message
        self._backoff = backoff
        self._max_backoff = max_backoff
        #: Attempts made, this delivery's first included (earlier deliveries count, see RetryBounds).
        before = bounds.attempts_before(message)
        self.attempts = 1 + before
        self.retries = max(0, retries - before)
        self._last = first
        #: The bounds ended the retries (not the policy's count, not success).
        self.cut_short = False

    @classmethod
    def of(cls, policy: RetryPolicy, bounds: RetryBounds, message: Message, first: float) -> Plan:
        """The plan of ``policy``'s retries (its count and backoff) for ``message``, whose first
        attempt took ``first`` seconds."""
        return cls(
            bounds, message, first, retries=policy.retries, backoff=policy.backoff, max_backoff=policy.max_backoff
        )

    def allows(self, wait: float) -> bool:
        if self._bounds.may_retry(self._message, wait, self._last):
            return True
        self.cut_short = True
        return False

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        began = time.monotonic()
        self.attempts += 1
        try:
            yield
        finally:
            self._last = time.monotonic() - began

    def tenacity(self) -> dict[str, Any]:
        """tenacity's arguments for the retries after the first wait: at most :attr:`retries`
        attempts, none once the bounds say no, jittered exponential waits."""
        from tenacity import RetryCallState, stop_after_attempt, stop_any, wait_exponential, wait_random

        def bounded(state: RetryCallState) -> bool:
            return not self.allows(state.upcoming_sleep)

        return {
            "stop": stop_any(stop_after_attempt(self.retries), cast(Any, bounded)),
            # After the first wait (backoff): 2, 4, 8... times it, up to max_backoff, jittered.
            "wait": wait_exponential(multiplier=2 * self._backoff, max=self._max_backoff)
            + wait_random(0, self._backoff),
            "reraise": True,
        }


async def asked(run: Callable[[Callable[[], Any]], Awaitable[Any]], question: Callable[[], bool]) -> bool:
    answer: bool = await run(question)
    return answer
