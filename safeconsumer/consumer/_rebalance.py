"""Assignment changes: every change of what this consumer owns starts here.

Every change of ownership passes here, whether librdkafka announces it (the rebalance
callbacks) or the application makes it (``assign``, ``unassign``, ``incremental_*``,
``unsubscribe``); it becomes a transition of the partition table (the table itself clears
everything when the consumer closes or fails: :mod:`._lifecycle`), and librdkafka's pause
flags are then made equal to the pause ledger's effective set restricted to the new
assignment, before a record of a newly assigned partition can be returned.

- ``on_assign``: the table takes the partitions (restoring eager limbo), the user's callback
  runs (it may assign itself, with explicit offsets), the assignment is applied if it did
  not, then effectively paused new partitions are paused.
- ``on_revoke`` / ``on_lost``: processed offsets are stored first on a revocation (so the
  commit librdkafka makes then includes them; nothing for a lost partition), the user's
  callback runs while the partitions are still owned, and then - in a ``finally``, even if
  the callback raised - the partitions are resumed inside librdkafka, stop being owned and
  their records are purged.

One behaviour under every protocol (I9). Under the eager protocol every partition is
revoked at each rebalance: a revoked partition's state (withheld and read-ahead records,
partition mark) waits in limbo and is restored when the partition comes back in that same
rebalance, reading on after its last held record; otherwise it is purged and the mark
dropped, as under an incremental protocol. A partition lost, unassigned, or revoked after
``unsubscribe()`` never waits in limbo.

The rebalancer is one object written in three modules: this one (the subscription and the join,
librdkafka's callbacks, the application's assignment calls, partitions leaving) and its two base
classes, :class:`._restarts.Restarts` (``seek()``, and partitions librdkafka does not fetch
assigned again) and :class:`._pause_flags.PauseFlags` (pause marks, and librdkafka's pause flags
made equal to the ledger's effective set: ``sync()``).
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from confluent_kafka import OFFSET_INVALID, OFFSET_STORED, Consumer, KafkaError, TopicPartition

from ..base._errors import is_failed_conversion
from ..base._keys import Key, RebalanceCallback
from ..group._explainer import RebalanceExplainer
from ._client import RawClient, group_generation
from ._deferred import DeferredOnLost
from ._delivery import DeliveryGate
from ._join_gate import JoinGate
from ._partitions import LeaveReason, PartitionTable
from ._pause import PauseLedger
from ._pause_flags import PauseFlags
from ._requery import Requery
from ._restarts import Restarts

if TYPE_CHECKING:
    from ..base._telemetry import LazyTelemetry

logger = logging.getLogger("safeconsumer")


def _from_committed(tp: TopicPartition) -> bool:
    """Whether an assigned partition starts from its group's committed offset (fetched first)."""
    return tp.offset in (OFFSET_INVALID, OFFSET_STORED)


def _keys(partitions: Iterable[TopicPartition]) -> list[Key]:
    return [(tp.topic, tp.partition) for tp in partitions]


