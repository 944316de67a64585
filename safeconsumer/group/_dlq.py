"""The share group's own dead-letter queue in the broker (KIP-1191, Kafka 4.4), as a consumer checks it.

On a cluster whose ``share.version`` is 2 or more, a share group whose config names a topic
(``errors.deadletterqueue.topic.name``) has the *broker* write a copy of every record it archives:
one the client REJECTed, and one past ``share.delivery.count.limit`` (released, or whose lock ran
out), whether or not a member is alive. With ``errors.deadletterqueue.copy.record.enable`` the copy
holds the record's key and value (not its headers; its timestamp is the write's), else neither; it
always carries the ``__dlq.errors.*`` headers. It says where the record came from and why it was
archived, not which exception the application saw (the consumer logs that).

The broker accepts the group config whatever the topic is, and finds out only when it writes: a
topic that does not exist, lacks the topic config ``errors.deadletterqueue.group.enable=true`` or
does not start with the brokers' ``errors.deadletterqueue.topic.name.prefix`` (``dlq.``) is logged
broker side ("Failed to write to DLQ, proceeding to ARCHIVED regardless") and the record is
archived without a copy. So a consumer checks each of these before it relies on the broker's copies
(:func:`check_broker_dlq`), and says what to fix when it cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # type: ignore[attr-defined]

logger = logging.getLogger("safeconsumer")

#: Group configs (Kafka 4.4).
DLQ_TOPIC = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD = "errors.deadletterqueue.copy.record.enable"
#: The topic config a DLQ topic needs.
DLQ_TOPIC_ENABLE = "errors.deadletterqueue.group.enable"
#: Broker configs.
DLQ_PREFIX = "errors.deadletterqueue.topic.name.prefix"
DLQ_AUTO_CREATE = "errors.deadletterqueue.auto.create.topics.enable"
#: The feature whose level 2 turns the broker's DLQ on (a new 4.4 cluster finalizes it).
SHARE_VERSION = "share.version"
DLQ_SHARE_VERSION = 2

__all__ = ["BrokerDlq", "check_broker_dlq", "set_group_dlq"]


@dataclass(frozen=True)
class BrokerDlq:
    """A share group's dead-letter queue in the broker, as last checked."""

    #: The group's ``errors.deadletterqueue.topic.name`` ("" when it names none, or the cluster has no such config).
    topic: str = ""
    #: The group's ``errors.deadletterqueue.copy.record.enable``.
    copy_record: bool = False
    #: Whether the cluster has share-group DLQs at all (the group config exists: Kafka 4.4 or later).
    known: bool = False
    #: Why the broker would not write a full copy of what it archives; None when it would (or no topic).
    problem: str | None = None
    #: The check could not be made (no broker answered, a request failed): not relied on, checked again soon.
    unchecked: bool = False

    @property
    def usable(self) -> bool:
        """The broker writes a full copy of every record the group archives to :attr:`topic`."""
        return bool(self.topic) and self.problem is None


def from_group_entries(entries: Mapping[str, Any]) -> BrokerDlq:
    """The group's DLQ settings from a describe of its GROUP config resource (not yet checked)."""
    topic = entries.get(DLQ_TOPIC)
    copy = entries.get(DLQ_COPY_RECORD)
    return BrokerDlq(
        topic=str(topic.value or "") if topic is not None else "",
        copy_record=copy is not None and str(copy.value).lower() == "true",
        known=topic is not None,
    )


def check_broker_dlq(
    dlq: BrokerDlq, admin: AdminClient, connection: Mapping[str, Any], timeout: float, *, level: int | None = -1
) -> BrokerDlq:
    """``dlq`` with :attr:`BrokerDlq.problem` set to the first reason the broker would not write a
    full copy to its topic, naming what to fix. ``connection``: the client settings (for the
    cluster's feature levels, which the admin API does not read); ``level``: the cluster's
    ``share.version`` when the caller read it already. Raises ``KafkaException`` when the cluster
    does not answer."""
    if not dlq.topic:
        return dlq
    if level == -1:
        level = share_version(connection, timeout)
    problem = _cluster_problem(dlq, level) or _topic_problem(dlq.topic, admin, timeout)
    return replace(dlq, problem=problem, unchecked=level is None)


def _cluster_problem(dlq: BrokerDlq, level: int | None) -> str | None:
    if level is None:
        return "the cluster's share.version could not be read"
    if level < DLQ_SHARE_VERSION:
        return (
            f"the cluster's share.version is {level}: the brokers write no dead-letter copies before level "
            f"{DLQ_SHARE_VERSION} (kafka-features.sh upgrade --feature share.version={DLQ_SHARE_VERSION})"
        )
    if not dlq.copy_record:
        return (
            f"the group's {DLQ_COPY_RECORD} is false: the broker's copies would hold no record, only headers "
            f"(kafka-configs --alter --entity-type groups --add-config {DLQ_COPY_RECORD}=true)"
        )
    return None


def _topic_problem(topic: str, admin: AdminClient, timeout: float) -> str | None:
    metadata = admin.list_topics(timeout=timeout)
    prefix, auto_create = "dlq.", False
    broker_id = min(metadata.brokers, default=None)
    if broker_id is not None:
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)
        prefix_entry, create_entry = entries.get(DLQ_PREFIX), entries.get(DLQ_AUTO_CREATE)
        prefix = str(prefix_entry.value or "") if prefix_entry is not None else prefix
        auto_create = create_entry is not None and str(create_entry.value).lower() == "true"
    if prefix and not topic.startswith(prefix):
        return (
            f"topic {topic!r} does not start with the brokers' {DLQ_PREFIX} {prefix!r}: the broker refuses to "
            "write it (name the group's DLQ with that prefix)"
        )
    if topic not in metadata.topics:
        # The broker creates it, enabled, at its first copy when it may.
        return None if auto_create else f"topic {topic!r} does not exist (create it with {DLQ_TOPIC_ENABLE}=true)"
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)
    enable = entries.get(DLQ_TOPIC_ENABLE)
    if enable is None or str(enable.value).lower() != "true":
        return (
            f"topic {topic!r} lacks {DLQ_TOPIC_ENABLE}=true: the broker refuses to write it (kafka-configs --alter "
            f"--entity-type topics --entity-name {topic} --add-config {DLQ_TOPIC_ENABLE}=true)"
        )
    return None


def set_group_dlq(admin: AdminClient, group: str, topic: str, timeout: float) -> None:
    """Name ``topic`` the group's DLQ, full copies (only for a group without state: the caller checks)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry  # type: ignore[attr-defined]

    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(DLQ_TOPIC, topic, incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(DLQ_COPY_RECORD, "true", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin.incremental_alter_configs([resource], request_timeout=timeout)[resource].result(timeout=timeout + 1)


def share_version(connection: Mapping[str, Any], timeout: float) -> int | None:
    """The cluster's finalized ``share.version`` (0 when it has none); None when it cannot be read
    (a security setting the protocol client does not speak, or no broker answers)."""
    from ._wire import Settings, WireError, bootstrap

    try:
        settings = Settings.from_config(connection)
        with bootstrap(str(connection.get("bootstrap.servers", "")), settings, timeout) as conn:
            return conn.finalized_features.get(SHARE_VERSION, 0)
    except (WireError, OSError) as exc:
        logger.debug("could not read the cluster's feature levels: %s", exc)
        return None
