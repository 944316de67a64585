"""What kafka-python's consumer asks of the cluster: whether it answers, its topics, and ListOffsets.

Metadata (whether a broker answers, the topics and their partitions) comes from the SafeConsumer;
offsets by timestamp, first and end offsets from the admin API's ListOffsets, through an admin
client made when first needed (with the consumer's connection settings) and asked at the
consumer's isolation level.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException
from kafka import errors as kerrors
from kafka.structs import OffsetAndTimestamp, TopicPartition

from ._convert import kafka_error, to_confluent
from ._guard import Guard

if TYPE_CHECKING:
    from ..consumer._facade import SafeConsumer

__all__ = ["INTERNAL_TOPICS", "Cluster"]

#: The broker's own topics, left out of ``topics()`` as kafka-python leaves them out.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def _spec(kind: str, *args: int) -> Any:
    """An ``OffsetSpec`` of the admin API's ListOffsets (imported when first asked for)."""
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    return getattr(OffsetSpec, kind)(*args)


class Cluster:
    """The cluster's topics and offsets, as kafka-python's ``KafkaConsumer`` answers them."""

    def __init__(
        self, consumer: SafeConsumer, guard: Guard, admin_conf: dict[str, Any], config: dict[str, Any], timeout: float
    ) -> None:
        self._consumer = consumer
        self._guard = guard
        self._call: Callable[..., Any] = guard.call
        self._admin_conf = admin_conf
        self._admin: Any = None
        self._config = config
        self._timeout = timeout

    def connected(self) -> bool:
        """Whether a broker answers (a metadata request within a second)."""
        try:
            self._call(self._consumer.list_topics, timeout=1.0)
        except kerrors.KafkaError:
            return False
        return True

    def bootstrap(self, timeout_ms: float | None) -> None:
        """Wait until the cluster's metadata is known; ``KafkaTimeoutError`` when it is not in ``timeout_ms``."""
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        try:
            self._call(self._consumer.list_topics, timeout=timeout)
        except kerrors.KafkaError as exc:
            raise kerrors.KafkaTimeoutError(f"Unable to bootstrap from {self._config['bootstrap_servers']}") from exc

    def topics(self) -> set[str]:
        """Every topic of the cluster the consumer may read (internal topics left out)."""
        metadata = self._call(self._consumer.list_topics, timeout=self._timeout)
        return set(metadata.topics) - INTERNAL_TOPICS

    def partitions_for_topic(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (an empty set for an unknown topic)."""
        metadata = self._call(self._consumer.list_topics, timeout=self._timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return set()
        return set(found.partitions)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition the earliest offset whose timestamp is at least the one given (timestamps
        checked by the facade), with that record's timestamp; None where no record is that late."""
        found = self._list_offsets({tp: _spec("for_timestamp", ts) for tp, ts in timestamps.items()}, timeout_ms)
        return {
            tp: None
            if info.offset < 0
            else OffsetAndTimestamp(info.offset, info.timestamp, -1 if info.leader_epoch is None else info.leader_epoch)
            for tp, info in found.items()
        }

    def beginning_offsets(self, partitions: Any, timeout_ms: float | None) -> dict[TopicPartition, int]:
        """Per partition its first offset."""
        found = self._list_offsets({tp: _spec("earliest") for tp in partitions}, timeout_ms)
        return {tp: info.offset for tp, info in found.items()}

    def end_offsets(self, partitions: Any, timeout_ms: float | None) -> dict[TopicPartition, int]:
        """Per partition the offset after its last record (the last stable offset under read_committed)."""
        found = self._list_offsets({tp: _spec("latest") for tp in partitions}, timeout_ms)
        return {tp: info.offset for tp, info in found.items()}

    def _admin_client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self._admin_conf)
        return self._admin

    def _list_offsets(self, wanted: Mapping[TopicPartition, Any], timeout_ms: float | None) -> dict[Any, Any]:
        """The broker's ListOffsets answer per partition, waited for up to ``timeout_ms``."""
        from confluent_kafka import IsolationLevel

        self._guard.check()
        if not wanted:
            return {}
        timeout = self._timeout if timeout_ms is None else timeout_ms / 1000
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self._config["isolation_level"] == "read_committed"
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
