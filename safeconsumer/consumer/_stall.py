"""Owned partitions librdkafka silently stops fetching: found, and started again (SPEC I11).

A partition can stay assigned, not paused, with records past its position, and never fetch:
librdkafka gave up fetching its committed offset (librdkafka #5586; under ``subscribe()`` it
only logs), a pause left behind inside librdkafka (#5591), or a cause nobody has named yet. So
one guard looks at the symptom instead of patching each cause.

The guard runs on the application's calls (the reader, every ``check_every`` seconds). It
reads librdkafka's position of every partition that should be fetching (owned, not paused by
intent nor parked: one C call, no request). A partition whose position has not moved for
``bound`` seconds is a *suspect*; only for suspects it asks the broker for their end offsets
(one ListOffsets request per leader) and, for those without a position, the group's committed
offsets (one OffsetFetch). A suspect with records past where it should read is *behind*.
Behind at two checks ``check_every`` apart, with librdkafka's queue seen empty in between (so
its records were not merely queued behind other partitions' for a slow application), it is
*stalled*; a partition whose cause is known (an error event said so) is stalled at the first.
A stalled partition is logged once (WARNING, the partition and the cause), counted, and
started again by the rebalancer: resumed inside librdkafka and assigned again from its
position (or its committed offset, or the reset policy), ownership, marks and withheld records
unchanged. ``seek()`` would not do: librdkafka refuses it for a partition waiting for its
offset (characterized: ``_STATE``, "Erroneous state").

``bound`` comes from the consumer's settings: the longest a healthy librdkafka takes to fetch a
partition that has records (a request timing out, ``socket.timeout.ms``; ten long-poll fetches,
``fetch.wait.max.ms``; two error backoffs, ``fetch.error.backoff.ms``), at least a second.

:class:`StallWatch` is the pure part (unit-tested in memory); :class:`StallGuard` asks
librdkafka and the broker, and hands stalled partitions to the rebalancer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, TopicPartition

from ..base._errors import FatalConsumerError
from ..base._keys import Key
from ._client import RawClient
from ._partitions import PartitionTable

logger = logging.getLogger("safeconsumer")

#: ListOffsets' "latest" (the end offset; the last stable offset under read_committed).
_LATEST = -1
#: How long the guard waits for the broker's answer, at most (it runs on the application's call).
QUERY_TIMEOUT = 5.0

#: Causes the guard can tell, as the WARNING and telemetry name them.
CAUSES = {
    "offset_fetch_failed": "librdkafka gave up fetching its committed offset (librdkafka #5586)",
    "no_position": "librdkafka never started fetching it (no position, no fetch)",
    "not_fetching": "librdkafka stopped fetching it past its position (e.g. a pause left inside librdkafka, #5591)",
}


def stall_bound(config: Mapping[str, Any]) -> float:
    """Seconds without fetch progress after which a partition with records is suspect."""

    def ms(name: str, default: float) -> float:
        try:
            return float(config.get(name, default)) / 1000
        except (TypeError, ValueError):
            return default / 1000

    return max(
        1.0, ms("socket.timeout.ms", 60000), 10 * ms("fetch.wait.max.ms", 500), 2 * ms("fetch.error.backoff.ms", 500)
    )


@dataclass(slots=True)
class _Watched:
    position: int
    since: float
    """When its position last moved (or it was first watched, or healed)."""
    behind_at: float = 0.0
    """When it was first found behind since it last moved (0: not behind)."""
    first_end: int | None = None
    """Its end offset when first found suspect without a start to compare with (reset 'latest')."""


class StallWatch:
    """Per partition that should be fetching: its position, since when it has not moved, and
    whether it was found behind. Pure: the guard feeds it what librdkafka and the broker said."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.check_every = bound / 2
        #: The next check, monotonic (0: check at the next call).
        self.due = 0.0
        #: Stalls found since the consumer was created.
        self.stalls = 0
        #: Partitions (None: any without a position) whose cause an error event named.
        self._causes: dict[Key | None, str] = {}
        self._watched: dict[Key, _Watched] = {}
        self._epoch = -1
        #: Per partition started again: the position it was at, how often in a row there, and when.
        #: Stalled again at the same position, it waits ``bound`` times 2**count before the next
        #: restart: a position librdkafka cannot read past (were there one) is not restarted for ever.
        self._healed: dict[Key, tuple[int, int, float]] = {}

    def cause_known(self, keys: Iterable[Key] | None, cause: str) -> None:
        """Called by the guard when an error event names why partitions do not fetch."""
        if keys is None:
            self._causes[None] = cause
        else:
            self._causes.update(dict.fromkeys(keys, cause))
        self.due = 0.0

    def observe(self, positions: Mapping[Key, int], epoch: int, now: float) -> list[Key]:
        """The positions of the partitions that should be fetching now, under ownership ``epoch``:
        returns the suspects (sorted), whose position has not moved for ``bound`` seconds (or whose
        cause is known). A new epoch (the assignment changed) starts every clock again."""
        self.due = now + self.check_every
        if epoch != self._epoch:
            self._epoch = epoch
            self._watched = {}
            self._causes = {k: c for k, c in self._causes.items() if k is None or k in positions}
            self._healed = {k: h for k, h in self._healed.items() if k in positions}
        watched = self._watched
        for key in [k for k in watched if k not in positions]:
            del watched[key]  # paused, or left: it starts over when it should fetch again
        suspects = []
        for key, position in positions.items():
            w = watched.get(key)
            if w is None or w.position != position:
                watched[key] = _Watched(position, now)
            elif now - w.since >= self.bound or self._cause(key, position) is not None:
                suspects.append(key)
        return sorted(suspects)

    def _cause(self, key: Key, position: int) -> str | None:
        cause = self._causes.get(key)
        if cause is None and position < 0:
            cause = self._causes.get(None)
        return cause

    def judge(self, key: Key, behind: bool | None, now: float, drained_at: float) -> str | None:
        """A suspect, and whether the broker shows records past where it should read (None: cannot
        tell yet). Returns the cause if it is stalled now, else None."""
        w = self._watched[key]
        if behind is None:
            return None
        if not behind:
            w.since, w.behind_at, w.first_end = now, 0.0, None  # idle, healthy: its clock starts again
            return None
        cause = self._cause(key, w.position)
        if cause is None:
            if not w.behind_at:
                w.behind_at = now
                return None
            if drained_at <= w.behind_at:
                return None  # librdkafka's queue never ran dry since: its records may wait there
            cause = "no_position" if w.position < 0 else "not_fetching"
        last = self._healed.get(key)
        if last is not None and last[0] == w.position and now - last[2] < self.bound * 2 ** last[1]:
            return None
        return cause

    def latest_grew(self, key: Key, end: int) -> bool | None:
        """A suspect without a position or committed offset under reset 'latest': behind only once
        records arrived after it was first seen (None: first seen now)."""
        w = self._watched[key]
        if w.first_end is None:
            w.first_end = end
            return None
        return end > w.first_end

    def healed(self, keys: Iterable[Key], now: float) -> None:
        """Called by the guard once the rebalancer started them again: their clocks start over."""
        for key in keys:
            self.stalls += 1
            self._causes.pop(key, None)
            w = self._watched.get(key)
            if w is not None:
                last = self._healed.get(key)
                row = last[1] + 1 if last is not None and last[0] == w.position else 1
                self._healed[key] = (w.position, row, now)
                w.since, w.behind_at, w.first_end = now, 0.0, None
        if not any(k is not None for k in self._causes):
            self._causes.pop(None, None)


