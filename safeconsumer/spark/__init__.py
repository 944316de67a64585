"""Kafka consumers inside PySpark ``foreachPartition`` tasks: one consumer per task.

::

    from safeconsumer.spark import ConsumeTask, ShareConsumeTask, run_consumer_tasks

    task = ConsumeTask(conf, ["orders"], sink=write_batch)  # write_batch(records: list[Message])
    figures = run_consumer_tasks(spark, task, tasks=4)      # on the driver
    print(figures.records, figures.rebalances)

    shared = ShareConsumeTask(share_conf, ["orders"], sink=write_batch)
    figures = run_consumer_tasks(spark, shared, tasks=8)    # more tasks than partitions: fine
    print(figures.records, figures.accepted, figures.redelivered)

- :class:`ConsumeTask` (``_groups``): each task is a consumer-group member (a SafeConsumer). It
  consumes every partition it is assigned up to the end offset seen when it was assigned
  (``until_end``), within a record budget (``max_records``) and a time budget (``max_seconds``).
  Records reach the sink in batches; a batch's offsets are committed (synchronously, only for
  partitions still owned) after the sink returned, never before. Every task that starts or ends
  rebalances the group (unless ``instance_ids`` makes the members static), and a job can use no
  more tasks than there are partitions.
- :class:`ShareConsumeTask` (``_share``): each task is a share-group member (a SafeShareConsumer,
  KIP-932). The broker hands each record to one task under a lock: no task ever stops for another
  (no rebalance), and any number of tasks share the partitions. A batch is acknowledged after the
  sink returned; a sink that raises releases it (handed out again at once).

For both, the consumer is always closed, a sink slower than the group allows is covered (the
automatic keepalive; a share group's lock overruns are counted), and a poison policy lets a job
succeed past a record the sink refuses (``_common`` holds what they share).

A fatal error (e.g. GROUP_MAX_SIZE_REACHED) must not be retried into the broker by Spark's task
retries: the task stops, closes, and *returns* with the error recorded in the job's accumulator;
:func:`run_consumer_tasks` then raises :class:`SparkConsumerFatalError` on the driver. Used
directly with ``foreachPartition`` and no accumulator, the task raises the error instead (set
``spark.task.maxFailures=1`` then). Bad config fails on the driver, in the task's ``validate()``,
before any task starts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, overload

from ._common import SparkConsumerFatalError, accumulator_param
from ._groups import ConsumeTask, TaskFigures
from ._share import ShareConsumeTask, ShareTaskFigures

__all__ = [
    "ConsumeTask",
    "ShareConsumeTask",
    "ShareTaskFigures",
    "SparkConsumerFatalError",
    "TaskFigures",
    "run_consumer_tasks",
]


@overload
def run_consumer_tasks(spark: Any, task: ConsumeTask, tasks: int) -> TaskFigures: ...
@overload
def run_consumer_tasks(spark: Any, task: ShareConsumeTask, tasks: int) -> ShareTaskFigures: ...
def run_consumer_tasks(spark: Any, task: ConsumeTask | ShareConsumeTask, tasks: int) -> Any:
    """Run ``tasks`` copies of ``task`` as one Spark job (``foreachPartition``) and sum their figures.

    ``spark`` is a SparkSession or SparkContext; ``task`` a :class:`ConsumeTask` (returns
    :class:`TaskFigures`) or a :class:`ShareConsumeTask` (returns :class:`ShareTaskFigures`). The
    task is validated here, on the driver, before any Spark task starts. Raises
    :class:`SparkConsumerFatalError` if any task's consumer hit a fatal error (those tasks returned
    instead of failing, so Spark did not retry them).
    """
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"tasks must be a positive int, got {tasks!r}")
    if not isinstance(task, ConsumeTask | ShareConsumeTask):
        raise TypeError(f"run_consumer_tasks() takes a ConsumeTask or a ShareConsumeTask, got {type(task).__name__}")
    task.validate()
    if isinstance(task, ConsumeTask) and tasks > 1 and task.conf.get("group.instance.id"):
        raise ValueError(
            f"{tasks} tasks cannot share one group.instance.id (the broker would fence them): "
            "use ConsumeTask(instance_ids=...) for one per task"
        )
    sc = getattr(spark, "sparkContext", spark)
    zero = TaskFigures() if isinstance(task, ConsumeTask) else ShareTaskFigures()
    accumulator = sc.accumulator(zero, accumulator_param())
    sc.parallelize(range(tasks), tasks).foreachPartition(replace(task, figures=accumulator))
    figures = accumulator.value
    if figures.fatal:
        raise SparkConsumerFatalError(
            f"{len(figures.fatal)} task(s) stopped by a fatal consumer error and were not retried: {figures.fatal[0]}",
            figures,
        )
    return figures
