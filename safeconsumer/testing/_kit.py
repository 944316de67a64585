"""Helpers for tests against a real broker: names, topics, records, group state, waiting."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from confluent_kafka.cimpl import NewPartitions, NewTopic
from tenacity import (
    Retrying,
    retry_if_exception,
    retry_if_result,
    stop_after_delay,
    wait_exponential,
    wait_random_exponential,
)

from ..group._describe import describe_group
from ..group._describe_process import enum_name

T = TypeVar("T")

#: The test kit's own clients (admin, producer, probes) log librdkafka's lines here, never to stderr.
KIT_LOG = logging.getLogger("safeconsumer.testing.librdkafka")


def kit_client(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` for one of the kit's own clients: librdkafka's lines go to :data:`KIT_LOG`."""
    return {**conf, "logger": KIT_LOG}


Protocol = Literal["range", "cooperative-sticky", "consumer"]

#: The three rebalance protocols every invariant is tested under: classic eager
#: (``range``), classic incremental (``cooperative-sticky``) and KIP-848 (``consumer``).
PROTOCOLS: Final[tuple[Protocol, ...]] = ("range", "cooperative-sticky", "consumer")


def protocol_conf(protocol: Protocol) -> dict[str, str]:
    """The consumer settings that select a rebalance protocol."""
    if protocol == "consumer":
        return {"group.protocol": "consumer"}
    return {"group.protocol": "classic", "partition.assignment.strategy": protocol}


