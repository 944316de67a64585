"""safeconsumer.spark on a Spark standalone cluster: a master and two workers, each a process of its own.

The tasks run in two executor JVMs (one per worker) with their own Python workers, against the
real broker. The guarantees are those of ``local[2]`` (``test_spark.py``): N records in, exactly
N processed, offsets committed, a second run processes nothing, and a fatal error fails the job
without Spark retrying the task (``spark.task.maxFailures`` left at the cluster default, 4).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from examples.spark_pipeline import (
    executor_pid,
    executors,
    spark_session,
    standalone_cluster,
)
from safeconsumer.testing import Broker, KafkaTestKit

from ..support import (
    check_n_in_exactly_n_processed_then_nothing,
    check_share_tasks_share_one_partition,
    run_fatal_spark_job,
)

# Spark's JVMs take both cores for a while: alone, after the parallel phase.
pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def cluster_spark() -> Iterator[Any]:
    with standalone_cluster(workers=2) as master:
        session = spark_session(parallelism=2, master=master)
        try:
            yield session
        finally:
            session.stop()


def test_on_a_cluster_n_records_in_exactly_n_processed_then_nothing_new(
    kafka: KafkaTestKit, cluster_spark: Any, tmp_path: Path
) -> None:
    assert cluster_spark.sparkContext.master.startswith("spark://")
    assert cluster_spark.conf.get("spark.task.maxFailures", "4") == "4", "retries stay the cluster default"
    check_n_in_exactly_n_processed_then_nothing(cluster_spark, kafka, str(tmp_path))
    # The batches were written in executor JVMs of the cluster (which of its two executors got
    # partitions is the group's assignment: the first task in may read everything).
    cluster = set(cluster_spark.sparkContext.parallelize(range(2), 2).map(lambda _: executor_pid()).collect())
    assert len(cluster) == 2 and 0 not in cluster, f"the cluster did not run two executor JVMs: {cluster}"
    wrote = executors(str(tmp_path))
    assert wrote and wrote <= cluster, f"batches written outside the cluster's executors: {wrote} vs {cluster}"


def test_on_a_cluster_share_tasks_in_two_executors_read_one_partition_side_by_side(
    kafka: KafkaTestKit, cluster_spark: Any, tmp_path: Path
) -> None:
    """More tasks than partitions: the two executors' tasks both consume the topic's one partition."""
    check_share_tasks_share_one_partition(cluster_spark, kafka, str(tmp_path))
    wrote = executors(str(tmp_path))
    assert len(wrote) == 2 and 0 not in wrote, f"the batches were not written by two executor JVMs: {wrote}"


def test_on_a_cluster_a_fatal_error_fails_the_job_without_retries(
    kafka_broker_factory: Callable[[Mapping[str, str]], Broker], cluster_spark: Any, tmp_path: Path
) -> None:
    sc = cluster_spark.sparkContext
    group = f"fatal-{os.getpid()}-{id(tmp_path)}"
    sc.setJobGroup(group, "a fatal error")
    figures = run_fatal_spark_job(cluster_spark, kafka_broker_factory, str(tmp_path), "spark-cluster-fatal")
    assert figures is not None and figures.tasks == 2, "a task was retried or did not report"
    assert len(figures.fatal) == 1
    # What Spark saw: one job, its stage's two tasks completed, none failed (so none retried).
    tracker = sc.statusTracker()
    (job,) = tracker.getJobIdsForGroup(group)
    info = tracker.getJobInfo(job)
    assert info is not None and len(info.stageIds) == 1, info
    stage = tracker.getStageInfo(info.stageIds[0])
    assert stage is not None, "the stage's figures were not kept"
    assert (stage.numCompletedTasks, stage.numFailedTasks) == (2, 0), stage