class Rebalancer(Restarts, PauseFlags):
    """Wraps the user's rebalance callbacks and applies every assignment change (its restarts and
    its pause side are written in the base classes)."""

    def __init__(
        self,
        consumer: Consumer,
        client: RawClient,
        *,
        table: PartitionTable,
        ledger: PauseLedger,
        gate: DeliveryGate,
        telemetry: LazyTelemetry,
        incremental: bool,
        protocol: str,
        explainer: RebalanceExplainer,
        closing: Callable[[], bool] = lambda: False,
        failed_in_close: Callable[[Exception], None] = lambda _exc: None,
        owned_changed: Callable[[int], object] = lambda _n: None,
        requery_delay: float = 0.0,
        stall_cause: Callable[[list[Key] | None, str], None] = lambda _keys, _cause: None,
        joining: JoinGate | None = None,
    ):
        #: Weak (I10); librdkafka calls back only inside a call on the consumer, so it is alive then.
        self._consumer = weakref.ref(consumer)
        self._client = client
        self._table = table
        self._ledger = ledger
        self._gate = gate
        self._telemetry = telemetry
        self.incremental = incremental
        #: For logs and spans: "consumer" (KIP-848) or "classic/<assignment strategy>".
        self.protocol = protocol
        self.user_on_assign: RebalanceCallback | None = None
        self.user_on_revoke: RebalanceCallback | None = None
        self.user_on_lost: RebalanceCallback | None = None
        #: The topics of the subscribe() in force (None: none): an eager revocation may then be
        #: followed by a re-assignment. Changed by subscribe() and unsubscribe() only.
        self.subscription: list[str] | None = None
        #: close() (or a fatal stop) has begun: revocations are final. The consumer's lifecycle answers.
        self._closing = closing
        #: Told of an application callback's exception during close() (the lifecycle raises it after).
        self._failed_in_close = failed_in_close
        #: Partitions owned when unsubscribe() was called: their coming revocation is final.
        #: Set by :meth:`unsubscribed`, emptied key by key in :meth:`_left`. It stays here, not in
        #: the partition table: it is a fact about the rebalance in progress (an eager revocation
        #: that no re-assignment follows), read only at the moment the partitions leave, and its
        #: timing (unsubscribe, then librdkafka's revoke callback inside a later poll) is covered
        #: only by broker tests (tests/integration/test_lifecycle_paths.py, test_pause_random_walk.py).
        self._unsubscribed: set[Key] = set()
        #: Parking as applied: every owned partition paused in librdkafka and at the gate. Not the
        #: same fact as ``Keeper.parked`` (the keeper's decision, taken under its own condition):
        #: this one changes only under the client lock, through :meth:`set_parked`, when the
        #: keeper's link applies that decision to an open consumer.
        self.parked = False
        #: A user rebalance callback is running (a commit() from it is not the app coming back).
        self.in_callback = False
        #: Inside on_assign, before or while the user's callback runs; and whether it assigned.
        self._in_assign = False
        self._assign_called = False
        #: The application's on_lost callbacks served by a read-ahead, waiting for its next call
        #: (the reader reads ahead through it).
        self.deferred = DeferredOnLost(self._run_callback)
        #: Finds and reports each rebalance's cause.
        self._explainer = explainer
        #: Partitions the application assigned to start from their committed offset (librdkafka
        #: fetches it first), and those whose fetch librdkafka gave up (see _requery). Changed by
        #: :meth:`assign` (replaced), :meth:`incremental_assign` (added), :meth:`unassign` and
        #: :meth:`seeked` (removed); read only by :meth:`requery_due`. It stays here, not in the
        #: partition table: it is a fact about how the application's assign() call started a
        #: partition, it outlives the table's entry (a partition revoked and given back by an
        #: incremental call keeps it until unassigned, and requery_due filters by ownership),
        #: only the re-query reads it, and that path is covered only by broker tests
        #: (tests/integration/test_coordinator_moves.py).
        self._from_committed: set[Key] = set()
        self.requery = Requery(requery_delay)
        #: Told how many partitions are owned after every assignment change (fetch memory).
        self._owned_changed_to = owned_changed
        #: Told when an error event names why partitions will not fetch (the stall guard, _stall).
        self._stall_cause = stall_cause
        #: A consumer-protocol member's subscription waits here until its group can be converted
        #: (see _migration); None for a classic member, which never waits.
        self.joining = joining
        #: librdkafka has the subscription (set by the subscribe() that reached it, cleared by
        #: unsubscribe()): a subscribe() then only changes topics, it is no new join.
        self._joined = False
        #: An assignment came since librdkafka got the subscription (a refused join is a first one only).
        self._assigned_since_join = False

    @property
    def subscribed(self) -> bool:
        """subscribe() is in force (see :attr:`subscription`)."""
        return self.subscription is not None

    # -- the application's subscription ------------------------------------------------------
    def subscribe(self, topics: list[str], callbacks: dict[str, RebalanceCallback | None]) -> None:
        """Called by the facade's subscribe() (lock held): librdkafka subscribes with this
        rebalancer's callbacks, which run the application's ``callbacks`` (given by name). A
        consumer-protocol member's first join waits in its join gate first (see _migration)."""
        joining = self.joining
        if self.subscription is None:
            self._explainer.subscribed()
        if joining is not None and not self._joined:
            joining.hold()
        else:
            self._subscribe(topics)
        self.user_on_assign = callbacks.get("on_assign")
        self.user_on_revoke = callbacks.get("on_revoke")
        self.user_on_lost = callbacks.get("on_lost")
        self.subscription = list(topics)
        self.requery.forget(None)

    def _subscribe(self, topics: list[str]) -> None:
        self._client.call(
            Consumer.subscribe, topics, on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost
        )
        self._joined = True
        self._assigned_since_join = False

    def join_due(self, now: float) -> None:
        """Called by the reader when the join gate is due (lock held): the subscription that waited
        goes to librdkafka once the gate opened."""
        joining = self.joining
        if joining is not None and joining.ready(now) and self.subscription is not None and not self._closing():
            self._subscribe(self.subscription)

    def first_join(self) -> bool:
        """Whether librdkafka has this member's subscription and no partition came since."""
        return self._joined and not self._assigned_since_join

    def refused_join(self, error: KafkaError) -> bool:
        """Called by the client (lock held) when the broker refused, or failed, to convert the group
        at this member's first heartbeat (fatal in librdkafka). True when the member waits again
        instead of failing: its join gate let it through because the group could be converted, the
        group changed before the heartbeat came (a mixed group turns classic again when its last
        consumer-protocol member leaves; a classic member joins an empty group, whose first
        rebalance Kafka 4.3 cannot convert), no partition came since, and ``migration_timeout`` has
        not run out. The client is then made anew (:meth:`._client.RawClient.renew`) and the
        subscription waits in the gate again."""
        joining = self.joining
        if (
            joining is None
            or not self.first_join()
            or self.subscription is None
            or self._closing()
            or not joining.may_wait_again(time.monotonic())
        ):
            return False
        try:
            self._client.renew()
        except Exception as exc:  # noqa: BLE001 - then the refusal is the fatal error it would have been
            logger.warning("making the client anew after a refused join failed: %s", exc)
            return False
        self._joined = False
        joining.hold(again=True)
        if is_failed_conversion(error):
            logger.warning(
                "group %r failed to convert at this consumer-protocol member's first heartbeat (UNKNOWN_SERVER_ERROR): "
                "a classic member joined it between the member's look at it and its join, and Kafka cannot convert "
                "a classic group in its first rebalance; the client was made anew and waits for the group to become "
                "convertible",
                self._client.group_id,
            )
        else:
            logger.warning(
                "group %r refused this consumer-protocol member's first heartbeat: it turned into a classic group "
                "the broker does not convert between the member's look at it and its join; the client was made "
                "anew and waits for the group to become convertible again",
                self._client.group_id,
            )
        return True

    def stop_joining(self) -> None:
        """The consumer stops (close(), a fatal error, dropped): a subscription that waited never joins."""
        if self.joining is not None:
            self.joining.close()

    # -- librdkafka's callbacks ------------------------------------------------------------
    def on_assign(self, _client: Consumer, partitions: list[TopicPartition]) -> None:
        """Called by librdkafka inside a poll/consume/close: the table takes ``partitions`` (limbo
        restored), the app's callback runs, the assignment is applied, pause flags follow intent."""
        self.deferred.run_all()
        keys = _keys(partitions)
        try:
            with self._explained("assigned", keys, leaving=False):
                self._on_assign(partitions, keys)
        finally:
            self._owned_changed()
        logger.info(
            "assigned %d partition(s) (%s, %s), now owning %d, %d effectively paused",
            len(keys),
            self.protocol,
            self._generation(),
            len(self._table.owned),
            self._table.intent_paused,
        )

    def _on_assign(self, partitions: list[TopicPartition], keys: list[Key]) -> None:
        table = self._table
        self._assigned_since_join = True
        # Owned from here on, so that the user's callback sees owns() and paused() of the new assignment.
        self._ledger.unmark_partitions(table.assigned(keys, replace=not self.incremental))
        self._in_assign, self._assign_called = True, False
        try:
            if self.user_on_assign is not None:
                with self._user_callback():
                    self.user_on_assign(self._consumer(), partitions)
        finally:
            self._in_assign = False
            if not self._assign_called:
                parts = [self._start_of(tp) or tp for tp in partitions]
                if self.incremental:
                    self._client.incremental_assign(parts)
                else:
                    self._client.assign(parts)
            table.restores_applied()
            self.sync(fresh=keys)

    def _start_of(self, tp: TopicPartition) -> TopicPartition | None:
        """Where a partition restored from eager limbo reads on: after its last held record.

        None when it was not restored, or the application gave an explicit offset.
        """
        offset = self._table.resume_at.get((tp.topic, tp.partition))
        if offset is None or tp.offset >= 0:
            return None
        return TopicPartition(tp.topic, tp.partition, offset)

    def on_revoke(self, _client: Consumer, partitions: list[TopicPartition]) -> None:
        """Called by librdkafka: a final store, the app's callback, then the partitions leave the
        table (or wait in eager limbo) and are resumed inside librdkafka."""
        self.deferred.run_all()
        self._leaving(partitions, self.user_on_revoke, "revoked")

    def on_lost(self, _client: Consumer, partitions: list[TopicPartition]) -> None:
        """Called by librdkafka: the partitions leave at once, nothing stored; the app's callback
        runs now, or (served by a read-ahead) waits in :attr:`deferred` for the app's next call."""
        callback = self.user_on_lost if self.user_on_lost is not None else self.user_on_revoke
        if self.deferred.reading_ahead and callback is not None:
            # The partitions leave now (librdkafka unassigns them when this returns); the
            # application hears of it in librdkafka's order, after events read before it.
            self._leaving(partitions, None, "lost")
            self.deferred.defer(callback, partitions)
            return
        self.deferred.run_all()
        self._leaving(partitions, callback, "lost")

    def _run_callback(self, callback: RebalanceCallback, partitions: list[TopicPartition]) -> None:
        """Run one deferred on_lost callback of the application (for :attr:`deferred`)."""
        with self._user_callback():
            callback(self._consumer(), partitions)

    def _leaving(
        self, partitions: list[TopicPartition], callback: RebalanceCallback | None, reason: LeaveReason
    ) -> None:
        keys = _keys(partitions)
        try:
            with self._explained(reason, keys, leaving=self._closing() or not self.subscribed):
                if reason == "revoked":
                    self._gate.flush(force=True)
                try:
                    if callback is not None:
                        with self._user_callback():
                            callback(self._consumer(), partitions)
                except Exception as exc:
                    if not self._closing():
                        raise
                    self._failed_in_close(exc)  # close() raises it once librdkafka closed
                finally:
                    self._left(keys, reason, rebalance=True)
        finally:
            self._owned_changed()
        logger.info(
            "%s %d partition(s) (%s, %s), now owning %d",
            reason,
            len(keys),
            self.protocol,
            self._generation(),
            len(self._table.owned),
        )

    @contextlib.contextmanager
    def _explained(self, change: str, keys: list[Key], *, leaving: bool) -> Iterator[None]:
        """One rebalance callback: its span (with its cause when known now), then its cause reported."""
        cause = self._explainer.local_cause(change, leaving=leaving)
        try:
            with self._telemetry.rebalance(change, keys, self.protocol, cause):
                yield
        finally:
            self._explainer.callback(change, cause)

    def _owned_changed(self) -> None:
        """Tell ``owned_changed`` (a constructor argument) the partition count; never an error into a callback."""
        try:
            self._owned_changed_to(len(self._table.owned))
        except Exception:  # a size estimate must not break a rebalance
            logger.debug("fetch memory check failed", exc_info=True)

    def _generation(self) -> str:
        generation = group_generation(self._consumer())
        return "generation unknown" if generation is None else f"generation {generation}"

    @contextlib.contextmanager
    def _user_callback(self) -> Iterator[None]:
        was, self.in_callback = self.in_callback, True
        try:
            yield
        finally:
            self.in_callback = was

    # -- the application's own assignment calls ------------------------------------------------
    def assign(self, partitions: list[TopicPartition]) -> None:
        """Called by the facade's ``assign()`` (lock held; also from the app's on_assign): the whole
        assignment is replaced in librdkafka and the table; partitions assigned again restart
        at the given offset; marks of partitions gone are dropped; flags follow intent."""
        keys = _keys(partitions)
        table = self._table
        inside = self._in_assign
        if inside:
            self._assign_called = True
        else:
            self._gate.flush(force=True)  # stored before the assignment changes (I9)
        applied: list[TopicPartition] = []
        for tp in partitions:
            restored = self._start_of(tp) if inside else None
            if restored is not None:
                applied.append(restored)
                continue
            # Assigned again: it restarts at the given offset (or the committed one); what was
            # read or withheld from its old position would repeat or reorder.
            key = (tp.topic, tp.partition)
            if key in table.owned:
                table.seeked(key, tp.offset)
            applied.append(tp)
        wanted = set(keys)
        gone = [k for k in table.owned if k not in wanted]
        if gone:
            self._left(gone, "unassigned")
        self._client.assign(applied)
        self._from_committed = {k for k, tp in zip(keys, applied, strict=True) if _from_committed(tp)}
        self.requery.forget(None)  # librdkafka fetches every committed offset of a new assignment anew
        self._ledger.unmark_partitions(table.assigned(keys, replace=True))
        self.sync(fresh=keys)
        self._owned_changed()

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        """Called by the facade's ``incremental_assign()`` (lock held; also from on_assign): the
        table takes ``partitions`` as well; flags follow intent."""
        keys = _keys(partitions)
        if self._in_assign:
            self._assign_called = True
        self._client.incremental_assign(partitions)
        for key, tp in zip(keys, partitions, strict=True):
            if _from_committed(tp):
                self._from_committed.add(key)
            else:
                self.seeked(key)
        self._ledger.unmark_partitions(self._table.assigned(keys, replace=False))
        self.sync(fresh=keys)
        self._owned_changed()

    def unassign(self, partitions: list[TopicPartition] | None) -> None:
        """Called by the facade's ``unassign()`` (None) or ``incremental_unassign(partitions)``
        (lock held): a final store, then the partitions leave librdkafka and the table, marks dropped."""
        self._gate.flush(force=True)  # stored before the assignment changes (I9)
        keys = list(self._table.owned) if partitions is None else _keys(partitions)
        self._left(keys, "unassigned")
        if partitions is None:
            self._client.unassign()
            self._from_committed.clear()
            self.requery.forget(None)
        else:
            self._client.incremental_unassign(partitions)
            self._from_committed.difference_update(keys)
            self.requery.forget(keys)
        self._owned_changed()

    def unsubscribe(self) -> None:
        """Called by the facade's unsubscribe() (lock held): what was processed is stored first (I9),
        librdkafka unsubscribes, and the coming revocation of what is owned is final."""
        self._gate.flush(force=True)
        if self.joining is not None:
            self.joining.cancel()
        self._client.call(Consumer.unsubscribe)
        self._joined = False
        self.subscription = None
        self._unsubscribed = set(self._table.owned)
        # Eager limbo waits for a re-assignment that will not come now.
        self._ledger.unmark_partitions(self._table.assigned((), replace=False))

    # -- bookkeeping ----------------------------------------------------------------------------
    def _left(self, keys: Iterable[Key], reason: LeaveReason, *, rebalance: bool = False) -> None:
        """Partitions stop being owned: resumed inside librdkafka, then limbo or gone for good."""
        table = self._table
        gone = {k for k in keys if k in table.owned}
        final = self._unsubscribed & gone
        self._unsubscribed -= gone
        if not gone:
            return
        # Never left paused inside librdkafka: it would come back silently stuck.
        self._client.resume(gone, leaving=True)
        eager = rebalance and reason == "revoked" and not self.incremental and self.subscribed and not self._closing()
        if eager and not final:
            # Where each reads on if it comes back with nothing held: after what the application was
            # handed (it may still be working on it, so nothing was stored for it): I3, I8.
            positions = {
                (tp.topic, tp.partition): tp.offset for tp in self._client.position(sorted(gone)) if tp.offset >= 0
            }
            table.to_limbo(gone, positions)
        else:
            table.left(gone, reason)
            self._ledger.unmark_partitions(gone)
        self._tell_table()
