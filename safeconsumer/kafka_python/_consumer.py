"""``KafkaConsumer``: kafka-python's consumer API on a SafeConsumer.

One core: every record comes out of the SafeConsumer underneath (``consume_available``: what
librdkafka has, returned as soon as there is any, as kafka-python's ``poll()``), so pause intent,
the delivery gate, processed-before-stored, the keepalive, fatal errors and telemetry are the
SafeConsumer's. This class holds only what kafka-python's API adds on top:

- its subscription modes (topics, pattern, user assignment) and their ``IllegalStateError``;
- ``group_id=None``: no group, every partition of the subscribed topics assigned locally;
- the consumed positions (the offset after the last record the application was given, per
  partition), which ``commit()`` and ``commit_async()`` commit when given no offsets;
- logical seeks (``seek_to_beginning``/``seek_to_end``) not yet resolved to an offset;
- asynchronous commits waiting for librdkafka's commit callback.

Nothing here holds the consumer strongly from a callback: librdkafka's callbacks reach this object
through a weak reference, so a dropped ``KafkaConsumer`` is freed where it is dropped (I10).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, Message
from kafka import errors as kerrors
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafka.future import Future
from kafka.structs import ConsumerGroupMetadata, MemberState, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

from ..base._clients import admin_config
from ..base._errors import FatalPolicy
from ..consumer._client import group_generation
from ..consumer._facade import SafeConsumer, delivery_stats
from ..consumer._join_gate import MIGRATION_TIMEOUT
from ..consumer._keepalive import KeepaliveMode
from ..consumer._pause import PauseState
from ..consumer._port import port_of
from ..consumer._retry import CommitRetry
from ..poison._policy import DeadLetterError, PoisonPolicy
from ._config import judge
from ._convert import deserializer, kafka_error, record, to_confluent, to_kafka

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["KafkaConsumer"]

logger = logging.getLogger("safeconsumer.kafka_python")

_SUBSCRIPTION_MESSAGE = (
    "You must choose only one way to configure your consumer: (1) subscribe to specific topics by name,"
    " (2) subscribe to topics matching a regex pattern, (3) assign itself specific topic-partitions."
)

#: The broker's own topics, left out of ``topics()`` as kafka-python leaves them out.
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

_Key = tuple[str, int]
_DEFAULT_COMMIT_RETRY = CommitRetry()


def _weakly(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of an object, held weakly: librdkafka keeps callbacks for the consumer's life."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        return None if bound is None else bound(*args)

    return call


def _spec(kind: str, *args: int) -> Any:
    """An ``OffsetSpec`` of the admin API's ListOffsets (imported when first asked for)."""
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    return getattr(OffsetSpec, kind)(*args)


