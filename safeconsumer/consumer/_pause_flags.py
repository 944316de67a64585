"""The rebalancer's pause side: the app's pause marks changed, librdkafka's pause flags kept equal to them."""

from __future__ import annotations

import re
from collections.abc import Iterable

from confluent_kafka import TopicPartition

from ..base._errors import InvalidPauseRequest, PauseStateError
from ..base._keys import Key
from ._client import RawClient
from ._partitions import PartitionTable
from ._pause import PauseLedger, PauseState, subscription_can_match


class PauseFlags:
    """:class:`._rebalance.Rebalancer`'s base class: pause marks and librdkafka's pause flags, apart
    only for the length of one module. One object, the rebalancer: ``Rebalancer.__init__`` sets
    every attribute declared below, and every assignment change there ends in :meth:`sync`."""

    # The rebalancer's state these methods read and change (set and described in Rebalancer.__init__).
    _client: RawClient
    _table: PartitionTable
    _ledger: PauseLedger
    subscription: list[str] | None
    parked: bool
    _in_assign: bool
    _assign_called: bool

    def sync(self, fresh: Iterable[Key] = ()) -> None:
        """Make librdkafka's pause flags equal the effective set of the current assignment.

        Called after every change of intent (the facade's pause/resume calls, lock held), of
        ownership (the rebalancer's) and of parking; changes the table's paused set and applied flags.

        ``fresh`` partitions were just assigned; those effectively paused are paused even
        if librdkafka was told so before. Fresh partitions that are not paused are left
        alone: every partition is resumed inside librdkafka as it leaves (``_left``), so
        none carries a stale flag, and a needless resume would restart its fetch.
        """
        _intent, effective = self._tell_table()
        if self._in_assign and not self._assign_called:
            return  # librdkafka has not been given the assignment yet; on_assign syncs once it has
        owned = self._table.owned
        fresh_set = set(fresh)
        to_pause = [k for k in effective if not owned[k].applied or k in fresh_set]
        to_resume = [k for k, s in owned.items() if s.applied and k not in effective]
        if to_pause:
            self._client.pause(to_pause)
            self._table.flags_applied(to_pause, paused=True)
        if to_resume:
            self._client.resume(to_resume, leaving=True)
            self._table.flags_applied(to_resume, paused=False)

    def _tell_table(self) -> tuple[frozenset[Key], frozenset[Key]]:
        """Give the table the effective paused set: (the user's, what is paused incl. parking)."""
        owned = self._table.owned
        intent = self._ledger.effective(owned)
        effective = frozenset(owned) if self.parked else intent
        self._table.set_paused(effective, len(intent))
        return intent, effective

    def change_marks(self, keys: list[Key] | None, *, mark: bool) -> None:
        """Called by the facade's ``pause()``/``resume()`` (lock held): partition marks of ``keys``,
        or (None) the consumer mark, set or cleared; flags follow."""
        if keys is None:
            self._ledger.set_consumer(mark)
        elif mark:
            self._ledger.mark_partitions(keys)
        else:
            self._ledger.unmark_partitions(keys)
        self.sync()

    def change_topic_marks(self, method: str, names: list[str], patterns: list[re.Pattern[str]], *, mark: bool) -> None:
        """Called by the facade's ``pause_topics()``/``resume_topics()`` (lock held): topic marks
        set or cleared; flags follow. Raises when there is nothing to apply them to, or when the
        subscription can never deliver a topic to be paused."""
        subscription = self.subscription
        if subscription is None and not self._table.owned:
            raise PauseStateError(
                f"{method}() needs a subscription or an assignment to apply to: call subscribe() or assign() first"
            )
        if mark and subscription is not None:
            never = subscription_can_match(subscription, names, patterns)
            if never:
                raise InvalidPauseRequest(f"{method}(): the subscription {subscription} can never deliver {never}")
        if mark:
            self._ledger.mark_topics(names, patterns)
        else:
            self._ledger.unmark_topics(names, patterns)
        self.sync()

    def paused(self) -> list[TopicPartition]:
        """Called by the facade's ``paused()`` (lock held): the effectively paused owned partitions, sorted."""
        return [TopicPartition(t, p) for t, p in sorted(self._ledger.effective(self._table.owned))]

    def pause_state(self, *, parked: bool) -> PauseState:
        """Called by the facade's ``pause_state()`` (lock held): a snapshot of intent and its effect."""
        return self._ledger.snapshot(self._table.owned, parked=parked)

    def set_parked(self, parked: bool) -> None:
        """Called by the keeper's link (lock held, consumer open): park (keepalive) or un-park; the
        user's intent is untouched, librdkafka's flags and the table's paused set follow both."""
        self.parked = parked
        self.sync()
