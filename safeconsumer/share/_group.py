"""What a share consumer must know of its share group, read through the admin API.

A share group's behaviour is set broker side, per group (KIP-932): how long a member holds a record
(``share.record.lock.duration.ms``), how many deliveries a record gets before the broker archives it
(``share.delivery.count.limit``) and where a group without state starts (``share.auto.offset.reset``,
``latest`` unless set). confluent-kafka's ``ShareConsumer`` exposes none of them, and refuses
``auto.offset.reset``. A describe of the group's configs answers for a group that does not exist
yet too (the broker's defaults); a share group with state is one the cluster lists.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
    ResourceType,
)

logger = logging.getLogger("safeconsumer")

Start = Literal["earliest", "latest"]
STARTS: tuple[Start, ...] = ("earliest", "latest")

LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_LIMIT = "share.delivery.count.limit"
AUTO_OFFSET_RESET = "share.auto.offset.reset"

#: Kafka's defaults, used until the broker answered (Kafka 4.3: 30 s, 5 deliveries, latest).
DEFAULT_LOCK_MS = 30_000
DEFAULT_DELIVERY_LIMIT = 5


@dataclass(frozen=True)
class GroupSettings:
    """A share group's settings as the broker applies them (its own values or the broker's)."""

    lock_ms: int = DEFAULT_LOCK_MS
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    auto_offset_reset: str = "latest"
    #: Whether ``share.auto.offset.reset`` is set on the group itself (not the broker's default).
    reset_is_the_groups: bool = False

    @property
    def lock_seconds(self) -> float:
        return self.lock_ms / 1000


def _value(entries: Mapping[str, Any], name: str) -> Any:
    entry = entries.get(name)
    return None if entry is None else entry.value


def read_settings(admin: AdminClient, group: str, timeout: float = 10.0) -> GroupSettings:
    """The group's settings (a describe of the GROUP config resource). Raises ``KafkaException``."""
    resource = ConfigResource(ResourceType.GROUP, group)
    entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)
    reset = _value(entries, AUTO_OFFSET_RESET) or "latest"
    source = entries.get(AUTO_OFFSET_RESET)
    return GroupSettings(
        lock_ms=int(_value(entries, LOCK_DURATION) or DEFAULT_LOCK_MS),
        delivery_limit=int(_value(entries, DELIVERY_LIMIT) or DEFAULT_DELIVERY_LIMIT),
        auto_offset_reset=str(reset),
        reset_is_the_groups=source is not None and _is_group_source(source),
    )


def _is_group_source(entry: Any) -> bool:
    """Whether a config entry's value is set on the group itself (``GROUP_CONFIG``)."""
    name = getattr(entry.source, "name", str(entry.source))
    return "GROUP" in str(name).upper() or str(entry.source) == "8"


def group_exists(admin: AdminClient, group: str, timeout: float = 10.0) -> bool:
    """Whether the cluster lists the group (of any type). ``list_consumer_groups`` leaves share
    groups out (confluent-kafka 2.16 knows no share type); the older listing names every group."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        listed = admin.list_groups(group, timeout=timeout)
    return any(g.id == group for g in listed)


def set_start(admin: AdminClient, group: str, start: Start, timeout: float = 10.0) -> None:
    """Set the group's ``share.auto.offset.reset`` (only for a group without state: the caller checks)."""
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[ConfigEntry(AUTO_OFFSET_RESET, start, incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)


def records_held(admin: AdminClient, topics: Iterable[str], timeout: float = 10.0) -> dict[str, int]:
    """How many records each topic's partitions hold now (end minus start offsets), by topic."""
    low, high = watermarks(admin, topics, timeout)
    held: dict[str, int] = {}
    for key, end in high.items():
        held[key[0]] = held.get(key[0], 0) + max(0, end - low.get(key, end))
    return held


def watermarks(
    admin: AdminClient, topics: Iterable[str], timeout: float = 10.0
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """The start and end offsets of every partition of ``topics`` that exists, by (topic,
    partition). Raises ``KafkaException``."""
    names = list(topics)
    metadata = admin.list_topics(timeout=timeout).topics if names else {}
    partitions = [TopicPartition(t, p) for t in names if t in metadata for p in metadata[t].partitions]

    def at(spec: Any) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        futures = admin.list_offsets({tp: spec for tp in partitions}, request_timeout=timeout)
        return {(tp.topic, tp.partition): f.result(timeout=timeout + 1).offset for tp, f in futures.items()}

    return at(OffsetSpec.earliest()), at(OffsetSpec.latest())  # type: ignore[no-untyped-call]
