"""Poll-keepalive: keep a busy member in its group without handing it records (KIP-62).

librdkafka evicts a member whose application has not called ``poll()``/``consume()`` for
``max.poll.interval.ms``. While the application works on something long, a background
thread ("the keeper") *parks* the consumer - every assigned partition is paused inside
librdkafka for the keepalive only, apart from the application's own pause intent - and
polls it often enough to count as alive and to serve rebalances: every 0.1 s while the
application holds no records, and only near the end of ``max.poll.interval.ms`` after the
last poll (:func:`holding_margin`) while it holds records it was handed (a rebalance then
waits for the application, as for a busy raw consumer, so that a revoked partition's records
are not read again by its next owner). Anything those polls
return waits in the read-ahead (:mod:`._reader`) for the application's next call, where
the gate withholds records of paused partitions: nothing is lost, nothing is delivered
early. Parking is not the application coming back: offsets of what it holds are not
stored (I8).

Two ways in:

- manual: ``with consumer.keepalive(): long_work()``. Blocks nest and may be entered from
  several threads; the consumer stays parked until the last one exits. No ceiling applies:
  the application asked for it.
- automatic (``keepalive="auto"``): once the application has polled at least once and then
  not called ``poll()``/``consume()`` for ``keepalive_after`` seconds, the keeper parks the
  consumer; the application's next call un-parks it. One parked span is capped at
  ``keepalive_max`` seconds: past it the keeper stops polling and logs at ERROR, so a
  deadlocked application is evicted and its partitions move on, as Kafka intends.

Rebalance callbacks, the user's included, run on the keeper thread while it polls. The
keeper reaches its consumer only through :class:`KeepaliveHost`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from opentelemetry.trace import Span

logger = logging.getLogger("safeconsumer")

KeepaliveMode = Literal["auto", "off"]

#: How long the keeper waits between its polls while parked; an application call waits
#: at most one keeper poll for the client lock.
PARKED_POLL_INTERVAL = 0.1


def holding_margin(max_poll: float) -> float:
    """How long before ``max_poll`` seconds run out the keeper polls a consumer whose application
    holds records: a quarter of it, but at least 2 s (half of it when shorter), since a busy
    machine can wake the keeper that late; 3 s: 1.5 s, 300 s (the default): 75 s."""
    return max(0.25 * max_poll, min(0.5 * max_poll, 2.0))


class KeepaliveHost(Protocol):
    """What the keeper needs from its consumer: all it may do to it."""

    @property
    def lock(self) -> AbstractContextManager[object]:
        """The consumer's client lock (re-entrant): parking decisions are made under it."""
        ...

    def idle_seconds(self) -> float:
        """Seconds since the application's poll()/consume() last reached librdkafka."""
        ...

    def touch(self) -> None:
        """The application is active now: its idle clock restarts."""
        ...

    def set_parked(self, parked: bool) -> None:
        """Park (every owned partition paused for the keepalive only) or un-park."""
        ...

    def holds_records(self) -> bool:
        """Whether the application holds records handed out that it has not come back from."""
        ...

    def keep_alive(self) -> bool:
        """One poll that keeps the member alive and serves rebalances, handing nothing out.

        False when the consumer has stopped (closed, or a fatal error, which the
        application's next call raises).
        """
        ...

    def span_started(self, mode: str) -> Span:
        """Telemetry: a parked span of time begins."""
        ...

    def span_ended(self, span: Span, mode: str, seconds: float) -> None:
        """Telemetry: it ended after ``seconds``."""
        ...


