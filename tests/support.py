"""Helpers shared by the integration tests: polling several members, recording what they got."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Consumer, KafkaError, Message

from safeconsumer import FatalConsumerError, SafeConsumer
from safeconsumer.testing import KafkaTestKit, Protocol, wait_until

#: A broker whose groups take two members at most (classic and KIP-848): a third is refused.
FULL_GROUP_LIMITS = {"group.max.size": "2", "group.consumer.max.size": "2", "group.share.max.size": "2"}


@dataclass
class Received:
    """Records one consumer returned, as (topic, partition, offset, value)."""

    records: list[tuple[str, int, int, bytes]] = field(default_factory=list)
    errors: list[KafkaError] = field(default_factory=list)

    def add(self, msg: Message | None) -> None:
        if msg is None:
            return
        err = msg.error()
        if err is not None:
            self.errors.append(err)
            return
        self.records.append((msg.topic(), msg.partition(), msg.offset(), msg.value()))  # type: ignore[arg-type]

    @property
    def values(self) -> list[bytes]:
        return [r[3] for r in self.records]

    def ids(self) -> list[int]:
        return [int(v.split(b".")[0]) for v in self.values]

    def partitions(self) -> set[tuple[str, int]]:
        return {(r[0], r[1]) for r in self.records}


def poll_each(members: Sequence[tuple[Consumer, Received]], timeout: float = 0.05, *, check: bool = False) -> None:
    """Poll every member once; with ``check``, verify I1 and I2 on each record (SafeConsumers only)."""
    for consumer, received in members:
        if check:
            checked_poll(consumer, received, timeout)
        else:
            received.add(consumer.poll(timeout))


def pump(
    members: Sequence[tuple[Consumer, Received]],
    until: Callable[[], object],
    *,
    timeout: float,
    what: str,
    check: bool = False,
) -> None:
    """Poll every member in turn until ``until()`` holds (a deadline, never a bare sleep)."""
    wait_until(until, timeout=timeout, what=what, step=lambda: poll_each(members, check=check))


def pump_for(members: Sequence[tuple[Consumer, Received]], seconds: float, *, check: bool = False) -> None:
    """Keep members polling for a fixed window: used only to show that something does NOT happen."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        poll_each(members, check=check)


def keys(tps: Iterable[object]) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in tps}  # type: ignore[attr-defined]


def checked_poll(consumer: object, received: Received, timeout: float = 0.05) -> None:
    """Poll a SafeConsumer and check I1 and I2 at the moment the record is returned."""
    assert isinstance(consumer, SafeConsumer)
    msg = consumer.poll(timeout)
    if msg is not None and msg.error() is None:
        key = (msg.topic(), msg.partition())
        assert key not in keys(consumer.paused()), f"I1: a record of paused {key} was returned"
        assert consumer.owns(msg), f"I2: a record of unowned {key} was returned"
    received.add(msg)


def checked_pump(
    members: Sequence[tuple[Consumer, Received]], until: Callable[[], object], *, timeout: float, what: str
) -> None:
    """Like :func:`pump`, checking I1 and I2 on every record returned."""
    pump(members, until, timeout=timeout, what=what, check=True)


def checked_pump_for(members: Sequence[tuple[Consumer, Received]], seconds: float) -> None:
    pump_for(members, seconds, check=True)


def full_group(kafka: KafkaTestKit, protocol: Protocol) -> tuple[str, str, list[tuple[SafeConsumer, Received]]]:
    """Two SafeConsumers sharing a 4-partition topic in a new group: (topic, group, members).

    On a broker with ``group.max.size`` (and ``group.consumer.max.size``) 2, the group is full.
    """
    topic = kafka.create_topic(partitions=4)
    group = kafka.name("g")
    members = []
    for _ in range(2):
        c = SafeConsumer(kafka.consumer_conf(group, protocol))
        c.subscribe([topic])
        members.append((c, Received()))
    pump(members, lambda: all(len(c.assignment()) == 2 for c, _ in members), timeout=45, what="two members")
    return topic, group, members


