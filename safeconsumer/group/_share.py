"""What a share consumer must know of its share group, read through the admin API.

A share group's behaviour is set broker side, per group (KIP-932): how long a member holds a record
(``share.record.lock.duration.ms``), how many deliveries a record gets before the broker archives it
(``share.delivery.count.limit``) and where a group without state starts (``share.auto.offset.reset``,
``latest`` unless set). confluent-kafka's ``ShareConsumer`` exposes none of them, and refuses
``auto.offset.reset``. A describe of the group's configs answers for a group that does not exist
yet too (the broker's defaults); a share group with state is one the cluster lists.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
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

from ._dlq import BrokerDlq, check_broker_dlq, from_group_entries, set_group_dlq

logger = logging.getLogger("safeconsumer")

Start = Literal["earliest", "latest"]
STARTS: tuple[Start, ...] = ("earliest", "latest")

LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_LIMIT = "share.delivery.count.limit"
AUTO_OFFSET_RESET = "share.auto.offset.reset"

#: Kafka's defaults, used until the broker answered (Kafka 4.3: 30 s, 5 deliveries, latest).
DEFAULT_LOCK_MS = 30_000
DEFAULT_DELIVERY_LIMIT = 5
#: The shortest lock a broker allows a share group (``group.share.min.record.lock.duration.ms`` is at
#: least 1000): what a batch is held on while the group's own settings were never read.
SHORTEST_LOCK_MS = 1000


@dataclass(frozen=True)
class GroupSettings:
    """A share group's settings as the broker applies them (its own values or the broker's)."""

    lock_ms: int = DEFAULT_LOCK_MS
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    auto_offset_reset: str = "latest"
    #: Whether ``share.auto.offset.reset`` is set on the group itself (not the broker's default).
    reset_is_the_groups: bool = False
    #: The group's dead-letter queue in the broker (Kafka 4.4), checked when a consumer's policy
    #: dead-letters (:func:`._dlq.check_broker_dlq`).
    dlq: BrokerDlq = dataclasses.field(default_factory=BrokerDlq)
    #: Read from the broker (False: Kafka's defaults, the group's own settings not read yet).
    read: bool = False

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
        dlq=from_group_entries(entries),
        read=True,
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


#: Seconds one admin request about the group may take (the cluster does not answer: it is given up).
ADMIN_TIMEOUT = 5.0

#: Seconds the first ``subscribe()`` waits to learn whether the cluster lists the group.
EXISTS_TIMEOUT = 1.0

#: Seconds between two reads of the group's settings while the consumer polls.
REFRESH_EVERY = 60.0

#: Seconds after a failed read before the next (Kafka's defaults may be far from the group's own:
#: a 30 s lock where the group's is 3 s, 5 deliveries where it allows 3).
RETRY_AFTER = 2.0


class GroupLook:
    """What a share consumer knows of its group (S3, S5): its settings, read at the first
    ``subscribe()`` and every :data:`REFRESH_EVERY` seconds after (on a thread: never on the
    application's), and a new group's start (``start``). It holds no consumer."""

    def __init__(
        self,
        group: str,
        admin_conf: dict[str, Any],
        start: Start | None,
        *,
        dead_letter_topic: str | None = None,
        set_dlq: bool = False,
    ) -> None:
        self.group = group
        self.start = start
        #: The poison policy's dead-letter topic (``DeadLetter.topic``), if it has one: the group's
        #: broker DLQ is then checked at each read, and relied on when it is that topic and usable.
        self.dead_letter_topic = dead_letter_topic
        #: ``group_dlq=True``: a group without state gets ``dead_letter_topic`` as its broker DLQ.
        self.set_dlq = set_dlq
        self._said_dlq: tuple[str, str | None, bool] | None = None
        self._admin_conf = admin_conf
        self._admin: AdminClient | None = None
        self.settings = GroupSettings()
        #: When :meth:`maybe_refresh` reads the settings again (monotonic): a plain attribute, compared
        #: at every poll() that returns records (Budgets). Due at once until the first read.
        self.refresh_at = 0.0
        self._refreshing: threading.Thread | None = None

    @property
    def settings(self) -> GroupSettings:
        """The group's settings as last read (Kafka's defaults before the first read), replaced whole."""
        return self._settings

    @settings.setter
    def settings(self, settings: GroupSettings) -> None:
        # lock_seconds is a plain attribute, read at every poll() that returns records (Budgets).
        self.lock_seconds = settings.lock_seconds if settings.read else min(settings.lock_ms, SHORTEST_LOCK_MS) / 1000
        self._settings = settings

    #: The lock a batch handed out now is held on: the group's, or while its settings were never read
    #: the shortest a broker allows (:data:`SHORTEST_LOCK_MS`). Kafka's default (30 s) may be ten
    #: times the group's own: a batch held on it would be acknowledged after its real lock ran out,
    #: and the overrun not seen. So records not reached go back early and acknowledgements after that
    #: lock count as overruns: a release too early, never a double processing unseen.
    lock_seconds: float

    @property
    def known(self) -> bool:
        """Whether the group's settings were ever read (until then :attr:`settings` are Kafka's defaults)."""
        return self.settings.read

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self._admin_conf)
        return self._admin

    def close(self) -> None:
        self._admin = None

    @property
    def broker_copies(self) -> bool:
        """Whether the broker writes the dead-letter copies (S4): the group's DLQ is the policy's
        topic and the broker can write it. The consumer then rejects what fails and copies nothing."""
        dlq = self.settings.dlq
        return self.dead_letter_topic is not None and dlq.usable and dlq.topic == self.dead_letter_topic

    def read(self) -> None:
        """The group's settings, and its broker DLQ checked when it is the policy's topic (a check that
        fails leaves the settings read: the DLQ is then not relied on, and read and checked again
        :data:`RETRY_AFTER` seconds later, as after a failed read)."""
        try:
            settings = read_settings(self.admin(), self.group, ADMIN_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the last known settings stay; read again soon
            logger.warning(
                "could not read share group %r's settings: %s; read again in %.0fs", self.group, exc, RETRY_AFTER
            )
            self.refresh_at = time.monotonic() + RETRY_AFTER
            return
        self.refresh_at = time.monotonic() + REFRESH_EVERY
        dlq = self._checked(settings.dlq)
        if dlq.unchecked:  # the consumer copies for itself meanwhile: not for a minute
            self.refresh_at = time.monotonic() + RETRY_AFTER
        self.settings = dataclasses.replace(settings, dlq=dlq)
        self._say_dlq()

    def _checked(self, dlq: BrokerDlq) -> BrokerDlq:
        if self.dead_letter_topic is None or dlq.topic != self.dead_letter_topic:
            return dlq  # not relied on: nothing to check
        try:
            return check_broker_dlq(dlq, self.admin(), self._admin_conf, ADMIN_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - never trusted unchecked
            return dataclasses.replace(dlq, problem=f"it could not be checked ({type(exc).__name__})", unchecked=True)

    @property
    def copy_from(self) -> int:
        """The delivery count from which a record handed out is copied before processing (S4): the
        group's limit, or 2 while its settings were never read (a copy too many, never an archive
        without one)."""
        settings = self.settings  # one snapshot: the refresh thread replaces it whole
        return settings.delivery_limit if settings.read else min(settings.delivery_limit, 2)

    def _say_dlq(self) -> None:
        """Once per state: whether the broker's copies are relied on, and what to fix when they cannot be."""
        topic, dlq = self.dead_letter_topic, self.settings.dlq
        if topic is None:
            return
        state = (dlq.topic, dlq.problem, dlq.known)
        if state == self._said_dlq:
            return
        self._said_dlq = state
        if self.broker_copies:
            logger.info(
                "share group %r: the broker writes the dead-letter copies to %r (the group's dead-letter queue): "
                "a record that fails is rejected, and one past the delivery limit is copied as it is archived",
                self.group,
                topic,
            )
        elif dlq.topic == topic:
            logger.warning(
                "share group %r: the broker's dead-letter queue %r is not relied on: %s; the consumer writes its "
                "own copies",
                self.group,
                topic,
                dlq.problem,
            )
        elif dlq.topic:
            logger.warning(
                "share group %r's dead-letter queue is %r, poison=DeadLetter(%r) another: a record that fails is "
                "copied to both, and the consumer copies records on their last delivery to %r",
                self.group,
                dlq.topic,
                topic,
                topic,
            )

    def settle_dlq(self, exists: bool) -> None:
        """``group_dlq=True``: a group without state gets the policy's topic as its broker DLQ; a live
        group's config is its operators' (a WARNING says what was not applied)."""
        topic, dlq = self.dead_letter_topic, self.settings.dlq
        if not self.set_dlq or topic is None or dlq.topic == topic:
            return
        if not self.known or not dlq.known:
            logger.warning(
                "share group %r: group_dlq=True was not applied: %s; the consumer writes its own copies to %r",
                self.group,
                "its settings could not be read"
                if not self.known
                else "the cluster has no share-group dead-letter queue (Kafka 4.4, KIP-1191)",
                topic,
            )
            return
        if exists or dlq.topic:
            logger.warning(
                "share group %r %s; group_dlq=True was not applied (a live group's config is its operators'; "
                "change it with kafka-configs --entity-type groups --add-config %s=%s,%s=true)",
                self.group,
                f"has the dead-letter queue {dlq.topic!r}" if dlq.topic else "exists without a dead-letter queue",
                "errors.deadletterqueue.topic.name",
                topic,
                "errors.deadletterqueue.copy.record.enable",
            )
            return
        try:
            set_group_dlq(self.admin(), self.group, topic, ADMIN_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the consumer copies itself, as without the option
            logger.warning("share group %r: group_dlq=True could not be applied: %s", self.group, exc)
            return
        logger.info("share group %r: its dead-letter queue in the broker is now %r", self.group, topic)
        # Not read back (a describe right after the change may still answer the old value): checked as set.
        mine = dataclasses.replace(dlq, topic=topic, copy_record=True, problem=None)
        self.settings = dataclasses.replace(self.settings, dlq=self._checked(mine))
        self._say_dlq()

    def maybe_refresh(self, now: float) -> None:
        if now < self.refresh_at or (self._refreshing is not None and self._refreshing.is_alive()):
            return
        self.refresh_at = now + REFRESH_EVERY
        self._refreshing = threading.Thread(target=self.read, name="safeconsumer-share-settings", daemon=True)
        self._refreshing.start()

    def first_subscribe(self, topics: list[str]) -> None:
        """S5 at the first ``subscribe()``: whether the cluster lists the group is asked before the
        member joins (it would list it then), bounded by :data:`EXISTS_TIMEOUT` (a cluster that does
        not answer: treated as listing it, nothing is changed). With ``start``, or a dead-letter topic,
        the group's start and its broker DLQ are settled before ``subscribe()`` returns
        (:data:`ADMIN_TIMEOUT` per request); without, the rest (its settings, the WARNING of a new
        group starting past records) runs on a thread of its own."""
        try:
            exists = group_exists(self.admin(), self.group, EXISTS_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - unknown: treated as existing, nothing is changed
            logger.warning("could not list share group %r: %s; its start is left as it is", self.group, exc)
            exists = True
        if self.start is not None or self.dead_letter_topic is not None:
            # Settled before the first poll: a record's start, and who writes its dead-letter copy
            # (the consumer copying a last delivery the broker copies too would be two copies).
            self.settle(exists)
            self._on_thread(self.warn_of_skipped, topics, exists)
            return
        self._on_thread(self.look, topics, exists)

    def _on_thread(self, target: Any, *args: Any) -> None:
        # The thread holds this look, never the consumer (a dropped consumer is freed where it is dropped).
        threading.Thread(target=target, args=args, name="safeconsumer-share-group", daemon=True).start()

    def look(self, topics: list[str], exists: bool) -> None:
        """The group's settings, its start (``start``), and the WARNING of a new group starting past records."""
        self.settle(exists)
        self.warn_of_skipped(topics, exists)

    def settle(self, exists: bool) -> None:
        """The group's settings read, its broker DLQ (``group_dlq``) and its start (``start``) settled."""
        admin = self.admin()
        self.read()
        self.settle_dlq(exists)
        settings = self.settings
        if self.start is not None and self.start != settings.auto_offset_reset:
            if exists or settings.reset_is_the_groups:
                logger.warning(
                    "share group %r %s share.auto.offset.reset=%s; start=%r was not applied (a live group's "
                    "config is its operators'; change it with kafka-configs --entity-type groups)",
                    self.group,
                    "exists with" if exists else "has",
                    settings.auto_offset_reset,
                    self.start,
                )
            else:
                set_start(admin, self.group, self.start, ADMIN_TIMEOUT)
                logger.info("share group %r starts at the %s records (share.auto.offset.reset)", self.group, self.start)
                # Not read back: a describe right after the change may still answer the old value.
                self.settings = dataclasses.replace(
                    self.settings, auto_offset_reset=self.start, reset_is_the_groups=True
                )

    def warn_of_skipped(self, topics: list[str], exists: bool) -> None:
        """The WARNING of a new group that starts at the latest offset past records its topics hold."""
        if not exists and self.settings.auto_offset_reset == "latest":
            try:
                held = records_held(self.admin(), topics, ADMIN_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - only a warning is lost
                logger.debug("could not count the records of %s: %s", topics, exc)
                return
            for topic, count in sorted(held.items()):
                if count:
                    logger.warning(
                        "share group %r is new and starts at the latest offset: it skips the %d record(s) topic %r "
                        "holds now (start='earliest' reads them)",
                        self.group,
                        count,
                        topic,
                    )
