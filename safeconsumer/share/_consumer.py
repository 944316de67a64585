"""``SafeShareConsumer``: confluent-kafka's ``ShareConsumer`` (KIP-932) with a known start and lock overruns
that are reported instead of passed off as success.

What this first part does (SPEC "Share groups"):

- **S5 a known start**: ``start="earliest"``/``"latest"`` sets a new share group's
  ``share.auto.offset.reset`` before its first member subscribes (a group the cluster already lists
  is never changed: a WARNING says the option was not applied); a new group that starts at latest
  while its topics hold records logs one WARNING naming the group, the topic and how many records
  it starts past.
- **S3 lock overruns**: the consumer reads the group's lock duration (``share.record.lock.duration.ms``)
  at subscribe and again every :data:`REFRESH_EVERY` seconds. A record acknowledged (explicitly, or
  implicitly by the next ``poll()``/``commit_*()``) after its acquisition lock ran out may have been
  handed to a peer meanwhile: one WARNING per batch names the records, and ``commit_sync()`` answers
  :class:`LockExpiredError` for their partitions where upstream answers ``None`` (success).

Everything else is upstream's, unchanged: the same methods, arguments, return types and errors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient

from .._errors import SafeConsumerError
from ..health._explainer import admin_config
from ._group import STARTS, GroupSettings, Start, group_exists, read_settings, records_held, set_start

logger = logging.getLogger("safeconsumer")

#: Seconds between two reads of the group's settings while the consumer polls.
REFRESH_EVERY = 60.0

#: Upstream's config key for the acknowledgement mode, and its default.
MODE_KEY = "share.acknowledgement.mode"

PartitionKey = tuple[str, int]


class LockExpiredError(SafeConsumerError, KafkaException):
    """``commit_sync()``'s answer for a partition some of whose records were acknowledged after
    their acquisition lock ran out: the broker may have handed them to another member meanwhile, so
    the acknowledgement may not be what the broker kept (upstream answers ``None``, success)."""


@dataclass
class _Batch:
    """The records one ``poll()`` handed to the application, not yet acknowledged."""

    at: float
    #: (topic, partition) -> offsets handed out and not acknowledged yet.
    open: dict[PartitionKey, set[int]] = field(default_factory=dict)

    def take(self, key: PartitionKey, offset: int) -> bool:
        offsets = self.open.get(key)
        if offsets is None or offset not in offsets:
            return False
        offsets.discard(offset)
        if not offsets:
            del self.open[key]
        return True


def _start(value: object) -> Start | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in STARTS:
        raise ValueError(f"start must be one of {', '.join(map(repr, STARTS))} or None, not {value!r}")
    return value


class SafeShareConsumer(ShareConsumer):
    """A drop-in for ``confluent_kafka.ShareConsumer``; see the module's docstring.

    ``start``: where a share group without state starts (``"earliest"`` or ``"latest"``; None: the
    group's own setting, ``latest`` unless its operators set one).
    """

    def __init__(self, *args: Any, start: str | None = None, **kwargs: Any) -> None:
        self._start = _start(start)
        conf: Mapping[str, Any] = args[0] if args and isinstance(args[0], Mapping) else {}
        super().__init__(*args, **kwargs)
        self._group = str(conf.get("group.id", ""))
        self._explicit = str(conf.get(MODE_KEY, "implicit")).lower() == "explicit"
        self._admin_conf = admin_config(conf, "share")
        self._admin: AdminClient | None = None
        self._settings = GroupSettings()
        self._read_at = 0.0
        self._refreshing: threading.Thread | None = None
        self._batch: _Batch | None = None
        #: Partitions with a record acknowledged after its lock ran out, since the last commit.
        self._late: dict[PartitionKey, set[int]] = {}
        #: Of those, the ones no WARNING named yet, and the longest time one was held.
        self._unsaid: dict[PartitionKey, set[int]] = {}
        self._unsaid_held = 0.0
        self._started = False
        #: Records acknowledged after their lock ran out (a count, for the application and telemetry).
        self.lock_overruns = 0
        _say_preview()

    # -- the group's settings ---------------------------------------------------------------
    @property
    def group_settings(self) -> GroupSettings:
        """The share group's settings as last read (Kafka's defaults before the first read)."""
        return self._settings

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self._admin_conf)
        return self._admin

    def _read(self) -> None:
        try:
            self._settings = read_settings(self._admin_client(), self._group)
        except Exception as exc:  # noqa: BLE001 - the last known settings stay; said once per failure
            logger.warning("could not read share group %r's settings: %s", self._group, exc)
        self._read_at = time.monotonic()

    def _maybe_refresh(self, now: float) -> None:
        if now - self._read_at < REFRESH_EVERY or (self._refreshing is not None and self._refreshing.is_alive()):
            return
        self._read_at = now
        self._refreshing = threading.Thread(target=self._read, name="safeconsumer-share-settings", daemon=True)
        self._refreshing.start()

    def _first_subscribe(self, topics: list[str]) -> None:
        """S5: the group's start, before its first member joins."""
        admin = self._admin_client()
        self._read()
        try:
            exists = group_exists(admin, self._group)
        except Exception as exc:  # noqa: BLE001 - unknown: treated as existing, nothing is changed
            logger.warning("could not list share group %r: %s; its start is left as it is", self._group, exc)
            return
        settings = self._settings
        if self._start is not None and self._start != settings.auto_offset_reset:
            if exists or settings.reset_is_the_groups:
                logger.warning(
                    "share group %r %s share.auto.offset.reset=%s; start=%r was not applied (a live group's "
                    "config is its operators'; change it with kafka-configs --entity-type groups)",
                    self._group,
                    "exists with" if exists else "has",
                    settings.auto_offset_reset,
                    self._start,
                )
            else:
                set_start(admin, self._group, self._start)
                logger.info(
                    "share group %r starts at the %s records (share.auto.offset.reset)", self._group, self._start
                )
                self._read()
        if not exists and self._settings.auto_offset_reset == "latest":
            try:
                held = records_held(admin, topics)
            except Exception as exc:  # noqa: BLE001 - only a warning is lost
                logger.debug("could not count the records of %s: %s", topics, exc)
                return
            for topic, count in sorted(held.items()):
                if count:
                    logger.warning(
                        "share group %r is new and starts at the latest offset: it skips the %d record(s) topic %r "
                        "holds now (start='earliest' reads them)",
                        self._group,
                        count,
                        topic,
                    )

    # -- upstream's methods -----------------------------------------------------------------
    def subscribe(self, topics: list[str], *args: Any, **kwargs: Any) -> None:
        if not self._started and isinstance(topics, list) and topics and all(isinstance(t, str) for t in topics):
            self._started = True
            self._first_subscribe(topics)
        super().subscribe(topics, *args, **kwargs)

    def poll(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if not self._explicit:
            self._acknowledged_all(now)
        self._say_late()
        messages = super().poll(*args, **kwargs)
        self._maybe_refresh(now)
        batch = _Batch(time.monotonic())
        for msg in messages:
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if msg.error() is None and topic is not None and partition is not None and offset is not None:
                batch.open.setdefault((topic, partition), set()).add(offset)
        self._batch = batch if batch.open else None
        return messages

    def acknowledge(self, message: Message, *args: Any, **kwargs: Any) -> None:
        super().acknowledge(message, *args, **kwargs)
        self._acknowledged(message.topic(), message.partition(), message.offset())

    def acknowledge_offset(self, topic: str, partition: int, offset: int, *args: Any, **kwargs: Any) -> None:
        super().acknowledge_offset(topic, partition, offset, *args, **kwargs)
        self._acknowledged(topic, partition, offset)

    def commit_sync(self, *args: Any, **kwargs: Any) -> Any:
        if not self._explicit:
            self._acknowledged_all(time.monotonic())
        self._say_late()
        result = super().commit_sync(*args, **kwargs)
        return self._with_late(result)

    def commit_async(self, *args: Any, **kwargs: Any) -> None:
        if not self._explicit:
            self._acknowledged_all(time.monotonic())
        self._say_late()
        super().commit_async(*args, **kwargs)

    def close(self, *args: Any, **kwargs: Any) -> None:
        self._batch = None  # not acknowledged: librdkafka gives them back
        self._say_late()
        try:
            super().close(*args, **kwargs)
        finally:
            admin, self._admin = self._admin, None
            del admin

    # -- lock overruns ----------------------------------------------------------------------
    def _overrun(self, now: float) -> bool:
        batch = self._batch
        return batch is not None and now - batch.at > self._settings.lock_seconds

    def _acknowledged(self, topic: str | None, partition: int | None, offset: int | None) -> None:
        batch = self._batch
        if batch is None or topic is None or partition is None or offset is None:
            return
        now = time.monotonic()
        key = (topic, partition)
        if batch.take(key, offset) and now - batch.at > self._settings.lock_seconds:
            self._late_records({key: {offset}}, now - batch.at)

    def _acknowledged_all(self, now: float) -> None:
        """Implicit mode: the previous batch is accepted now."""
        batch, self._batch = self._batch, None
        if batch is not None and now - batch.at > self._settings.lock_seconds:
            self._late_records(batch.open, now - batch.at)

    def _late_records(self, records: Mapping[PartitionKey, set[int]], held: float) -> None:
        """Records acknowledged past their lock: counted now, said once per batch (:meth:`_say_late`)."""
        for key, offsets in records.items():
            self.lock_overruns += len(offsets)
            self._late.setdefault(key, set()).update(offsets)
            self._unsaid.setdefault(key, set()).update(offsets)
        self._unsaid_held = max(self._unsaid_held, held)

    def _say_late(self) -> None:
        """One WARNING for the late acknowledgements not said yet (the explicit mode's, one by one,
        are said together at the next ``poll()``/``commit_*()``)."""
        unsaid, self._unsaid = self._unsaid, {}
        held, self._unsaid_held = self._unsaid_held, 0.0
        if not unsaid:
            return
        named = ", ".join(
            f"{topic} [{partition}] @ {min(offsets)}" + (f"..{max(offsets)}" if len(offsets) > 1 else "")
            for (topic, partition), offsets in sorted(unsaid.items())
        )
        logger.warning(
            "share group %r: %d record(s) acknowledged up to %.1f s after they were handed out, past the group's "
            "%.1f s acquisition lock (share.record.lock.duration.ms): another member may have processed them too: %s",
            self._group,
            sum(len(offsets) for offsets in unsaid.values()),
            held,
            self._settings.lock_seconds,
            named,
        )

    def _with_late(self, result: Any) -> Any:
        """``commit_sync()``'s result with :class:`LockExpiredError` for each partition that had a
        record acknowledged late: in place of upstream's ``None`` (the records were handed to a peer,
        which took them: the broker answers success) or of its INVALID_RECORD_STATE (nobody took them)."""
        late, self._late = self._late, {}
        if not late or not isinstance(result, dict):
            return result
        for key, offsets in late.items():
            tp = next((tp for tp in result if (tp.topic, tp.partition) == key), None) or TopicPartition(*key)
            answer = result.get(tp)
            text = (
                f"{len(offsets)} record(s) of {key[0]} [{key[1]}] from offset {min(offsets)} were acknowledged after "
                "their acquisition lock ran out; another member may have processed them"
            )
            if answer is None:
                result[tp] = LockExpiredError(KafkaError(KafkaError.INVALID_RECORD_STATE, text))
            elif isinstance(answer, KafkaException) and _code(answer) == KafkaError.INVALID_RECORD_STATE:
                result[tp] = LockExpiredError(
                    answer.args[0] if answer.args else KafkaError(KafkaError.INVALID_RECORD_STATE, text)
                )
        return result


def _code(exc: KafkaException) -> int | None:
    error = exc.args[0] if exc.args else None
    return error.code() if isinstance(error, KafkaError) else None


#: The confluent-kafka releases SafeShareConsumer is tested with (upstream's share consumer is a
#: Preview: its API may change in any release; the conformance suite catches it at the next upgrade).
TESTED_WITH = ("2.16",)

_said: list[bool] = []


def _say_preview() -> None:
    """Once per process: upstream's share consumer is a Preview (librdkafka logs it through the
    application's client, which may print to stderr), and whether this release is one we test with."""
    if _said:
        return
    _said.append(True)
    from importlib.metadata import version

    installed = version("confluent-kafka")
    tested = installed.startswith(tuple(f"{v}." for v in TESTED_WITH))
    logger.log(
        logging.INFO if tested else logging.WARNING,
        "confluent-kafka's ShareConsumer is a Preview: its API may change in any release; SafeShareConsumer is "
        "tested with confluent-kafka %s (installed: %s)",
        ", ".join(f"{v}.x" for v in TESTED_WITH),
        installed,
    )
