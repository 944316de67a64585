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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from confluent_kafka import KafkaError

if TYPE_CHECKING:
    from .otel import Telemetry

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
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError._FENCED,
    }
)

#: Consumer settings an admin client of the same cluster needs (connection and security).
_ADMIN_PREFIXES = (
    "bootstrap.servers",
    "security.protocol",
    "sasl.",
    "ssl.",
    "ssl_key",
    "socket.",
    "broker.address.",
    "client.dns.lookup",
    "client.rack",
    "enable.ssl.",
    "enable.sasl.",
    "https.",
    "oauth_cb",
    "reconnect.backoff",
    "retry.backoff",
    "api.version.",
    "broker.version.fallback",
)


#: Seconds one describe of the group may take (close() waits for at most one).
DESCRIBE_TIMEOUT = 2.0


@dataclass(frozen=True)
class Member:
    """One member of a group, as the broker describes it."""

    member_id: str
    client_id: str
    host: str
    instance_id: str | None

    def __str__(self) -> str:
        instance = f", group.instance.id {self.instance_id}" if self.instance_id else ""
        return f"member {self.member_id} (client.id {self.client_id}, host {self.host}{instance})"


@dataclass(frozen=True)
class GroupView:
    """A group as described by the broker."""

    state: str
    members: dict[str, Member]


