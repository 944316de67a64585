"""Consumer-group tasks: :class:`ConsumeTask`, one SafeConsumer (a group member) per Spark task, and
the :class:`TaskFigures` a run of them reports."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Message, TopicPartition

from ..base._clients import HELPER_LOG, redact_config
from ..base._errors import FatalConsumerError
from ..base._keys import Key, key_of
from ..consumer._client import group_generation
from ..consumer._facade import SafeConsumer, delivery_stats
from ..poison._policy import DeadLetter, Skip
from ._common import Sink, check_bounds, check_common, partition_id, report, summed

logger = logging.getLogger("safeconsumer")


@dataclass
class TaskFigures:
    """What the tasks of one run did, summed over tasks (per-task times kept apart)."""

    tasks: int = 0
    records: int = 0
    batches: int = 0
    #: Rebalance callbacks the tasks saw while consuming (assignments, revocations, losses);
    #: the revocation each task's close() makes is not one.
    rebalances: int = 0
    #: The group generations (classic) or member epochs (KIP-848) the tasks were assigned in:
    #: a run that brought none new did not rebalance the group.
    generations: list[int] = field(default_factory=list)
    withheld: int = 0
    purged: int = 0
    #: Records each task handed its sink, one entry per task: how the work spread over the tasks.
    task_records: list[int] = field(default_factory=list)
    task_seconds: list[float] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)

    def merge(self, other: TaskFigures) -> TaskFigures:
        return summed(self, other)


@dataclass(frozen=True)
class ConsumeTask:
    """A picklable ``foreachPartition`` function: one bounded SafeConsumer run per Spark partition.

    :param conf: the consumer config (``group.id`` and ``bootstrap.servers`` required);
        ``enable.auto.commit`` is forced off: offsets are committed after the sink returned.
    :param topics: topics to subscribe to (names or ``^regex``).
    :param sink: ``sink(records)`` processes one batch of records; it runs on the executor.
    :param batch_size: records per ``consume()`` call and per sink call, at most.
    :param until_end: stop once every assigned partition reached the end offset seen when it
        was assigned.
    :param max_records: stop after this many records (None: no record budget).
    :param max_seconds: stop after this many seconds (None: no time budget; then ``until_end``
        must bound the run).
    :param idle_seconds: stop when nothing was assigned and nothing arrived for this long.
    :param instance_ids: give each task a stable ``group.instance.id``,
        ``"<instance_ids>-<Spark partition id>"`` (static membership, KIP-345). A task of the
        next run started within ``session.timeout.ms`` then takes its place back without a
        rebalance, and a task that ends does not rebalance the others. Spark partition ids
        are the same in every run of the job; use one prefix per job and group.
    :param poison: the consumer's poison policy (``Skip()`` or ``DeadLetter(...)``, see
        docs/poison-records.md): a batch the sink refuses is handed to the sink again one record at
        a time, and each record it still refuses is skipped or dead-lettered; the job succeeds. ``None``
        (default): the sink's exception fails the task, as before.
    """

    conf: Mapping[str, Any]
    topics: Sequence[str]
    sink: Sink
    batch_size: int = 500
    until_end: bool = True
    max_records: int | None = None
    max_seconds: float | None = 300.0
    idle_seconds: float = 15.0
    instance_ids: str | None = None
    poison: Skip | DeadLetter | None = None
    figures: Any = field(default=None, compare=False)
    """The run's accumulator, set by :func:`run_consumer_tasks`."""

    def __repr__(self) -> str:
        return f"ConsumeTask(conf={redact_config(self.conf)!r}, topics={list(self.topics)!r})"

    def _sink(self, consumer: SafeConsumer, batch: list[Message]) -> None:
        """The sink on one batch. With a poison policy, a batch the sink refuses goes again one record
        at a time through ``consumer.handle()``: the records that fail are skipped or dead-lettered,
        the others reach the sink (a second time, for those it wrote before it failed: at least once)."""
        if self.poison is None:
            self.sink(batch)
            return
        try:
            self.sink(batch)
        except Exception:  # noqa: BLE001 - the policy decides, record by record
            logger.warning("the sink refused a batch of %d record(s); handling them one at a time", len(batch))
            for msg in batch:
                consumer.handle(msg, lambda record: self.sink([record]))

    def validate(self) -> None:
        """Check everything that can be checked on the driver; raise ValueError/TypeError naming it."""
        check_common("ConsumeTask", self.conf, self.topics, self.sink)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"ConsumeTask batch_size must be a positive int, got {self.batch_size!r}")
        if self.instance_ids is not None:
            if not isinstance(self.instance_ids, str) or not self.instance_ids:
                raise TypeError(f"ConsumeTask instance_ids must be a non-empty str, got {self.instance_ids!r}")
            if self.conf.get("group.instance.id"):
                raise ValueError("ConsumeTask conf sets group.instance.id and instance_ids: use instance_ids alone")
        check_bounds("ConsumeTask", self.until_end, self.max_records, self.max_seconds, self.idle_seconds)
        # librdkafka checks every config key and value when a client is created; no connection
        # is made until the consumer subscribes.
        try:
            SafeConsumer({"logger": HELPER_LOG, **self._consumer_conf()}).close()
        except KafkaException as exc:
            raise ValueError(f"ConsumeTask conf is invalid: {exc.args[0].str()}") from exc

    def _consumer_conf(self) -> dict[str, Any]:
        return {**self.conf, "enable.auto.commit": False}

    # -- on the executor -----------------------------------------------------------------
    def __call__(self, _rows: Iterable[Any]) -> None:
        report(self.run(partition_id() if self.instance_ids is not None else None), self.figures)

    def run(self, index: int | None = None) -> TaskFigures:
        """Consume one bounded run; return its figures (a fatal error is recorded, not raised).

        ``index``: the task's Spark partition id (its instance id's suffix with ``instance_ids``).
        """
        started = time.monotonic()
        ends: dict[Key, int] = {}
        done: dict[Key, int] = {}  # next offset to process, per partition
        rebalances = 0
        conf = {"logger": HELPER_LOG, **self._consumer_conf()}  # librdkafka's lines to logging, not stderr
        if self.instance_ids is not None:
            if index is None:
                raise ValueError("ConsumeTask with instance_ids runs inside a Spark task, or takes run(index)")
            conf["group.instance.id"] = f"{self.instance_ids}-{index}"
        consumer = SafeConsumer(conf, poison=self.poison)

        generations: list[int] = []

        def on_assign(c: SafeConsumer, partitions: list[TopicPartition]) -> None:
            nonlocal rebalances
            rebalances += 1
            generation = group_generation(c)
            if generation is not None:
                generations.append(generation)
            if not self.until_end:
                return
            committed = c.committed(partitions, timeout=30)
            for tp in committed:
                key = (tp.topic, tp.partition)
                low, high = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=30)
                ends[key] = high
                done[key] = tp.offset if tp.offset >= 0 else low

        closing = False

        def on_revoke(_c: SafeConsumer, partitions: list[TopicPartition]) -> None:
            nonlocal rebalances
            if not closing:  # close()'s own revocation ends the task; it is no rebalance
                rebalances += 1

        figures = TaskFigures(tasks=1)
        idle_since = time.monotonic()
        try:
            consumer.subscribe(list(self.topics), on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
            while True:
                now = time.monotonic()
                if self.max_seconds is not None and now - started >= self.max_seconds:
                    break
                if self.max_records is not None and figures.records >= self.max_records:
                    break
                owned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
                if self.until_end and owned and all(done.get(k, 0) >= ends.get(k, 0) for k in owned):
                    break
                want = self.batch_size
                if self.max_records is not None:
                    want = min(want, self.max_records - figures.records)
                batch = [m for m in consumer.consume(want, 1.0) if m.error() is None]
                if not batch:
                    if not owned and time.monotonic() - idle_since >= self.idle_seconds:
                        break
                    continue
                idle_since = time.monotonic()
                self._sink(consumer, batch)
                offsets: dict[Key, int] = {}
                for m in batch:
                    key = key_of(m)
                    offsets[key] = (m.offset() or 0) + 1
                consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
                done.update(offsets)
                figures.records += len(batch)
                figures.batches += 1
        except FatalConsumerError as exc:
            logger.critical("Spark task stopped by a fatal consumer error: %s", exc)
            figures.fatal.append(f"{type(exc).__name__}: {exc}")
        finally:
            closing = True
            consumer.close()
        stats = delivery_stats(consumer)
        figures.rebalances = rebalances
        figures.generations = generations
        figures.withheld = stats.withheld
        figures.purged = stats.purged_revoked + stats.purged_lost + stats.purged_unowned + stats.purged_seek
        figures.task_records, figures.task_seconds = [figures.records], [time.monotonic() - started]
        return figures
