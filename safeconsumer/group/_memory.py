"""Fetch memory: a worst-case estimate of what consumers buffer, per consumer and per process.

librdkafka fetches in the background, into one queue per consumer, and stops asking for more
only when that queue holds ``queued.max.messages.kbytes`` of record values or
``queued.min.messages`` records (both checked against the whole queue of a subscribing
consumer, before each fetch). So at worst a consumer holds:

- **queue**: ``queued.max.messages.kbytes`` x 1024 bytes of values;
- **in flight**: the fetch responses that arrive after the last check, one per broker, each up
  to ``max.partition.fetch.bytes`` per partition (a record larger than that still arrives, one
  per response: Fetch v3+, pinned by tests/integration/test_characterization.py). Counted as
  partitions x max(``max.partition.fetch.bytes``, the largest record) - the incident's
  "partitions x largest record" - and, when the number of brokers is known, at most
  brokers x max(``fetch.max.bytes``, the largest record); never more per response than
  ``receive.message.max.bytes``;
- **per record**: about 340 bytes of librdkafka structures per fetched record (measured on
  x86-64 with librdkafka 2.16; counted as 384 with small keys and headers), for up to
  ``queued.min.messages`` queued records plus the in-flight responses' records, assumed to
  average at least :data:`RECORD_BYTES_ASSUMED` on the wire;
- **read-ahead**: the records safeconsumer has read from librdkafka and not yet handed out, as
  Python objects: at most :data:`safeconsumer.base._keys.READ_AHEAD` of them, read a chunk at a time
  while their values total less than :data:`safeconsumer.base._keys.READ_AHEAD_BYTES`; the last chunk
  (:data:`safeconsumer.base._keys.READ_CHUNK` records, judged by the ones before it) may be of the
  largest records, so that is what is counted on top;
- **fixed**: threads, connection buffers and allocator slack, :data:`FIXED` per consumer
  (measured here: 4.4 MB for the first consumer of a process, about 0.6 MB for each further
  one; 4 MiB is counted for each).

Records the application holds, and batches a compressed topic expands into, are not counted.
A process holds the sum over its consumers (the incident's "consumers per process" factor).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..base._keys import READ_AHEAD, READ_AHEAD_BYTES, READ_CHUNK

#: librdkafka's memory per fetched record beyond its value (measured about 340 bytes).
RECORD_OVERHEAD = 384
#: Average wire size assumed for the records of the in-flight responses when counting them.
RECORD_BYTES_ASSUMED = 1024
#: A Python record object beyond its value and key (Message plus bytes headers).
PY_RECORD_OVERHEAD = 512
#: A consumer's memory beyond fetched records.
FIXED = 4 << 20

#: librdkafka's defaults for the settings the estimate reads.
DEFAULTS = {
    "queued.max.messages.kbytes": 65536,
    "queued.min.messages": 100000,
    "max.partition.fetch.bytes": 1048576,
    "fetch.max.bytes": 52428800,
    "message.max.bytes": 1000000,
    "receive.message.max.bytes": 100000000,
}
#: What each part of the estimate is named after, for advice.
SETTINGS = {
    "queue": "queued.max.messages.kbytes",
    "in_flight": "max.partition.fetch.bytes",
    "per_record": "queued.min.messages",
    "read_ahead": "max.partition.fetch.bytes",
    "fixed": "consumers per process",
}

logger = logging.getLogger("safeconsumer")


def _int_setting(conf: Mapping[str, Any], key: str, alias: str | None = None) -> int:
    raw = conf.get(key, conf.get(alias) if alias else None)
    if raw is None:
        return DEFAULTS[key]
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key} must be an integer number of bytes or records, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{key} must not be negative, got {value}")
    return value


@dataclass(frozen=True)
class FetchLimits:
    """The fetch settings of one consumer config, as librdkafka applies them."""

    queue_bytes: int
    queue_records: int
    partition_fetch: int
    fetch_max: int
    receive_max: int

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> FetchLimits:
        """Read a librdkafka consumer config; unset keys take librdkafka's defaults and rules."""
        queue_bytes = _int_setting(conf, "queued.max.messages.kbytes") * 1024
        message_max = _int_setting(conf, "message.max.bytes")
        if "fetch.max.bytes" in conf:
            fetch_max = _int_setting(conf, "fetch.max.bytes")
        else:  # librdkafka: no more than the queue holds, no less than message.max.bytes
            fetch_max = max(min(DEFAULTS["fetch.max.bytes"], queue_bytes), message_max)
        if "receive.message.max.bytes" in conf:
            receive_max = _int_setting(conf, "receive.message.max.bytes")
        else:
            receive_max = max(DEFAULTS["receive.message.max.bytes"], fetch_max + 512)
        return cls(
            queue_bytes=queue_bytes,
            queue_records=_int_setting(conf, "queued.min.messages"),
            partition_fetch=_int_setting(conf, "max.partition.fetch.bytes", "fetch.message.max.bytes"),
            fetch_max=fetch_max,
            receive_max=receive_max,
        )