def fatal_error_of(third: SafeConsumer, members: Sequence[tuple[Consumer, Received]], *, timeout: float) -> Exception:
    """Poll ``third`` (and keep ``members`` polling) until it raises a FatalConsumerError; return it."""
    raised: list[FatalConsumerError] = []

    def step() -> None:
        poll_each(members)
        if not raised:
            try:
                third.poll(0.1)
            except FatalConsumerError as exc:
                raised.append(exc)

    wait_until(lambda: raised, timeout=timeout, what="a fatal consumer error", step=step)
    return raised[0]


def run_fatal_spark_job(
    spark: Any, factory: Callable[[Mapping[str, str]], Any], out_dir: str, prefix: str, *, share: bool = False
) -> Any:
    """Two tasks on a broker whose groups take one member, both members for 12 s: the second to join
    finds the group full (``ConsumeTask``s, or with ``share`` ``ShareConsumeTask``s in a share group at
    ``group.share.max.size``). Returns the figures of the ``SparkConsumerFatalError`` the job raised."""
    import pytest

    from examples.spark_pipeline import FileSink
    from safeconsumer.spark import ConsumeTask, ShareConsumeTask, SparkConsumerFatalError, run_consumer_tasks

    limits = {"group.share.max.size": "1"} if share else {"group.max.size": "1", "group.consumer.max.size": "1"}
    kit = KafkaTestKit(factory(limits).bootstrap_servers, prefix=prefix)
    try:
        topic = kit.create_topic(partitions=2)
        conf = {"bootstrap.servers": kit.bootstrap_servers, "group.id": kit.name("g")}
        task: ConsumeTask | ShareConsumeTask
        if share:
            task = ShareConsumeTask(conf, [topic], sink=FileSink(out_dir), until_end=False, max_seconds=12)
        else:
            conf["auto.offset.reset"] = "earliest"
            task = ConsumeTask(conf, [topic], sink=FileSink(out_dir), until_end=False, max_seconds=12)
        with pytest.raises(SparkConsumerFatalError, match="GroupMaxSizeReachedError") as raised:
            run_consumer_tasks(spark, task, tasks=2)
        return raised.value.figures
    finally:
        kit.close()


