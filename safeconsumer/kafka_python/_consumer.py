"""``KafkaConsumer``: kafka-python's consumer API on a SafeConsumer, as a facade.

One core: every record comes out of the SafeConsumer underneath (``consume_available``: what
librdkafka has, returned as soon as there is any, as kafka-python's ``poll()``), so pause intent,
the delivery gate, processed-before-stored, the keepalive, fatal errors and telemetry are the
SafeConsumer's. This class checks arguments as kafka-python checks them (a commit's offsets are
checked where they are built), refuses calls once closed (:mod:`._guard`, which also raises
librdkafka's errors as kafka-python's) and leaves what kafka-python's API adds on top to its parts,
one module each:

- :mod:`._subscription`: the subscription modes (topics, pattern, user assignment) and their
  ``IllegalStateError``; ``group_id=None`` (no group, every partition of the subscribed topics
  assigned locally); the rebalance listener, and the group metadata it leaves;
- :mod:`._positions`: the consumed positions (the offset after the last record the application was
  given, per partition) and the logical seeks (``seek_to_beginning``/``seek_to_end``) not yet
  resolved to an offset;
- :mod:`._records`: each read handed out as kafka-python's records, and given back when not taken;
- :mod:`._seeks`: seeks accepted at once, as kafka-python's are, and ``position()``;
- :mod:`._commits`: commits of the consumed positions or given offsets, and the asynchronous ones
  waiting for librdkafka's commit callback;
- :mod:`._cluster`: whether a broker answers, topics, partitions and ListOffsets;
- :mod:`._config` and :mod:`._convert`: the config, and every type and error, translated.

Nothing here holds the consumer strongly from a callback: librdkafka's callbacks reach this object
through a weak reference, and its parts hold the SafeConsumer and the guard, never this object, so
a dropped ``KafkaConsumer`` is freed where it is dropped (I10).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, Message
from kafka import errors as kerrors
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafka.future import Future
from kafka.structs import ConsumerGroupMetadata, OffsetAndTimestamp, TopicPartition

from ..base._clients import admin_config
from ..base._errors import FatalPolicy
from ..consumer._facade import SafeConsumer, delivery_stats
from ..consumer._join_gate import MIGRATION_TIMEOUT
from ..consumer._keepalive import KeepaliveMode
from ..consumer._pause import PauseState
from ..consumer._port import port_of
from ..consumer._retry import CommitRetry
from ..poison._policy import PoisonPolicy
from ._cluster import Cluster
from ._commits import Commits
from ._config import judge
from ._convert import deserializer, to_confluent, to_kafka
from ._guard import Guard, translated, weakly
from ._positions import Key, Positions
from ._records import Handout
from ._seeks import Seeks
from ._subscription import SUBSCRIPTION_MESSAGE, Mode, Subscription

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["KafkaConsumer"]

logger = logging.getLogger("safeconsumer.kafka_python")

_DEFAULT_COMMIT_RETRY = CommitRetry()


class KafkaConsumer:
    """kafka-python's ``KafkaConsumer``, on librdkafka, with every SafeConsumer guarantee.

    ``KafkaConsumer(*topics, **configs)`` takes kafka-python's config names and defaults; a name
    kafka-python does not know, or a value librdkafka cannot honour, raises
    ``kafka.errors.KafkaConfigurationError``. The keyword-only options are safeconsumer's:
    ``group_protocol='consumer'`` (KIP-848, which kafka-python lacks) and SafeConsumer's own
    (``keepalive``, ``on_fatal``, ``poison``, ...; see :class:`safeconsumer.SafeConsumer`): a record
    the key or value deserializer cannot read is raised as kafka-python raises it, or skipped or
    dead-lettered by the ``poison`` policy.
    """

    def __init__(
        self,
        *topics: str,
        group_protocol: str = "classic",
        keepalive: KeepaliveMode = "auto",
        keepalive_after: float | None = None,
        keepalive_max: float | None = None,
        on_fatal: FatalPolicy = "raise",
        commit_retry: CommitRetry | None = _DEFAULT_COMMIT_RETRY,
        meter_provider: MeterProvider | None = None,
        tracer_provider: TracerProvider | None = None,
        explain_rebalances: bool = True,
        fetch_memory_budget: int | None = None,
        auth_failure_timeout: float | None = 10.0,
        poison: PoisonPolicy = None,
        migration_timeout: float | None = MIGRATION_TIMEOUT,
        **configs: Any,
    ) -> None:
        self._guard = Guard()  # closed until the SafeConsumer exists: close() has nothing to do
        self._call = self._guard.call
        settings = judge(topics, configs, group_protocol=group_protocol)
        self.config = settings.config
        self._groupless = settings.groupless
        key_deser = deserializer(self.config["key_deserializer"], "key_deserializer")
        value_deser = deserializer(self.config["value_deserializer"], "value_deserializer")
        self._timeout = self.config["request_timeout_ms"] / 1000
        conf = dict(settings.librdkafka)
        conf["on_commit"] = weakly(self._commit_done)
        provider = self.config["sasl_oauth_token_provider"]
        if provider is not None:
            conf["oauth_cb"] = lambda _config: (provider.token(), time.time() + 3600)
        admin_conf = admin_config(conf, "kafka-python")
        self._consumer = SafeConsumer(
            conf,
            keepalive=keepalive,
            keepalive_after=keepalive_after,
            keepalive_max=keepalive_max,
            on_fatal=on_fatal,
            commit_retry=commit_retry,
            meter_provider=meter_provider,
            tracer_provider=tracer_provider,
            explain_rebalances=explain_rebalances,
            fetch_memory_budget=fetch_memory_budget,
            auth_failure_timeout=auth_failure_timeout,
            poison=poison,
            migration_timeout=migration_timeout,
        )
        self._port = port_of(self._consumer, "poll")
        self._positions = Positions()
        self._handout = Handout(self._port, key_deser, value_deser, self._positions)
        parts = (self._consumer, self._call, self._positions, self.config)
        self._subscription = Subscription(*parts, groupless=self._groupless, timeout=self._timeout)
        self._commits = Commits(*parts, groupless=self._groupless, timeout=self._timeout)
        self._seeks = Seeks(*parts, groupless=self._groupless, timeout=self._timeout)
        self._cluster = Cluster(self._consumer, self._guard, admin_conf, self.config, self._timeout)
        self._guard.closed = False
        self._consumer_timeout = float(self.config["consumer_timeout_ms"]) / 1000
        if self.config["api_version"] is None:
            self.bootstrap(self.config["bootstrap_timeout_ms"])
        if topics:
            self.subscribe(topics=list(topics))

    def __repr__(self) -> str:
        return f"<safeconsumer.kafka_python.KafkaConsumer group={self.config['group_id']!r}>"

    # -- connection ----------------------------------------------------------------------------
    def bootstrap_connected(self) -> bool:
        """Whether a broker answers (a metadata request within a second)."""
        return self._cluster.connected()

    def bootstrap(self, timeout_ms: float | None = None, refresh: bool = False) -> None:
        """Wait until the cluster's metadata is known; ``KafkaTimeoutError`` when it is not in ``timeout_ms``."""
        self._cluster.bootstrap(timeout_ms)

    # -- subscription ------------------------------------------------------------------------
    def subscribe(self, topics: Any = (), pattern: str | None = None, listener: Any = None) -> None:
        """Subscribe to topics by name or to a regex ``pattern`` (librdkafka's regex dialect, anchored
        at the start as ``re.match``), with an optional ``ConsumerRebalanceListener``."""
        if not topics and not pattern:
            raise ValueError("Must provide topics or pattern")
        if topics and pattern:
            raise kerrors.IllegalStateError(SUBSCRIPTION_MESSAGE)
        mode = Mode.PATTERN if pattern else Mode.TOPICS
        if not pattern and (isinstance(topics, str) or not isinstance(topics, list | tuple)):
            raise TypeError("Topics must be a list (or non-str sequence)")
        if self._subscription.mode not in (Mode.NONE, mode):
            raise kerrors.IllegalStateError(SUBSCRIPTION_MESSAGE)
        if listener and not isinstance(listener, ConsumerRebalanceListener | AsyncConsumerRebalanceListener):
            raise TypeError("listener must be a ConsumerRebalanceListener or AsyncConsumerRebalanceListener")
        for topic in topics:
            if not isinstance(topic, str) or not topic:
                raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        self._subscription.subscribed(mode, set() if pattern else set(topics), pattern, listener)
        if self._groupless:
            self._subscription.assign_all()
            return
        entries = [pattern if pattern.startswith("^") else "^" + pattern] if pattern else list(topics)
        self._call(
            self._consumer.subscribe,
            entries,
            on_assign=weakly(self._assigned),
            on_revoke=weakly(self._revoked),
            on_lost=weakly(self._lost),
        )

    def subscription(self) -> set[str] | None:
        """The subscribed topics (a copy), or None when not subscribed."""
        mode = self._subscription.mode
        if mode in (Mode.NONE, Mode.ASSIGNED):
            return None
        if mode == Mode.PATTERN and not self._groupless:
            return {tp.topic for tp in self.assignment()}
        return set(self._subscription.topics or ())

    def unsubscribe(self) -> None:
        """Leave the subscription (or the user assignment): nothing assigned, no pause marks kept."""
        if self._subscription.mode == Mode.ASSIGNED or self._groupless:
            self._call(self._consumer.unassign)
        else:
            self._call(self._consumer.unsubscribe)
        self._subscription.cleared()
        self._positions.clear()

    def assign(self, partitions: Any) -> None:
        """Read exactly ``partitions`` (kafka ``TopicPartition``s), from their committed offsets or the
        reset policy. An empty list unsubscribes."""
        if not partitions:
            self.unsubscribe()
            return
        if self._subscription.mode not in (Mode.NONE, Mode.ASSIGNED):
            raise kerrors.IllegalStateError(SUBSCRIPTION_MESSAGE)
        wanted = {(tp.topic, tp.partition) for tp in partitions}
        self._call(self._consumer.assign, [to_confluent(tp) for tp in partitions])
        self._subscription.assigned_by_user()
        self._positions.forget(lambda key: key not in wanted)

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned to this consumer now."""
        if self._guard.closed:
            return set()
        return to_kafka(self._call(self._consumer.assignment))

    # -- rebalance listener: librdkafka holds these weakly; the subscription does the work ------
    def _assigned(self, _consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._subscription.assigned(partitions)

    def _revoked(self, _consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._subscription.revoked(partitions)

    def _lost(self, _consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._subscription.lost(partitions)

    # -- reading -------------------------------------------------------------------------------
    def poll(
        self, timeout_ms: float = 0, max_records: int | None = None, update_offsets: bool = True
    ) -> dict[TopicPartition, list[Any]]:
        """Records by partition, as soon as any arrive within ``timeout_ms``; ``{}`` when none did.

        The records count as handed out: their offsets are stored (for a commit) once you come back,
        with your next call (SPEC I8). ``update_offsets=False`` gives them back instead: the next
        poll returns them again.
        """
        self._guard.check()
        if timeout_ms < 0:
            raise ValueError("Timeout must not be negative")
        if max_records is None:
            max_records = self.config["max_poll_records"]
        elif not isinstance(max_records, int):
            raise TypeError("max_records must be an integer")
        elif max_records < 1:
            raise ValueError("max_records must be positive")
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            msgs = self._read(max_records, max(0.0, deadline - time.monotonic()))
            if msgs:
                records = self._handout.records(msgs)
                if records:
                    if not update_offsets:
                        self._handout.not_taken(msgs, records)
                    return records
            if time.monotonic() >= deadline:
                return {}

    def _read(self, max_records: int, timeout: float) -> list[Message]:
        if self._subscription.refresh_due():
            self._subscription.assign_all()
        return cast("list[Message]", self._call(self._port.consume_available, max_records, timeout))

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        """The next record; ``StopIteration`` once ``consumer_timeout_ms`` passes without one (the
        consumer stays iterable). Each record counts as handed out alone: its offset is stored once
        you ask for the next (SPEC I8), so a commit never covers a record you had not finished."""
        if self._guard.closed:
            raise StopIteration("KafkaConsumer closed")
        deadline = time.monotonic() + self._consumer_timeout
        while True:
            remaining = deadline - time.monotonic()
            msgs = self._read(1, -1 if remaining == float("inf") else max(0.0, remaining))
            if msgs:
                records = self._handout.records(msgs)
                for batch in records.values():
                    return batch[0]
            if time.monotonic() >= deadline:
                raise StopIteration

    # -- pause ------------------------------------------------------------------------------------
    def pause(self, *partitions: TopicPartition) -> None:
        """Pause fetching from ``partitions``: kept as intent while each stays assigned, across
        rebalances; their records already fetched are withheld, never lost."""
        self._check_partitions(partitions)
        self._call(self._consumer.pause, [to_confluent(tp) for tp in partitions])

    def resume(self, *partitions: TopicPartition) -> None:
        """Resume ``partitions`` (their withheld records come first)."""
        self._check_partitions(partitions)
        self._call(self._consumer.resume, [to_confluent(tp) for tp in partitions])

    def _check_partitions(self, partitions: tuple[Any, ...]) -> None:
        if not all(isinstance(p, TopicPartition) for p in partitions):
            raise TypeError("partitions must be TopicPartition namedtuples")
        if partitions:
            assigned = self.assignment()
            for tp in partitions:
                if tp not in assigned:
                    raise KeyError(tp)  # kafka-python: the partition's state does not exist

    def paused(self) -> set[TopicPartition]:
        """The assigned partitions paused now: by ``pause()``, ``pause_topics()`` or ``pause_all()``."""
        if self._guard.closed:
            return set()
        return to_kafka(self._call(self._consumer.paused))

    def pause_topics(self, *topics: str | Any) -> None:
        """Pause whole topics (names, ``^regex`` strings or ``re.Pattern``), including partitions
        assigned later, until ``resume_topics()``; a rebalance never drops the mark."""
        self._call(self._consumer.pause_topics, list(topics))

    def resume_topics(self, *topics: str | Any) -> None:
        """Lift topic marks set by ``pause_topics()``."""
        self._call(self._consumer.resume_topics, list(topics))

    def pause_all(self) -> None:
        """Pause the whole consumer, whatever is assigned now or later, until ``resume_all()``."""
        self._call(self._consumer.pause)

    def resume_all(self) -> None:
        """Lift the consumer-level mark of ``pause_all()`` (partition and topic marks stay)."""
        self._call(self._consumer.resume)

    def pause_state(self) -> PauseState:
        """A frozen snapshot of the pause intent (see :meth:`safeconsumer.SafeConsumer.pause_state`)."""
        return cast(PauseState, self._call(self._consumer.pause_state))

    def keepalive(self) -> Any:
        """``with consumer.keepalive(): long_work()``: stay in the group without consuming."""
        return self._call(self._consumer.keepalive)

    def owns(self, partition: TopicPartition) -> bool:
        """Whether ``partition`` is assigned to this consumer right now."""
        return bool(self._call(self._consumer.owns, to_confluent(partition)))

    @property
    def safe_consumer(self) -> SafeConsumer:
        """The SafeConsumer underneath (its telemetry, ``delivery_stats()``)."""
        return self._consumer

    # -- positions ----------------------------------------------------------------------------
    def _assigned_key(self, partition: Any) -> Key:
        if not isinstance(partition, TopicPartition):
            raise TypeError("partition must be a TopicPartition namedtuple")
        if partition not in self.assignment():
            raise kerrors.IllegalStateError("Partition is not assigned")
        return (partition.topic, partition.partition)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        if not isinstance(partition, TopicPartition):
            raise TypeError("partition must be a TopicPartition namedtuple")
        if not isinstance(offset, int) or offset < 0:
            raise ValueError("Offset must be int >= 0")
        if partition not in self.assignment():
            raise ValueError("Unassigned partition")
        self._seeks.to_offset(partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read ``partitions`` (all assigned when none given) from their first offset."""
        self._seek_logical(partitions, OFFSET_BEGINNING)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read ``partitions`` (all assigned when none given) from their end."""
        self._seek_logical(partitions, OFFSET_END)

    def _seek_logical(self, partitions: tuple[Any, ...], where: int) -> None:
        if not all(isinstance(p, TopicPartition) for p in partitions):
            raise TypeError("partitions must be TopicPartition namedtuples")
        assigned = self.assignment()
        if not partitions:
            if not assigned:
                raise ValueError("No partitions are currently assigned")
            partitions = tuple(sorted(assigned))
        for tp in partitions:
            if tp not in assigned:
                raise ValueError(f"Unassigned partition: {tp}")
        for tp in partitions:
            self._seeks.to_logical(tp, where)

    def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int | None:
        """The offset of the next record you will be given from ``partition``: after the last one you
        were given, else where a seek, the committed offset or the reset policy puts it."""
        return self._seeks.position(partition, self._assigned_key(partition), timeout_ms)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark as the last fetch response gave it (None before one)."""
        self._assigned_key(partition)
        _low, high = self._call(self._consumer.get_watermark_offsets, to_confluent(partition), cached=True)
        return None if high is None or high < 0 else int(high)

    # -- commits ----------------------------------------------------------------------------------
    def commit(self, offsets: Any = None, timeout_ms: float | None = None) -> None:
        """Commit ``offsets`` (``{TopicPartition: OffsetAndMetadata}``), by default the consumed
        positions, and wait for it. Offsets of partitions this member no longer owns are dropped
        with a WARNING (SPEC I7). ``CommitFailedError`` when the group has moved on."""
        self._commits.commit(offsets)

    def commit_async(self, offsets: Any = None, callback: Callable[..., Any] | None = None) -> Future:
        """Commit without waiting: a ``kafka.future.Future``, resolved (and ``callback(offsets,
        result_or_exception)`` called) by a later ``poll()`` or iteration, as kafka-python does."""
        return self._commits.commit_async(offsets, callback)

    def _commit_done(self, err: KafkaError | None, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """librdkafka's commit callback, held weakly (see :meth:`._commits.Commits.done`)."""
        self._commits.done(err, partitions)

    def committed(self, partition: TopicPartition, metadata: bool = False, timeout_ms: float | None = None) -> Any:
        """The group's committed offset of ``partition`` (an ``OffsetAndMetadata`` with ``metadata=True``),
        or None when nothing is committed."""
        return self._commits.committed(partition, metadata, timeout_ms)

    # -- cluster ------------------------------------------------------------------------------
    def topics(self) -> set[str]:
        """Every topic of the cluster the consumer may read (internal topics left out)."""
        return self._cluster.topics()

    def partitions_for_topic(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (an empty set for an unknown topic)."""
        return self._cluster.partitions_for_topic(topic)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition the earliest offset whose timestamp is at least the one given, with that
        record's timestamp; None where no record is that late."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}. The target time cannot be negative.")
        return self._cluster.offsets_for_times(timestamps, timeout_ms)

    def beginning_offsets(self, partitions: Any, timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """Per partition its first offset."""
        return self._cluster.beginning_offsets(partitions, timeout_ms)

    def end_offsets(self, partitions: Any, timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """Per partition the offset after its last record (the last stable offset under read_committed)."""
        return self._cluster.end_offsets(partitions, timeout_ms)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group id, generation and member id (as far as librdkafka tells them)."""
        return self._subscription.group_metadata(closed=self._guard.closed)

    def metrics(self, raw: bool = False) -> dict[str, dict[str, Any]] | None:
        """The consumer's counters: ``{"consumer-fetch-manager-metrics": {...}, "safeconsumer": {...}}``
        (None when ``metrics_enabled=False``). ``raw`` is accepted and gives the same dict."""
        if not self.config["metrics_enabled"]:
            return None
        stats = delivery_stats(self._consumer)
        return {
            "consumer-fetch-manager-metrics": {"records-consumed-total": stats.delivered},
            "safeconsumer": {k: v for k, v in vars(stats).items() if isinstance(v, int)},
        }

    # -- closing ------------------------------------------------------------------------------------
    def close(self, autocommit: bool = True, timeout_ms: float | None = None) -> None:
        """Close: with ``enable_auto_commit`` and ``autocommit``, the consumed positions are committed
        first (as kafka-python does); then the member leaves its group. Closing twice does nothing."""
        if self._guard.closed:
            return
        try:
            # Unless autocommit, what the application was last given is not processed (the with-block
            # raised, say): it goes back, so the SafeConsumer's close neither stores nor commits it (I8).
            self._handout.release_held(processed=autocommit)
            if (
                autocommit
                and self.config["enable_auto_commit"]
                and not self._groupless
                and self._positions.any_consumed()
            ):
                try:
                    self.commit(timeout_ms=timeout_ms)
                except kerrors.KafkaError as exc:
                    logger.warning("commit at close failed: %s", type(exc).__name__)
            self._handout.close_deserializers()
        finally:
            try:
                # The listener's on_partitions_revoked runs in here, and may still commit.
                translated(self._consumer.close)
            finally:
                self._guard.closed = True

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(autocommit=exc_type is None)