def unique_name(prefix: str = "sc") -> str:
    """A topic or group name no other test uses: a readable prefix and a random suffix."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", prefix).strip("-")[:120] or "sc"
    return f"{clean}-{uuid.uuid4().hex[:10]}"


class WaitTimeout(AssertionError):
    """A condition did not become true before its deadline."""


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    step: Callable[[], object] | None = None,
) -> T:
    """Call ``step`` (e.g. a consumer poll) then ``condition`` until the condition is truthy.

    Returns the truthy value; raises :class:`WaitTimeout` naming ``what`` when
    ``timeout`` seconds pass first. Without a ``step`` it waits ``interval``
    between checks.
    """
    deadline = time.monotonic() + timeout
    while True:
        if step is not None:
            step()
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {what}")
        if step is None:
            time.sleep(interval)


@dataclass(frozen=True)
class MemberSnapshot:
    member_id: str
    client_id: str
    assignment: frozenset[tuple[str, int]]
    instance_id: str | None = None


@dataclass(frozen=True)
class GroupSnapshot:
    """What the admin API says of a group at one moment."""

    group_id: str
    state: str
    type: str
    members: tuple[MemberSnapshot, ...]

    @property
    def member_ids(self) -> frozenset[str]:
        return frozenset(m.member_id for m in self.members)

    @property
    def assignment(self) -> dict[str, frozenset[tuple[str, int]]]:
        return {m.member_id: m.assignment for m in self.members}


def retry_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    retry_on: Callable[[BaseException], bool],
    first: float = 0.05,
    cap: float = 1.0,
) -> bool:
    """Call ``check`` until it returns True (tenacity: jittered exponential backoff from ``first``
    up to ``cap`` seconds); False once ``timeout`` passed. An exception ``retry_on`` accepts
    counts as "not yet"; any other propagates."""
    retrying = Retrying(
        stop=stop_after_delay(timeout),
        wait=wait_random_exponential(multiplier=first, max=cap),
        retry=retry_if_result(lambda ok: not ok) | retry_if_exception(retry_on),
        retry_error_callback=lambda _state: False,
    )
    return bool(retrying(check))


def _retriable_admin_error(exc: BaseException) -> bool:
    if isinstance(exc, KafkaException):
        err = exc.args[0] if exc.args else None
        return isinstance(err, KafkaError) and (err.retriable() or err.code() in _TRANSIENT)
    return False


_TRANSIENT = {
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}


class KafkaTestKit:
    """Admin and producer helpers bound to one bootstrap address.

    Every helper that waits does so on a condition with a deadline; retriable
    broker errors (a coordinator still loading, a leader not yet elected) are
    retried with tenacity, bounded in time.
    """

    def __init__(
        self, bootstrap_servers: str, *, prefix: str = "sc", client_config: Mapping[str, Any] | None = None
    ) -> None:
        """``client_config``: settings every client of the kit gets (a secured broker's
        ``Broker.client_config``: security settings and credentials)."""
        self.bootstrap_servers = bootstrap_servers
        self.prefix = prefix
        self.client_config: dict[str, Any] = {**(client_config or {}), "bootstrap.servers": bootstrap_servers}
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None

    # -- names ---------------------------------------------------------------------------
    def name(self, kind: str = "t") -> str:
        return unique_name(f"{self.prefix}-{kind}")

    def consumer_conf(self, group: str, protocol: Protocol = "range", **extra: Any) -> dict[str, Any]:
        """A consumer config for this broker: earliest offsets, the chosen protocol, ``extra`` last.

        ``extra`` keys use underscores for dots (``session_timeout_ms=6000``).
        """
        conf: dict[str, Any] = {
            **self.client_config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            **protocol_conf(protocol),
        }
        if protocol != "consumer":
            conf["session.timeout.ms"] = 6000
            conf["heartbeat.interval.ms"] = 500
        conf.update({k.replace("_", "."): v for k, v in extra.items()})
        return conf

    # -- clients -------------------------------------------------------------------------
    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(kit_client(self.client_config))
        return self._admin

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(kit_client({**self.client_config, "linger.ms": 5}))
        return self._producer

    def _retrying(self, timeout: float) -> Retrying:
        return Retrying(
            stop=stop_after_delay(timeout),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception(_retriable_admin_error),
            reraise=True,
        )

    # -- topics --------------------------------------------------------------------------
    def create_topic(
        self,
        name: str | None = None,
        partitions: int = 1,
        *,
        config: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> str:
        """Create a topic (with topic ``config``) and wait until every partition has a leader.
        Returns its name."""
        topic = name or self.name("t")
        new = NewTopic(topic, partitions, 1, config=dict(config or {}))
        for attempt in self._retrying(timeout):
            with attempt:
                futures = self.admin.create_topics([new], operation_timeout=timeout)
                try:
                    futures[topic].result()
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
        self.wait_for_partitions(topic, partitions, timeout=timeout)
        return topic

    def add_partitions(self, topic: str, total: int, *, timeout: float = 30.0) -> None:
        """Grow ``topic`` to ``total`` partitions and wait until they have leaders."""
        self.admin.create_partitions([NewPartitions(topic, total)])[topic].result()
        self.wait_for_partitions(topic, total, timeout=timeout)

    def wait_for_partitions(self, topic: str, partitions: int, *, timeout: float = 30.0) -> None:
        """Wait (tenacity: jittered backoff, a deadline) until ``topic`` has ``partitions`` led partitions."""

        def ready() -> bool:
            meta = self.admin.list_topics(topic, timeout=5).topics.get(topic)
            if meta is None or meta.error is not None:
                return False
            return len(meta.partitions) >= partitions and all(p.leader >= 0 for p in meta.partitions.values())

        if not retry_until(ready, timeout=timeout, retry_on=_retriable_admin_error):
            raise WaitTimeout(
                f"timed out after {timeout:.1f}s waiting for topic {topic!r} with {partitions} partitions"
            )

    # -- records -------------------------------------------------------------------------
    def produce(
        self,
        topic: str,
        count: int,
        *,
        partitions: int | Iterable[int] | None = None,
        start: int = 0,
        value_size: int = 0,
        headers: Mapping[str, bytes] | None = None,
    ) -> list[tuple[int, bytes]]:
        """Produce ``count`` records with values ``b"<i>"`` (padded to ``value_size``), ids from ``start``.

        With ``partitions`` an int N, record i goes to partition i % N; with an
        iterable, round-robin over those partitions; with None the partitioner
        decides. Returns ``(partition, value)`` per record as the broker acked it.
        """
        targets: list[int] | None
        if partitions is None:
            targets = None
        elif isinstance(partitions, int):
            targets = list(range(partitions))
        else:
            targets = list(partitions)
        acked: list[tuple[int, bytes]] = []
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked.append((msg.partition(), msg.value()))

        hdrs = list(headers.items()) if headers else None
        for i in range(start, start + count):
            value = str(i).encode().ljust(value_size, b".")
            kwargs: dict[str, Any] = {"value": value, "on_delivery": on_delivery}
            if targets is not None:
                kwargs["partition"] = targets[i % len(targets)]
            if hdrs:
                kwargs["headers"] = hdrs
            while True:
                try:
                    self.producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self.producer.poll(0)
        remaining = self.producer.flush(30)
        if remaining or errors:
            raise AssertionError(f"producing to {topic!r} failed: {remaining} unsent, errors {errors[:3]}")
        return acked

    def end_offsets(self, topic: str, *, timeout: float = 30.0) -> dict[int, int]:
        """The high watermark of every partition of ``topic`` (retried while a leader is being
        elected, e.g. after a broker restart)."""
        meta = self.admin.list_topics(topic, timeout=10).topics[topic]
        from confluent_kafka import Consumer

        probe = Consumer(kit_client({**self.client_config, "group.id": unique_name("probe")}))
        try:
            return {
                p: self._retrying(timeout)(probe.get_watermark_offsets, TopicPartition(topic, p), timeout=10)[1]
                for p in meta.partitions
            }
        finally:
            probe.close()

    # -- groups --------------------------------------------------------------------------
    def describe_group(self, group: str, *, timeout: float = 10.0) -> GroupSnapshot:
        """The group's state, type (classic or consumer) and members with their assignments.

        Neither the classic DescribeGroups API nor librdkafka's admin client
        exposes the generation; compare member ids and assignments over time
        (a rebalance changes them) or read a member's own generation with
        :func:`consumer_generation`.
        """
        for attempt in self._retrying(timeout):
            with attempt:
                desc = describe_group(self.admin, group, timeout)
        members = tuple(
            sorted(
                (
                    MemberSnapshot(
                        m.member_id,
                        m.client_id,
                        frozenset((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions or [])),
                        m.group_instance_id,
                    )
                    for m in desc.members
                ),
                key=lambda m: m.member_id,
            )
        )
        return GroupSnapshot(group, enum_name(desc.state), enum_name(desc.type), members)

    def set_group_config(self, group: str, settings: Mapping[str, str], *, timeout: float = 15.0) -> None:
        """Set configs of one group on the broker (KIP-848 and share groups have their own, e.g.
        ``{"share.record.lock.duration.ms": "2000"}``); a group that does not exist yet keeps them."""
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()]
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        self.admin.incremental_alter_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)

    def committed(self, group: str, topic: str, partitions: int, *, timeout: float = 10.0) -> dict[int, int]:
        """The group's committed offset per partition of ``topic`` (-1001 where none)."""
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
        for attempt in self._retrying(timeout):
            with attempt:
                result = self.admin.list_consumer_group_offsets([request], request_timeout=timeout)[group].result()
        return {tp.partition: tp.offset for tp in result.topic_partitions}

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
        self._admin = None


def consumer_generation(consumer: Any) -> int:
    """The group generation (classic) or member epoch (KIP-848) a consumer currently holds.

    Read from ``consumer_group_metadata()``; -1 when not in a group.
    """
    from ..consumer._client import group_generation

    generation = group_generation(consumer)
    if generation is None:
        raise ValueError("unrecognised consumer group metadata format")
    return generation
