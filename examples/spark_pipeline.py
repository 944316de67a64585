"""A PySpark pipeline: N Spark tasks, each a consumer-group member, write what they read to files.

    python -m examples.spark_pipeline            # on the embedded broker
    KAFKA_BOOTSTRAP_SERVERS=host:9092 python -m examples.spark_pipeline

Each task consumes its partitions up to the end offsets it saw when they were assigned, hands
the records to the sink in batches, and commits a batch only after the sink returned. Running
the job a second time processes nothing: everything was committed. Then it counts the rebalance
callbacks per run with and without ``ConsumeTask(instance_ids=...)`` (static membership): with
stable instance ids the next run takes its places back, one assignment per task.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Message

from safeconsumer.spark import ConsumeTask, TaskFigures, run_consumer_tasks
from safeconsumer.testing import KafkaTestKit, start_broker


class FileSink:
    """Appends ``topic,partition,offset`` of every record to a file of its own per call site.

    Picklable and free of driver state: it runs inside Spark's Python workers.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, records: list[Message]) -> None:
        path = Path(self.directory) / f"batch-{os.getpid()}-{uuid.uuid4().hex}.csv"
        path.write_text("".join(f"{m.topic()},{m.partition()},{m.offset()}\n" for m in records))


def processed(directory: str) -> list[tuple[str, int, int]]:
    """Every (topic, partition, offset) the sink wrote, in no particular order."""
    out: list[tuple[str, int, int]] = []
    for path in Path(directory).glob("batch-*.csv"):
        for line in path.read_text().splitlines():
            topic, partition, offset = line.rsplit(",", 2)
            out.append((topic, int(partition), int(offset)))
    return out


def spark_session(parallelism: int = 2) -> Any:
    """A local SparkSession whose Python workers run this interpreter and can import this project."""
    from pyspark.sql import SparkSession

    root = str(Path(__file__).resolve().parents[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return (
        SparkSession.builder.master(f"local[{parallelism}]")
        .appName("safeconsumer-example")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(parallelism))
        .getOrCreate()
    )


def run_pipeline(
    spark: Any,
    bootstrap: str,
    topic: str,
    group: str,
    out_dir: str,
    *,
    tasks: int = 2,
    instance_ids: str | None = None,
) -> TaskFigures:
    """One run of the job: ``tasks`` SafeConsumers in group ``group``, records to ``out_dir``.

    ``instance_ids``: a prefix for stable per-task ``group.instance.id`` (static membership).
    """
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    task = ConsumeTask(
        conf, [topic], sink=FileSink(out_dir), batch_size=200, max_seconds=120, instance_ids=instance_ids
    )
    return run_consumer_tasks(spark, task, tasks=tasks)


def main() -> int:
    n = 2000
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="spark-example")
        topic = kit.create_topic(partitions=4)
        kit.produce(topic, n, partitions=4)
        group, static_group = kit.name("group"), kit.name("static-group")
        print(f"produced {n} records to {topic}; starting Spark (local[2])", flush=True)
        spark = spark_session()
        bootstrap = broker.bootstrap_servers
        try:
            with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as elsewhere:
                first = run_pipeline(spark, bootstrap, topic, group, out)
                second = run_pipeline(spark, bootstrap, topic, group, out)
                rows = processed(out)
                # Rebalances per run, with and without stable instance ids (static membership).
                kit.produce(topic, n, partitions=4, start=n)
                dynamic_next = run_pipeline(spark, bootstrap, topic, group, elsewhere)
                ids = kit.name("job")
                static_runs = []
                for i in range(3):  # the first run takes the places; the next ones find them held
                    if i:
                        kit.produce(topic, n, partitions=4, start=(i + 1) * n)
                    static_runs.append(run_pipeline(spark, bootstrap, topic, static_group, elsewhere, instance_ids=ids))
        finally:
            spark.stop()
            kit.close()
    print(
        f"first run: {first.records} records in {first.batches} batches by {first.tasks} tasks "
        f"({first.rebalances} rebalance callbacks, {first.purged} purged); second run: {second.records} records",
        flush=True,
    )
    dynamic = [max(r.generations, default=0) for r in (first, second, dynamic_next)]
    static = [max(r.generations, default=0) for r in static_runs]
    print(
        "group generation after each run: without instance ids "
        + " -> ".join(map(str, dynamic))
        + " (every run's members join an emptied group); with instance_ids "
        + " -> ".join(map(str, static))
        + " (once the places are taken, a run rebalances nothing)",
        flush=True,
    )
    ok = first.records == n and second.records == 0 and len(set(rows)) == len(rows) == n
    ok = ok and dynamic_next.records == n and [r.records for r in static_runs] == [2 * n, n, n]
    ok = ok and dynamic[2] > dynamic[0] and static[2] == static[1]
    print("spark pipeline: OK" if ok else "spark pipeline: FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
