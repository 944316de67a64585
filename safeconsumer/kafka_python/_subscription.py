"""kafka-python's subscription modes, the group-less assignment, and what the group said of this member.

kafka-python reads in one of three modes (:class:`Mode`: topics by name, a regex pattern, or
partitions the user assigned) and refuses a second with ``IllegalStateError``
(:data:`SUBSCRIPTION_MESSAGE`). With ``group_id=None`` there is no group: every partition of the
subscribed topics is assigned locally, and looked at again as metadata ages. In a group, librdkafka's
rebalance callbacks reach the user's ``ConsumerRebalanceListener`` here, with kafka-python's types,
and the positions of the partitions that went are dropped; ``group_metadata()`` answers from what
the last assignment saw.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import confluent_kafka
from kafka.structs import ConsumerGroupMetadata, MemberState

from ..consumer._client import group_generation
from ._cluster import INTERNAL_TOPICS
from ._convert import to_kafka
from ._part import Part

if TYPE_CHECKING:
    pass

__all__ = ["SUBSCRIPTION_MESSAGE", "Mode", "Subscription"]

SUBSCRIPTION_MESSAGE = (
    "You must choose only one way to configure your consumer: (1) subscribe to specific topics by name,"
    " (2) subscribe to topics matching a regex pattern, (3) assign itself specific topic-partitions."
)


class Mode:
    """How the consumer was told what to read (kafka-python's subscription types)."""

    NONE = "none"  # not told yet, or unsubscribed: any mode may come next
    TOPICS = "topics"  # subscribe(topics=...): topics by name
    PATTERN = "pattern"  # subscribe(pattern=...): the topics a regex matches
    ASSIGNED = "assigned"  # assign(): the user's partitions, no group subscription


class Subscription(Part):
    """What the consumer was told to read, and what its group last said.

    Its state changes only through its own methods, which the facade and librdkafka's rebalance
    callbacks (through the facade) call.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As :class:`Part`'s."""
        super().__init__(*args, **kwargs)
        self._mode = Mode.NONE
        self._topics: set[str] | None = None
        self._pattern: str | None = None
        self._listener: Any = None
        self._joined = False  # in a group: assigned since it joined, not lost since
        self._generation: int | None = None
        self._next_refresh = 0.0  # group-less subscriptions: when to look for new partitions

    @property
    def mode(self) -> str:
        """The :class:`Mode` the consumer reads in."""
        return self._mode

    @property
    def topics(self) -> set[str] | None:
        """The subscribed topics (group-less with a pattern: the matching ones), None when none."""
        return self._topics

    # -- the facade's transitions ---------------------------------------------------------------
    def subscribed(self, mode: str, topics: set[str], pattern: str | None, listener: Any) -> None:
        """``subscribe()`` accepted: a group-less one looks for its partitions at once."""
        self._mode, self._listener = mode, listener
        self._topics = topics
        self._pattern = pattern
        self._next_refresh = 0.0

    def assigned_by_user(self) -> None:
        """``assign()`` accepted."""
        self._mode = Mode.ASSIGNED

    def cleared(self) -> None:
        """``unsubscribe()``: no mode, no topics, no listener, not in the group."""
        self._mode, self._topics, self._pattern, self._listener = Mode.NONE, None, None, None
        self._joined = False

    # -- group-less ----------------------------------------------------------------------------
    def refresh_due(self) -> bool:
        """Whether a group-less subscription should look for new partitions before this read."""
        return self._groupless and self._mode in (Mode.TOPICS, Mode.PATTERN) and time.monotonic() >= self._next_refresh

    def assign_all(self) -> None:
        """group_id=None: every partition of the subscribed topics (or the matching ones), as kafka-python
        assigns them locally; looked at again when nothing is assigned yet or metadata may have changed."""
        metadata = self._call(self._consumer.list_topics, timeout=self._timeout)
        names = set(metadata.topics) - INTERNAL_TOPICS
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
        interval = self._config["metadata_max_age_ms"] / 1000 if wanted else 1.0
        self._next_refresh = time.monotonic() + interval

    # -- the group: librdkafka's rebalance callbacks (through the facade), and what they said ------
    def assigned(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        self._joined = True
        self._generation = group_generation(self._consumer)
        if self._listener is not None:
            self._listener.on_partitions_assigned(to_kafka(partitions))

    def revoked(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        revoked = to_kafka(partitions)
        try:
            if self._listener is not None:
                self._listener.on_partitions_revoked(revoked)
        finally:
            self._positions.forget(lambda key: key in revoked)

    def lost(self, partitions: list[confluent_kafka.TopicPartition]) -> None:
        lost = to_kafka(partitions)
        self._joined = False
        try:
            if self._listener is not None:
                self._listener.on_partitions_lost(lost)
        finally:
            self._positions.forget(lambda key: key in lost)

    def group_metadata(self, *, closed: bool) -> ConsumerGroupMetadata:
        """``KafkaConsumer.group_metadata()`` (``closed``: whether the consumer is)."""
        if self._groupless:
            return ConsumerGroupMetadata(group_id=None, generation_id=-1, member_id="")
        if closed or self._mode == Mode.NONE:
            return ConsumerGroupMetadata(group_id=self._config["group_id"], generation_id=-1, member_id="")
        # The generation as the last assignment saw it: read on the polling thread, inside the
        # callback (librdkafka's group metadata call can block while another thread polls).
        generation = self._generation
        stable = self._joined and generation is not None and generation >= 0
        return ConsumerGroupMetadata(
            group_id=self._config["group_id"],
            generation_id=-1 if generation is None else generation,
            member_id=self._consumer.memberid() or "",
            group_instance_id=self._config["group_instance_id"],
            state=MemberState.STABLE if stable else MemberState.REBALANCING,
        )
