"""What both kinds of Spark task share: the sink's shape, the fatal error the driver raises, and the
accumulator that sums a run's figures."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from confluent_kafka import Message

from ..base._errors import SafeConsumerError

logger = logging.getLogger("safeconsumer")

#: ``sink(records)``: processes one batch of records, on the executor.
Sink = Callable[[list[Message]], object]


class Figures(Protocol):
    """What a task reports: summed over the run's tasks by the accumulator."""

    tasks: int
    fatal: list[str]

    def merge(self, other: Any) -> Any: ...


_F = TypeVar("_F", bound=Figures)


class SparkConsumerFatalError(SafeConsumerError):
    """A task's consumer hit a fatal error; the job was not retried into the broker.

    ``figures`` holds what the run's tasks did, when known (from :func:`run_consumer_tasks`): a
    :class:`TaskFigures` or, for share-group tasks, a :class:`ShareTaskFigures`.
    """

    def __init__(self, message: str, figures: Any = None) -> None:
        super().__init__(message)
        self.figures = figures


def summed(a: _F, b: _F) -> _F:
    """Two tasks' figures (dataclasses) together: counts added, per-task lists joined."""
    return type(a)(**{f.name: getattr(a, f.name) + getattr(b, f.name) for f in dataclasses.fields(a)})  # type: ignore[arg-type]


def accumulator_param() -> Any:
    """A Spark ``AccumulatorParam`` summing figures with their ``merge``."""
    from pyspark.accumulators import AccumulatorParam

    class _FiguresParam(AccumulatorParam[Figures]):
        def zero(self, value: Figures) -> Figures:
            return type(value)()

        def addInPlace(self, value1: Figures, value2: Figures) -> Figures:
            return value1.merge(value2)  # type: ignore[no-any-return]

    return _FiguresParam()


def partition_id() -> int | None:
    """The Spark partition id of the task this runs in (None outside a Spark task)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else None


def report(figures: _F, accumulator: Any) -> _F:
    """On the executor: add a task's figures to the run's accumulator; with none (the function used
    directly with ``foreachPartition``), a fatal error is raised instead (then set
    ``spark.task.maxFailures=1``)."""
    if accumulator is not None:
        accumulator.add(figures)
    elif figures.fatal:
        raise SparkConsumerFatalError(figures.fatal[0])
    return figures


def check_common(kind: str, conf: object, topics: object, sink: object) -> None:
    """The checks every task makes on the driver: a config with the group and the cluster, topic
    names, a callable sink. Raises TypeError/ValueError naming what is wrong."""
    if not isinstance(conf, Mapping):
        raise TypeError(f"{kind} conf must be a dict, got {type(conf).__name__}")
    for key in ("group.id", "bootstrap.servers"):
        if not conf.get(key):
            raise ValueError(f"{kind} conf needs {key!r}")
    if (
        isinstance(topics, str)
        or not isinstance(topics, Sequence)
        or not topics
        or not all(isinstance(t, str) and t for t in topics)
    ):
        raise TypeError(f"{kind} topics must be a non-empty list of topic names, got {topics!r}")
    if not callable(sink):
        raise TypeError(f"{kind} sink must be callable, got {type(sink).__name__}")


def check_bounds(kind: str, until_end: object, max_records: object, max_seconds: object, idle_seconds: object) -> None:
    """A task's run must end: at the end seen at start, after a record or a time budget."""
    bad_count = isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1
    if max_records is not None and bad_count:
        raise ValueError(f"{kind} max_records must be a positive int or None, got {max_records!r}")
    for name, value in (("max_seconds", max_seconds), ("idle_seconds", idle_seconds)):
        if value is None and name == "max_seconds":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"{kind} {name} must be a positive number, got {value!r}")
    if not until_end and max_records is None and max_seconds is None:
        raise ValueError(f"{kind} is unbounded: set until_end, max_records or max_seconds")