@dataclass(frozen=True)
class FetchEstimate:
    """Worst-case bytes one consumer (or a sum of them) buffers, by part."""

    queue: int = 0
    in_flight: int = 0
    per_record: int = 0
    read_ahead: int = 0
    fixed: int = 0
    consumers: int = 1

    @property
    def total(self) -> int:
        return sum(self.parts().values())

    def __add__(self, other: FetchEstimate) -> FetchEstimate:
        theirs = other.parts()
        return FetchEstimate(
            **{k: v + theirs[k] for k, v in self.parts().items()}, consumers=self.consumers + other.consumers
        )

    def times(self, n: int) -> FetchEstimate:
        """``n`` consumers like this one."""
        p = self.parts()
        return FetchEstimate(**{k: v * n for k, v in p.items()}, consumers=self.consumers * n)

    def parts(self) -> dict[str, int]:
        """Bytes by part (every field but ``consumers``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "consumers"}

    def describe(self) -> str:
        """``184.0 MiB = queue 64.0 MiB (queued.max.messages.kbytes) + ...``, largest part first."""
        parts = sorted(self.parts().items(), key=lambda kv: -kv[1])
        named = (f"{name.replace('_', '-')} {mib(v)} ({SETTINGS[name]})" for name, v in parts)
        return f"{mib(self.total)} = " + " + ".join(named)


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def estimate(
    limits: FetchLimits,
    partitions: int,
    *,
    largest_record: int = 0,
    brokers: int | None = None,
) -> FetchEstimate:
    """Worst-case bytes one consumer with ``limits`` buffers while owning ``partitions``.

    ``largest_record``: the largest record its topics allow, when known (the topics'
    ``max.message.bytes``); records up to ``max.partition.fetch.bytes`` are assumed otherwise.
    ``brokers``: how many brokers may answer its fetches, when known (one response each).
    """
    record = max(limits.partition_fetch, largest_record)
    in_flight = partitions * min(record, limits.receive_max)
    if brokers is not None:
        in_flight = min(in_flight, brokers * min(max(limits.fetch_max, record), limits.receive_max))
    records = limits.queue_records + in_flight // RECORD_BYTES_ASSUMED
    return FetchEstimate(
        queue=limits.queue_bytes,
        in_flight=in_flight,
        per_record=records * RECORD_OVERHEAD,
        read_ahead=READ_AHEAD_BYTES + READ_CHUNK * record + READ_AHEAD * PY_RECORD_OVERHEAD,
        fixed=FIXED,
    )


def parse_budget(value: object, name: str = "fetch_memory_budget") -> int | None:
    """A budget in bytes: None, or a positive int."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a number of bytes (int) or None, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive number of bytes, got {value}")
    return value


class ProcessFetchMemory:
    """Every live SafeConsumer of this process: its limits, partitions and budget."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[int, tuple[FetchLimits, int, int | None]] = {}

    def join(self, key: int, limits: FetchLimits, budget: int | None) -> None:
        with self._lock:
            self._members[key] = (limits, 0, budget)

    def leave(self, key: int) -> None:
        with self._lock:
            self._members.pop(key, None)

    def owned(self, key: int, partitions: int) -> tuple[FetchEstimate, int | None]:
        """``key`` now owns ``partitions``: the process's estimate and the tightest budget set."""
        with self._lock:
            if key in self._members:
                limits, _, budget = self._members[key]
                self._members[key] = (limits, partitions, budget)
            members = list(self._members.values())
        total = FetchEstimate(consumers=0)
        for limits, owned, _ in members:
            total = total + estimate(limits, owned)
        budgets = [b for _, _, b in members if b is not None]
        return total, (min(budgets) if budgets else None)

    def check(self, key: int, partitions: int, group: str) -> bool:
        """After an assignment change: log a WARNING when the process is over a budget; True if so.

        Only growth is judged: nothing is logged when ``key``'s partition count stayed (one
        rebalance can report its assignment more than once) or fell (a revocation, a close)."""
        with self._lock:
            member = self._members.get(key)
            if member is None or partitions <= member[1]:
                if member is not None:
                    self._members[key] = (member[0], partitions, member[2])
                return False
        total, budget = self.owned(key, partitions)
        if budget is None or total.total <= budget:
            return False
        logger.warning(
            "fetch memory: %d SafeConsumer(s) in this process may buffer %s, over the fetch_memory_budget of %s "
            "(after an assignment change in group %r). Lower the largest settings named, or run fewer consumers "
            "per process",
            total.consumers,
            total.describe(),
            mib(budget),
            group,
        )
        return True


#: The one registry of this process.
PROCESS = ProcessFetchMemory()


class ConsumerBudget:
    """One consumer's share of :data:`PROCESS`: refused at construction if it alone exceeds its
    budget, joined once built, told of every assignment change, left at close (or when dropped).

    :data:`PROCESS` is looked up when used, so a test may give the process a registry of its own.
    """

    def __init__(self, key: int, config: Mapping[str, Any], budget: int | None, group_id: str) -> None:
        """Raises ``ValueError`` for a setting the estimate cannot read, or a budget this consumer
        alone exceeds before it owns any partition."""
        self._key = key
        self._group_id = group_id
        self._budget = budget
        self._limits = FetchLimits.from_config(config)
        alone = estimate(self._limits, 0)
        if budget is not None and alone.total > budget:
            raise ValueError(
                f"fetch_memory_budget {mib(budget)} is less than this one consumer may buffer before it owns "
                f"any partition: {alone.describe()}; lower those settings or raise the budget"
            )

    def join(self, consumer: object) -> None:
        """Count this consumer in the process, until :meth:`leave` or until ``consumer`` is dropped."""
        PROCESS.join(self._key, self._limits, self._budget)
        weakref.finalize(consumer, PROCESS.leave, self._key)

    def owned(self, partitions: int) -> None:
        """Called by the rebalancer after every assignment change: warn above the budget."""
        PROCESS.check(self._key, partitions, self._group_id)

    def leave(self) -> None:
        PROCESS.leave(self._key)
