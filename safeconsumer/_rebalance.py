"""Assignment state and rebalance callbacks: the only writer of what this consumer owns.

After every assignment change librdkafka's pause flags are made equal to the ledger's
effective set restricted to the new assignment, before a record of a newly assigned
partition can be returned:

- ``on_assign``: the assignment is applied (the user's callback may do it itself, with
  explicit offsets), then effectively paused new partitions are paused.
- ``on_revoke`` / ``on_lost``: delivered offsets are stored first (so the commit librdkafka
  makes on revocation includes them), the user's callback runs while the partitions
  are still owned, and then - in a ``finally``, even if the callback raised - the
  partitions are resumed inside librdkafka, their withheld records purged, and they
  stop being owned.

Partition marks under the eager protocol: every partition is revoked at each
rebalance, so the marks of revoked partitions wait ("limbo") for the next
``on_assign``; those of partitions that come back survive, the rest are dropped.
Under incremental protocols a revoked partition is leaving, and its mark goes now.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ._delivery import DeliveryGate, PurgeReason
from ._pause import Key, PauseLedger

if TYPE_CHECKING:
    from ._consumer import SafeConsumer
    from .otel import Telemetry

logger = logging.getLogger("safeconsumer")

RebalanceCallback = Callable[["SafeConsumer", list[TopicPartition]], object]


def group_generation(consumer: Consumer) -> int | None:
    """The group generation (classic) or member epoch (KIP-848) the consumer holds, if known.

    Read from ``consumer_group_metadata()``, whose serialized form starts with ``CGMDv2:``
    and the generation as an int32 in the host's byte order (librdkafka copies it as it is
    in memory); None when that form is not recognised.
    """
    try:
        data = bytes(Consumer.consumer_group_metadata(consumer))
    except (KafkaException, RuntimeError, TypeError):
        return None
    magic = b"CGMDv2:"
    if not data.startswith(magic) or len(data) < len(magic) + 4:
        return None
    return int.from_bytes(data[len(magic) : len(magic) + 4], sys.byteorder, signed=True)


def _generation(consumer: Consumer) -> str:
    generation = group_generation(consumer)
    return "generation unknown" if generation is None else f"generation {generation}"


def _tps(keys: Iterable[Key]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in sorted(keys)]


class RebalanceHandler:
    """Wraps the user's rebalance callbacks and keeps ownership and pause flags true."""

    def __init__(
        self,
        consumer: SafeConsumer,
        ledger: PauseLedger,
        gate: DeliveryGate,
        telemetry: Telemetry,
        *,
        incremental: bool,
        protocol: str,
    ):
        self._consumer = consumer
        self._ledger = ledger
        self._gate = gate
        self._telemetry = telemetry
        self.incremental = incremental
        #: For logs and spans: "consumer" (KIP-848) or "classic/<assignment strategy>".
        self.protocol = protocol
        self.user_on_assign: RebalanceCallback | None = None
        self.user_on_revoke: RebalanceCallback | None = None
        self.user_on_lost: RebalanceCallback | None = None
        #: What librdkafka was told is paused (app flag), among owned partitions.
        self._applied: set[Key] = set()
        #: Partition marks of eagerly revoked partitions, kept until the next on_assign.
        self._limbo: set[Key] = set()
        self._in_assign_callback = False
        self._assign_called = False
        #: Bumped on every change of what this consumer owns (lets the gate trust a batch).
        self.epoch = 0
        #: Parked by the keepalive: every owned partition paused in librdkafka and at the gate.
        self.parked = False

    @property
    def owned(self) -> set[Key]:
        return self._gate.owned

    # -- librdkafka's callbacks ------------------------------------------------------------
    def on_assign(self, _client: Consumer, partitions: list[TopicPartition]) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        with self._telemetry.rebalance("assigned", keys, self.protocol):
            self._assign(partitions, keys)
        logger.info(
            "assigned %d partition(s) (%s, %s), now owning %d, %d effectively paused",
            len(keys),
            self.protocol,
            _generation(self._consumer),
            len(self.owned),
            self._gate.intent_paused,
        )

    def _assign(self, partitions: list[TopicPartition], keys: list[Key]) -> None:
        # Owned from here on, so that the user's callback sees owns() and paused() of the new assignment.
        self.assigned(keys, replace=not self.incremental)
        self._in_assign_callback, self._assign_called = True, False
        try:
            if self.user_on_assign is not None:
                self.user_on_assign(self._consumer, partitions)
        finally:
            self._in_assign_callback = False
            if not self._assign_called:
                if self.incremental:
                    Consumer.incremental_assign(self._consumer, partitions)
                else:
                    Consumer.assign(self._consumer, partitions)
            # Marks of eagerly revoked partitions that did not come back are dropped now.
            self._ledger.unmark_partitions(self._limbo - set(keys))
            self._limbo.clear()
            self.sync(fresh=keys)

    def on_revoke(self, _client: Consumer, partitions: list[TopicPartition]) -> None:
        self._leaving(partitions, self.user_on_revoke, "revoked")

    def on_lost(self, _client: Consumer, partitions: list[TopicPartition]) -> None:
        callback = self.user_on_lost if self.user_on_lost is not None else self.user_on_revoke
        self._leaving(partitions, callback, "lost")

    def _leaving(
        self, partitions: list[TopicPartition], callback: RebalanceCallback | None, reason: PurgeReason
    ) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        with self._telemetry.rebalance(reason, keys, self.protocol):
            if reason == "revoked":
                self._gate.flush(force=True)
            try:
                if callback is not None:
                    callback(self._consumer, partitions)
            finally:
                self.left(keys, reason, rebalance=True)
        logger.info(
            "%s %d partition(s) (%s, %s), now owning %d",
            reason,
            len(keys),
            self.protocol,
            _generation(self._consumer),
            len(self.owned),
        )

    # -- assignment bookkeeping (also for the app's own assign/unassign calls) ------------------
    def note_assign_call(self) -> None:
        if self._in_assign_callback:
            self._assign_called = True

    def assigned(self, keys: Iterable[Key], *, replace: bool) -> None:
        """Record partitions now owned (``replace``: the whole new assignment)."""
        new = set(keys)
        self.epoch += 1
        if replace:
            gone = self.owned - new
            if gone:
                self.left(gone, "revoked")
            self.owned.clear()
        self.owned.update(new)

    def left(self, keys: Iterable[Key], reason: PurgeReason, *, rebalance: bool = False) -> None:
        """Partitions stop being owned: unpause them in librdkafka, purge what was withheld.

        ``rebalance``: they leave through a rebalance callback, where an eager protocol
        may hand them straight back, so their partition marks wait for the next assign.
        """
        gone = set(keys)
        if not gone:
            return
        self.epoch += 1
        self._resume_raw(gone)
        self._applied -= gone
        self.owned.difference_update(gone)
        self._gate.purge(gone, reason)
        if rebalance and not self.incremental:
            self._limbo |= gone & self._ledger.partitions
        else:
            self._ledger.unmark_partitions(gone)
        self._tell_gate(*self._paused_sets())

    def sync(self, fresh: Iterable[Key] = ()) -> None:
        """Make librdkafka's pause flags equal the effective set of the current assignment.

        ``fresh`` partitions were just assigned; those effectively paused are paused even
        if librdkafka was told so before. Fresh partitions that are not paused are left
        alone: every partition is resumed inside librdkafka as it leaves (``left``), so
        none carries a stale flag, and a needless resume would restart its fetch.
        """
        intent, effective = self._paused_sets()
        if self._in_assign_callback and not self._assign_called:
            # librdkafka has not been given the assignment yet; on_assign syncs once it has.
            self._tell_gate(intent, effective)
            return
        to_pause = (effective - self._applied) | (effective & set(fresh))
        to_resume = self._applied - effective
        if to_pause:
            Consumer.pause(self._consumer, _tps(to_pause))
        if to_resume:
            self._resume_raw(to_resume)
        self._applied = set(effective)
        self._tell_gate(intent, effective)

    def _paused_sets(self) -> tuple[frozenset[Key], frozenset[Key]]:
        """(the user's effective paused set, what is paused: every owned partition while parked)."""
        intent = self._ledger.effective(self.owned)
        return intent, frozenset(self.owned) if self.parked else intent

    def _tell_gate(self, intent: frozenset[Key], effective: frozenset[Key]) -> None:
        self._gate.intent_paused = len(intent)
        self._gate.set_paused(effective)

    def set_parked(self, parked: bool) -> None:
        """Park (keepalive) or un-park: the user's intent is untouched, librdkafka follows both."""
        self.parked = parked
        self.sync()

    def _resume_raw(self, keys: set[Key]) -> None:
        try:
            Consumer.resume(self._consumer, _tps(keys))
        except KafkaException as exc:
            # A partition already gone from librdkafka has no flag left to clear.
            logger.debug("resume of %d leaving partition(s) reported %s", len(keys), exc)
