"""What a share group's records went through while the doctor watched: the share-group state log.

The broker's share coordinator writes every change of a share-partition's record states to the
internal topic ``__share_group_state`` (KIP-932's persister): a ``ShareUpdate`` record per change
(a snapshot of the whole state now and then) listing ranges of offsets with their state and
delivery count. Read from the topic's end while ``--observe`` watches, those updates show:

- records **archived** (state ARCHIVED): rejected by a member, or past the group's
  ``share.delivery.count.limit`` (never delivered again; the broker keeps no copy);
- records **given back for redelivery** (state AVAILABLE with a delivery count): released by a
  member, or whose acquisition lock ran out (the log does not say which).

Both are lower bounds: now and then the coordinator writes a full snapshot instead of an update
(``share.coordinator.snapshot.update.records.per.snapshot``), and the changes it carries are not
told apart from the state before; snapshots seen are counted.

Records in flight are not in the log (an acquisition is not written). The log's format is the
broker's own (record type 0 snapshot, 1 update, value version 0, as Kafka 4.x writes it); a record
of another shape is counted as unreadable, never guessed at. Reading it needs Read on the internal
topic; without it the watch says why.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from ..base._clients import HELPER_LOG, admin_config
from ..group._wire import Reader, WireError

STATE_TOPIC = "__share_group_state"

SNAPSHOT, UPDATE = 0, 1

#: A partition of a topic just created, its leader not in place yet.
_NOT_READY = frozenset(
    {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART}
)
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


@dataclass
class StateSeen:
    """What the updates written while watched say, for one group."""

    updates: int = 0
    #: Full snapshots written meanwhile: the changes they carry are not counted (counts are lower bounds).
    snapshots: int = 0
    archived: int = 0
    #: Archived records by their delivery count when archived.
    archived_by_count: dict[int, int] = field(default_factory=dict)
    redeliverable: int = 0
    max_delivery_count: int = 0
    unreadable: int = 0
    #: Offset ranges archived, by "topic [partition]" (the first few).
    archived_offsets: dict[str, list[list[int]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "updates": self.updates,
            "snapshots": self.snapshots,
            "archived": self.archived,
            "archived_by_delivery_count": {str(k): v for k, v in sorted(self.archived_by_count.items())},
            "given_back": self.redeliverable,
            "max_delivery_count": self.max_delivery_count,
            "unreadable": self.unreadable,
            "archived_offsets": self.archived_offsets,
        }


class StateWatch:
    """Reads the state log from where it ends at construction. Raises :class:`WireError` if it cannot."""

    def __init__(self, connection: Mapping[str, Any], group: str, timeout: float) -> None:
        self._group = group
        self.seen = StateSeen()
        conf = {
            **admin_config(connection, "state-log"),  # the connection's settings only (not the members' -X)
            "bootstrap.servers": connection["bootstrap.servers"],
            "group.id": f"safeconsumer-doctor-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "logger": HELPER_LOG,
        }
        try:
            self._consumer = Consumer(conf)
        except KafkaException as exc:
            raise WireError(f"cannot read {STATE_TOPIC}: {exc.args[0].str() if exc.args else exc}") from None
        try:
            topics = self._consumer.list_topics(STATE_TOPIC, timeout=timeout).topics
            meta = topics.get(STATE_TOPIC)
            if meta is None or meta.error is not None or not meta.partitions:
                reason = meta.error.str() if meta is not None and meta.error is not None else "it does not exist"
                raise WireError(f"cannot read {STATE_TOPIC}: {reason}")
            deadline = time.monotonic() + timeout
            starts = [TopicPartition(STATE_TOPIC, p, self._end(p, deadline)) for p in sorted(meta.partitions)]
            self._consumer.assign(starts)
        except KafkaException as exc:
            self.close()
            raise WireError(f"cannot read {STATE_TOPIC}: {exc.args[0].str() if exc.args else exc}") from None
        except WireError:
            self.close()
            raise

    def _end(self, partition: int, deadline: float) -> int:
        """A partition's end offset now. The broker creates the topic at a share group's first use,
        and its partitions answer NOT_LEADER until their leaders are in place: asked again, until
        ``deadline``."""
        while True:
            try:
                _low, high = self._consumer.get_watermark_offsets(
                    TopicPartition(STATE_TOPIC, partition), timeout=max(0.5, deadline - time.monotonic()), cached=False
                )
                return int(high)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                again = isinstance(error, KafkaError) and (error.retriable() or error.code() in _NOT_READY)
                if not again or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def read(self, topic_ids: Mapping[bytes, str], seconds: float) -> None:
        """Take in what was written since the last read (waiting up to ``seconds``)."""
        for message in self._consumer.consume(1000, seconds):
            error = message.error()
            if error is not None:
                if error.fatal() or error.code() == error.TOPIC_AUTHORIZATION_FAILED:
                    raise WireError(f"cannot read {STATE_TOPIC}: {error.str()}")
                continue
            self._take(message, topic_ids)

    def _take(self, message: Message, topic_ids: Mapping[bytes, str]) -> None:
        key, value = message.key(), message.value()
        if not isinstance(key, bytes) or not isinstance(value, bytes):
            return  # a tombstone (a group's state deleted)
        try:
            update = parse_update(key, value, self._group)
        except WireError:
            self.seen.unreadable += 1
            return
        if update is None:
            return
        if update == SNAPSHOT_SEEN:
            self.seen.snapshots += 1
            return
        topic_id, partition, batches = update
        seen = self.seen
        seen.updates += 1
        where = f"{topic_ids.get(topic_id, uuid.UUID(bytes=topic_id).hex)} [{partition}]"
        for first, last, state, count in batches:
            n = last - first + 1
            seen.max_delivery_count = max(seen.max_delivery_count, count)
            if state == ARCHIVED:
                seen.archived += n
                seen.archived_by_count[count] = seen.archived_by_count.get(count, 0) + n
                ranges = seen.archived_offsets.setdefault(where, [])
                if len(ranges) < 20:
                    ranges.append([first, last])
            elif state == AVAILABLE and count > 0:
                seen.redeliverable += n

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._consumer.close()


#: What :func:`parse_update` answers for a snapshot of the group's.
SNAPSHOT_SEEN: tuple[bytes, int, list[tuple[int, int, int, int]]] = (b"", -1, [])


def parse_update(key: bytes, value: bytes, group: str) -> tuple[bytes, int, list[tuple[int, int, int, int]]] | None:
    """One state-log record of ``group``'s: (topic id, partition, [(first, last, state, delivery
    count)]) for an update, :data:`SNAPSHOT_SEEN` for a snapshot, None for another group's. Raises
    :class:`WireError` for a record of ``group`` of a shape this reader does not know."""
    k = Reader(key)
    kind = k.int16()
    if kind not in (SNAPSHOT, UPDATE) or k.string() != group:
        return None
    topic_id, partition = k.uuid(), k.int32()
    if kind == SNAPSHOT:
        return SNAPSHOT_SEEN  # the whole state, not a change: counted from the updates
    v = Reader(value)
    if v.int16() != 0:
        raise WireError("a state-log value of an unknown version")
    v.int32()  # snapshot epoch
    v.int32()  # leader epoch
    v.int64()  # start offset
    return topic_id, partition, v.compact_array(_batch)


def _batch(r: Reader) -> tuple[int, int, int, int]:
    first, last, state, count = r.int64(), r.int64(), r.int8(), r.int16()
    r.skip_tags()
    return first, last, state, count