class Keeper:
    """The keepalive state machine and its background thread. One per SafeConsumer.

    States: *active* (the application polls; the watchdog measures its idleness), *parked
    manually* (``keepalive()`` blocks open: ``_depth > 0``), *parked automatically*
    (``auto_parked``: the application went quiet), *over the ceiling* (parked automatically
    for longer than ``ceiling``: no more keepalive polls), *stopped* (``_stop``: closed).
    """

    def __init__(
        self, host: KeepaliveHost, *, mode: KeepaliveMode, after: float, ceiling: float, max_poll: float | None = None
    ) -> None:
        self._host = host
        self.mode = mode
        self.after = after
        self.ceiling = ceiling
        #: While the application holds records, the keeper polls only this long after the last
        #: poll: max.poll.interval.ms less a margin for a late wake-up (at least ``after``).
        self.holding_poll_every = max(after, max_poll - holding_margin(max_poll)) if max_poll else after
        self._cond = threading.Condition()
        self._depth = 0  # open manual keepalive() blocks
        self.auto_parked = False
        self._parked_since: float | None = None
        self._span: Span | None = None
        self._span_mode = "manual"
        self._ceiling_hit = False
        self.app_active = False  # the application has polled at least once
        self._stop = False
        self._thread: threading.Thread | None = None
        #: When the keeper last polled (monotonic; the application's calls are the host's idle clock).
        self._last_poll = 0.0

    # -- called by the facade ------------------------------------------------------------
    @property
    def parked(self) -> bool:
        return self._depth > 0 or self.auto_parked

    def app_is_back(self) -> None:
        """The application's poll()/consume() (client lock held): end an automatic parked span.

        The first call also starts the watchdog: from then on it measures idleness.

        Called by the facade's poll()/consume(). Changes ``app_active``, ``auto_parked``, the idle clock; starts
        the thread or un-parks through the host.
        """
        if not self.app_active:
            self.app_active = True
            if self.mode == "auto":
                self._ensure_thread()
        # The application is active from now: the watchdog must not see the old idle time.
        self._host.touch()
        with self._cond:
            was, self.auto_parked = self.auto_parked, False
            unpark = was and self._depth == 0
        if unpark:
            self._unpark()

    def enter(self) -> None:
        """Called by the facade's keepalive() on entry, on the application's thread. Parks the consumer (through
        the host) on the first nesting level; changes ``_depth``; starts the thread.
        """
        with self._cond:
            self._depth += 1
            first = self._depth == 1 and not self.auto_parked
        if first:
            self._park(auto=False)
        self._ensure_thread()
        with self._cond:
            self._cond.notify_all()

    def exit(self) -> None:
        """Called by the facade's keepalive() on exit while the consumer is open. Un-parks on the last nesting
        level (restarting the idle clock); changes ``_depth``.
        """
        with self._cond:
            self._depth -= 1
            last = self._depth == 0 and not self.auto_parked
        if last:
            # The application is back from its long work: the watchdog's idle clock restarts,
            # or it would park again at once, with the block's duration counted as idle time.
            self._host.touch()
            self._unpark()
        with self._cond:
            self._cond.notify_all()

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        """The facade's keepalive() block: :meth:`enter`, then :meth:`exit` unless the keeper
        was stopped meanwhile (the consumer closed or failed: nothing to un-park)."""
        self.enter()
        try:
            yield
        finally:
            with self._cond:
                stopped = self._stop
            if not stopped:
                self.exit()

    def stop(self, *, join: bool = True, wake: bool = True) -> None:
        """Stop the keeper thread; safe from any thread, including the keeper itself.

        Pass ``join=False`` while holding the client lock: the keeper may be waiting for it.
        ``wake=False, join=False``: only mark it stopped (it polls no more, and ends when it
        next wakes), without handing it the interpreter now; a later ``stop()`` ends it.

        Called by the lifecycle's close() (twice: marked, then joined outside the lock) and fail(). Sets
        ``_stop``; ends an open parked span.
        """
        with self._cond:
            self._stop = True
            if wake:
                self._cond.notify_all()
        thread = self._thread
        if join and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
        self._end_span()

    # -- parking -------------------------------------------------------------------------
    def _park(self, *, auto: bool) -> None:
        # Not an offset store: the application still works on what it was handed (I8).
        with self._host.lock:
            if auto:
                # The application may have come back since the plan was made.
                if self._stop or self.parked or self._host.idle_seconds() < self.after:
                    return
                self.auto_parked = True
            self._parked_since = time.monotonic()
            self._ceiling_hit = False
            self._span_mode = "auto" if auto else "manual"
            self._span = self._host.span_started(self._span_mode)
            self._host.set_parked(True)
        logger.info("parked: keeping the member alive without consuming (%s)", "auto" if auto else "keepalive()")

    def _unpark(self) -> None:
        with self._host.lock:
            if self._parked_since is not None:
                logger.info("un-parked after %.1fs", time.monotonic() - self._parked_since)
            self._end_span()
            self._host.set_parked(False)

    def _end_span(self) -> None:
        """End the parked span of time (un-parked, or the consumer closed while parked)."""
        span, self._span = self._span, None
        since, self._parked_since = self._parked_since, None
        if span is not None and since is not None:
            self._host.span_ended(span, self._span_mode, time.monotonic() - since)

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
                        self._host.idle_seconds(),
                        self.ceiling,
                    )
                return "wait", 1.0
            if self._host.holds_records():
                # The application works on records it holds: a rebalance served now would revoke
                # partitions before their offsets can be stored (I8), and their next owner would
                # read them again. So poll only as max.poll.interval.ms requires: a revocation
                # meanwhile waits for the application, as it would for a busy raw consumer, and only
                # work longer than ``holding_poll_every`` pays in duplicates.
                quiet = min(self._host.idle_seconds(), now - self._last_poll)
                if quiet < self.holding_poll_every:
                    return "wait", min(self.holding_poll_every - quiet, 1.0)
            return "poll", 0.0
        if self.mode == "auto" and self.app_active:
            idle = self._host.idle_seconds()
            if idle >= self.after:
                return "park", 0.0
            return "wait", min(self.after - idle, 1.0)
        return "wait", 3600.0  # nothing to do until woken

    def _keep_alive_once(self) -> None:
        if self.parked and not self._host.keep_alive():
            return  # the consumer stopped; the application's next call raises
        self._last_poll = time.monotonic()
        with self._cond:
            if not self._stop:
                self._cond.wait(PARKED_POLL_INTERVAL)
