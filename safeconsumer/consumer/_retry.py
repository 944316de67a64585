"""Retries with tenacity, where retrying is safe: a commit while the group coordinator moves.

A commit is retried only on the errors :func:`._errors.is_retriable_commit_error` accepts,
with a bounded, jittered exponential backoff, and ownership is checked again before every
attempt: an offset of a partition that moved meanwhile is dropped, never retried.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException

from ..base._errors import is_retriable_commit_error

if (
    TYPE_CHECKING
):  # tenacity is imported at the first synchronous commit: 1.4 MiB a consumer that never makes one does not pay
    from tenacity import RetryCallState, Retrying

logger = logging.getLogger("safeconsumer")


@dataclass(frozen=True)
class CommitRetry:
    """How a synchronous ``commit()`` is retried on a coordinator error.

    Waits are random between 0 and ``min(maximum, initial * 2**n)`` seconds (full jitter);
    retrying stops after ``attempts`` attempts or once ``deadline`` seconds have passed since
    the first, and the last error is raised. Asynchronous commits are never retried here:
    their outcome arrives later, through ``on_commit``.
    """

    attempts: int = 5
    initial: float = 0.2
    maximum: float = 5.0
    deadline: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"CommitRetry.attempts must be an int >= 1, got {self.attempts!r}")
        for name in ("initial", "maximum", "deadline"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"CommitRetry.{name} must be a positive number of seconds, got {value!r}")

    def retrying(self) -> Retrying:
        """A fresh tenacity controller for one commit() call."""
        from tenacity import (
            Retrying,
            retry_if_exception,
            stop_after_attempt,
            stop_after_delay,
            wait_random_exponential,
        )

        return Retrying(
            stop=stop_after_attempt(self.attempts) | stop_after_delay(self.deadline),
            wait=wait_random_exponential(multiplier=self.initial, max=self.maximum),
            retry=retry_if_exception(_retriable),
            before_sleep=_log_retry,
            reraise=True,
        )


def _retriable(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and is_retriable_commit_error(exc.args[0] if exc.args else None)


def _log_retry(state: RetryCallState) -> None:
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None else None
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    name = error.name() if error is not None and hasattr(error, "name") else type(exc).__name__
    wait = state.next_action.sleep if state.next_action is not None else 0.0
    logger.warning("commit failed (%s), attempt %d; retrying in %.2fs", name, state.attempt_number, wait)