def check_n_in_exactly_n_processed_then_nothing(spark: Any, kafka: KafkaTestKit, out_dir: str) -> None:
    """The Spark pipeline's guarantees: N records in, exactly N processed across two tasks, offsets
    committed to the end; a second run processes nothing."""
    from examples.spark_pipeline import processed, run_pipeline

    n = 2000
    topic = kafka.create_topic(partitions=4)
    kafka.produce(topic, n, partitions=4)
    group = kafka.name("g")
    conn = kafka.client_config
    first = run_pipeline(spark, kafka.bootstrap_servers, topic, group, out_dir, tasks=2, client_config=conn)
    rows = processed(out_dir)
    assert first.tasks == 2 and len(first.task_seconds) == 2
    assert first.records == n == len(rows), f"{first.records} counted, {len(rows)} written, {n} produced"
    assert len(set(rows)) == n, "a record was processed twice"
    assert {(p, o) for _, p, o in rows} == {(p, o) for p in range(4) for o in range(n // 4)}
    committed = kafka.committed(group, topic, 4)
    assert committed == {p: n // 4 for p in range(4)}, "offsets were not committed up to the end"

    second = run_pipeline(spark, kafka.bootstrap_servers, topic, group, out_dir, tasks=2, client_config=conn)
    assert second.records == 0 and len(processed(out_dir)) == n, "the second run processed records again"


def produce_in_small_batches(
    kafka: KafkaTestKit, topic: str, n: int, *, poison: int | None = None, per: int = 10
) -> None:
    """``n`` records (values ``b"<i>"``, ``b"poison"`` at offset ``poison``) to partition 0, flushed every
    ``per`` records: record batches of ``per``. A share group acquires whole record batches (a
    consumer's ``max.poll.records`` is best effort), so this is what spreads records over members."""
    for i in range(n):
        kafka.producer.produce(topic, value=b"poison" if i == poison else str(i).encode(), partition=0)
        if (i + 1) % per == 0:
            assert kafka.producer.flush(30) == 0
    assert kafka.producer.flush(30) == 0


def check_share_tasks_share_one_partition(spark: Any, kafka: KafkaTestKit, out_dir: str) -> Any:
    """Two ``ShareConsumeTask``s on a one-partition topic (more tasks than partitions) holding a poison
    record: both tasks are handed records of the partition, every other record reaches the sink once,
    the poison record is in the dead-letter topic (archived with a copy), nothing is handed out twice
    (no rebalance made anyone's work go to another), and a second run finds nothing. Returns the
    first run's figures."""
    from dataclasses import replace

    from examples.spark_pipeline import processed
    from safeconsumer import DeadLetter
    from safeconsumer.spark import ShareConsumeTask, run_consumer_tasks

    n, poison = 600, 123
    topic, dlq, group = kafka.create_topic(partitions=1), kafka.create_topic(), kafka.name("g")
    produce_in_small_batches(kafka, topic, n, poison=poison)
    conf = {**kafka.client_config, "group.id": group, "max.poll.records": 10}
    # 0.1 s of work per batch of 10: one task alone would take 6 s, so the other joins long before the end.
    sink = RefusingSink(out_dir, delay=0.1)
    task = ShareConsumeTask(conf, [topic], sink, start="earliest", poison=DeadLetter(dlq), idle_seconds=30)
    figures = run_consumer_tasks(spark, task, tasks=2)
    rows = processed(out_dir)
    assert sorted(o for _, _, o in rows) == [o for o in range(n) if o != poison], "a record lost or written twice"
    assert figures.tasks == 2 and all(r > 0 for r in figures.task_records), f"a task had no records: {figures}"
    assert figures.records == n and figures.accepted == n - 1 and figures.dead_lettered == 1, figures
    assert figures.redelivered == 0 and figures.lock_overruns == 0, figures
    assert kafka.end_offsets(dlq) == {0: 1}, "the poison record is not in the dead-letter topic"
    second = run_consumer_tasks(spark, replace(task, idle_seconds=5), tasks=2)
    assert second.records == 0 and len(processed(out_dir)) == n - 1, second
    return figures


class RefusingSink:
    """A Spark sink (picklable, runs in Spark's Python workers) that writes as ``FileSink`` does and
    refuses any batch holding a record whose value is ``b"poison"``; ``delay``: seconds of work per batch."""

    def __init__(self, directory: str, delay: float = 0.0) -> None:
        from examples.spark_pipeline import FileSink

        self.files = FileSink(directory)
        self.delay = delay

    def __call__(self, records: list[Message]) -> None:
        time.sleep(self.delay)
        if any(m.value() == b"poison" for m in records):
            raise ValueError("the sink refuses this record")
        self.files(records)


def replicated_topic(
    kafka: KafkaTestKit, name: str, partitions: int, *, config: Mapping[str, str] | None = None
) -> str:
    """Create ``name`` with a replica on each of up to two brokers (``min.insync.replicas`` 1) and wait
    for its leaders: in a two-broker cluster, what the producer saw acknowledged outlives a SIGKILL of
    either broker, so a soak's losses are the consumers' alone. (With one replica, a CI run once ended
    with end offsets two records short of the producer's acknowledgements after broker 2's SIGKILL;
    the cause was not traced, and four SIGKILLs under 260,000 idempotent records lost none here.)"""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    replicas = min(2, len(kafka.admin.list_topics(timeout=10).brokers))
    settings = {"min.insync.replicas": "1", **(config or {})}
    kafka.admin.create_topics([NewTopic(name, partitions, replicas, config=settings)])[name].result(30)
    kafka.wait_for_partitions(name, partitions)
    return name


def set_group_config(kafka: KafkaTestKit, group: str, **settings: str) -> None:
    """Set group configs on the broker (``share_record_lock_duration_ms="2000"`` for the dotted name)."""
    kafka.set_group_config(group, {k.replace("_", "."): v for k, v in settings.items()})


def run_suite(
    tests: str,
    plugin: str,
    tree: Path,
    env: Mapping[str, str],
    junit: Path,
    *pytest_args: str,
    timeout: float,
    qualified: bool,
) -> dict[str, str]:
    """Run another project's pytest suite (``tests`` under ``tree``) with ``plugin`` loaded; each test's
    outcome ("passed", "failed", "skipped") by name (``module::name`` when ``qualified``)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            tests,
            "-p",
            plugin,
            "-p",
            "no:cacheprovider",
            "-q",
            "-o",
            "log_level=WARNING",
            f"--junitxml={junit}",
            *pytest_args,
        ],
        cwd=tree,
        env=dict(env),
        timeout=timeout,
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    outcomes: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        name = case.get("name", "?")
        outcomes[f"{case.get('classname', '?')}::{name}" if qualified else name] = outcome
    return outcomes


def broker_dlq(
    kafka: KafkaTestKit,
    group: str,
    *,
    topic: str | None = None,
    enabled: bool = True,
    copy_record: bool = True,
) -> str:
    """Kafka 4.4's dead-letter queue of share group ``group`` (KIP-1191): a topic named with the
    broker's prefix (``dlq.``) created with ``errors.deadletterqueue.group.enable`` (unless not
    ``enabled``), set as the group's ``errors.deadletterqueue.topic.name``. Returns the topic."""
    name = topic or f"dlq.{kafka.name('d')}"
    kafka.create_topic(name, config={"errors.deadletterqueue.group.enable": "true"} if enabled else None)
    set_group_config(
        kafka,
        group,
        errors_deadletterqueue_topic_name=name,
        errors_deadletterqueue_copy_record_enable="true" if copy_record else "false",
    )
    return name


@dataclass
class ShareMember:
    """A ``share_kill_proc`` member process and the file its stderr goes to."""

    proc: subprocess.Popen[str]
    stderr: IO[str]

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        text = self.stderr.read()
        return text


def start_share_member(kafka: KafkaTestKit, topic: str, group: str, *, safe: str | None = None) -> ShareMember:
    """A ``share_kill_proc`` member (see there) in its own process, subscribed once this returns."""
    import tempfile

    args = [sys.executable, "-m", "tests.integration.share_kill_proc", kafka.bootstrap_servers, topic, group]
    stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by kill_after, with the process
    proc = subprocess.Popen(
        [*args, *(["--safe", safe] if safe else [])], stdout=subprocess.PIPE, stderr=stderr, text=True
    )
    member = ShareMember(proc, stderr)
    stdout = proc.stdout
    assert stdout is not None
    ready: list[str] = []
    reader = threading.Thread(target=lambda: ready.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(60)
    if not ready or ready[0].strip() != "R":
        proc.kill()
        proc.wait(30)
        raise AssertionError(
            f"share member exited {proc.returncode} before subscribing: {member.stderr_text()[-2000:]}"
        )
    return member


def kill_after(member: ShareMember, records: int, *, delivery: int, timeout: float = 60) -> list[tuple[int, int]]:
    """SIGKILL ``member`` (a :func:`start_share_member`) once it printed ``records`` records on their
    ``delivery``-th delivery; returns every (offset, delivery count) it printed. Its exit status must
    be the SIGKILL's, its stderr free of tracebacks."""
    import queue
    import signal

    proc = member.proc
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while sum(1 for _o, d in got if d == delivery) < records:
            if time.monotonic() > deadline or (proc.poll() is not None and lines.empty()):
                proc.kill()
                proc.wait(30)
                raise AssertionError(
                    f"member printed {got} (exit {proc.returncode}); stderr: {member.stderr_text()[-2000:]}"
                )
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line.startswith("G "):
                _g, offset, count = line.split()
                got.append((int(offset), int(count)))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(10)  # at the end of its output
        err = member.stderr_text()
    finally:
        stdout.close()
        member.stderr.close()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    return got
