"""Poll-keepalive: keep a busy member in its group without handing it records (KIP-62).

librdkafka evicts a member whose application has not called ``poll()``/``consume()`` for
``max.poll.interval.ms``. While the application works on something long, a background
thread ("the keeper") *parks* the consumer - every assigned partition is paused inside
librdkafka for the keepalive only, apart from the application's own pause intent - and
polls it often enough to count as alive and to serve rebalances. Anything those polls
return goes through the delivery gate, which withholds records of parked partitions:
nothing is lost, nothing is delivered early.

Two ways in:

- manual: ``with consumer.keepalive(): long_work()``. Blocks nest and may be entered from
  several threads; the consumer stays parked until the last one exits. No ceiling applies:
  the application asked for it.
- automatic (``keepalive="auto"``): once the application has polled at least once and then
  not called ``poll()``/``consume()`` for ``keepalive_after`` seconds, the keeper parks the
  consumer; the application's next call un-parks it. One parked span is capped at
  ``keepalive_max`` seconds: past it the keeper stops polling and logs at ERROR, so a
  deadlocked application is evicted and its partitions move on, as Kafka intends.

Rebalance callbacks, the user's included, run on the keeper thread while it polls.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Literal

from confluent_kafka import Consumer

from ._errors import FatalConsumerError

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ._consumer import SafeConsumer

logger = logging.getLogger("safeconsumer")

KeepaliveMode = Literal["auto", "off"]

#: How long the keeper waits between its polls while parked; an application call waits
#: at most one keeper poll (``poll(0)``) for the client lock.
PARKED_POLL_INTERVAL = 0.1


class Keeper:
    """The keepalive state machine and its background thread. One per SafeConsumer."""

    def __init__(self, consumer: SafeConsumer, *, mode: KeepaliveMode, after: float, ceiling: float) -> None:
        self._consumer = consumer
        self.mode = mode
        self.after = after
        self.ceiling = ceiling
        self._cond = threading.Condition()
        self._depth = 0  # open manual keepalive() blocks
        self.auto_parked = False
        self._parked_since: float | None = None
        self._span: Span | None = None
        self._span_mode = "manual"
        self._ceiling_hit = False
        self._app_active = False  # the application has polled at least once
        self._stop = False
        self._thread: threading.Thread | None = None

    # -- called by the facade ------------------------------------------------------------
    @property
    def parked(self) -> bool:
        return self._depth > 0 or self.auto_parked

    def app_started(self) -> None:
        """The application's first poll()/consume(): from now on the watchdog measures idleness.

        Idleness is measured on the consumer's ``_last_call``: the time the application's
        poll()/consume() last reached librdkafka (read-ahead makes that at least once a second).
        """
        self._app_active = True
        if self.mode == "auto":
            self._ensure_thread()

    def enter(self) -> None:
        with self._cond:
            self._depth += 1
            first = self._depth == 1 and not self.auto_parked
        if first:
            self._park(auto=False)
        self._ensure_thread()
        with self._cond:
            self._cond.notify_all()

    def exit(self) -> None:
        with self._cond:
            self._depth -= 1
            last = self._depth == 0 and not self.auto_parked
        if last:
            self._unpark()
        with self._cond:
            self._cond.notify_all()

    def unpark_auto(self) -> None:
        """The application is back: end an automatic parked span (must hold the client lock)."""
        # The application is active from now: the watchdog must not see the old idle time.
        self._consumer._last_call = time.monotonic()
        with self._cond:
            was, self.auto_parked = self.auto_parked, False
            unpark = was and self._depth == 0
        if unpark:
            self._unpark()

    def stop(self, *, join: bool = True) -> None:
        """Stop the keeper thread; safe from any thread, including the keeper itself.

        Pass ``join=False`` while holding the client lock: the keeper may be waiting for it.
        """
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        thread = self._thread
        if join and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._end_span()

    # -- parking -------------------------------------------------------------------------
    def _park(self, *, auto: bool) -> None:
        consumer = self._consumer
        with consumer._lock:
            if auto:
                self.auto_parked = True
            self._parked_since = time.monotonic()
            self._ceiling_hit = False
            self._span_mode = "auto" if auto else "manual"
            self._span = consumer._telemetry.keepalive_started(self._span_mode)
            consumer._gate.flush(force=True)  # an idle moment: store what was delivered
            consumer._rebalance.set_parked(True)
        logger.info("parked: keeping the member alive without consuming (%s)", "auto" if auto else "keepalive()")

    def _unpark(self) -> None:
        consumer = self._consumer
        with consumer._lock:
            if self._parked_since is not None:
                logger.info("un-parked after %.1fs", time.monotonic() - self._parked_since)
            self._end_span()
            consumer._rebalance.set_parked(False)

    def _end_span(self) -> None:
        """End the parked span of time (un-parked, or the consumer closed while parked)."""
        span, self._span = self._span, None
        since, self._parked_since = self._parked_since, None
        if span is not None and since is not None:
            self._consumer._telemetry.keepalive_ended(span, self._span_mode, time.monotonic() - since)

    # -- the thread ----------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        with self._cond:
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._run, name="safeconsumer-keeper", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                action, wait = self._plan()
                if action == "wait":
                    self._cond.wait(wait)
                    continue
            if action == "park":
                self._park(auto=True)
            else:
                self._keep_alive_once()

    def _plan(self) -> tuple[Literal["poll", "park", "wait"], float]:
        """What the keeper does next (called with ``_cond`` held)."""
        now = time.monotonic()
        if self.parked:
            since = self._parked_since
            if self._depth == 0 and since is not None and now - since > self.ceiling:
                if not self._ceiling_hit:
                    self._ceiling_hit = True
                    if self._span is not None:
                        self._span.add_event("safeconsumer.keepalive.ceiling_reached")
                    logger.error(
                        "keepalive ceiling reached: the application has not polled for %.0fs "
                        "(keepalive_max=%.0fs); no longer keeping the member alive, it will be "
                        "evicted after max.poll.interval.ms",
                        now - self._consumer._last_call,
                        self.ceiling,
                    )
                return "wait", 1.0
            return "poll", 0.0
        if self.mode == "auto" and self._app_active:
            idle = now - self._consumer._last_call
            if idle >= self.after:
                return "park", 0.0
            return "wait", min(self.after - idle, 1.0)
        return "wait", 3600.0  # nothing to do until woken

    def _keep_alive_once(self) -> None:
        consumer = self._consumer
        with consumer._lock:
            if self.parked and not consumer._closing_or_closed():
                msg = Consumer.poll(consumer, 0)
                while msg is not None:
                    if msg.error() is not None:
                        try:
                            consumer._check_error_event(msg)
                        except FatalConsumerError:
                            return  # the consumer stopped itself; the application's next call raises
                        # Other errors are the application's to see: keep them, in order, for its next call.
                        consumer._gate.ahead.append(msg)
                    else:
                        consumer._gate.admit(msg)  # parked: withheld, never delivered early
                    msg = Consumer.poll(consumer, 0)
        with self._cond:
            if not self._stop:
                self._cond.wait(PARKED_POLL_INTERVAL)