def admin_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a consumer config an admin client of the same cluster takes."""
    conf = {k: v for k, v in config.items() if k.startswith(_ADMIN_PREFIXES)}
    client_id = config.get("client.id")
    conf["client.id"] = f"{client_id or 'safeconsumer'}-health"
    return conf


class GroupDescriber:
    """Describes one group through the admin API (its client created at first use)."""

    def __init__(self, config: Mapping[str, Any], group_id: str) -> None:
        self._conf = admin_config(config)
        self._group_id = group_id
        self._admin: Any = None

    def release(self) -> None:
        """Drop the admin client (its threads end once it is collected)."""
        self._admin = None

    def describe(self, timeout: float) -> GroupView | None:
        """The group now, or None when the broker did not answer in time (logged at DEBUG)."""
        from confluent_kafka.admin import AdminClient

        try:
            if self._admin is None:
                self._admin = AdminClient(self._conf)
            future = self._admin.describe_consumer_groups([self._group_id], request_timeout=timeout)[self._group_id]
            group = future.result(timeout=timeout + 1)
        except Exception as exc:  # noqa: BLE001 - explaining is best effort; never the consumer's failure
            logger.debug("describing group %r failed: %s", self._group_id, exc)
            return None
        members = {
            m.member_id: Member(m.member_id, m.client_id, m.host, m.group_instance_id) for m in group.members or []
        }
        state = getattr(group.state, "name", str(group.state))
        return GroupView(state, members)


@dataclass
class _Callback:
    change: str
    partitions: int
    at: float
    generation: int | None


class RebalanceExplainer:
    """Finds and reports the cause of each rebalance this member sees (see the module)."""

    def __init__(
        self,
        *,
        group_id: str,
        protocol: str,
        telemetry: Telemetry,
        describer: GroupDescriber | None,
        member_id: Callable[[], str | None],
        owned: Callable[[], int],
        generation: Callable[[], int | None],
        settle: float = 1.0,
        deadline: float = 15.0,
    ) -> None:
        self._group_id = group_id
        self._protocol = protocol
        self._telemetry = telemetry
        self._describer = describer
        self._member_id = member_id
        self._owned = owned
        #: This member's id, as of its last rebalance callback.
        self._me: str | None = None
        self._generation = generation
        #: The generation (member epoch) and cause of the last rebalance explained: a later
        #: callback of the same generation is the rest of that rebalance (cooperative's second round).
        self._last: tuple[int, Cause] | None = None
        self._settle = settle
        self._deadline = deadline
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: list[_Callback] = []
        self._known: dict[str, Member] | None = None
        self._refresh = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        #: Since this member's last assignment: error codes librdkafka reported.
        self._errors: set[int] = set()
        #: This member has been assigned since it subscribed (so an assignment is not a join).
        self.in_group = False
        self._last_logged: tuple[Cause, float] | None = None

    # -- what the consumer tells it ---------------------------------------------------------
    def error_seen(self, code: int) -> None:
        """An error event or exception from librdkafka (only its code is kept)."""
        if code == KafkaError._MAX_POLL_EXCEEDED or code in FENCED_CODES:
            self._errors.add(code)

    def local_cause(self, change: str, *, leaving: bool) -> Cause | None:
        """The cause of a callback when this member's own state tells it, else None (a peer's)."""
        if change == "lost":
            errors = self._errors
            if errors & FENCED_CODES:
                return "fenced"
            if KafkaError._MAX_POLL_EXCEEDED in errors:
                return "max_poll_exceeded"
            return "session_lost"
        if leaving:
            return "left"
        if change == "assigned" and not self.in_group:
            return "joined"
        return None

    def callback(self, change: str, partitions: int, cause: Cause | None) -> None:
        """A rebalance callback ran (``cause``: its local cause, already counted with its span)."""
        now = time.monotonic()
        if change == "assigned":
            self.in_group = True
            self._errors.clear()
        elif change == "lost" or cause == "left":
            self.in_group = False
        if cause is not None:
            self._report(cause, [])
            if cause == "joined" and self._describer is not None:
                self._start(refresh=True)  # learn the members, to name later peers
            return
        if self._describer is None:
            self._telemetry.rebalance_caused(change, "unknown")
            self._report("unknown", [])
            return
        generation = self._generation()
        self._me = self._member_id()  # read here, on the consumer's thread: never from the explainer's
        with self._lock:
            self._waiting.append(_Callback(change, partitions, now, generation))
        self._start()

    def fatal(self, cause: Cause) -> None:
        """The member stopped for good (group full, fenced as a static member)."""
        self._report(cause, [])

    def close(self, *, wait: bool = True) -> None:
        """Stop the background thread (what it had not explained is counted as ``unknown``).

        ``wait``: join it; at most one describe call is in flight (``DESCRIBE_TIMEOUT``).
        """
        with self._lock:
            self._stopped = True
            self._wake.notify_all()
            thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=DESCRIBE_TIMEOUT + 2)
        with self._lock:
            left, self._waiting = self._waiting, []
        for cb in left:
            self._telemetry.rebalance_caused(cb.change, "unknown")
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
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._run, name=f"safeconsumer-rebalance-cause-{self._group_id}", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._waiting and not self._refresh and not self._stopped:
                    if not self._wake.wait(timeout=5.0):
                        self._thread = None
                        return  # idle: a later rebalance starts a new thread
                if self._stopped:
                    return
            self._settled()
            with self._lock:
                if self._stopped:
                    return
                episode, self._waiting = self._waiting, []
                self._refresh = False
            last = self._last
            if episode and last is not None and all(cb.generation == last[0] for cb in episode):
                for cb in episode:  # the rest of the rebalance already explained
                    self._telemetry.rebalance_caused(cb.change, last[1])
                continue
            view = self._stable_view()
            if episode:
                cause = self._explain(episode, view)
                generations = [cb.generation for cb in episode if cb.generation is not None]
                self._last = (generations[-1], cause) if generations else None
            if view is not None:
                self._known = view.members

    def _settled(self) -> None:
        """Wait until no callback came for ``settle`` seconds (one rebalance may run several)."""
        end = time.monotonic() + self._deadline
        while True:
            with self._lock:
                if self._stopped:
                    return
                last = self._waiting[-1].at if self._waiting else 0.0
                wait = last + self._settle - time.monotonic()
                if wait <= 0 or time.monotonic() >= end:
                    return
                self._wake.wait(timeout=wait)

    def _stable_view(self) -> GroupView | None:
        """The group once the broker says it is stable (or the last answer, at the deadline)."""
        assert self._describer is not None
        end = time.monotonic() + self._deadline
        view: GroupView | None = None
        while not self._stopped and time.monotonic() < end:
            view = self._describer.describe(timeout=DESCRIBE_TIMEOUT)
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