class _Mode:
    """How the consumer was told what to read (kafka-python's subscription types)."""

    NONE = "none"
    TOPICS = "topics"
    PATTERN = "pattern"
    ASSIGNED = "assigned"


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
        self._closed = True  # until the SafeConsumer exists: close() and __del__ have nothing to do
        settings = judge(topics, configs, group_protocol=group_protocol)
        self.config = settings.config
        self._groupless = settings.groupless
        self._key_deser = deserializer(self.config["key_deserializer"], "key_deserializer")
        self._value_deser = deserializer(self.config["value_deserializer"], "value_deserializer")
        self._timeout = self.config["request_timeout_ms"] / 1000
        conf = dict(settings.librdkafka)
        conf["on_commit"] = _weakly(self._commit_done)
        provider = self.config["sasl_oauth_token_provider"]
        if provider is not None:
            conf["oauth_cb"] = lambda _config: (provider.token(), time.time() + 3600)
        self._admin_conf = admin_config(conf, "kafka-python")
        self._admin: Any = None
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
        self._poison = self._port.poison_handler()
        self._closed = False
        self._mode = _Mode.NONE
        self._topics: set[str] | None = None
        self._pattern: str | None = None
        self._listener: Any = None
        self._joined = False  # in a group: assigned since it joined, not lost since
        self._generation: int | None = None
        self._consumed: dict[_Key, tuple[int, int]] = {}  # next offset, leader epoch
        self._held: list[Message] = []  # what the last read handed out (given back by close(autocommit=False))
        self._resets: dict[_Key, int] = {}  # partition -> OFFSET_BEGINNING / OFFSET_END, not yet resolved
        self._commits: deque[tuple[dict[_Key, int], Future, Callable[..., Any]]] = deque()
        self._next_refresh = 0.0  # group-less subscriptions: when to look for new partitions
        self._consumer_timeout = float(self.config["consumer_timeout_ms"]) / 1000
        if self.config["api_version"] is None:
            self.bootstrap(self.config["bootstrap_timeout_ms"])
        if topics:
            self.subscribe(topics=list(topics))

    def __repr__(self) -> str:
        return f"<safeconsumer.kafka_python.KafkaConsumer group={self.config['group_id']!r}>"

    # -- errors --------------------------------------------------------------------------------
    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A call of the SafeConsumer, its errors as kafka-python's."""
        if self._closed:
            raise kerrors.IllegalStateError("KafkaConsumer is closed")
        try:
            return method(*args, **kwargs)
        except (KafkaException, RuntimeError) as exc:
            translated = kafka_error(exc)
            if translated is exc:
                raise
            raise translated from exc

    def _event(self, msg: Message) -> None:
        """An error event among the records: raised when it ends the consumer or means no offset
        to start from (as kafka-python raises it), otherwise logged (kafka-python's network layer
        handles such errors itself and never returns them)."""
        err = cast(KafkaError, msg.error())
        if err.fatal() or err.code() == KafkaError._AUTO_OFFSET_RESET:
            raise kafka_error(err)
        logger.warning("%s: %s", err.name(), err.str())

    # -- connection ----------------------------------------------------------------------------
    def bootstrap_connected(self) -> bool:
        """Whether a broker answers (a metadata request within a second)."""
        try:
            self._call(self._consumer.list_topics, timeout=1.0)
        except kerrors.KafkaError:
            return False
        return True

    def bootstrap(self, timeout_ms: float | None = None, refresh: bool = False) -> None:
        """Wait until the cluster's metadata is known; ``KafkaTimeoutError`` when it is not in ``timeout_ms``."""
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        try:
            self._call(self._consumer.list_topics, timeout=timeout)
        except kerrors.KafkaError as exc:
            raise kerrors.KafkaTimeoutError(f"Unable to bootstrap from {self.config['bootstrap_servers']}") from exc

    # -- subscription ------------------------------------------------------------------------
    def subscribe(self, topics: Any = (), pattern: str | None = None, listener: Any = None) -> None:
        """Subscribe to topics by name or to a regex ``pattern`` (librdkafka's regex dialect, anchored
        at the start as ``re.match``), with an optional ``ConsumerRebalanceListener``."""
        if not topics and not pattern:
            raise ValueError("Must provide topics or pattern")
        if topics and pattern:
            raise kerrors.IllegalStateError(_SUBSCRIPTION_MESSAGE)
        mode = _Mode.PATTERN if pattern else _Mode.TOPICS
        if not pattern and (isinstance(topics, str) or not isinstance(topics, list | tuple)):
            raise TypeError("Topics must be a list (or non-str sequence)")
        if self._mode not in (_Mode.NONE, mode):
            raise kerrors.IllegalStateError(_SUBSCRIPTION_MESSAGE)
        if listener and not isinstance(listener, ConsumerRebalanceListener | AsyncConsumerRebalanceListener):
            raise TypeError("listener must be a ConsumerRebalanceListener or AsyncConsumerRebalanceListener")
        for topic in topics:
            if not isinstance(topic, str) or not topic:
                raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        self._mode, self._listener = mode, listener
        self._topics = set() if pattern else set(topics)
        self._pattern = pattern
        if self._groupless:
            self._next_refresh = 0.0
            self._assign_all()
            return
        entries = [pattern if pattern.startswith("^") else "^" + pattern] if pattern else list(topics)
        self._call(
            self._consumer.subscribe,
            entries,
            on_assign=_weakly(self._assigned),
            on_revoke=_weakly(self._revoked),
            on_lost=_weakly(self._lost),
        )

    def subscription(self) -> set[str] | None:
        """The subscribed topics (a copy), or None when not subscribed."""
        if self._mode in (_Mode.NONE, _Mode.ASSIGNED):
            return None
        if self._mode == _Mode.PATTERN and not self._groupless:
            return {tp.topic for tp in self.assignment()}
        return set(self._topics or ())

    def unsubscribe(self) -> None:
        """Leave the subscription (or the user assignment): nothing assigned, no pause marks kept."""
        if self._mode == _Mode.ASSIGNED or self._groupless:
            self._call(self._consumer.unassign)
        else:
            self._call(self._consumer.unsubscribe)
        self._mode, self._topics, self._pattern, self._listener = _Mode.NONE, None, None, None
        self._joined = False
        self._consumed.clear()
        self._resets.clear()

    def assign(self, partitions: Any) -> None:
        """Read exactly ``partitions`` (kafka ``TopicPartition``s), from their committed offsets or the
        reset policy. An empty list unsubscribes."""
        if not partitions:
            self.unsubscribe()
            return
        if self._mode not in (_Mode.NONE, _Mode.ASSIGNED):
            raise kerrors.IllegalStateError(_SUBSCRIPTION_MESSAGE)
        wanted = {(tp.topic, tp.partition) for tp in partitions}
        self._call(self._consumer.assign, [to_confluent(tp) for tp in partitions])
        self._mode = _Mode.ASSIGNED
        self._forget(lambda key: key not in wanted)

    def assignment(self) -> set[TopicPartition]:
        """The partitions assigned to this consumer now."""
        if self._closed:
            return set()
        return to_kafka(self._call(self._consumer.assignment))

    def _assign_all(self) -> None:
        """group_id=None: every partition of the subscribed topics (or the matching ones), as kafka-python
        assigns them locally; looked at again when nothing is assigned yet or metadata may have changed."""
        metadata = self._call(self._consumer.list_topics, timeout=self._timeout)
        names = set(metadata.topics) - _INTERNAL_TOPICS
        if self._pattern is not None:
            matcher = __import__("re").compile(self._pattern)
            topics = {t for t in names if matcher.match(t)}
            self._topics = topics
        else:
            topics = set(self._topics or ()) & names
        wanted = sorted((t, p) for t in topics for p in metadata.topics[t].partitions)
        current = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
        if set(wanted) != current:
            added = [confluent_kafka.TopicPartition(t, p) for t, p in wanted if (t, p) not in current]
            if added:
                self._call(self._consumer.incremental_assign, added)
        interval = self.config["metadata_max_age_ms"] / 1000 if wanted else 1.0
        self._next_refresh = time.monotonic() + interval

    def _forget(self, gone: Callable[[_Key], bool]) -> None:
        for table in (self._consumed, self._resets):
            for key in [k for k in table if gone(k)]:
                del table[key]

    # -- rebalance listener ----------------------------------------------------------------------
    def _assigned(self, _consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._joined = True
        self._generation = group_generation(self._consumer)
        if self._listener is not None:
            self._listener.on_partitions_assigned(to_kafka(partitions))

    def _revoked(self, _consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        revoked = to_kafka(partitions)
        try:
            if self._listener is not None:
                self._listener.on_partitions_revoked(revoked)
        finally:
            self._forget(lambda key: key in revoked)

    def _lost(self, _consumer: Any, partitions: list[confluent_kafka.TopicPartition]) -> None:
        lost = to_kafka(partitions)
        self._joined = False
        try:
            if self._listener is not None:
                self._listener.on_partitions_lost(lost)
        finally:
            self._forget(lambda key: key in lost)

    # -- reading -------------------------------------------------------------------------------
    def poll(
        self, timeout_ms: float = 0, max_records: int | None = None, update_offsets: bool = True
    ) -> dict[TopicPartition, list[Any]]:
        """Records by partition, as soon as any arrive within ``timeout_ms``; ``{}`` when none did.

        The records count as handed out: their offsets are stored (for a commit) once you come back,
        with your next call (SPEC I8). ``update_offsets=False`` gives them back instead: the next
        poll returns them again.
        """
        if self._closed:
            raise kerrors.IllegalStateError("KafkaConsumer is closed")
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
                records = self._records(msgs)
                if records:
                    if not update_offsets:
                        self._give_back(msgs)
                        self._held = []
                        for key in {(tp.topic, tp.partition) for tp in records}:
                            self._consumed.pop(key, None)
                    return records
            if time.monotonic() >= deadline:
                return {}

    def _read(self, max_records: int, timeout: float) -> list[Message]:
        if self._groupless and self._mode in (_Mode.TOPICS, _Mode.PATTERN) and time.monotonic() >= self._next_refresh:
            self._assign_all()
        return cast("list[Message]", self._call(self._port.consume_available, max_records, timeout))

    def _records(self, msgs: list[Message]) -> dict[TopicPartition, list[Any]]:
        """kafka-python's shape of one read; the consumed positions move past it.

        A deserializer that raises (or an error event raised) stops the read there: what came before
        it is returned, it and what came after go back to the SafeConsumer unprocessed (never stored),
        and the next call starts with it, raising again while it cannot be deserialized.
        """
        out: dict[TopicPartition, list[Any]] = {}
        by_key: dict[_Key, list[Any]] = {}
        kd, vd = self._key_deser, self._value_deser
        poison = self._poison
        judged = 0  # records up to here counted toward the poison policy's ratio limit
        for i, msg in enumerate(msgs):
            try:
                if msg.error() is not None:
                    self._event(msg)
                    continue
                try:
                    converted = record(msg, kd, vd)
                except Exception as exc:
                    if poison.policy is None:
                        raise
                    # Skipped or dead-lettered: handed out, stored once the application comes back.
                    poison.passed(i - judged)
                    judged = i + 1
                    poison.deserialization_failed(exc, msg)
                    continue
            except DeadLetterError:
                del msgs[i:]  # the poison handler gave them back already
                if not by_key:
                    raise
                break
            except BaseException:
                self._give_back(msgs[i + 1 if msg.error() is not None else i :])
                del msgs[i:]
                if not by_key:
                    raise
                break
            key = (converted[0], converted[1])  # topic, partition
            batch = by_key.get(key)
            if batch is None:
                batch = by_key[key] = out[TopicPartition(*key)] = []
            batch.append(converted)
        if poison.policy is not None:
            poison.passed(len(msgs) - judged)
        self._held = msgs
        consumed = self._consumed
        for key, batch in by_key.items():
            last = batch[-1]
            consumed[key] = (last.offset + 1, last.leader_epoch)
            self._resets.pop(key, None)
        return out

    def _give_back(self, msgs: list[Message]) -> None:
        """``msgs`` never reached the application: the SafeConsumer takes its records back, unprocessed,
        to hand them out again first (error events, already raised or logged, are not repeated)."""
        records = [m for m in msgs if m.error() is None]
        if records:
            self._port.async_link().give_back(records)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        """The next record; ``StopIteration`` once ``consumer_timeout_ms`` passes without one (the
        consumer stays iterable). Each record counts as handed out alone: its offset is stored once
        you ask for the next (SPEC I8), so a commit never covers a record you had not finished."""
        if self._closed:
            raise StopIteration("KafkaConsumer closed")
        deadline = time.monotonic() + self._consumer_timeout
        while True:
            remaining = deadline - time.monotonic()
            msgs = self._read(1, -1 if remaining == float("inf") else max(0.0, remaining))
            if msgs:
                records = self._records(msgs)
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
        if self._closed:
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
    def _assigned_key(self, partition: Any) -> _Key:
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
        self._resets.pop((partition.topic, partition.partition), None)
        self._consumed.pop((partition.topic, partition.partition), None)
        self._seek(to_confluent(partition, offset))

    def _seek(self, target: confluent_kafka.TopicPartition) -> None:
        """librdkafka refuses a seek (``_STATE``) until a just-assigned partition has looked up its
        starting offset (tens of milliseconds); kafka-python's seek is accepted at once, so the
        refusal is retried for up to ``request_timeout_ms``."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                self._call(self._consumer.seek, target)
                return
            except kerrors.IllegalStateError as exc:
                cause = exc.__cause__
                refused = isinstance(cause, KafkaException) and cause.args[0].code() == KafkaError._STATE
                if not refused or time.monotonic() >= deadline:
                    raise
            time.sleep(0.01)

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
            key = (tp.topic, tp.partition)
            self._consumed.pop(key, None)
            self._resets[key] = where
            self._seek(to_confluent(tp, where))

    def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int | None:
        """The offset of the next record you will be given from ``partition``: after the last one you
        were given, else where a seek, the committed offset or the reset policy puts it."""
        key = self._assigned_key(partition)
        consumed = self._consumed.get(key)
        if consumed is not None:
            return consumed[0]
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        [pos] = self._call(self._consumer.position, [to_confluent(partition)])
        if pos.offset >= 0:
            return int(pos.offset)
        reset = self._resets.get(key)
        if reset is None and not self._groupless:
            [committed] = self._call(self._consumer.committed, [to_confluent(partition)], timeout=timeout)
            if committed.offset >= 0:
                return int(committed.offset)
        if reset is None:
            policy = self.config["auto_offset_reset"]
            reset = {"earliest": OFFSET_BEGINNING, "smallest": OFFSET_BEGINNING}.get(policy)
            if reset is None and policy not in ("latest", "largest"):
                raise kerrors.NoOffsetForPartitionError(partition)
            reset = OFFSET_END if reset is None else reset
        low, high = self._call(self._consumer.get_watermark_offsets, to_confluent(partition), timeout=timeout)
        return int(low if reset == OFFSET_BEGINNING else high)

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark as the last fetch response gave it (None before one)."""
        self._assigned_key(partition)
        _low, high = self._call(self._consumer.get_watermark_offsets, to_confluent(partition), cached=True)
        return None if high is None or high < 0 else int(high)

    # -- commits ----------------------------------------------------------------------------------
    def _offsets(self, offsets: Any) -> list[confluent_kafka.TopicPartition]:
        if self._groupless:
            raise kerrors.IllegalStateError("Requires group_id")
        if offsets is None:
            owned = {(tp.topic, tp.partition) for tp in self._consumer.assignment()}
            return [
                to_confluent(TopicPartition(t, p), offset, None, epoch)
                for (t, p), (offset, epoch) in self._consumed.items()
                if (t, p) in owned
            ]
        if not isinstance(offsets, dict) or not all(
            isinstance(k, TopicPartition) and isinstance(v, OffsetAndMetadata) for k, v in offsets.items()
        ):
            raise TypeError("offsets must be dict[TopicPartition, OffsetAndMetadata]")
        return [to_confluent(tp, om.offset, om.metadata, om.leader_epoch) for tp, om in offsets.items()]

    def commit(self, offsets: Any = None, timeout_ms: float | None = None) -> None:
        """Commit ``offsets`` (``{TopicPartition: OffsetAndMetadata}``), by default the consumed
        positions, and wait for it. Offsets of partitions this member no longer owns are dropped
        with a WARNING (SPEC I7). ``CommitFailedError`` when the group has moved on."""
        partitions = self._offsets(offsets)
        if not partitions:
            return
        try:
            self._call(self._consumer.commit, offsets=partitions, asynchronous=False)
        except (kerrors.IllegalGenerationError, kerrors.UnknownMemberIdError, kerrors.RebalanceInProgressError) as e:
            raise kerrors.CommitFailedError() from e
        except kerrors.KafkaError as exc:
            if isinstance(exc.__cause__, KafkaException) and exc.__cause__.args[0].code() == KafkaError._NO_OFFSET:
                return  # nothing to commit: every offset was dropped (I7) or already committed
            raise

    def commit_async(self, offsets: Any = None, callback: Callable[..., Any] | None = None) -> Future:
        """Commit without waiting: a ``kafka.future.Future``, resolved (and ``callback(offsets,
        result_or_exception)`` called) by a later ``poll()`` or iteration, as kafka-python does."""
        partitions = self._offsets(offsets)
        future = Future()
        done = callback or self.config["default_offset_commit_callback"]
        requested = {
            TopicPartition(p.topic, p.partition): OffsetAndMetadata(p.offset, p.metadata or "", -1) for p in partitions
        }
        if not partitions:
            future.success(None)
            done(requested, None)
            return future
        self._commits.append(({(p.topic, p.partition): p.offset for p in partitions}, future, done))
        try:
            self._call(self._consumer.commit, offsets=partitions, asynchronous=True)
        except Exception as exc:  # noqa: BLE001 - handed to the future and the callback, as kafka-python does
            self._commits.pop()
            future.failure(exc)
            done(requested, exc)
        return future

    def _commit_done(self, err: KafkaError | None, partitions: list[confluent_kafka.TopicPartition]) -> None:
        """librdkafka's commit callback (served by the SafeConsumer's reads): the first waiting
        ``commit_async()`` that asked for exactly these offsets is resolved; an auto-commit of other
        offsets resolves none."""
        committed = {(p.topic, p.partition): p.offset for p in partitions}
        for i, (wanted, future, done) in enumerate(self._commits):
            if wanted == committed:
                del self._commits[i]
                offsets = {TopicPartition(*k): OffsetAndMetadata(v, "", -1) for k, v in wanted.items()}
                failure = (
                    kafka_error(err)
                    if err is not None
                    else next((kafka_error(p.error) for p in partitions if p.error is not None), None)
                )
                if failure is None:
                    future.success(None)
                    done(offsets, None)
                else:
                    future.failure(failure)
                    done(offsets, failure)
                return

    def committed(self, partition: TopicPartition, metadata: bool = False, timeout_ms: float | None = None) -> Any:
        """The group's committed offset of ``partition`` (an ``OffsetAndMetadata`` with ``metadata=True``),
        or None when nothing is committed."""
        if self._groupless:
            raise kerrors.IllegalStateError("Requires group_id")
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        [tp] = self._call(self._consumer.committed, [to_confluent(partition)], timeout=timeout)
        if tp.error is not None:
            raise kafka_error(tp.error)
        if tp.offset < 0:
            return None
        if metadata:
            epoch = tp.leader_epoch
            return OffsetAndMetadata(tp.offset, tp.metadata or "", -1 if epoch is None else epoch)
        return tp.offset

    # -- cluster ------------------------------------------------------------------------------
    def topics(self) -> set[str]:
        """Every topic of the cluster the consumer may read (internal topics left out)."""
        metadata = self._call(self._consumer.list_topics, timeout=self._timeout)
        return set(metadata.topics) - _INTERNAL_TOPICS

    def partitions_for_topic(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (an empty set for an unknown topic)."""
        metadata = self._call(self._consumer.list_topics, timeout=self._timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return set()
        return set(found.partitions)

    def _admin_client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self._admin_conf)
        return self._admin

    def _list_offsets(self, wanted: Mapping[TopicPartition, Any], timeout_ms: float | None) -> dict[Any, Any]:
        """The broker's ListOffsets answer per partition, waited for up to ``timeout_ms``."""
        from confluent_kafka import IsolationLevel

        if self._closed:
            raise kerrors.IllegalStateError("KafkaConsumer is closed")
        if not wanted:
            return {}
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self.config["isolation_level"] == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        deadline = time.monotonic() + timeout
        request = {to_confluent(tp): spec for tp, spec in wanted.items()}
        while True:
            futures = self._admin_client().list_offsets(request, isolation_level=isolation, request_timeout=timeout)
            try:
                return {TopicPartition(p.topic, p.partition): f.result() for p, f in futures.items()}
            except KafkaException as exc:
                err = exc.args[0]
                # A partition without a leader yet (or unknown: "No leaders found"): kafka-python
                # waits for metadata until the timeout.
                retriable = err.code() in (
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError._NOENT,
                )
                if not retriable and not err.retriable():
                    raise kafka_error(exc) from exc
                if time.monotonic() >= deadline:
                    raise kerrors.KafkaTimeoutError(
                        f"Failed to get offsets by times in {timeout * 1000:.0f} ms"
                    ) from exc
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition the earliest offset whose timestamp is at least the one given, with that
        record's timestamp; None where no record is that late."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}. The target time cannot be negative.")
        found = self._list_offsets({tp: _spec("for_timestamp", ts) for tp, ts in timestamps.items()}, timeout_ms)
        return {
            tp: None
            if info.offset < 0
            else OffsetAndTimestamp(info.offset, info.timestamp, -1 if info.leader_epoch is None else info.leader_epoch)
            for tp, info in found.items()
        }

    def beginning_offsets(self, partitions: Any, timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """Per partition its first offset."""
        found = self._list_offsets({tp: _spec("earliest") for tp in partitions}, timeout_ms)
        return {tp: info.offset for tp, info in found.items()}

    def end_offsets(self, partitions: Any, timeout_ms: float | None = None) -> dict[TopicPartition, int]:
        """Per partition the offset after its last record (the last stable offset under read_committed)."""
        found = self._list_offsets({tp: _spec("latest") for tp in partitions}, timeout_ms)
        return {tp: info.offset for tp, info in found.items()}

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group id, generation and member id (as far as librdkafka tells them)."""
        if self._groupless:
            return ConsumerGroupMetadata(group_id=None, generation_id=-1, member_id="")
        if self._closed or self._mode == _Mode.NONE:
            return ConsumerGroupMetadata(group_id=self.config["group_id"], generation_id=-1, member_id="")
        # The generation as the last assignment saw it: read on the polling thread, inside the
        # callback (librdkafka's group metadata call can block while another thread polls).
        generation = self._generation
        stable = self._joined and generation is not None and generation >= 0
        return ConsumerGroupMetadata(
            group_id=self.config["group_id"],
            generation_id=-1 if generation is None else generation,
            member_id=self._consumer.memberid() or "",
            group_instance_id=self.config["group_instance_id"],
            state=MemberState.STABLE if stable else MemberState.REBALANCING,
        )

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
        if self._closed:
            return
        try:
            if not autocommit:
                # What the application was last given is not processed (the with-block raised, say):
                # it goes back, so the SafeConsumer's close neither stores nor commits it (I8).
                self._give_back(self._held)
            self._held = []
            if autocommit and self.config["enable_auto_commit"] and not self._groupless and self._consumed:
                try:
                    self.commit(timeout_ms=timeout_ms)
                except kerrors.KafkaError as exc:
                    logger.warning("commit at close failed: %s", type(exc).__name__)
            for deser in (self._key_deser, self._value_deser):
                closer = getattr(deser, "close", None)
                if callable(closer):
                    closer()
        finally:
            try:
                # The listener's on_partitions_revoked runs in here, and may still commit.
                self._consumer.close()
            except (KafkaException, RuntimeError) as exc:
                translated = kafka_error(exc)
                if translated is exc:
                    raise
                raise translated from exc
            finally:
                self._closed = True

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(autocommit=exc_type is None)
