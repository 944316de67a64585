"""SafeConsumers inside PySpark ``foreachPartition`` tasks: one consumer-group member per task.

::

    from safeconsumer.spark import ConsumeTask, run_consumer_tasks

    task = ConsumeTask(conf, ["orders"], sink=write_batch)  # write_batch(records: list[Message])
    figures = run_consumer_tasks(spark, task, tasks=4)      # on the driver
    print(figures.records, figures.rebalances)

Each task opens a SafeConsumer, subscribes, and consumes a bounded amount: every partition it
is assigned up to the end offset seen when it was assigned (``until_end``), within a record
budget (``max_records``) and a time budget (``max_seconds``). Records reach the sink in batches;
the batch's offsets are committed (synchronously, only for partitions still owned) after the
sink returned, never before; the consumer is always closed. A sink slower than
``max.poll.interval.ms`` is covered by the automatic keepalive.

A fatal error (e.g. GROUP_MAX_SIZE_REACHED) must not be retried into the broker by Spark's task
retries: the task stops, closes, and *returns* with the error recorded in the job's accumulator;
:func:`run_consumer_tasks` then raises :class:`SparkConsumerFatalError` on the driver. Used
directly with ``foreachPartition`` and no accumulator, the task raises the error instead (set
``spark.task.maxFailures=1`` then). Bad config fails on the driver, in :meth:`ConsumeTask.validate`,
before any task starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaException, Message, TopicPartition

from ._errors import FatalConsumerError, SafeConsumerError
from ._keys import Key
from .consumer._client import group_generation
from .consumer._config import redact_config
from .consumer._facade import SafeConsumer, delivery_stats
from .poison._policy import DeadLetter, Skip

__all__ = ["ConsumeTask", "SparkConsumerFatalError", "TaskFigures", "run_consumer_tasks"]

logger = logging.getLogger("safeconsumer")

Sink = Callable[[list[Message]], object]


class SparkConsumerFatalError(SafeConsumerError):
    """A task's consumer hit a fatal error; the job was not retried into the broker.

    ``figures`` holds what the run's tasks did, when known (from :func:`run_consumer_tasks`).
    """

    def __init__(self, message: str, figures: TaskFigures | None = None) -> None:
        super().__init__(message)
        self.figures = figures


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
    task_seconds: list[float] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)

    def merge(self, other: TaskFigures) -> TaskFigures:
        return TaskFigures(
            tasks=self.tasks + other.tasks,
            records=self.records + other.records,
            batches=self.batches + other.batches,
            rebalances=self.rebalances + other.rebalances,
            generations=self.generations + other.generations,
            withheld=self.withheld + other.withheld,
            purged=self.purged + other.purged,
            task_seconds=self.task_seconds + other.task_seconds,
            fatal=self.fatal + other.fatal,
        )


def _accumulator_param() -> Any:
    from pyspark.accumulators import AccumulatorParam

    class _FiguresParam(AccumulatorParam[TaskFigures]):
        def zero(self, value: TaskFigures) -> TaskFigures:
            return TaskFigures()

        def addInPlace(self, value1: TaskFigures, value2: TaskFigures) -> TaskFigures:
            return value1.merge(value2)

    return _FiguresParam()


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
        if not isinstance(self.conf, Mapping):
            raise TypeError(f"ConsumeTask conf must be a dict, got {type(self.conf).__name__}")
        for key in ("group.id", "bootstrap.servers"):
            if not self.conf.get(key):
                raise ValueError(f"ConsumeTask conf needs {key!r}")
        if isinstance(self.topics, str) or not self.topics or not all(isinstance(t, str) and t for t in self.topics):
            raise TypeError(f"ConsumeTask topics must be a non-empty list of topic names, got {self.topics!r}")
        if not callable(self.sink):
            raise TypeError(f"ConsumeTask sink must be callable, got {type(self.sink).__name__}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"ConsumeTask batch_size must be a positive int, got {self.batch_size!r}")
        if self.instance_ids is not None:
            if not isinstance(self.instance_ids, str) or not self.instance_ids:
                raise TypeError(f"ConsumeTask instance_ids must be a non-empty str, got {self.instance_ids!r}")
            if self.conf.get("group.instance.id"):
                raise ValueError("ConsumeTask conf sets group.instance.id and instance_ids: use instance_ids alone")
        if not self.until_end and self.max_records is None and self.max_seconds is None:
            raise ValueError("ConsumeTask is unbounded: set until_end, max_records or max_seconds")
        # librdkafka checks every config key and value when a client is created; no connection
        # is made until the consumer subscribes.
        try:
            SafeConsumer(self._consumer_conf()).close()
        except KafkaException as exc:
            raise ValueError(f"ConsumeTask conf is invalid: {exc.args[0].str()}") from exc

    def _consumer_conf(self) -> dict[str, Any]:
        return {**self.conf, "enable.auto.commit": False}

    # -- on the executor -----------------------------------------------------------------
    def __call__(self, _rows: Iterable[Any]) -> None:
        index = None
        if self.instance_ids is not None:
            from pyspark import TaskContext

            context = TaskContext.get()
            index = context.partitionId() if context is not None else None
        figures = self.run(index)
        if self.figures is not None:
            self.figures.add(figures)
        elif figures.fatal:
            raise SparkConsumerFatalError(figures.fatal[0])

    def run(self, index: int | None = None) -> TaskFigures:
        """Consume one bounded run; return its figures (a fatal error is recorded, not raised).

        ``index``: the task's Spark partition id (its instance id's suffix with ``instance_ids``).
        """
        started = time.monotonic()
        ends: dict[Key, int] = {}
        done: dict[Key, int] = {}  # next offset to process, per partition
        rebalances = 0
        conf = self._consumer_conf()
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
                    key = (m.topic() or "", m.partition() or 0)
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
        figures.task_seconds = [time.monotonic() - started]
        return figures


def run_consumer_tasks(spark: Any, task: ConsumeTask, tasks: int) -> TaskFigures:
    """Run ``tasks`` copies of ``task`` as one Spark job (``foreachPartition``) and sum their figures.

    ``spark`` is a SparkSession or SparkContext. The task is validated here, on the driver,
    before any Spark task starts. Raises :class:`SparkConsumerFatalError` if any task's consumer
    hit a fatal error (those tasks returned instead of failing, so Spark did not retry them).
    """
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"tasks must be a positive int, got {tasks!r}")
    if not isinstance(task, ConsumeTask):
        raise TypeError(f"run_consumer_tasks() takes a ConsumeTask, got {type(task).__name__}")
    task.validate()
    if tasks > 1 and task.conf.get("group.instance.id"):
        raise ValueError(
            f"{tasks} tasks cannot share one group.instance.id (the broker would fence them): "
            "use ConsumeTask(instance_ids=...) for one per task"
        )
    sc = getattr(spark, "sparkContext", spark)
    accumulator = sc.accumulator(TaskFigures(), _accumulator_param())
    sc.parallelize(range(tasks), tasks).foreachPartition(replace(task, figures=accumulator))
    figures: TaskFigures = accumulator.value
    if figures.fatal:
        raise SparkConsumerFatalError(
            f"{len(figures.fatal)} task(s) stopped by a fatal consumer error and were not retried: {figures.fatal[0]}",
            figures,
        )
    return figures
