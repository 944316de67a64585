"""Joining a group that is between protocols (KIP-848's online migration).

A ``group.protocol=consumer`` member's first heartbeat converts a classic group into a consumer
group, one member at a time. Where the broker cannot convert it, it answers that heartbeat
``GROUP_ID_NOT_FOUND``, and librdkafka makes that a fatal error of the whole client: the member
dies at once (``_FATAL`` "ConsumerGroupHeartbeat fatal error: Broker: The group id does not
exist"). Kafka 4.3 refuses a conversion when online upgrade is disabled
(``group.consumer.migration.policy``), when the group is not a consumer group (its protocol type),
when it has more members than ``group.consumer.max.size``, and when a member's assignment carries
assignor data (KAFKA-18134). The last one is every librdkafka ``cooperative-sticky`` group once
it has rebalanced after its first assignment: librdkafka writes each member's sticky data into the
assignment the leader sends (measured on Kafka 4.3.1 with confluent-kafka 2.16.1:
``tests/integration/test_protocol_migration.py``; ``range`` and ``roundrobin`` groups convert).

So a consumer-protocol SafeConsumer does not hand its subscription to librdkafka at once. Its
:class:`JoinGate` first looks the group up on a thread of its own (off the application's calls)
and judges it (:func:`judge`). It lists the cluster's groups (ListGroups, sent to every broker)
rather than describing the group: describing is a request to the group's coordinator, and
librdkafka's admin client aborts the whole process when such a request meets a coordinator whose
broker is down (librdkafka #4605; seen here in the soak with broker faults). A listing gives the
group's state and type, not its assignor, so:

- *join*: no group yet, an empty one, a consumer group (mixed or not);
- *wait*: a classic group with members (whose assignor may be one the broker refuses), or no
  answer yet: the gate looks again every ``check_every`` seconds and opens as soon as the group
  can be converted (its classic members left, or a peer converted it), or when
  ``migration_timeout`` ran out: then the member joins as upstream's would (a ``range`` or
  ``roundrobin`` group converts then, and so does a ``cooperative-sticky`` one in its first
  generation), and if the broker refuses, the fatal error says why (:func:`._errors.classify`,
  with :attr:`JoinGate.reason`). ``safeconsumer doctor --migrate`` tells which groups convert
  (it may describe: it is not the application's process); for those ``migration_timeout=0``
  converts at once.

States of a gate: *idle* (``due`` 0: nothing waits; the subscription, if any, is librdkafka's),
*describing* (a subscription waits; the thread judges the group), *open* (the thread's verdict
is to join: the reader's next call hands the subscription to librdkafka, and the gate is idle
again). The rebalancer owns the gate; the reader runs it when due, on the application's calls
(:meth:`._rebalance.Rebalancer.join_due`), and so does the gate's thread when it opens (under the
consumer's lock): a member that is not polling joins at once too, as upstream's does. Classic
members never wait: a classic member joining
a consumer group is taken in as a mixed member.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from ..base._errors import MIGRATION_REMEDY
from ..group._describe import GroupView

logger = logging.getLogger("safeconsumer")

#: Assignors whose assignments librdkafka sends without assignor data: a classic group using one
#: converts (the broker's protocol names, as the group's description gives them).
CONVERTIBLE_ASSIGNORS = frozenset({"range", "roundrobin"})

#: Seconds a consumer-protocol member's first subscription waits for its group to become
#: convertible before it joins all the same (SafeConsumer's ``migration_timeout``).
MIGRATION_TIMEOUT = 30.0

#: Refused joins after which a subscription no longer waits again (a refusal the gate cannot see
#: coming, e.g. online migration disabled on the broker, fails then instead of looping).
MAX_REFUSALS = 3

#: How often the reader asks a gate that is describing whether it opened (seconds).
ASK_EVERY = 0.05


#: The reason to wait while the broker has not told the group's state.
NO_ANSWER = "the brokers have not told the group's state yet"


def judge(view: GroupView | None) -> str | None:
    """Why a consumer-protocol member should not join the group seen as ``view`` yet, or None when
    the broker can take it in now (``view`` None: the brokers did not answer)."""
    if view is None:
        return NO_ANSWER
    if view.kind.upper() != "CLASSIC" or view.state.upper() in ("EMPTY", "DEAD"):
        return None
    assignor = view.assignor.lower()
    if assignor in CONVERTIBLE_ASSIGNORS:
        return None
    named = f"the {view.assignor!r} assignor" if view.assignor else "an assignor a listing does not name"
    return (
        f"it is a classic group with members ({view.state.lower()}), using {named}: Kafka refuses to convert "
        "a classic group whose assignments carry assignor data (KAFKA-18134), as librdkafka's "
        "cooperative-sticky assignments do once the group rebalanced after its first assignment "
        "(range and roundrobin groups convert)"
    )


class Lists(Protocol):
    """What the gate needs of a :class:`._health.GroupDescriber`."""

    def listed(self, timeout: float) -> GroupView | None: ...

    def release(self) -> None: ...


class JoinGate:
    """Holds a consumer-protocol member's subscription back until its group can be converted."""

    def __init__(
        self,
        group_id: str,
        describer: Callable[[], Lists],
        *,
        timeout: float | None,
        check_every: float = 1.0,
        on_open: Callable[[], object] = lambda: None,
    ) -> None:
        self._group_id = group_id
        self._describer = describer
        #: Seconds a subscription may wait for a convertible group (None: for ever).
        self.timeout = timeout
        self._check_every = check_every
        #: Called on the gate's thread once it opened: the subscription goes to librdkafka then (under
        #: the consumer's lock), as upstream's member joins without waiting for a poll().
        self._on_open = on_open
        #: When the reader should next ask :meth:`ready` (0: idle, nothing waits).
        self.due = 0.0
        #: Why the last subscription waited (None: it did not): the fatal error's explanation if
        #: the broker refuses the member all the same.
        self.reason: str | None = None
        #: When the subscription that waits first waited (a wait again after a refused join,
        #: :meth:`hold` ``again``, keeps it: ``timeout`` bounds the whole wait).
        self._started = 0.0
        #: The gate opened because ``timeout`` ran out, not because the group could be converted.
        self.timed_out = False
        #: Joins this subscription's gate let through that the broker refused all the same.
        self.refusals = 0
        #: The consumer stopped (:meth:`close`): no subscription waits here any more.
        self._closed = False
        self._open = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, *, again: bool = False) -> None:
        """Called by the rebalancer's subscribe() (lock held) when librdkafka has no subscription: the
        subscription waits, the group is judged on the gate's thread. A gate already describing goes on.
        ``again``: the broker refused the join this gate let through (see :meth:`may_wait_again`); the
        wait goes on within the same ``timeout``."""
        if self.due or self._closed:
            return
        self.cancel()
        if again:
            self.refusals += 1
        else:
            self.reason = None
            self._started = time.monotonic()
            self.refusals = 0
        self.timed_out = False
        self._open, self._stop = threading.Event(), threading.Event()
        self.due = time.monotonic()
        thread = threading.Thread(
            target=self._run,
            args=(self._open, self._stop),
            name=f"safeconsumer-join-{self._group_id}",
            daemon=True,
        )
        self._thread = thread
        thread.start()

    def ready(self, now: float) -> bool:
        """Called by the rebalancer when due (lock held): whether the subscription may go to librdkafka
        now. True makes the gate idle; False asks again ``ASK_EVERY`` seconds later."""
        if not self.due:
            return False
        if self._open.is_set():
            self.due = 0.0
            self._thread = None
            return True
        self.due = now + ASK_EVERY
        return False

    def may_wait_again(self, now: float) -> bool:
        """Whether a join this gate let through, which the broker refused, may wait again: the gate
        opened because the group could be converted (it changed between the look and the join: a
        mixed group whose last consumer-protocol member left turns classic again) and ``timeout``
        has not run out since the subscription first waited."""
        return (
            not self._closed
            and not self.timed_out
            and self.refusals < MAX_REFUSALS
            and (self.timeout is None or now - self._started < self.timeout)
        )

    def close(self) -> None:
        """The consumer stopped (close(), a fatal error, dropped): nothing waits here again."""
        self._closed = True
        self.cancel()

    def cancel(self) -> None:
        """The subscription that waited is gone (unsubscribe(), close(), a fatal error, the consumer
        dropped): the thread ends by itself; the gate is idle. Called on any thread."""
        self._stop.set()
        self.due = 0.0
        self._thread = None

    def _run(self, opened: threading.Event, stop: threading.Event) -> None:
        """The gate's thread: judge the group until it can be converted, or the timeout ran out."""
        describer = self._describer()
        started = self._started
        try:
            while not stop.is_set():
                reason = judge(describer.listed(timeout=5.0))
                if stop.is_set():
                    break
                if reason is None:
                    if self.reason not in (None, NO_ANSWER):
                        logger.info("group %r can take this consumer-protocol member now: joining", self._group_id)
                    break
                if reason != NO_ANSWER and self.reason in (None, NO_ANSWER):
                    logger.warning(
                        "not joining group %r yet: %s; waiting up to %s for it to become convertible. %s",
                        self._group_id,
                        reason,
                        "ever" if self.timeout is None else f"{self.timeout:g} s",
                        MIGRATION_REMEDY,
                    )
                self.reason = reason
                if self.timeout is not None and time.monotonic() - started >= self.timeout:
                    self.timed_out = True
                    logger.warning(
                        "group %r still cannot be converted after %g s (%s): joining as upstream's consumer "
                        "would; if the broker refuses, the consumer stops with a GroupMigrationError",
                        self._group_id,
                        self.timeout,
                        reason,
                    )
                    break
                stop.wait(self._check_every)
        finally:
            describer.release()
            opened.set()
        if not stop.is_set() and self.due:  # (due 0: the reader's call joined already; the lock is not taken)
            self._on_open()
