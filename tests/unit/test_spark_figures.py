"""safeconsumer.spark's pure parts: figures summed over tasks, and the driver-side checks."""

from __future__ import annotations

import pickle

import pytest
from confluent_kafka import Message

from safeconsumer.spark import ConsumeTask, ShareConsumeTask, ShareTaskFigures, TaskFigures
from safeconsumer.spark._common import check_bounds, check_common


def _sink(records: list[Message]) -> None:
    del records


def test_share_figures_sum_counts_and_keep_per_task_lists_apart() -> None:
    a = ShareTaskFigures(
        tasks=1, records=10, batches=2, accepted=9, dead_lettered=1, task_records=[10], task_seconds=[1.5]
    )
    b = ShareTaskFigures(tasks=1, records=5, batches=1, accepted=5, redelivered=2, task_records=[5], task_seconds=[2.0])
    both = a.merge(b)
    assert (both.tasks, both.records, both.batches, both.accepted, both.dead_lettered, both.redelivered) == (
        2,
        15,
        3,
        14,
        1,
        2,
    )
    assert both.task_records == [10, 5] and both.task_seconds == [1.5, 2.0]
    assert ShareTaskFigures().merge(both) == both, "the accumulator's zero changes nothing"
    fatal = ShareTaskFigures(tasks=1, fatal=["GroupMaxSizeReachedError: full"])
    assert both.merge(fatal).fatal == ["GroupMaxSizeReachedError: full"]


def test_consumer_group_figures_still_sum_as_before() -> None:
    a = TaskFigures(tasks=1, records=3, rebalances=1, generations=[4], task_seconds=[1.0])
    b = TaskFigures(tasks=1, records=4, rebalances=2, generations=[5], task_seconds=[2.0])
    assert a.merge(b) == TaskFigures(tasks=2, records=7, rebalances=3, generations=[4, 5], task_seconds=[1.0, 2.0])


def test_tasks_pickle_as_spark_ships_them() -> None:
    conf = {"bootstrap.servers": "b:9092", "group.id": "g"}
    for task in (ConsumeTask(conf, ["t"], _sink), ShareConsumeTask(conf, ["t"], _sink, start="earliest")):
        assert pickle.loads(pickle.dumps(task)) == task


@pytest.mark.parametrize(
    ("conf", "topics", "sink", "error", "match"),
    [
        ([("group.id", "g")], ["t"], _sink, TypeError, "conf must be a dict"),
        ({"group.id": "g"}, ["t"], _sink, ValueError, "bootstrap.servers"),
        ({"group.id": "g", "bootstrap.servers": "b"}, [], _sink, TypeError, "non-empty list"),
        ({"group.id": "g", "bootstrap.servers": "b"}, ["t", ""], _sink, TypeError, "non-empty list"),
        ({"group.id": "g", "bootstrap.servers": "b"}, ["t"], None, TypeError, "sink must be callable"),
    ],
)
def test_common_checks_name_what_is_wrong(conf: object, topics: object, sink: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        check_common("Task", conf, topics, sink)


@pytest.mark.parametrize(
    ("bounds", "match"),
    [
        ((True, 0, 10.0, 5.0), "max_records"),
        ((True, True, 10.0, 5.0), "max_records"),
        ((True, None, -1, 5.0), "max_seconds"),
        ((True, None, 10.0, 0), "idle_seconds"),
        ((True, None, 10.0, "5"), "idle_seconds"),
        ((False, None, None, 5.0), "unbounded"),
    ],
)
def test_bounds_are_checked(bounds: tuple[object, object, object, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        check_bounds("Task", *bounds)
    check_bounds("Task", True, None, None, 5.0)  # until_end alone bounds a run
