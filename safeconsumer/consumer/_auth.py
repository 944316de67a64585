"""Refused logins: when retrying stops being worth it (SPEC: a secured cluster).

librdkafka retries a refused SASL login or a failed TLS handshake for ever, reporting each
attempt only to ``error_cb`` (without one, nothing reaches the application: ``poll()`` returns
``None`` while the credentials are wrong). SafeConsumer listens to every reported error through
an :class:`ErrorTap` it puts in front of the application's ``error_cb``, and :class:`AuthWatch`
decides when the failures have lasted long enough to be fatal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

logger = logging.getLogger("safeconsumer")


class AuthWatch:
    """Pure: a run of refused logins is fatal once it lasted ``timeout`` seconds.

    A run ends when no failure was reported for ``quiet`` seconds (the login worked, or nothing
    tried): the next failure starts a new run. A login that is refused briefly (a credential still
    spreading through the cluster's metadata, an identity provider's hiccup) is retried, as
    librdkafka does.
    """

    def __init__(self, timeout: float, quiet: float) -> None:
        self.timeout = timeout
        self.quiet = max(quiet, timeout)
        self._first: float | None = None
        self._last = 0.0

    def failed(self, now: float) -> bool:
        """A refused login at ``now``; True once the run it belongs to lasted ``timeout``."""
        if self._first is None or now - self._last > self.quiet:
            self._first = now
        self._last = now
        return now - self._first >= self.timeout

    @property
    def failing_for(self) -> float:
        """How long the current run has lasted (0 without one)."""
        return 0.0 if self._first is None else self._last - self._first


class ErrorTap:
    """The ``error_cb`` librdkafka is given: safeconsumer's sink first, then the application's
    own ``error_cb`` (if any) with the same error, so it sees what it saw under confluent_kafka.

    Holds no reference to the consumer (I10); its sink is bound once the consumer's parts exist.
    """

    def __init__(self, app_callback: Callable[[KafkaError], Any] | None) -> None:
        self.app_callback = app_callback
        self.sink: Callable[[KafkaError], None] | None = None

    def __call__(self, error: KafkaError) -> None:
        sink = self.sink
        if sink is not None:
            try:
                sink(error)
            except Exception:  # a fault of ours must not take the application's callback away
                logger.exception("safeconsumer's error listener failed")
        if self.app_callback is not None:
            self.app_callback(error)
