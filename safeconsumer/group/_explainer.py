"""Group health: every rebalance this member sees, explained.

Each rebalance callback (assigned, revoked, lost) gets a *cause*:

- known in the callback, from this member's own state: ``joined`` (its first assignment since
  ``subscribe()``), ``left`` (``close()`` or ``unsubscribe()``), ``max_poll_exceeded`` (a loss
  after librdkafka reported ``_MAX_POLL_EXCEEDED``), ``fenced`` (after a fencing error),
  ``session_lost`` (any other loss); and ``group_full`` when the broker refuses the member;
- or caused by the rest of the group: a background thread (off the poll path) describes the
  group with the admin API once it settled, and compares its members with those it saw at the
  previous rebalance: ``peer_joined``, ``peer_left``, ``peers_changed`` (both), or
  ``assignment_changed`` (same members: e.g. partitions were added to a topic). Without an
  answer from the broker the cause is ``unknown``.

One INFO line per rebalance names the cause (and the peers: member id, client id, host,
instance id); the ``safeconsumer.rebalances`` counter counts each callback with its cause, and
the callback's span carries it when known there (a peer-caused rebalance gets a
``safeconsumer rebalance explained`` span, from its first callback until it was explained).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from confluent_kafka import KafkaError

from ._describe import GroupDescriber, GroupView, Member

if TYPE_CHECKING:
    from ..base._telemetry import LazyTelemetry

logger = logging.getLogger("safeconsumer")

Cause = Literal[
    "joined",
    "left",
    "max_poll_exceeded",
    "session_lost",
    "fenced",
    "group_full",
    "peer_joined",
    "peer_left",
    "peers_changed",
    "assignment_changed",
    "unknown",
]

#: Error codes that mean this member was fenced (its member id or instance id taken over).
FENCED_CODES = frozenset(
    {
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError._FENCED,
    }
)


#: Seconds one describe of the group may take (close() waits for at most one).
DESCRIBE_TIMEOUT = 2.0

#: Error codes saying a broker or the group coordinator is unreachable, and how long after the
#: last one the explainer does not describe the group (see ``RebalanceExplainer._describe``).
TROUBLE_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._WAIT_COORD,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
    }
)
TROUBLE_QUIET = 30.0


def _migration(before: str, after: str, joined: list[Member], left: list[Member]) -> str | None:
    """What a change of the group's type says (KIP-848's online migration), or None: a classic
    group becomes a consumer group when a consumer-protocol member joins, and classic again when
    the last one leaves (the admin API does not tell a member's protocol otherwise)."""
    before, after = before.upper(), after.upper()
    if before == after or "" in (before, after) or "UNKNOWN" in (before, after):
        return None
    if after == "CONSUMER":
        who = f" by the consumer-protocol member {joined[0].member_id}" if len(joined) == 1 else ""
        return f"the group was converted from the classic protocol to a consumer group{who} (KIP-848 upgrade)"
    if after == "CLASSIC":
        who = f" as its last consumer-protocol member {left[0].member_id} left" if len(left) == 1 else ""
        return f"the group was converted back to the classic protocol{who} (KIP-848 downgrade)"
    return None


@dataclass
class _Callback:
    change: str
    at: float


class RebalanceExplainer:
    """Finds and reports the cause of each rebalance this member sees (see the module)."""

    def __init__(
        self,
        *,
        group_id: str,
        protocol: str,
        telemetry: LazyTelemetry,
        describer: GroupDescriber | None,
        member_id: Callable[[], str | None],
        owned: Callable[[], int],
        settle: float = 1.0,
        deadline: float = 15.0,
    ) -> None:
        self._group_id = group_id
        self._protocol = protocol
        self._telemetry = telemetry
        self._describer = describer
        self._member_id = member_id
        self._owned = owned
        self._settle = settle
        self._deadline = deadline
        #: This member's id, as of its last rebalance callback (read on the consumer's thread).
        self._me: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        #: Callbacks waiting for their cause: a peer's doing (described) or a loss (judged).
        self._waiting: list[_Callback] = []
        #: The members after the last explained rebalance (the baseline for the next one).
        self._known: dict[str, Member] | None = None
        #: The group's type then ("CLASSIC", "CONSUMER"; "" unknown): a change is a protocol migration.
        self._known_kind = ""
        #: How many partitions this member was assigned at its last join (read on the consumer's thread).
        self._joined_with: int | None = None
        self._refresh = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        #: When librdkafka last reported each fencing or max-poll error code.
        self._errors: dict[int, float] = {}
        #: When librdkafka last reported a broker or the coordinator unreachable (see ``_describe``).
        self._trouble_at = -TROUBLE_QUIET
        #: A revocation explained, its assignment not yet seen: (when, cause). An assignment
        #: that follows completes that rebalance (eager's second half, cooperative's second round).
        self._open_revocation: tuple[float, Cause] | None = None
        #: This member has been assigned since it subscribed (so an assignment is not a join).
        self.in_group = False
        self._last_logged: tuple[Cause, float] | None = None

    # -- what the consumer tells it ---------------------------------------------------------
    def error_seen(self, code: int) -> None:
        """An error event or exception from librdkafka (only its code and time are kept)."""
        if code in TROUBLE_CODES:
            self._trouble_at = time.monotonic()
        if code == KafkaError._MAX_POLL_EXCEEDED or code in FENCED_CODES:
            self._errors[code] = time.monotonic()

    def local_cause(self, change: str, *, leaving: bool) -> Cause | None:
        """The cause of a callback when it is known now, else None (judged off the callback).

        A loss is judged later: the error event announcing it may still be on its way (a
        read-ahead call serves the loss before the event it returned is looked at).
        """
        if change == "lost":
            return None
        if leaving:
            return "left"
        if change == "assigned" and not self.in_group:
            return "joined"
        if self._describer is None:
            return "unknown"
        return None

    def callback(self, change: str, cause: Cause | None) -> None:
        """A rebalance callback ran (``cause``: known at once, and already counted with its span)."""
        now = time.monotonic()
        self._me = self._member_id()  # read here, on the consumer's thread: never from the explainer's
        if change == "assigned":
            self.in_group = True
        elif change == "lost" or cause == "left":
            self.in_group = False
        if cause is not None:
            self._report(cause, [])
            if cause == "joined" and self._describer is not None:
                self._joined_with = self._owned()
                self._start(refresh=True)  # learn the members, to name later peers
            return
        with self._lock:
            stopped = self._stopped
            if not stopped:
                self._waiting.append(_Callback(change, now))
        if stopped:  # closing: no thread will explain it
            self._telemetry.rebalance_caused(change, "unknown")
            return
        self._start()

    def subscribed(self) -> None:
        """The member subscribed: it joins soon, and its join is described at once (the baseline
        to name later peers by), so the describe process starts now, off the caller's thread."""
        describer = self._describer
        if describer is not None and describer.isolated:
            threading.Thread(target=describer.warm, name="safeconsumer-describe-warm", daemon=True).start()

    def fatal(self, cause: Cause) -> None:
        """The member stopped for good (group full, fenced as a static member)."""
        self._report(cause, [])

    def stop(self, *, wake: bool = True) -> None:
        """Explain nothing more in the background (a callback from now on is explained in place);
        returns at once. ``wake=False``: the thread is not woken now. :meth:`close` ends it."""
        with self._lock:
            self._stopped = True
            if wake:
                self._wake.notify_all()

    def end_process(self) -> None:
        """The consumer was dropped: its describe process ends now (killed, not waited for by a
        describe in flight), rather than when the explainer is collected."""
        if self._describer is not None:
            self._describer.end_process()

    def close(self, *, wait: bool = True) -> None:
        """Stop the background thread (what it had not explained is counted as ``unknown``).

        ``wait``: join it; at most one describe call is in flight (``DESCRIBE_TIMEOUT``).
        """
        self.stop()
        with self._lock:
            thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=DESCRIBE_TIMEOUT + 2)
        with self._lock:
            left, self._waiting = self._waiting, []
        for cb in left:
            self._telemetry.rebalance_caused(cb.change, self._loss_cause(cb) if cb.change == "lost" else "unknown")
        if left:
            logger.debug("closed before %d rebalance callback(s) were explained", len(left))
        if self._describer is not None:
            self._describer.release()

    # -- reporting ------------------------------------------------------------------------
    def _report(self, cause: Cause, peers: list[str]) -> None:
        now = time.monotonic()
        last = self._last_logged
        if last is not None and last[0] == cause and now - last[1] < self._settle and not peers:
            return  # the same rebalance's next callback
        self._last_logged = (cause, now)
        named = f": {'; '.join(peers)}" if peers else ""
        logger.info(
            "rebalance of group %r (%s): %s%s; this member owns %d partition(s)",
            self._group_id,
            self._protocol,
            cause.replace("_", " "),
            named,
            self._owned(),
        )

    # -- the background thread --------------------------------------------------------------
    def _start(self, *, refresh: bool = False) -> None:
        with self._lock:
            if self._stopped:
                return
            self._refresh = self._refresh or refresh
            self._wake.notify_all()
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._run, name=f"safeconsumer-rebalance-cause-{self._group_id}", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            idle, drop = False, None
            with self._lock:
                while not (self._waiting or self._refresh or self._stopped):
                    if not self._wake.wait(timeout=5.0) and not (self._waiting or self._refresh or self._stopped):
                        self._thread = None  # idle: the next rebalance starts a new thread
                        idle = True
                        drop = self._describer.idle() if self._describer is not None else None
                        break
                if not idle:
                    if self._stopped:
                        return
                    refresh, self._refresh = self._refresh, False
            if idle:
                if drop is not None:
                    drop()  # the admin client and the describe process go here, outside the lock
                return
            if refresh:
                self._learn_members()
            if not self._settled():
                return
            with self._lock:
                episode, self._waiting = self._waiting, []
            if episode:
                self._handle(episode)
            self._drop_admin_between_rebalances()

    def _drop_admin_between_rebalances(self) -> None:
        """Nothing more to describe now: the admin client (a second librdkafka instance, its
        threads and buffers) goes at once, not after the idle wait. Made at a join, it would
        otherwise live through the consumer's busiest seconds (measured: peak RSS of a fast
        ``poll()`` application 1.12x raw with it, 1.04x without). The next rebalance makes another.
        A describe process stays until the explainer is idle: its memory is not this process's."""
        admin = None
        with self._lock:
            if not (self._waiting or self._refresh or self._stopped) and self._describer is not None:
                admin = self._describer.between_rebalances()
        del admin  # destroyed here, outside the lock

    def _learn_members(self) -> None:
        """The baseline after this member joined: one answer, taken at once (a peer joining a
        moment later must not be in it, nor one the broker is adding already), kept only if no
        rebalance began meanwhile."""
        assert self._describer is not None
        view = self._describe()
        with self._lock:
            if view is not None and not self._waiting:
                self._known = view.baseline(self._me, self._joined_with)
                self._known_kind = view.kind
                logger.debug(
                    "group %r after this member joined: %d member(s), type %s",
                    self._group_id,
                    len(self._known),
                    view.kind or "not told",
                )

    def _settled(self) -> bool:
        """Wait until no callback came for ``settle`` seconds (one rebalance may run several).

        False once stopped.
        """
        end = time.monotonic() + self._deadline
        while True:
            with self._lock:
                if self._stopped:
                    return False
                last = self._waiting[-1].at if self._waiting else 0.0
                wait = last + self._settle - time.monotonic()
                if wait <= 0 or time.monotonic() >= end:
                    return True
                self._wake.wait(timeout=wait)

    def _handle(self, episode: list[_Callback]) -> None:
        losses = [cb for cb in episode if cb.change == "lost"]
        for cb in losses:
            cause = self._loss_cause(cb)
            self._telemetry.rebalance_caused(cb.change, cause)
            self._report(cause, [])
        rest = [cb for cb in episode if cb.change != "lost"]
        if not rest:
            return
        view = self._stable_view()
        with self._lock:  # callbacks that came while describing belong to the change described
            rest += [cb for cb in self._waiting if cb.change != "lost"]
            self._waiting = [cb for cb in self._waiting if cb.change == "lost"]
        opened, known = self._open_revocation, self._known
        if (
            opened is not None
            and all(cb.change == "assigned" for cb in rest)
            and view is not None
            and known is not None
            and view.members.keys() == known.keys()
        ):
            # No member came or went since the revocation was explained: this assignment is
            # the rest of that rebalance (eager's second half, cooperative's second round).
            self._open_revocation = None
            for cb in rest:
                self._telemetry.rebalance_caused(cb.change, opened[1])
            return
        cause = self._explain(rest, view)
        ended_revoking = rest[-1].change == "revoked"
        self._open_revocation = (rest[-1].at, cause) if ended_revoking else None
        if view is not None:
            self._known = view.members
            self._known_kind = view.kind

    def _loss_cause(self, cb: _Callback) -> Cause:
        """Why partitions were lost: the error librdkafka reported around the loss, if any."""
        near = {code for code, at in self._errors.items() if cb.at - 30.0 <= at <= cb.at + self._deadline}
        if near & FENCED_CODES:
            return "fenced"
        if KafkaError._MAX_POLL_EXCEEDED in near:
            return "max_poll_exceeded"
        return "session_lost"

    def _describe(self) -> GroupView | None:
        """The group as described now. Described in this process (no describe process could be
        started: :mod:`._describe_process`), None (not asked) while the cluster reported a broker
        or the coordinator unreachable in the last ``TROUBLE_QUIET`` seconds: librdkafka 2.16's
        admin client can abort the whole process when a coordinator request meets a connection
        that just dropped (librdkafka #4605), and an explanation is not worth that risk, so such
        rebalances are counted ``unknown``. The quiet period narrows that window; it does not close it."""
        assert self._describer is not None
        if not self._describer.isolated and time.monotonic() - self._trouble_at < TROUBLE_QUIET:
            logger.debug("not describing the group: a broker or the coordinator was unreachable lately")
            return None
        return self._describer.describe(timeout=DESCRIBE_TIMEOUT)

    def _stable_view(self) -> GroupView | None:
        """The group once the broker says it is stable (or the last answer, at the deadline)."""
        assert self._describer is not None
        end = time.monotonic() + self._deadline
        view: GroupView | None = None
        while not self._stopped and time.monotonic() < end:
            view = self._describe()
            if view is not None and view.state.upper() in ("STABLE", "EMPTY"):
                return view
            with self._lock:
                if self._stopped:
                    break
                self._wake.wait(timeout=0.5)
        return view

    def _explain(self, episode: list[_Callback], view: GroupView | None) -> Cause:
        me = self._me
        known = self._known
        peers: list[str] = []
        cause: Cause
        if view is None or known is None:
            cause = "unknown"
            logger.debug("rebalance not explained: %s", "no answer" if view is None else "no earlier view")
        else:
            joined = [m for k, m in view.members.items() if k not in known and k != me]
            left = [m for k, m in known.items() if k not in view.members and k != me]
            peers = [f"joined {m}" for m in joined] + [f"left {m}" for m in left]
            migration = _migration(self._known_kind, view.kind, joined, left)
            if migration:
                peers.append(migration)
            cause = (
                "peers_changed"
                if joined and left
                else "peer_joined"
                if joined
                else "peer_left"
                if left
                else "assignment_changed"
            )
        for cb in episode:
            self._telemetry.rebalance_caused(cb.change, cause)
        self._telemetry.rebalance_explained(cause, episode[0].at, peers, self._protocol)
        self._report(cause, peers)
        return cause
