"""A PySpark pipeline: N Spark tasks, each a consumer-group member, write what they read to files.

    python -m examples.spark_pipeline            # a standalone cluster, on the embedded broker
    python -m examples.spark_pipeline --local    # local[2]: one JVM, quicker
    KAFKA_BOOTSTRAP_SERVERS=host:9092 python -m examples.spark_pipeline

By default the job runs on a Spark standalone cluster started here from the pyspark
distribution: a master and two workers, each a process of its own, whose executors (a JVM each,
with their own Python workers) run the tasks. safeconsumer reaches the executors as any
dependency does on a cluster: here the workers share this machine's virtualenv; elsewhere ship it
(``docs/spark.md``).

Each task consumes its partitions up to the end offsets it saw when they were assigned, hands
the records to the sink in batches, and commits a batch only after the sink returned. Running
the job a second time processes nothing: everything was committed. Then it counts the rebalance
callbacks per run with and without ``ConsumeTask(instance_ids=...)`` (static membership): with
stable instance ids the next run takes its places back, one assignment per task. Last, two tasks on
a one-partition topic, as consumer-group members (one idles) and as share-group members
(``ShareConsumeTask``: both read it, no rebalance).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Message

from safeconsumer.spark import ConsumeTask, ShareConsumeTask, SparkConsumerFatalError, TaskFigures, run_consumer_tasks
from safeconsumer.testing import KafkaTestKit, start_broker


class FileSink:
    """Appends ``topic,partition,offset`` of every record to a file of its own per call site.

    Picklable and free of driver state: it runs inside Spark's Python workers.
    """

    def __init__(self, directory: str, delay: float = 0.0) -> None:
        self.directory = directory
        self.delay = delay  # seconds of work per batch: a slow write

    def __call__(self, records: list[Message]) -> None:
        time.sleep(self.delay)
        # The file name says which executor JVM (0: none, local mode) and Python worker wrote it.
        path = Path(self.directory) / f"batch-{executor_pid()}-{os.getpid()}-{uuid.uuid4().hex}.csv"
        path.write_text("".join(f"{m.topic()},{m.partition()},{m.offset()}\n" for m in records))


def executor_pid() -> int:
    """The pid of the Spark executor JVM this Python worker runs under (Linux), 0 if none."""
    pid = os.getpid()
    for _ in range(8):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent
            if pid <= 1:
                return 0
            if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except (OSError, ValueError, IndexError):
            return 0
    return 0


def executors(directory: str) -> set[int]:
    """The executor JVMs (pids; 0 for local mode) whose tasks wrote batches to ``directory``."""
    return {int(path.name.split("-")[1]) for path in Path(directory).glob("batch-*.csv")}


def processed(directory: str) -> list[tuple[str, int, int]]:
    """Every (topic, partition, offset) the sink wrote, in no particular order."""
    out: list[tuple[str, int, int]] = []
    for path in Path(directory).glob("batch-*.csv"):
        for line in path.read_text().splitlines():
            topic, partition, offset = line.rsplit(",", 2)
            out.append((topic, int(partition), int(offset)))
    return out


def _python_env() -> None:
    """Spark's Python workers run this interpreter and can import this project (the sink's module)."""
    root = str(Path(__file__).resolve().parents[1])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


def spark_session(parallelism: int = 2, *, master: str | None = None) -> Any:
    """A SparkSession: ``local[parallelism]``, or on the cluster at ``master`` (``spark://host:port``).

    On a cluster each executor gets one core (so ``parallelism`` executors run the tasks side by
    side), task retries stay Spark's default and speculation stays off: a speculative copy of a
    task would be one more group member.
    """
    from pyspark.sql import SparkSession

    _python_env()
    builder = (
        SparkSession.builder.appName("safeconsumer-example")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(parallelism))
        .config("spark.speculation", "false")
    )
    if master is None:
        builder = builder.master(f"local[{parallelism}]")
    else:
        builder = (
            builder.master(master)
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", str(parallelism))
            .config("spark.executor.memory", "512m")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
            # Start the job only once every executor is there: each task is a group member of its own.
            .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
            .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
        )
    return builder.getOrCreate()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class SparkClusterError(RuntimeError):
    """The standalone cluster did not come up; the message names what and where its logs are."""


@contextmanager
def standalone_cluster(workers: int = 2, *, timeout: float = 120.0) -> Iterator[str]:
    """A Spark standalone cluster on 127.0.0.1: a master and ``workers`` workers (one core each).

    Each is a process of its own started with the pyspark distribution's ``bin/spark-class``;
    yields the master URL and stops them all on exit. Fails with :class:`SparkClusterError`
    naming the process and its log when one does not come up within ``timeout`` seconds.
    """
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    _python_env()
    logs = Path(tempfile.mkdtemp(prefix="safeconsumer-spark-"))
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(logs),
        "SPARK_WORKER_DIR": str(logs / "work"),
    }
    port, ui = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    with ExitStack() as stack:

        def start(name: str, *args: str) -> subprocess.Popen[bytes]:
            log = stack.enter_context((logs / f"{name}.log").open("wb"))
            proc = subprocess.Popen(
                [str(home / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: executors and daemons stop with it
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only prctl runs there, no locks taken
            )
            stack.callback(_stop, proc)
            return proc

        master = start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        )
        for i in range(workers):
            start(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(_free_port()),
                "--work-dir",
                str(logs / f"work-{i}"),
            )
        deadline = time.monotonic() + timeout
        alive = 0
        while alive < workers:
            if master.poll() is not None:
                raise SparkClusterError(f"the Spark master exited ({master.returncode}); log: {logs / 'master.log'}")
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"{alive} of {workers} Spark workers registered with {url} within {timeout:.0f}s; logs in {logs}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as reply:
                    alive = int(json.load(reply).get("aliveworkers", 0))
            except OSError:
                pass
            time.sleep(0.5)
        yield url


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    # Between fork and exec (spark-class execs the JVM): the kernel kills the JVM when the
    # thread that started it exits, so an interrupted run leaves no cluster behind.
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a master or worker and everything it started (executor JVMs, Python daemons)."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def run_pipeline(
    spark: Any,
    bootstrap: str,
    topic: str,
    group: str,
    out_dir: str,
    *,
    tasks: int = 2,
    instance_ids: str | None = None,
    client_config: Mapping[str, Any] | None = None,
) -> TaskFigures:
    """One run of the job: ``tasks`` SafeConsumers in group ``group``, records to ``out_dir``.

    ``instance_ids``: a prefix for stable per-task ``group.instance.id`` (static membership).
    ``client_config``: the cluster's connection settings (security, credentials), if it needs any.
    """
    conf = {**(client_config or {}), "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
    task = ConsumeTask(
        conf, [topic], sink=FileSink(out_dir), batch_size=200, max_seconds=120, instance_ids=instance_ids
    )
    return run_consumer_tasks(spark, task, tasks=tasks)


def one_partition_two_ways(spark: Any, kit: KafkaTestKit, out_dir: str, n: int = 600) -> tuple[str, bool]:
    """Two tasks on a one-partition topic, as consumer-group members and as share-group members.

    A consumer group gives the partition to one task (the other idles), and each task that joins or
    leaves rebalances the group; a share group hands the partition's records to both, and has no
    rebalance. Records are produced in batches of 10 (a share group hands out whole record
    batches), and the sink takes 0.1 s a batch, so both tasks are members long before the end.
    Returns the line to print and whether the share tasks held (both read, each record once, none
    handed out twice)."""
    topic = kit.create_topic(partitions=1)
    for i in range(n):
        kit.producer.produce(topic, value=str(i).encode(), partition=0)
        if (i + 1) % 10 == 0:
            kit.producer.flush(30)
    kit.producer.flush(30)
    bootstrap = kit.bootstrap_servers
    group_conf = {"bootstrap.servers": bootstrap, "group.id": kit.name("group"), "auto.offset.reset": "earliest"}
    groups = run_consumer_tasks(
        spark, ConsumeTask(group_conf, [topic], FileSink(out_dir, 0.1), batch_size=10, idle_seconds=5), tasks=2
    )
    share_conf = {"bootstrap.servers": bootstrap, "group.id": kit.name("share"), "max.poll.records": 10}
    share_dir = Path(out_dir) / "share"
    share_dir.mkdir()
    task = ShareConsumeTask(share_conf, [topic], FileSink(str(share_dir), 0.1), start="earliest", idle_seconds=5)
    shared = run_consumer_tasks(spark, task, tasks=2)
    rows = processed(str(share_dir))
    held = sorted(o for _, _, o in rows) == list(range(n)) and min(shared.task_records) > 0
    held = held and shared.redelivered == 0
    line = (
        f"one partition, two tasks: as consumer-group members, records per task {sorted(groups.task_records)} "
        f"(one idles) and {groups.rebalances} rebalance callbacks; as share-group members (ShareConsumeTask), "
        f"records per task {sorted(shared.task_records)}, {shared.accepted} accepted, {shared.redelivered} "
        "handed out twice, no rebalance (a share group has none)"
    )
    return line, held


def run_into_a_full_group(spark: Any, out_dir: str) -> str:
    """A job of two tasks on a broker whose groups hold one member: the second task to join is
    refused (GROUP_MAX_SIZE_REACHED) and returns; the job then fails, no task retried into the broker."""
    with start_broker(overrides={"group.max.size": "1", "group.consumer.max.size": "1"}) as full:
        kit = KafkaTestKit(full.bootstrap_servers, prefix="spark-full")
        try:
            topic = kit.create_topic(partitions=2)
            conf = {"bootstrap.servers": full.bootstrap_servers, "group.id": kit.name("g")}
            task = ConsumeTask(conf, [topic], sink=FileSink(out_dir), until_end=False, max_seconds=12)
            started = time.monotonic()
            run_consumer_tasks(spark, task, tasks=2)
        except SparkConsumerFatalError as exc:
            figures = exc.figures or TaskFigures()
            full_errors = sum("GroupMaxSizeReachedError" in f for f in figures.fatal)
            if not full_errors or figures.tasks != 2:
                return f"FAILED: {exc}"
            return (
                f"the job failed: {full_errors} task(s) stopped by GroupMaxSizeReachedError, "
                f"{figures.tasks} tasks run once each (Spark retries none), in {time.monotonic() - started:.0f} s"
            )
        finally:
            kit.close()
    return "FAILED: the job did not fail"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="safeconsumer.spark on a Spark standalone cluster (or local[2])")
    parser.add_argument("--local", action="store_true", help="run on local[2] instead of a standalone cluster")
    args = parser.parse_args(argv)
    n = 2000
    with ExitStack() as stack:
        master = None if args.local else stack.enter_context(standalone_cluster(workers=2))
        return _run(n, master)


def _run(n: int, master: str | None) -> int:
    with start_broker() as broker:
        kit = KafkaTestKit(broker.bootstrap_servers, prefix="spark-example")
        topic = kit.create_topic(partitions=4)
        kit.produce(topic, n, partitions=4)
        group, static_group = kit.name("group"), kit.name("static-group")
        where = f"a standalone cluster at {master} (two workers)" if master else "local[2]"
        print(f"produced {n} records to {topic}; starting Spark on {where}", flush=True)
        spark = spark_session(master=master)
        bootstrap = broker.bootstrap_servers
        try:
            with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as elsewhere:
                first = run_pipeline(spark, bootstrap, topic, group, out)
                committed = kit.committed(group, topic, 4)
                second = run_pipeline(spark, bootstrap, topic, group, out)
                rows, jvms = processed(out), executors(out)
                # Rebalances per run, with and without stable instance ids (static membership).
                kit.produce(topic, n, partitions=4, start=n)
                dynamic_next = run_pipeline(spark, bootstrap, topic, group, elsewhere)
                ids = kit.name("job")
                static_runs = []
                for i in range(3):  # the first run takes the places; the next ones find them held
                    if i:
                        kit.produce(topic, n, partitions=4, start=(i + 1) * n)
                    static_runs.append(run_pipeline(spark, bootstrap, topic, static_group, elsewhere, instance_ids=ids))
                fatal = run_into_a_full_group(spark, elsewhere)
                with tempfile.TemporaryDirectory() as both_ways:
                    two_ways, share_held = one_partition_two_ways(spark, kit, both_ways)
        finally:
            spark.stop()
            kit.close()
    print(
        f"first run: {first.records} records in {first.batches} batches by {first.tasks} tasks "
        f"({first.rebalances} rebalance callbacks, {first.purged} purged) in executor JVMs {sorted(jvms)}; "
        f"second run: {second.records} records",
        flush=True,
    )
    print(f"committed after the first run: {dict(sorted(committed.items()))} (partition: next offset)", flush=True)
    print(f"a job whose second task finds its group full (group.max.size=1): {fatal}", flush=True)
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
    print(two_ways, flush=True)
    ok = share_held and first.records == n and second.records == 0 and len(set(rows)) == len(rows) == n
    ok = ok and (master is None or (bool(jvms) and 0 not in jvms))  # on a cluster: written by executors
    ok = ok and dynamic_next.records == n and [r.records for r in static_runs] == [2 * n, n, n]
    ok = ok and dynamic[2] > dynamic[0] and static[2] == static[1]
    ok = ok and committed == {p: n // 4 for p in range(4)} and fatal.startswith("the job failed")
    print("spark pipeline: OK" if ok else "spark pipeline: FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