class StallGuard:
    """Finds stalled partitions on the application's calls and has the rebalancer start them again.

    Every method runs under the consumer's lock, called by the reader (:meth:`check`) or the
    rebalancer (:meth:`cause_known`)."""

    def __init__(
        self,
        client: RawClient,
        table: PartitionTable,
        *,
        bound: float,
        reset: str,
        restart: Callable[[dict[Key, int], dict[Key, str]], list[Key]],
        counted: Callable[[Key, str], None],
        tick: Callable[[], object] = lambda: None,
    ) -> None:
        self._client = client
        self._table = table
        self.watch = StallWatch(bound)
        self._reset = reset
        self._restart = restart
        self._counted = counted
        #: Runs on every check, the guard's clock: telemetry looks whether OpenTelemetry was loaded since.
        self._tick = tick

    def cause_known(self, keys: Iterable[Key] | None, cause: str) -> None:
        """Called by the rebalancer for an error event that names why partitions will not fetch."""
        self.watch.cause_known(keys, cause)

    def check(self, now: float, drained_at: float) -> None:
        """Called by the reader when ``watch.due`` passed (lock held, not inside a callback)."""
        self._tick()
        table = self._table
        fetching = [k for k, s in table.owned.items() if not s.applied and k not in table.paused]
        if not fetching:
            self.watch.due = now + self.watch.check_every
            return
        positions = {(tp.topic, tp.partition): tp.offset for tp in self._client.position(fetching)}
        suspects = self.watch.observe(positions, table.epoch, now)
        if not suspects:
            return
        try:
            ends, starts = self._ask_broker(suspects, positions)
        except FatalConsumerError:
            raise
        except KafkaException as exc:
            logger.debug("stall check: the broker did not answer (%s); checking again later", exc)
            return
        stalled: dict[Key, str] = {}
        for key in suspects:
            end = ends.get(key)
            start = starts.get(key, positions[key])
            behind: bool | None
            if end is None:
                behind = None
            elif start >= 0:
                behind = end > start
            else:
                behind = self.watch.latest_grew(key, end)
            cause = self.watch.judge(key, behind, now, drained_at)
            if cause is not None:
                stalled[key] = cause
        if not stalled:
            return
        from_ = {k: positions[k] if positions[k] >= 0 else starts.get(k, OFFSET_INVALID) for k in stalled}
        restarted = self._restart(from_, stalled)
        for key in restarted:
            self._counted(key, stalled[key])
        self.watch.healed(restarted, now)

    def _ask_broker(self, suspects: list[Key], positions: Mapping[Key, int]) -> tuple[dict[Key, int], dict[Key, int]]:
        """The suspects' end offsets, and for those without a position where they start: the
        committed offset, else the earliest offset under reset 'earliest' (else unknown, -1)."""
        ends_asked = [TopicPartition(t, p, _LATEST) for t, p in suspects]
        answered = self._client.call(Consumer.offsets_for_times, ends_asked, QUERY_TIMEOUT)
        ends = {(tp.topic, tp.partition): tp.offset for tp in answered if tp.error is None and tp.offset >= 0}
        unplaced = [k for k in suspects if positions[k] < 0]
        starts: dict[Key, int] = {}
        if unplaced:
            committed = self._client.call(
                Consumer.committed, [TopicPartition(t, p) for t, p in unplaced], QUERY_TIMEOUT
            )
            starts = {(tp.topic, tp.partition): tp.offset for tp in committed if tp.error is None}
            if self._reset in ("earliest", "smallest", "beginning"):
                missing = [k for k in unplaced if starts.get(k, -1) < 0]
                if missing:
                    low = self._client.call(
                        Consumer.offsets_for_times, [TopicPartition(t, p, -2) for t, p in missing], QUERY_TIMEOUT
                    )
                    starts.update({(tp.topic, tp.partition): tp.offset for tp in low if tp.error is None})
        return ends, starts
