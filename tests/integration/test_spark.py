"""safeconsumer.spark with a real local SparkSession (local[2]) against the real broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from examples.spark_pipeline import FileSink, processed, run_pipeline, spark_session
from safeconsumer.spark import ConsumeTask, ShareConsumeTask, run_consumer_tasks
from safeconsumer.testing import Broker, KafkaTestKit

from ..support import (
    check_n_in_exactly_n_processed_then_nothing,
    check_share_tasks_share_one_partition,
    run_fatal_spark_job,
)

# Spark's JVMs take both cores for a while: alone, after the parallel phase.
pytestmark = pytest.mark.serial


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session(parallelism=2)
    try:
        yield session
    finally:
        session.stop()


def test_n_records_in_exactly_n_processed_then_nothing_new(kafka: KafkaTestKit, spark: Any, tmp_path: Path) -> None:
    check_n_in_exactly_n_processed_then_nothing(spark, kafka, str(tmp_path))


def test_over_sasl_ssl_n_records_in_exactly_n_processed(
    secured_kafka: KafkaTestKit, spark: Any, tmp_path: Path
) -> None:
    """The same job through a secured cluster (SCRAM-SHA-512 over TLS): the tasks get the credentials."""
    check_n_in_exactly_n_processed_then_nothing(spark, secured_kafka, str(tmp_path))


def test_bad_config_fails_on_the_driver_before_any_task(kafka: KafkaTestKit, spark: Any, tmp_path: Path) -> None:
    sink = FileSink(str(tmp_path))
    good = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": kafka.name("g")}
    with pytest.raises(ValueError, match=r"no\.such\.property"):
        run_consumer_tasks(spark, ConsumeTask({**good, "no.such.property": "1"}, ["t"], sink), tasks=2)
    with pytest.raises(ValueError, match=r"group\.id"):
        run_consumer_tasks(spark, ConsumeTask({"bootstrap.servers": "x:1"}, ["t"], sink), tasks=2)
    with pytest.raises(TypeError, match="topics"):
        run_consumer_tasks(spark, ConsumeTask(good, "t", sink), tasks=2)
    with pytest.raises(TypeError, match="sink"):
        run_consumer_tasks(spark, ConsumeTask(good, ["t"], "not callable"), tasks=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tasks"):
        run_consumer_tasks(spark, ConsumeTask(good, ["t"], sink), tasks=0)
    with pytest.raises(ValueError, match=r"cannot share one group\.instance\.id"):
        run_consumer_tasks(spark, ConsumeTask({**good, "group.instance.id": "w"}, ["t"], sink), tasks=2)
    with pytest.raises(ValueError, match="use instance_ids alone"):
        run_consumer_tasks(spark, ConsumeTask({**good, "group.instance.id": "w"}, ["t"], sink, instance_ids="w"), 1)
    with pytest.raises(TypeError, match="instance_ids must be a non-empty str"):
        run_consumer_tasks(spark, ConsumeTask(good, ["t"], sink, instance_ids=""), tasks=2)
    with pytest.raises(ValueError, match="no patterns"):
        run_consumer_tasks(spark, ShareConsumeTask(good, ["^t"], sink), tasks=2)
    with pytest.raises(ValueError, match=r"auto\.offset\.reset"):
        run_consumer_tasks(spark, ShareConsumeTask({**good, "auto.offset.reset": "earliest"}, ["t"], sink), tasks=2)
    with pytest.raises(TypeError, match="takes a ConsumeTask or a ShareConsumeTask"):
        run_consumer_tasks(spark, sink, tasks=2)  # type: ignore[call-overload]
    assert not list(tmp_path.iterdir()), "a task ran"


def test_a_fatal_error_aborts_the_job_instead_of_being_retried(
    kafka_broker_factory: Callable[[Mapping[str, str]], Broker], spark: Any, tmp_path: Path
) -> None:
    figures = run_fatal_spark_job(spark, kafka_broker_factory, str(tmp_path), "spark-fatal")
    assert figures is not None and figures.tasks == 2, "a task was retried or did not report"
    assert len(figures.fatal) == 1


def test_share_tasks_more_than_partitions_every_record_processed_none_archived_without_a_copy(
    kafka: KafkaTestKit, spark: Any, tmp_path: Path
) -> None:
    check_share_tasks_share_one_partition(spark, kafka, str(tmp_path))


def test_a_share_task_refused_for_the_group_size_fails_the_job_without_retries(
    kafka_broker_factory: Callable[[Mapping[str, str]], Broker], spark: Any, tmp_path: Path
) -> None:
    figures = run_fatal_spark_job(spark, kafka_broker_factory, str(tmp_path), "spark-share-fatal", share=True)
    assert figures is not None and figures.tasks == 2, "a task was retried or did not report"
    assert len(figures.fatal) == 1 and "group.share.max.size" in figures.fatal[0], figures.fatal


def test_stable_instance_ids_let_the_next_run_take_its_places_back(
    kafka: KafkaTestKit, spark: Any, tmp_path: Path
) -> None:
    """With instance_ids each task is a static member that keeps its place in the group between
    runs (within the session timeout): once the places are taken, a run does not rebalance the
    group (the same generation, one assignment per task). Without them every run's members join
    an emptied group anew (the control: a new generation each run)."""
    topic, group, prefix = kafka.create_topic(partitions=4), kafka.name("g"), kafka.name("job")
    runs = []
    for i in range(3):
        kafka.produce(topic, 400, partitions=4, start=400 * i)
        runs.append(run_pipeline(spark, kafka.bootstrap_servers, topic, group, str(tmp_path), instance_ids=prefix))
    assert [r.records for r in runs] == [400, 400, 400] and len(set(processed(str(tmp_path)))) == 1200
    _, settled, static_next = runs
    assert len(set(settled.generations)) == 1, settled
    assert set(static_next.generations) == set(settled.generations), (settled, static_next)
    assert static_next.rebalances == 2, f"{static_next.rebalances} callbacks: expected one assignment per task"
    members = kafka.describe_group(group)
    assert sorted(m.instance_id or "" for m in members.members) == [f"{prefix}-0", f"{prefix}-1"]

    dynamic = kafka.name("g")
    (tmp_path / "dynamic").mkdir()
    one = run_pipeline(spark, kafka.bootstrap_servers, topic, dynamic, str(tmp_path / "dynamic"))
    kafka.produce(topic, 400, partitions=4, start=1200)
    two = run_pipeline(spark, kafka.bootstrap_servers, topic, dynamic, str(tmp_path / "dynamic"))
    assert one.records == 1200 and two.records == 400
    assert max(two.generations) > max(one.generations), (one, two)


def test_a_poison_record_is_dead_lettered_and_the_job_succeeds(kafka: KafkaTestKit, spark: Any, tmp_path: Path) -> None:
    from safeconsumer import DeadLetter

    from ..support import RefusingSink

    topic, dlq, group = kafka.create_topic(partitions=2), kafka.create_topic(), kafka.name("g")
    for i in range(100):
        kafka.producer.produce(topic, value=b"poison" if i == 42 else str(i).encode(), partition=i % 2)
    assert kafka.producer.flush(30) == 0
    conf = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest"}
    out = str(tmp_path / "out")
    Path(out).mkdir()
    task = ConsumeTask(conf, [topic], sink=RefusingSink(out), batch_size=50, max_seconds=120, poison=DeadLetter(dlq))
    figures = run_consumer_tasks(spark, task, tasks=2)
    assert figures.records == 100
    rows = processed(out)
    assert len({(p, o) for _, p, o in rows}) == 99 and (0, 21) not in {(p, o) for _, p, o in rows}
    assert kafka.committed(group, topic, 2) == {0: 50, 1: 50}
    assert kafka.end_offsets(dlq) == {0: 1}, "the poison record is in the dead-letter topic"


def test_without_a_policy_a_poison_record_fails_the_job(kafka: KafkaTestKit, spark: Any, tmp_path: Path) -> None:
    from ..support import RefusingSink

    topic, group = kafka.create_topic(), kafka.name("g")
    for value in (b"0", b"poison", b"2"):
        kafka.producer.produce(topic, value=value, partition=0)
    assert kafka.producer.flush(30) == 0
    conf = {"bootstrap.servers": kafka.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest"}
    task = ConsumeTask(conf, [topic], sink=RefusingSink(str(tmp_path)), max_seconds=60)
    with pytest.raises(Exception, match="the sink refuses this record"):
        run_consumer_tasks(spark, task, tasks=1)
    assert kafka.committed(group, topic, 1) == {0: -1001}, "nothing committed past the record the sink refused"
