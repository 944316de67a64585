"""Share-group tasks: :class:`ShareConsumeTask`, one SafeShareConsumer per Spark task, and the
:class:`ShareTaskFigures` a run of them reports.

A share group (KIP-932) hands each record to one member under a lock and has no partition
ownership: tasks joining and leaving never stop the others (no rebalance), and a job may run more
tasks than the topics have partitions. Each batch is acknowledged after the sink returned it,
never before; a sink that raises gives the batch back (released: handed out again at once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Message
from confluent_kafka.admin import AdminClient

from ..base._clients import HELPER_LOG, admin_config, redact_config
from ..base._errors import FatalConsumerError, error_of
from ..base._keys import Key, key_of
from ..group._share import watermarks
from ..poison._policy import DeadLetter, Skip
from ..share._consumer import SafeShareConsumer
from ..share._upstream import MODE_KEY
from ._common import Sink, check_bounds, check_common, report, summed

logger = logging.getLogger("safeconsumer")

#: With ``until_end``, a task that got records stops once the group has had nothing for it this long
#: (seconds): what is left of the backlog is locked by other tasks, or there is none.
DRAINED_AFTER = 2.0
#: How long a task's ``poll()`` waits for records, and ``commit_sync()`` for the broker's answer.
POLL_SECONDS = 1.0
COMMIT_SECONDS = 30.0


@dataclass
class ShareTaskFigures:
    """What the share-group tasks of one run did, summed over tasks (per-task times kept apart)."""

    tasks: int = 0
    #: Records handed to the sink (a record the sink refused and then took alone counts once).
    records: int = 0
    batches: int = 0
    #: Records acknowledged (ACCEPT) after the sink returned, and the broker took it.
    accepted: int = 0
    #: Records the poison policy skipped or dead-lettered (rejected: the broker archives them).
    skipped: int = 0
    dead_lettered: int = 0
    #: Records handed to a task on a second or later delivery: work a peer or an earlier run may
    #: have started (what a consumer group's rebalance costs; a share group's only on failure).
    redelivered: int = 0
    #: Records acknowledged after their lock ran out (the sink outlasted the group's lock).
    lock_overruns: int = 0
    #: Records each task handed its sink, one entry per task: how the work spread over the tasks.
    task_records: list[int] = field(default_factory=list)
    task_seconds: list[float] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)

    def merge(self, other: ShareTaskFigures) -> ShareTaskFigures:
        return summed(self, other)


@dataclass(frozen=True)
class ShareConsumeTask:
    """A picklable ``foreachPartition`` function: one bounded SafeShareConsumer run per Spark partition.

    :param conf: the share consumer config (``group.id`` and ``bootstrap.servers`` required);
        ``share.acknowledgement.mode`` is the task's: each batch is acknowledged after the sink
        returned it (explicit mode).
    :param topics: topic names to subscribe to (share groups take no patterns).
    :param sink: ``sink(records)`` processes one batch (one ``poll()``'s records); it runs on the
        executor. When it raises, the batch is released (handed out again at once) and the task
        fails, unless a ``poison`` policy takes the records it still refuses one at a time.
    :param until_end: stop once the backlog seen at start (the end offsets of the topics'
        partitions when the task started) is behind the group: the task was handed a record at or
        past the end of every partition that held records (start offset below end; a share group hands a partition's
        records out in offset order), or the group had nothing for it for :data:`DRAINED_AFTER`
        seconds after it got records (the rest is in other tasks' hands). A task whose topics held
        nothing at its start returns at once.
    :param max_records: stop once this many records reached the sink (a batch is processed
        whole: none of it is released to cut it, so the last one may go past the budget).
    :param max_seconds: stop after this many seconds (required: a share group does not tell a task
        when the others finished the backlog, so on a topic still written to only a time budget
        surely ends a run).
    :param idle_seconds: stop when the group handed the task nothing for this long, since its start
        or its last batch.
    :param start: where a share group without state starts (``"earliest"``/``"latest"``; None: the
        group's own setting, ``latest`` unless set), as ``SafeShareConsumer(start=...)``.
    :param poison: ``Skip()`` or ``DeadLetter(...)``: a batch the sink refuses is handed to the sink
        again one record at a time, and each record it still refuses is skipped (a WARNING) or
        dead-lettered, then rejected; with ``DeadLetter`` a record on its last delivery is also
        copied to the dead-letter topic before the sink gets it.
    """

    conf: Mapping[str, Any]
    topics: Sequence[str]
    sink: Sink
    until_end: bool = True
    max_records: int | None = None
    max_seconds: float | None = 300.0
    idle_seconds: float = 15.0
    start: str | None = None
    poison: Skip | DeadLetter | None = None
    figures: Any = field(default=None, compare=False)
    """The run's accumulator, set by :func:`run_consumer_tasks`."""

    def __repr__(self) -> str:
        return f"ShareConsumeTask(conf={redact_config(self.conf)!r}, topics={list(self.topics)!r})"

    def validate(self) -> None:
        """Check everything that can be checked on the driver; raise ValueError/TypeError naming it."""
        check_common("ShareConsumeTask", self.conf, self.topics, self.sink)
        patterns = [t for t in self.topics if t.startswith("^")]
        if patterns:
            raise ValueError(f"ShareConsumeTask topics must be names: share groups take no patterns, got {patterns}")
        check_bounds("ShareConsumeTask", self.until_end, self.max_records, self.max_seconds, self.idle_seconds)
        if self.max_seconds is None:
            raise ValueError(
                "ShareConsumeTask needs max_seconds: a share group does not tell a task when the others finished "
                "the backlog, so on a topic still written to only a time budget surely ends a run"
            )
        # librdkafka checks every config key and value when a client is created (a share consumer
        # also starts connecting: its log goes to the helpers' logger, not stderr).
        try:
            conf = {"logger": HELPER_LOG, **self._consumer_conf()}
            SafeShareConsumer(conf, start=self.start, poison=self.poison).close()
        except KafkaException as exc:
            raise ValueError(f"ShareConsumeTask conf is invalid: {exc.args[0].str()}") from exc
        except ValueError as exc:  # upstream's own refusals (auto.offset.reset), an unknown start
            raise ValueError(f"ShareConsumeTask: {exc}") from exc

    def _consumer_conf(self) -> dict[str, Any]:
        return {**self.conf, MODE_KEY: "explicit"}

    # -- on the executor -----------------------------------------------------------------
    def __call__(self, _rows: Iterable[Any]) -> None:
        report(self.run(), self.figures)

    def run(self) -> ShareTaskFigures:
        """Consume one bounded run; return its figures (a fatal error is recorded, not raised)."""
        started = time.monotonic()
        figures = ShareTaskFigures(tasks=1)
        starts, ends = self._offsets() if self.until_end else ({}, {})
        backlog = {key for key, end in ends.items() if end > starts.get(key, 0)}
        if self.until_end and not backlog:  # the topics held nothing when the task started
            figures.task_records, figures.task_seconds = [0], [time.monotonic() - started]
            return figures
        passed: set[Key] = set()  # partitions the group handed a record of past its end
        conf = {"logger": HELPER_LOG, **self._consumer_conf()}  # librdkafka's lines to logging, not stderr
        consumer = SafeShareConsumer(conf, start=self.start, poison=self.poison)
        try:
            consumer.subscribe(list(self.topics))
            last = time.monotonic()  # the last batch, or the start
            while not self._spent(started, figures):
                try:
                    batch = [m for m in consumer.poll(POLL_SECONDS) if m.error() is None]
                except KafkaException as exc:
                    error = error_of(exc)
                    if error is None or error.code() != KafkaError._MAX_POLL_EXCEEDED:
                        raise
                    # The sink outlasted max.poll.interval.ms: librdkafka took the member out of the
                    # group (what it held was given back, SafeShareConsumer said so); this poll rejoins.
                    continue
                if not batch:
                    quiet = time.monotonic() - last
                    if quiet >= self.idle_seconds or (self.until_end and figures.records and quiet >= DRAINED_AFTER):
                        break
                    continue
                figures.redelivered += sum((m.delivery_count() or 1) > 1 for m in batch)
                self._process(consumer, batch, figures)
                last = time.monotonic()  # the sink's own time is not time the group had nothing
                passed.update(key_of(m) for m in batch if (m.offset() or 0) >= ends.get(key_of(m), 0))
                if self.until_end and backlog <= passed:
                    break  # every partition's backlog was handed out: the group is past the run's end
        except FatalConsumerError as exc:
            logger.critical("Spark share task stopped by a fatal consumer error: %s", exc)
            figures.fatal.append(f"{type(exc).__name__}: {exc}")
        finally:
            try:
                consumer.close()  # what the task holds and did not process goes back at once
            except Exception as exc:  # noqa: BLE001 - the run's own outcome stands; a fatal error closed it already
                logger.warning("closing the Spark share task's consumer failed: %s", exc)
        figures.skipped = consumer.poison.skipped
        figures.dead_lettered = consumer.poison.dead_lettered
        figures.lock_overruns = consumer.lock_overruns
        figures.task_records, figures.task_seconds = [figures.records], [time.monotonic() - started]
        return figures

    def _spent(self, started: float, figures: ShareTaskFigures) -> bool:
        if self.max_seconds is not None and time.monotonic() - started >= self.max_seconds:
            return True
        return self.max_records is not None and figures.records >= self.max_records

    def _offsets(self) -> tuple[dict[Key, int], dict[Key, int]]:
        """The start and end offsets of the topics' partitions now: the backlog this run is for."""
        return watermarks(AdminClient(admin_config(self.conf, "spark")), self.topics, timeout=30)

    def _process(self, consumer: SafeShareConsumer, batch: list[Message], figures: ShareTaskFigures) -> None:
        """The sink on one batch, then its acknowledgements, sent and answered (``commit_sync``)."""
        figures.records += len(batch)
        figures.batches += 1
        try:
            self.sink(batch)
        except Exception:
            if self.poison is None:
                for m in batch:
                    consumer.acknowledge(m, AcknowledgeType.RELEASE)
                try:
                    consumer.commit_sync(COMMIT_SECONDS)
                except FatalConsumerError:
                    raise  # the task's own end: recorded, not retried by Spark
                except KafkaException:
                    pass  # not sent now, the releases go with close()
                raise
            logger.warning("the sink refused a batch of %d record(s); handling them one at a time", len(batch))
            taken: list[Message] = []
            poison = consumer.poison
            for m in batch:  # each is acknowledged by handle(): ACCEPT, REJECT after the policy, or
                before = poison.skipped + poison.dead_lettered + poison.returned  # RELEASE for redelivery
                consumer.handle(m, lambda record: self.sink([record]))
                if poison.skipped + poison.dead_lettered + poison.returned == before:
                    taken.append(m)
            figures.accepted += _taken(consumer.commit_sync(COMMIT_SECONDS), taken)
            return
        for m in batch:
            consumer.acknowledge(m)
        figures.accepted += _taken(consumer.commit_sync(COMMIT_SECONDS), batch)


def _taken(answer: object, batch: list[Message]) -> int:
    """How many of ``batch``'s records ``commit_sync()`` confirmed: those of partitions it answered
    with no error (a partition it did not name was committed with an earlier call)."""
    failed: set[Key] = set()
    if isinstance(answer, dict):
        failed = {(tp.topic, tp.partition) for tp, error in answer.items() if error is not None}
    return sum(key_of(m) not in failed for m in batch)
